"""Decay branches of the curve's points (docs/reports/pretraining.md).

The curve reads each point off one long run whose rate decays over the whole horizon, so at an
early budget the rate is still near its peak: an export that no run sized for that budget would
make. A branch continues the run from the state kept at a point (`curve_points.keep_state`) for
`FRACTION` more steps while the rate falls linearly from where the run had it to 0 (the
"cooldown" of Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed
Training Durations": a constant or slowly decaying rate plus a short final decay matches a
schedule sized for the budget). The annealed export is recorded as a point of its own,
`<budget>+cool`, with its own step, tokens, CPU-seconds (the point's plus the branch's) and
held-out MLM accuracy, and is fine-tuned like every point (`--finetune --points 2h+cool`). The
main run is never touched: a branch is a run of its own in `branches/<budget>/`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text, claim_output_dir, release_output_dir
from bertkit.runs.pretrain import PRETRAIN_MARKER, run_pretraining
from bertkit.studies import pipeline
from bertkit.studies.pretraining.curve import (
    BRANCH,
    CurveSettings,
    check_points,
    run_config,
    sitting,
)
from bertkit.studies.pretraining.curve_points import keep_state, record_point
from bertkit.studies.results import ResultsStore
from bertkit.training.optim import lr_at
from bertkit.training.state import list_checkpoints

log = logging.getLogger(__name__)

FRACTION = 0.2  # the branch's length, a fraction of the point's steps (Hägele et al.: 10-20%)
# How far past a point the run's latest state may be and still start its branch: the run stops
# at the first sync point after a budget (a log interval at most), and a sitting killed
# right after resuming saves a few steps later.
SLACK_STEPS = 50


def branch_points(store: ResultsStore, settings: CurveSettings, work: Path,
                  points: Sequence[str] | None = None) -> None:
    """Run the decay branch of every recorded point (of `points`, budget labels, when given)
    that has a kept state and no branch recorded yet; a killed branch resumes."""
    labels = check_points(settings, points, branches=False)
    recorded = [label for label in labels if store.pretrain_info(label) is not None]
    missing = sorted(set(points or ()) - set(recorded))
    if not recorded or missing:
        raise BertkitError(f"{work}: {', '.join(missing) or 'no point'} recorded yet "
                           f"(recorded: {', '.join(recorded) or 'none'}); pre-train first")
    horizon = int(store.pretrain_info("horizon")["steps"])
    cannot, ended = [], []
    for label in recorded:
        info = store.pretrain_info(label)
        if ((points is not None and label not in points)
                or store.pretrain_info(label + BRANCH) is not None):
            continue
        if info["step"] >= horizon:
            log.info("%s: the run's last point, its rate already 0: no branch", label)
            ended.append(label)
            continue
        folder = work / "branches" / label
        plan = branch_plan(folder, work, label, info["step"], settings, horizon)
        if plan is None:
            log.warning("%s: no training state kept at step %d (the run has moved on); its "
                        "decay branch cannot start", label, info["step"])
            cannot.append(label)
            continue
        run_branch(store, settings, work, label, folder, plan)
    if points is not None and (cannot or ended):  # (asked for by name: not a silent success)
        reasons = [f"{', '.join(cannot)}: no training state kept there"] if cannot else []
        reasons += [f"{', '.join(ended)}: the run's end, its rate already 0"] if ended else []
        raise BertkitError(f"no decay branch for {'; '.join(reasons)}")


def branch_plan(folder: Path, work: Path, label: str, step: int, settings: CurveSettings,
                horizon_steps: int) -> dict | None:
    """Where the branch starts and ends and the rate it anneals from, written once
    (`branch.json`) so that a resumed branch keeps them. Its start: the state kept at the point,
    or else the run's latest state if it is at most `SLACK_STEPS` past the point and before the
    run's end (a study begun before states were kept); None when there is neither."""
    plan_file = folder / "branch.json"
    if plan_file.is_file():
        return json.loads(plan_file.read_text(encoding="utf-8"))
    kept = list_checkpoints(folder)
    if not kept:
        with sitting(work, "pretrain"):  # (the run's states change only in its own sitting)
            # (a state at the run's end has no rate left to anneal from: on a short run the
            # end can lie within the slack of the point before it)
            near = [(s, p) for s, p in list_checkpoints(work / "run")
                    if step <= s <= step + SLACK_STEPS and s < horizon_steps]
            if not near:
                return None
            keep_state(work, label, near[0][1])
        kept = list_checkpoints(folder)
    start = kept[0][0]
    main = run_config(settings, work, work / "run", horizon_steps).train  # (the run's schedule)
    plan = {"from_step": start, "steps": max(1, round(FRACTION * start)),
            "from_lr": lr_at(start, peak_lr=main.lr, warmup_steps=main.resolved_warmup,
                             max_steps=main.max_steps, schedule=main.schedule)}
    atomic_write_text(plan_file, json.dumps(plan) + "\n")
    return plan


def run_branch(store: ResultsStore, settings: CurveSettings, work: Path, label: str,
               folder: Path, plan: dict) -> None:
    """The branch as a run resumed from the kept state, its export recorded as `label+cool`."""
    name = label + BRANCH
    run = folder / "run"
    start, end = plan["from_step"], plan["from_step"] + plan["steps"]
    cfg = run_config(settings, work, run, end, decay_from=(start, plan["from_lr"]))
    if not list_checkpoints(run):  # the kept state becomes the branch run's first state
        shutil.rmtree(run, ignore_errors=True)
        # the folder is claimed as this run's (its settings written) before the state arrives,
        # so that the run resumes from it rather than refusing a folder it did not write
        claim_output_dir(run, PRETRAIN_MARKER, dataclasses.asdict(cfg))
        release_output_dir(run)
        # copied whole, then renamed: a kill during the copy never leaves a state to resume from
        shutil.copytree(folder / "checkpoints", run / "checkpoints.tmp")
        (run / "checkpoints.tmp").rename(run / "checkpoints")
    arch = pipeline.architecture_file(run)
    if settings.init is None and not arch.is_file():
        shutil.copyfile(pipeline.architecture_file(work / "run"), arch)
    log.info("decay branch %s: steps %d to %d, the rate from %.3g to 0", name, start, end,
             plan["from_lr"])
    result = run_pretraining(cfg)
    record_point(store, work, name, run, result, hours=store.pretrain_info(label)["hours"], **plan)
    shutil.rmtree(run, ignore_errors=True)  # (the kept state stays: another branch may start there)
