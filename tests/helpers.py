"""Small shared helpers for tests (not fixtures)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

CI_VALUES = ("1", "true", "yes")


def in_ci() -> bool:
    """Whether the suite runs in CI (CI=true, as GitHub Actions, GitLab and most others set it)."""
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def missing(reason: str) -> NoReturn:
    """The real data (../shared/data) or the MiniLM package a test needs is absent: the test
    skips, except in CI, where it fails, so that a missing install step cannot hide behind a
    green run. (A CUDA-only test skips everywhere: CI machines have no GPU.)"""
    if in_ci():
        pytest.fail(f"{reason}; in CI (CI=true) a test that needs it fails instead of skipping",
                    pytrace=False)
    pytest.skip(reason)


def real_sentences(shared_data: Path, n: int = 8) -> list[str]:
    """n lines of WikiText-2 test of varied lengths (short to ~100 words)."""
    lines = (shared_data / "wikitext-2" / "wiki.test.raw").read_text(encoding="utf-8").splitlines()
    texts = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("=")]
    texts.sort(key=len)
    step = max(1, len(texts) // (n + 1))
    picked = [texts[i * step] for i in range(1, n + 1)]
    return [" ".join(t.split()[:100]) for t in picked]


def wikitext_corpus(shared_data: Path, folder: Path, n: int = 1000) -> Path:
    """The first n lines of WikiText-2 test, its CRLF line ends kept, as folder/wiki.raw: a
    corpus for `bertkit prepare` of about 3,400 instances at 64 tokens (two duplicates)."""
    lines = (shared_data / "wikitext-2" / "wiki.test.raw").read_bytes().split(b"\r\n")[:n]
    path = folder / "wiki.raw"
    path.write_bytes(b"\r\n".join(lines))
    return path


def head_lines(src: Path, dst: Path, n: int) -> None:
    """The first n lines of src (a header among them) written to dst."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, encoding="utf-8") as f:
        dst.write_text("".join(line for _, line in zip(range(n), f)), encoding="utf-8")


def small_glue(shared_data: Path, root: Path, task: str = "SST-2", train: int = 64,
               dev: int = 100) -> Path:
    """root laid out as a data folder (`root/glue/TASK/`) holding the first `train` and `dev`
    rows of the real task's files: fine-tuning cells that take a few training examples then
    neither read SST-2's 67,349 rows nor score its 872 dev sentences each time."""
    for split, rows in (("train", train), ("dev", dev)):
        head_lines(shared_data / "glue" / task / f"{split}.tsv",
                   root / "glue" / task / f"{split}.tsv", rows + 1)
    return root


def _hold_until(folder: Path, ready, done) -> None:
    from bertkit.studies.runner import hold

    with hold(folder, "a test's holder"):
        ready.set()
        done.wait(60)


@contextlib.contextmanager
def held_elsewhere(folder: Path) -> Iterator[None]:
    """`folder` held by another process (`runner.hold` in a forked child) while the block
    runs: a lock is this process's own once taken, so only another process can hold it."""
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_until, args=(folder, ready, done))
    child.start()
    try:
        assert ready.wait(30), "the holder did not start"
        yield
    finally:
        done.set()
        child.join(30)
