"""Fixtures of the study tests: a curve small enough to pre-train in seconds."""

from __future__ import annotations

import types

import pytest

from bertkit.studies.pretraining import curve
from bertkit.training import loop, runtime

BUDGETS = (0.0006, 0.0012)  # CPU-hours: 2.16 and 4.32 CPU-seconds
STEP_CPU_SECONDS = 0.03  # what one training step costs on `step_clock`


@pytest.fixture
def step_clock(monkeypatch):
    """The training loop's CPU clock advances by `STEP_CPU_SECONDS` a step and by nothing
    else, so that a budget in CPU seconds is the same number of steps on every machine (the
    probe measures 0.03 a step, the horizon is 143 steps, 4.32 / 0.03 in floats rounded down,
    and 0.0006h stops at step 80, the first log line past 72). On the real clock how far apart
    the points and the run's end fall depends on the CPU and its load: CI once found the run's
    end within a decay branch's slack of the first point, which no developer machine had met."""
    seconds = [0.0]
    train_step = loop._train_step

    def counted_step(*args, **kwargs):
        seconds[0] += STEP_CPU_SECONDS
        return train_step(*args, **kwargs)

    clock = types.SimpleNamespace(perf_counter=runtime.time.perf_counter,
                                  process_time=lambda: seconds[0])
    monkeypatch.setattr(loop, "_train_step", counted_step)
    for module in (loop, runtime):
        monkeypatch.setattr(module, "time", clock)


@pytest.fixture
def settings(shared_data, tmp_path, step_clock):
    """The curve's recipe at toy size (`tiny`, 300 pieces, T = 32) on 60,000 characters of
    WikiText-2, with two budget points, on `step_clock`."""
    text = (shared_data / "wikitext-2" / "wiki.test.raw").read_text(encoding="utf-8")[:60_000]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    return curve.CurveSettings(corpus=(str(corpus),), vocab_size=300, model="tiny",
                               batch_size=8, max_seq_length=32, budgets_hours=BUDGETS)
