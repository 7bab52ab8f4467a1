"""docs/reference/cli.md is what the parser prints: every command and its options, current.
When this fails, `.venv/bin/python -m tests.docs.cli_reference` rewrites the page."""

from __future__ import annotations

from tests.docs.cli_reference import PAGE, render


def test_cli_reference_is_current(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert PAGE.is_file(), "docs/reference/cli.md is missing: python -m tests.docs.cli_reference"
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/reference/cli.md is out of date: python -m tests.docs.cli_reference")


def test_cli_reference_names_every_command():
    text = render()
    for command in ("pretrain", "finetune", "distill", "serve", "vocab train", "data download"):
        assert f"\n## bertkit {command}\n" in text
