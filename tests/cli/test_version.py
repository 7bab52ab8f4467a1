"""`bertkit --version`: the one version (bertkit.__version__), as the installed metadata has it."""

from __future__ import annotations

from importlib.metadata import version

import pytest

import bertkit
from bertkit.cli.main import main


def test_version_prints_the_one_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"bertkit {bertkit.__version__}"
    assert version("bertkit") == bertkit.__version__  # pyproject reads it from the package
