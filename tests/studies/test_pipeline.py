"""studies.pipeline: the step-time probe that sizes a budget."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bertkit.runs.pretrain import PretrainConfig
from bertkit.studies import pipeline

START_UP, STEP = 0.06, 0.02  # seconds the fake training loop takes: once a run, and a step


@pytest.fixture
def runs(monkeypatch):
    """The probe's training runs, faked: each advances the probe's clock by START_UP + steps x
    STEP (a clock of its own, not sleeps: a loaded machine oversleeps by tens of milliseconds);
    returns the list of the steps each run was asked for."""
    asked: list[int] = []
    now = [0.0]

    def fake_train(model, dataset, collate, cfg, step_metrics=None):
        asked.append(cfg.max_steps)
        now[0] += START_UP + cfg.max_steps * STEP

    monkeypatch.setattr(pipeline, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(pipeline, "train", fake_train)
    monkeypatch.setattr(pipeline, "open_shards", lambda *a, **k: None)
    monkeypatch.setattr(pipeline, "make_collate", lambda *a, **k: None)
    monkeypatch.setattr(pipeline, "new_model",
                        lambda objective, config: SimpleNamespace(bert=SimpleNamespace()))
    return asked


def probe(budget):
    return pipeline.seconds_per_step(PretrainConfig(data=""), None, "shards", None, budget=budget)


def test_the_probe_times_the_difference_of_two_runs(runs):
    per_step = probe(budget=None)
    assert runs == [2, 2, 10]  # warm-up, short, long: start-up cancels out
    assert per_step == pytest.approx(STEP)


def test_a_budget_shorter_than_the_warm_up_skips_the_timed_runs(runs):
    per_step = probe(budget=0.05)  # the warm-up alone takes START_UP + 2 x STEP = 0.1 s
    assert runs == [2]
    assert per_step == pytest.approx((START_UP + 2 * STEP) / 2)  # an over-estimate
    assert probe(budget=60.0) == pytest.approx(STEP) and runs == [2, 2, 2, 10]
