"""The run's own cost: wall and CPU seconds summed over sittings, and a CPU-seconds budget that
stops a run which then resumes as if uninterrupted (what the pre-training curve study uses)."""

from __future__ import annotations

import json

import pytest
from test_loop import collate, config, make_data, make_model

from bertkit.errors import BertkitError
from bertkit.training import train
from bertkit.training.state import list_checkpoints

pytestmark = pytest.mark.usefixtures("one_thread")


def test_cost_is_logged_saved_and_returned(tmp_path):
    result = train(make_model(), make_data(), collate, config(tmp_path))
    assert result.cpu_seconds > 0 and result.train_seconds > 0
    assert result.tokens_seen == 8 * 8 * 12  # 8 steps x 8 examples x 12 real tokens
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    cpu = [r["cpu_seconds"] for r in records]
    assert cpu == sorted(cpu) and cpu[-1] <= result.cpu_seconds
    summary = json.loads((list_checkpoints(tmp_path)[-1][1] / "summary.json").read_text())
    assert summary["cpu_seconds"] == pytest.approx(result.cpu_seconds, abs=0.05)
    assert summary["tokens_seen"] == result.tokens_seen


def test_cpu_budget_stops_and_the_resumed_run_equals_the_uninterrupted_one(tmp_path):
    full = train(make_model(), make_data(), collate, config(tmp_path / "full"))
    out = tmp_path / "budget"
    # a budget any step exceeds: the run stops at the first sync point (log_every=1: step 1)
    first = train(make_model(), make_data(), collate, config(out, stop_at_cpu_seconds=1e-6))
    assert first.step == 1 and first.losses == full.losses[:1]
    assert [s for s, _ in list_checkpoints(out)] == [1]  # saved where it stopped
    rest = train(make_model(), make_data(), collate, config(out, resume=True))
    assert rest.step == 8
    assert rest.losses == full.losses[1:]  # the lr schedule ran on to max_steps: exact
    assert rest.cpu_seconds > first.cpu_seconds  # the cost of both sittings


def test_cpu_budget_must_be_positive(tmp_path):
    with pytest.raises(BertkitError, match="stop_at_cpu_seconds"):
        config(tmp_path, stop_at_cpu_seconds=0)


def test_a_stop_step_stops_there_even_off_the_log_grid_and_the_run_resumes_exactly(tmp_path):
    """`stop_at_step` (a curve reproducing recorded points): the run stops and saves at that
    step, though no log or save falls there; resumed at it, it trains nothing more; resumed
    without it, it goes on to the uninterrupted run's losses."""
    full = train(make_model(), make_data(), collate, config(tmp_path / "full"))
    out = tmp_path / "stopped"
    first = train(make_model(), make_data(), collate,
                  config(out, log_every=4, save_every=0, stop_at_step=3))
    assert first.step == 3 and [s for s, _ in list_checkpoints(out)] == [3]
    again = train(make_model(), make_data(), collate,
                  config(out, save_every=0, stop_at_step=3, resume=True))
    assert again.step == 3 and again.losses == []
    rest = train(make_model(), make_data(), collate, config(out, resume=True))
    assert rest.step == 8 and rest.losses == full.losses[3:]  # exact: the schedule ran on
    with pytest.raises(BertkitError, match="stop_at_step"):
        config(tmp_path, stop_at_step=0)
