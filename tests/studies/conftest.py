"""Fixtures of the study tests: a curve small enough to pre-train in seconds."""

from __future__ import annotations

import pytest

from bertkit.studies import curve

BUDGETS = (0.0006, 0.0012)  # CPU-hours: about 2 and 4 CPU-seconds


@pytest.fixture
def settings(shared_data, tmp_path):
    """The curve's recipe at toy size (`tiny`, 300 pieces, T = 32) on 60,000 characters of
    WikiText-2, with two budget points."""
    text = (shared_data / "wikitext-2" / "wiki.test.raw").read_text(encoding="utf-8")[:60_000]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    return curve.CurveSettings(corpus=(str(corpus),), vocab_size=300, model="tiny",
                               batch_size=8, max_seq_length=32, budgets_hours=BUDGETS)
