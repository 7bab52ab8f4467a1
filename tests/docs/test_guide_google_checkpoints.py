"""docs/guides/google-checkpoints.md runs as written (tests/docs/guide_runner.py), on the
checkpoints real TensorFlow made (tests/fixtures/google): the tiny release stands for BERT-Tiny,
the run_classifier output for an MNLI run."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from tests.docs.guide_runner import REPO, new_session, page_commands, run_commands

PAGE = "docs/guides/google-checkpoints.md"
FIXTURES = REPO / "tests" / "fixtures" / "google"
SCALED = [(r"--output runs/sst2-tiny$",
           "--output runs/sst2-tiny --epochs 1 --max-train-examples 16 --max-eval-examples 16")]


def test_google_checkpoints_guide_runs(shared_data, tmp_path):
    commands = page_commands(PAGE)
    assert any(c.startswith("bertkit convert google ") for c in commands)
    session = new_session(shared_data, tmp_path)
    shutil.copytree(FIXTURES / "uncased_L-2_H-16_A-2", session.clone / "uncased_L-2_H-128_A-2")
    shutil.copytree(FIXTURES / "run_classifier", session.clone / "my-mnli-run")
    run_commands(session, commands, SCALED)
    for made in ("bert-tiny/model.safetensors", "runs/sst2-tiny/metrics.json",
                 "my-mnli/model.safetensors"):
        assert (session.clone / made).exists(), made


def test_the_output_the_guide_shows_is_the_commands(tmp_path, capsys):
    from bertkit.cli.main import main

    text = (REPO / PAGE).read_text(encoding="utf-8")
    shown = re.search(r"prints what it wrote and why:\n\n```\n(.*?)```", text, re.S).group(1)
    release = tmp_path / "uncased_L-2_H-128_A-2"
    shutil.copytree(FIXTURES / "uncased_L-2_H-16_A-2", release)
    cwd = Path.cwd()
    try:
        os.chdir(tmp_path)
        assert main(["convert", "google", "uncased_L-2_H-128_A-2", "--output", "bert-tiny"]) == 0
    finally:
        os.chdir(cwd)
    assert capsys.readouterr().out == shown
