"""Small shared helpers for tests (not fixtures)."""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator
from pathlib import Path


def real_sentences(shared_data: Path, n: int = 8) -> list[str]:
    """n lines of WikiText-2 test of varied lengths (short to ~100 words)."""
    lines = (shared_data / "wikitext-2" / "wiki.test.raw").read_text(encoding="utf-8").splitlines()
    texts = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("=")]
    texts.sort(key=len)
    step = max(1, len(texts) // (n + 1))
    picked = [texts[i * step] for i in range(1, n + 1)]
    return [" ".join(t.split()[:100]) for t in picked]


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
