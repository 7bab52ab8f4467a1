"""A real full filesystem (a small tmpfs, mounted where the test runs as root): `bertkit prepare`
and `bertkit embed` that run out of space end in one line naming the file and the space, keep
nothing half-written under a final name, and the same command, run again once the disk is
larger, writes exactly what a run on a roomy disk writes. Where no tmpfs can be mounted (not
root, or no permission in a container), the test skips and says so; tests/robustness/
test_disk_full.py covers every write with the errors a full disk raises."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.io import LOCK_FILE
from tests.helpers import wikitext_corpus


class Disk:
    """A tmpfs of `size` at `path`; `grow` remounts it larger, keeping its files."""

    def __init__(self, path: Path, size: str):
        self.path = path
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"no small tmpfs could be mounted here (needs root): {proc.stderr.strip()}")

    def grow(self, size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture
def disk(tmp_path) -> Iterator[Disk]:
    disk = Disk(tmp_path / "disk", "300k")
    yield disk
    disk.close()


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory) -> Path:
    return wikitext_corpus(shared_data, tmp_path_factory.mktemp("corpus"))


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != LOCK_FILE}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bertkit: error:"), err
    return err[0]


def test_prepare_on_a_full_disk_says_so_and_continues_once_there_is_room(
        disk, corpus, minilm_path, tmp_path, capsys):
    args = [str(corpus), "--tokenizer", str(minilm_path), "--max-seq-length", "64",
            "--dupe-factor", "2", "--shard-size", "500", "--chunk-chars", "20000", "--seed", "1",
            "--no-progress"]
    assert main(["prepare", *args, "--output", str(tmp_path / "roomy")]) == 0
    roomy = contents(tmp_path / "roomy")
    assert sum(map(len, roomy.values())) > 600_000  # twice the small disk
    capsys.readouterr()

    out = disk.path / "shards"
    assert main(["prepare", *args, "--output", str(out)]) == 1
    line = one_error_line(capsys)
    assert "no space left on the device" in line and str(out) in line and "free" in line, line
    partial = contents(out)
    # the folder does not look finished (its record says so, for --resume)
    assert json.loads(partial.pop("meta.json", b'{"complete": false}'))["complete"] is False
    for name, data in partial.items():  # what is kept is whole: equal to the roomy run's file
        assert name in roomy and roomy[name] == data, f"{name} kept half-written"

    disk.grow("2m")
    assert main(["prepare", *args, "--output", str(out), "--resume"]) == 0
    assert contents(out) == roomy


def test_embed_on_a_full_disk_writes_nothing_and_then_the_whole_table(
        disk, minilm_path, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"sentence number {i} about a cat on a mat\n" for i in range(400)),
                     encoding="utf-8")
    vectors = disk.path / "vectors.npy"  # 400 x 384 float32: 614 KB, twice the disk
    argv = ["embed", str(minilm_path), "--input", str(texts), "--output", str(vectors),
            "--batch-size", "64", "--no-progress"]
    assert main(argv) == 1
    line = one_error_line(capsys)
    assert "no space left on the device" in line and str(vectors) in line, line
    assert list(disk.path.iterdir()) == []  # no table, no temporary

    disk.grow("2m")
    assert main(argv) == 0
    assert np.load(vectors).shape == (400, 384)
