"""Two `bertkit prepare` processes into one folder: the second refuses in one line naming the
first (its pid and host), with or without --overwrite, and the first's output is exactly what it
writes alone. So do `prepare --part` and `merge-shards` while another process holds the folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.io import LOCK_FILE
from tests.helpers import held_elsewhere, wikitext_corpus


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory) -> Path:
    return wikitext_corpus(shared_data, tmp_path_factory.mktemp("corpus"))


def argv(corpus: Path, tokenizer: Path, out: Path, seed: int, *extra: str) -> list[str]:
    return ["prepare", str(corpus), "--tokenizer", str(tokenizer), "--output", str(out),
            "--max-seq-length", "64", "--dupe-factor", "2", "--shard-size", "500",
            "--chunk-chars", "20000", "--seed", str(seed), "--no-progress", *extra]


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.mark.slow  # three processes start (torch imported in each)
def test_a_second_prepare_into_the_same_folder_refuses_and_the_first_is_intact(
        tmp_path, corpus, minilm_path):
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, "-m", "bertkit", *argv(corpus, minilm_path, out, 1)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        lock = out / LOCK_FILE
        while not (lock.is_file() and lock.read_text(encoding="utf-8").startswith("pid")):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.01)
        # paused while it holds the folder: the second run meets it mid-run, whatever the timing
        os.kill(first.pid, signal.SIGSTOP)
        assert first.poll() is None, "the first run ended before it could be met"
        seconds = [subprocess.Popen(  # one plain, one with --overwrite, at once
            [sys.executable, "-m", "bertkit", *argv(corpus, minilm_path, out, 2, *extra)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for extra in ((), ("--overwrite",))]
        for second in seconds:
            err = second.communicate(timeout=120)[1].strip()
            assert second.returncode != 0, err
            assert len(err.splitlines()) == 1 and err.startswith("bertkit: error:"), err
            assert "another process is writing this folder" in err
            assert f"pid {first.pid} on {socket.gethostname()}" in err
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert main(argv(corpus, minilm_path, tmp_path / "alone", 1)) == 0
    written, alone = contents(out), contents(tmp_path / "alone")
    assert written == alone and len(alone) > 8  # meta.json and the shards, byte for byte
    assert not (out / LOCK_FILE).exists()


def test_a_part_and_a_merge_refuse_a_folder_another_process_writes(tmp_path, corpus,
                                                                  minilm_path, capsys):
    part = tmp_path / "part"
    part.mkdir()
    with held_elsewhere(part):
        assert main(argv(corpus, minilm_path, part, 1, "--part", "0/1")) == 1
        assert "another process is writing this folder" in capsys.readouterr().err
    assert main(argv(corpus, minilm_path, part, 1, "--part", "0/1")) == 0
    merged = tmp_path / "merged"
    merged.mkdir()
    with held_elsewhere(merged):
        for extra in ((), ("--overwrite",)):
            assert main(["merge-shards", str(part), "--output", str(merged), "--no-progress",
                         *extra]) == 1
            err = capsys.readouterr().err.strip()
            assert "another process is writing this folder" in err and "\n" not in err
    assert not merged.exists() or not any(merged.iterdir())
    assert main(["merge-shards", str(part), "--output", str(merged), "--no-progress"]) == 0
