"""Small shared helpers for tests (not fixtures)."""

from __future__ import annotations

from pathlib import Path


def real_sentences(shared_data: Path, n: int = 8) -> list[str]:
    """n lines of WikiText-2 test of varied lengths (short to ~100 words)."""
    lines = (shared_data / "wikitext-2" / "wiki.test.raw").read_text(encoding="utf-8").splitlines()
    texts = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("=")]
    texts.sort(key=len)
    step = max(1, len(texts) // (n + 1))
    picked = [texts[i * step] for i in range(1, n + 1)]
    return [" ".join(t.split()[:100]) for t in picked]
