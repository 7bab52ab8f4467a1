"""Step statistics kept on the device until a sync point (`bertkit.training.stats`)."""

from __future__ import annotations

import pytest
import torch

from bertkit.training import stats
from bertkit.training.stats import Pending, StepStats, Window


def _step(loss: float, acc: float, grad_norm: float, tokens: int, lr: float) -> StepStats:
    # as the loop builds them: 0-dim float32 tensors for the loss and norm, a Python float for a
    # metric a task returned as a number, an int64 tensor for the token count
    return StepStats({"loss": torch.tensor(loss), "acc": acc}, torch.tensor(grad_norm),
                     torch.tensor(tokens), lr)


def test_sync_averages_each_step_over_micro_batches_and_returns_the_stop_flag():
    pending = Pending()
    pending.add(_step(loss=3.0, acc=1.5, grad_norm=0.5, tokens=120, lr=1e-3))
    pending.add(_step(loss=2.0, acc=1.0, grad_norm=0.25, tokens=7, lr=2e-3))
    synced, stop = pending.sync(torch.device("cpu"), accum=2, world=1, stop=True)
    assert stop is True
    assert synced == [
        {"acc": 0.75, "loss": 1.5, "grad_norm": 0.5, "tokens": 120, "lr": 1e-3},
        {"acc": 0.5, "loss": 1.0, "grad_norm": 0.25, "tokens": 7, "lr": 2e-3},
    ]
    assert all(type(r["tokens"]) is int for r in synced)
    assert pending.steps == []  # a step is synced once
    assert pending.sync(torch.device("cpu"), accum=2, world=1, stop=False) == ([], False)


def test_sync_sends_one_tensor_every_device_has_to_one_all_reduce(monkeypatch):
    """MPS has no float64: the one tensor of a sync is float32, on the training device."""
    reduced = []

    def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
        reduced.append(t)
        return t * 2  # as if a second rank had seen the same steps

    monkeypatch.setattr(stats.dist_utils, "all_reduce_sum", all_reduce_sum)
    pending = Pending()
    for _ in range(3):
        pending.add(_step(loss=4.0, acc=2.0, grad_norm=1.0, tokens=2**24 - 1, lr=0.1))
    synced, stop = pending.sync(torch.device("cpu"), accum=1, world=2, stop=False)
    assert len(reduced) == 1 and reduced[0].dtype == torch.float32
    assert reduced[0].device.type == "cpu" and reduced[0].shape == (3 * 4 + 1,)
    # sums over 2 ranks, divided by accum * world: the mean of what each rank saw
    assert synced[0] == {"acc": 2.0, "loss": 4.0, "grad_norm": 1.0, "tokens": 2**25 - 2, "lr": 0.1}
    assert stop is False  # no rank asked to stop: 0 + 0


def test_window_averages_the_steps_between_two_log_lines():
    window = Window()
    window.add({"loss": 2.0, "grad_norm": 1.0, "tokens": 100, "lr": 1e-3})
    window.add({"loss": 1.0, "grad_norm": 3.0, "tokens": 50, "lr": 2e-3})
    assert window.tokens == 150 and window.tokens_per_s() > 0
    out = window.flush()
    assert out["loss"] == 1.5 and out["grad_norm"] == 2.0
    assert out["lr"] == 2e-3  # the latest lr, not an average
    assert out["tokens_per_s"] > 0 and "tokens" not in out
    assert (window.sums, window.steps, window.tokens) == ({}, 0, 0)  # the next window starts empty
    assert window.flush() == {"tokens_per_s": pytest.approx(0.0)}
