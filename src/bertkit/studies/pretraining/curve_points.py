"""Taking the curve's points off its one run (docs/reports/pretraining.md): `pretrain_points` continues
the run (`curve.run_config`) to each budget not yet recorded, stops it there (`PointStop`: at the
budget's CPU seconds, at a step another run recorded, or at a recipe's fixed steps), exports and
records the point (`record_point`) and keeps the run's state there (`keep_state`,
`branches/<budget>/`) for the point's decay branch (`cooldown`).

The curve's settings, data and run recipe are `curve`'s; this module decides where the run
stops and what a point's record holds.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.runs.pretrain import run_pretraining
from bertkit.studies import pipeline
from bertkit.studies.pretraining.curve import (
    BRANCH,
    HOUR,
    CurveSettings,
    architecture,
    budget_label,
    horizon_steps,
    run_config,
)
from bertkit.studies.results import ResultsStore
from bertkit.studies.runner import machine
from bertkit.tokenization import BertTokenizer
from bertkit.training.loop import TrainResult
from bertkit.training.state import list_checkpoints, saved_cost

log = logging.getLogger(__name__)


def pretrain_points(store: ResultsStore, settings: CurveSettings, work: Path,
                    hours_left: float = math.inf, fixed_steps: bool = False) -> float:
    """Continue the run to each budget not yet recorded, exporting the model there; stop when
    this sitting has used `hours_left` CPU-hours of its own (the next sitting continues).
    Returns the CPU seconds this call's training spent.
    `fixed_steps` (a run sized for one budget: the recipe table) ends the run at its horizon
    in steps, not at the budget's CPU seconds: how many CPU seconds a step costs depends on
    what else the machine runs, so a CPU stop would give runs of one budget unequal steps and
    an unfinished schedule (the records keep the seconds each run did cost)."""

    if settings.phase2_seq_length is not None and not fixed_steps:
        raise BertkitError("a second phase is for a run of fixed steps (a recipe): a curve's "
                           "points would be read off its first phase")
    arch = architecture(settings, BertTokenizer.from_pretrained(work / "vocab").vocab_size)
    steps = horizon_steps(store, settings, work, arch)
    phase2_steps = planned_phase2_steps(store, settings)
    if settings.init is None:  # (with --init the run takes the model's own config)
        arch.save(pipeline.architecture_file(work / "run"))
    # a reproduction (`reproduce.adopt_plan`) takes each point at the step another run recorded
    # it, and keeps a branch's state where the recorded branch began
    plan = store.pretrain_info("horizon")
    at_steps, branch_steps = plan.get("point_steps", {}), plan.get("branch_steps", {})
    spent = 0.0
    for hours in settings.budgets_hours:
        label = budget_label(hours)
        if store.pretrain_info(label) is not None:
            keep_branch_start(settings, work, steps, label, branch_steps.get(label))  # (killed)
            continue
        if spent >= hours_left * HOUR:
            log.info("this sitting's %.2f CPU-hours are used; the next one continues", hours_left)
            return spent
        before = run_cpu_seconds(work / "run")
        point = PointStop(label, hours, at_steps.get(label), fixed_steps)
        if not point.can_take(store, settings, work, steps, before):
            continue
        stop_at = min(point.cpu_seconds, before + (hours_left * HOUR - spent))
        stop_at = None if math.isinf(stop_at) else stop_at
        cfg = run_config(settings, work, work / "run", steps, stop_at=stop_at, phase2_steps=phase2_steps,
                         stop_at_step=point.at_step)
        log.info("pre-training to %s (%s; the run has %.0f CPU-s)", label,
                 f"step {point.at_step}, as recorded" if point.at_step is not None else
                 f"{steps} steps" + (f" + {phase2_steps} at T = {settings.phase2_seq_length}"
                                     if phase2_steps else "")
                 if fixed_steps else f"{stop_at:.0f} CPU-s", before)
        result = run_pretraining(cfg)
        spent += result.cpu_seconds - before
        last_phase, last_step = ((work / "run" / "phase2", phase2_steps) if phase2_steps
                                 else (work / "run", steps))
        ended = result.output_dir == last_phase and result.step >= last_step
        if not point.reached(result, ended):
            continue  # stopped for the sitting's limit: the next check returns
        if result.checkpoint is not None and not phase2_steps and label not in branch_steps:
            keep_state(work, label, result.checkpoint)  # (a decay branch starts here)
        extra: dict[str, Any] = {"hours": hours}
        if phase2_steps:  # the point counts the run's steps over both phases
            extra["phase2_steps"] = result.step
            result = dataclasses.replace(result, step=steps + result.step)
        record_point(store, work, label, work / "run", result, **extra)
        keep_branch_start(settings, work, steps, label, branch_steps.get(label))
    return spent


@dataclass(frozen=True)
class PointStop:
    """Where the run stops for one budget point: at the step another run recorded it
    (`at_step`: a reproduction), at the run's horizon in steps (`fixed_steps`: a recipe's run
    sized for one budget), or else at the budget's CPU seconds (the curve)."""

    label: str
    hours: float
    at_step: int | None = None
    fixed_steps: bool = False

    @property
    def cpu_seconds(self) -> float:
        """The run's CPU-second stop for the point (inf: it stops by steps)."""
        return math.inf if self.fixed_steps or self.at_step is not None else self.hours * HOUR

    def can_take(self, store: ResultsStore, settings: CurveSettings, work: Path, steps: int,
                 before: float) -> bool:
        """Whether the run (at `before` CPU seconds, `steps` its horizon) can still be taken to
        the point: False (said) when it ended below a CPU budget; a run already past the point
        with no record of it is an error."""
        if self.at_step is not None:
            check_not_past(work / "run", self.label, self.at_step)
            return True
        if self.fixed_steps:
            return True
        if run_ended_at_a_point(store, settings, work, steps):
            # (the probe over-measured the step: the run reached its horizon below this budget)
            log.warning("%s: the run ended at step %d with %.0f CPU-s, below this budget's %.0f "
                        "(its steps cost less than the probe measured); its end is recorded as "
                        "an earlier point, so %s gets none", self.label, steps, before,
                        self.cpu_seconds, self.label)
            return False
        if before >= self.cpu_seconds:
            raise BertkitError(
                f"{work / 'run'}: already past the {self.label} budget ({before:.0f} of "
                f"{self.cpu_seconds:.0f} CPU-s) with no record of {self.label} in "
                f"{store.path.name}: a sitting stopped between exporting the point and recording "
                "it, or the record was lost. The point cannot be taken at its budget any more; "
                "continue the curve in a new --work folder, or remove that budget from the study")
        return True

    def reached(self, result: TrainResult, ended: bool) -> bool:
        """Whether the run stopped at the point (`ended`: at its last step), not short of it
        for the sitting's limit."""
        if self.at_step is not None:
            return result.step >= self.at_step
        return ended or (not self.fixed_steps and result.cpu_seconds >= self.cpu_seconds)


def check_not_past(run: Path, label: str, at_step: int) -> None:
    """A reproduced point's step is still ahead of the run (or is where it stands)."""
    now = max((s for s, _ in list_checkpoints(run)), default=0)
    if now > at_step:
        raise BertkitError(f"{run}: at step {now}, past {label}'s recorded step {at_step}, with "
                           f"no record of {label}: reproduce the curve in a new --work")


def keep_branch_start(settings: CurveSettings, work: Path, steps: int, label: str,
                      at: int | None) -> None:
    """In a reproduction whose decay branch began a few steps past its point (`at`, from the
    plan's `branch_steps`: the original kept no state at the point then, and branched from the
    run's next one), the run's state at that step, kept for `--cooldown` (in place of the
    point's own)."""
    if at is None or list_checkpoints(work / "branches" / label):
        return
    check_not_past(work / "run", label + BRANCH, at)
    result = run_pretraining(run_config(settings, work, work / "run", steps, stop_at_step=at))
    keep_state(work, label, result.checkpoint)


def keep_state(work: Path, label: str, state: Path) -> None:
    """Copy the run's state at a point to `branches/<label>/checkpoints/` (the run keeps one
    state, which its next save replaces): where the point's decay branch starts."""
    target = work / "branches" / label / state.parent.name / state.name
    if not target.exists():
        shutil.copytree(state, target.with_name(target.name + ".tmp"), dirs_exist_ok=True)
        target.with_name(target.name + ".tmp").rename(target)


def planned_phase2_steps(store: ResultsStore, settings: CurveSettings) -> int:
    """The second phase's steps, as the horizon recorded them (0: one phase), checked against
    the recipe."""
    steps = int(store.pretrain_info("horizon").get("phase2_steps", 0))
    if (settings.phase2_seq_length is not None) != (steps > 0):
        raise BertkitError(f"{store.path}: the horizon's phase 2 steps ({steps}) do not match "
                           f"the recipe's second phase ({settings.phase2_seq_length})")
    return steps


def run_cpu_seconds(run: Path) -> float:
    """The CPU seconds a run's saved states cost, both phases' when it has two."""
    return float(saved_cost(run)["cpu_seconds"]) + float(saved_cost(run / "phase2")["cpu_seconds"])


def run_ended_at_a_point(store: ResultsStore, settings: CurveSettings, work: Path,
                         steps: int) -> bool:
    """The run has a state at its horizon (`steps`) and a budget's point recorded there: a
    later budget would be the same model again."""
    if not any(s >= steps for s, _ in list_checkpoints(work / "run")):
        return False
    return any((store.pretrain_info(budget_label(h)) or {}).get("step") == steps
               for h in settings.budgets_hours)


def record_point(store: ResultsStore, work: Path, label: str, run: Path, result: TrainResult,
                 **extra: Any) -> None:
    """A point: the run's export copied to `points/<label>/`, its step, tokens, cost and
    held-out metrics (and `extra`) recorded under `label`."""
    point = work / "points" / label
    shutil.rmtree(point, ignore_errors=True)
    shutil.copytree(run / "model", point)
    evals = {k: round(v, 4) for k, v in result.metrics.items() if k.startswith("eval_")}
    store.put_pretrain(label, {
        **extra, "step": result.step, "tokens_seen": result.tokens_seen,
        "cpu_seconds": round(result.cpu_seconds, 1),
        "train_seconds": round(result.train_seconds, 1), **evals, "machine": machine()})
    log.info("point %s: step %d, %d tokens, %s", label, result.step, result.tokens_seen, evals)
