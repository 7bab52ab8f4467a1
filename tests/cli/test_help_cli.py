"""Every command's --help: exits 0, shows defaults, never a literal %% or "(default: None)"."""

from __future__ import annotations

import pytest

from bertkit.cli.main import main

COMMANDS = ["info", "tokenize", "embed", "features", "similarity", "export", "pretrain", "plot",
            "fill-mask", "nsp", "prepare", "finetune", "evaluate", "predict", "ablate", "demo",
            "serve", "vocab train", "vocab stats", "data list", "data download", "study",
            "distill"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([*command.split(), "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "%%" not in text and "(default: None)" not in text and "(default: False)" not in text
    if command == "prepare":  # an option without help text still shows its default
        assert "--max-seq-length MAX_SEQ_LENGTH\n                        (default: 128" in text
