"""The loop's run state: saved and restored whole, a killed run's metric tail dropped, its cost
counted."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.training import runtime
from bertkit.training.config import TrainConfig
from bertkit.training.runtime import Run, restore_run, run_state, tick, truncate_metrics
from bertkit.training.state import save_training_state
from bertkit.training.stream import DataOrder, StepPlan


def make_run(out, seed=0, batch_size=4) -> Run:
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    return Run(model=model, forward=model, optimizer=torch.optim.AdamW(model.parameters(), lr=0.1),
               scaler=None, device=torch.device("cpu"), order=DataOrder(0, 8, batch_size),
               plan=StepPlan(batch_size, world=1, rank=0, micro=batch_size, accum=1),
               config=TrainConfig(output_dir=str(out), max_steps=10, batch_size=batch_size),
               warmup=0)


def test_run_state_restores_into_a_fresh_run(tmp_path):
    run = make_run(tmp_path)
    run.model(torch.ones(4, 3)).sum().backward()
    run.optimizer.step()  # the optimizer now has moments to carry over
    run.step, run.examples_seen, run.tokens_seen = 1, 4, 48
    run.train_seconds, run.cpu_seconds = 2.5, 4.0
    save_training_state(tmp_path, run.step, run_state(run), keep=2)
    expected = (random.random(), np.random.rand(), torch.rand(3))  # what the run draws next

    fresh = make_run(tmp_path, seed=1)
    random.seed(99)
    restore_run(fresh, reseed=lambda seed: pytest.fail("same world size: states restored"))
    assert (random.random(), np.random.rand()) == expected[:2]
    assert torch.equal(torch.rand(3), expected[2])
    for a, b in zip(run.model.parameters(), fresh.model.parameters()):
        assert torch.equal(a, b)
    moments = fresh.optimizer.state_dict()["state"][0]
    assert torch.equal(moments["exp_avg"], run.optimizer.state_dict()["state"][0]["exp_avg"])
    assert (fresh.step, fresh.examples_seen, fresh.tokens_seen) == (1, 4, 48)
    assert (fresh.train_seconds, fresh.cpu_seconds) == (2.5, 4.0)


def test_restore_refuses_another_batch_size_and_a_missing_state(tmp_path):
    with pytest.raises(BertkitError, match="no checkpoint under"):
        restore_run(make_run(tmp_path), reseed=lambda seed: None)
    save_training_state(tmp_path, 1, run_state(make_run(tmp_path)), keep=2)
    with pytest.raises(BertkitError, match="saved with batch size 4, resumed with 8"):
        restore_run(make_run(tmp_path, batch_size=8), reseed=lambda seed: None)


def test_truncate_metrics_drops_the_lines_after_the_state_and_a_cut_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "loss": 1.0 / s}) for s in range(1, 6)]
    path.write_text("\n".join(lines[:3]) + "\n" + '{"eval_acc": 0.5}\n' + "\n".join(lines[3:])
                    + '\n{"step": 6, "lo', encoding="utf-8")  # a kill cut the last line
    truncate_metrics(path, 3)
    assert path.read_text(encoding="utf-8") == "\n".join(lines[:3]) + '\n{"eval_acc": 0.5}\n'
    truncate_metrics(tmp_path / "absent.jsonl", 3)
    assert not (tmp_path / "absent.jsonl").exists()


def test_tick_adds_the_time_since_the_last_reading(tmp_path, monkeypatch):
    now = {"wall": 100.0, "cpu": 50.0}  # a clock of its own: a loaded machine pauses at will
    monkeypatch.setattr(runtime, "time", SimpleNamespace(perf_counter=lambda: now["wall"],
                                                         process_time=lambda: now["cpu"]))
    run = make_run(tmp_path)
    run.train_seconds, run.cpu_seconds = 10.0, 20.0
    run.clock = (99.0, 49.5)
    tick(run)
    assert (run.train_seconds, run.cpu_seconds) == (11.0, 20.5)
    now["wall"] += 0.25
    now["cpu"] += 0.125
    tick(run)  # counted from the last reading, not again from the first
    assert (run.train_seconds, run.cpu_seconds) == (11.25, 20.625)
