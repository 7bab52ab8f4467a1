"""The loop's settings and the step schedule derived from them."""

from __future__ import annotations

import pytest

from bertkit.errors import BertkitError
from bertkit.training.config import StepSchedule, TrainConfig


def steps(when, max_steps=12):
    return [s for s in range(1, max_steps + 1) if when(s)]


def test_the_schedule_logs_evaluates_and_saves_on_its_multiples_and_logs_the_last_step():
    schedule = StepSchedule.from_config(TrainConfig("out", max_steps=10, log_every=4,
                                                    eval_every=3, save_every=5))
    assert steps(schedule.log, 10) == [4, 8, 10]  # and the last, off the multiples
    assert steps(schedule.eval, 10) == [3, 6, 9]  # the end's evaluation is the loop's
    assert steps(schedule.save, 10) == [5, 10]
    assert steps(schedule.sync, 10) == [3, 4, 5, 6, 8, 9, 10]
    assert steps(schedule.last, 10) == [10]
    assert schedule.sync(7, stop_signalled=True) and not schedule.sync(7)


def test_every_zero_means_only_at_the_end_and_no_budget_is_never_spent():
    schedule = StepSchedule.from_config(TrainConfig("out", max_steps=6, log_every=1))
    assert steps(schedule.eval) == [] and steps(schedule.save) == []
    assert steps(schedule.sync, 6) == [1, 2, 3, 4, 5, 6]
    assert not schedule.budget_spent(1e9)


def test_the_cpu_budget_is_spent_when_reached():
    schedule = StepSchedule.from_config(TrainConfig("out", max_steps=6, stop_at_cpu_seconds=2.0))
    assert not schedule.budget_spent(1.99) and schedule.budget_spent(2.0)


def test_a_schedule_needs_max_steps_and_a_config_refuses_bad_values():
    with pytest.raises(BertkitError, match="max_steps is not set"):
        StepSchedule.from_config(TrainConfig("out"))
    with pytest.raises(BertkitError, match="--save-every must be >= 0"):
        TrainConfig("out", save_every=-1)
    with pytest.raises(BertkitError, match="--log-every must be >= 1"):
        TrainConfig("out", log_every=0)
