"""A pre-training curve made again from its report (`bertkit study pretrain-curve --reproduce`).

A curve's points are taken at budgets of its run's own CPU seconds, which no other machine (nor
the same one under another load) spends at the same step. Its report therefore carries a plan
(`curve_plan`): the horizon (the lr schedule's steps) and the step each budget point was
recorded at, and where a decay branch began when that was not the point's own step. A new work
folder begun from the plan (`adopt_plan`) takes each point at its recorded step
(`TrainConfig.stop_at_step`, in `curve_points.pretrain_points`): data and training are seeded
functions, so on the same CPU class and thread count the points are the recorded models, and
elsewhere the same recipe at the same steps. The work folder a curve ran in is not kept by
every machine (docs/reports/studies.md); the committed report is.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.studies.pretraining.cooldown import FRACTION, SLACK_STEPS
from bertkit.studies.pretraining.curve import ADDED_LATER, BRANCH, CurveSettings, budget_label, point_labels
from bertkit.studies.results import ResultsStore


def branch_length(start: int) -> int:
    """A decay branch's steps from `start` (`cooldown.branch_plan`'s rule)."""
    return max(1, round(FRACTION * start))


def as_recorded(recorded: dict[str, Any], settings: CurveSettings
                ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A report's settings (those added since at their defaults) and `settings`, both as JSON
    reads them back (tuples as lists), to compare."""
    def read_back(data: dict[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps(data, default=str))

    return read_back({**ADDED_LATER, **recorded}), read_back(dataclasses.asdict(settings))


def curve_plan(store: ResultsStore) -> dict[str, Any]:
    """What reproducing this curve takes, for its report: the horizon, the step of each budget
    point recorded, and `branch_steps`: where a decay branch began past its point's step. A
    curve made again passes on the plan it adopted too, for the points it has not reached."""
    pretrain = store.data["pretrain"]
    horizon = dict(pretrain.get("horizon") or {})
    adopted = {key: horizon.pop(key, {}) for key in ("point_steps", "branch_steps")}
    horizon.pop("reproduces", None)
    steps = {label: info["step"] for label, info in pretrain.items()
             if label != "horizon" and not label.endswith(BRANCH)}
    branches = {label: pretrain[label + BRANCH]["from_step"] for label in steps
                if pretrain.get(label + BRANCH, {}).get("from_step", steps[label]) != steps[label]}
    steps, branches = ({**adopted["point_steps"], **steps},
                       {**adopted["branch_steps"], **branches})
    return {**horizon, "point_steps": steps, **({"branch_steps": branches} if branches else {})}


def report_plan(report: dict[str, Any], source: str) -> dict[str, Any]:
    """A report's plan (`curve_plan`), or, in a report written before plans were (2026-11-29),
    the same read off its status lines (a branch's start from its end step: the one start
    within the branch rule's slack of its point that ends there)."""
    plan = report.get("plan")
    if plan is None:
        plan, steps, ends = {}, {}, {}
        for line in report.get("status", []):
            if m := re.match(r"horizon: (\d+) steps at ([\d.]+) CPU-s a step", line):
                plan = {"steps": int(m[1]), "cpu_seconds_per_step": float(m[2])}
            elif m := re.match(r"([\d.]+h)(\+cool)?: step (\d+),", line):
                (ends if m[2] else steps)[m[1]] = int(m[3])
        plan["point_steps"] = steps
        branches = {}
        for label, end in ends.items():
            point = steps.get(label, end)
            starts = [b for b in range(point, point + SLACK_STEPS + 1)
                      if b + branch_length(b) == end]
            if starts and starts[0] != point:
                branches[label] = starts[0]
        plan.update({"branch_steps": branches} if branches else {})
    if not plan.get("steps") or not plan.get("point_steps"):
        raise BertkitError(f"{source}: no horizon and budget points to reproduce (a curve's "
                           "JSON, written by --report)")
    return plan


def check_plan(plan: dict[str, Any], settings: CurveSettings, source: str) -> None:
    """Every point a budget of these settings, at a step inside the horizon, in budget order;
    every branch start at or past its point."""
    budgets = [budget_label(h) for h in settings.budgets_hours]
    points = plan["point_steps"]
    unknown = sorted(set(points) - set(budgets))
    if unknown:
        raise BertkitError(f"{source}: points {', '.join(unknown)} are no budgets of this study "
                           f"({', '.join(budgets)})")
    ordered = [points[b] for b in budgets if b in points]
    if ordered != sorted(ordered) or not all(1 <= s <= plan["steps"] for s in ordered):
        raise BertkitError(f"{source}: the points' steps ({ordered}) must rise with the budgets "
                           f"and lie within the horizon's {plan['steps']}")
    for label, start in plan.get("branch_steps", {}).items():
        if label not in points or not points[label] <= start <= plan["steps"]:
            raise BertkitError(f"{source}: {label}'s decay branch starts at step {start}, not "
                               "at or past its point")


def adopt_plan(store: ResultsStore, settings: CurveSettings, report: dict[str, Any],
               source: str) -> None:
    """Begin `store` as a reproduction of the curve `report` records (its JSON beside the
    table): the same settings, its horizon (so the same lr schedule) and each budget point at
    the step it was recorded at. A store that already holds this plan continues; a store with
    another is refused."""
    if "settings" not in report:
        raise BertkitError(f"{source}: records no settings (a report written before they were), "
                           "so a reproduction could not tell its recipe from another's")
    theirs, mine = as_recorded(report["settings"], settings)
    differ = sorted(k for k in {*theirs, *mine} if theirs.get(k, "<none>") != mine.get(k, "<none>"))
    if differ:
        # (the corpus is recorded as the paths --data made: another spelling of the same folder
        # differs too)
        hint = (f"; its corpus begins {theirs['corpus'][0]} (--data as it was given then)"
                if "corpus" in differ and theirs.get("corpus") else "")
        raise BertkitError(f"{source}: recorded with other settings ({', '.join(differ)}) than "
                           f"these options make; give the options it was run with{hint}")
    plan = {**report_plan(report, source), "reproduces": Path(source).name}
    check_plan(plan, settings, source)
    have = store.pretrain_info("horizon")
    if have is None:
        store.put_pretrain("horizon", plan)
        return
    for key in ("steps", "point_steps", "branch_steps"):
        if have.get(key) != plan.get(key):
            raise BertkitError(f"{store.path}: holds a study whose {key} differ from "
                               f"{source}'s; reproduce it in a new --work (a study that holds "
                               "its plan continues without --reproduce)")


KEPT = "kept from the earlier report"  # the status line that says what a report kept


def keep_earlier_rows(earlier: dict[str, Any], settings: CurveSettings, rows: list[dict],
                      tasks: list[dict], status: list[str], source: str
                      ) -> tuple[list[dict], list[dict], list[str]]:
    """A report rewritten from a work folder that lacks some of its fine-tuning (a curve made
    again: its points reproduced, their cells not yet run again) keeps the earlier report's
    rows for what the folder has not scored, rather than dropping measured rows: a point's row
    or whole-task row with scores here wins; an earlier one for a point at the same step (the
    same model, when reproduced) or one this folder has not reached is kept. Returns the rows,
    the task rows and the status lines: this folder's, the earlier report's lines of the points
    this folder has not recorded, and what was kept. An earlier report of other settings, or whose point lies
    at another step than this folder's (another run of the recipe), is refused: its rows would
    mix two runs in one table."""
    if "settings" in earlier:
        theirs, mine = as_recorded(earlier["settings"], settings)
        if theirs != mine:
            raise BertkitError(f"{source}: a report of other settings; not rewritten from this "
                               "study (--report into another folder)")
    steps = {r["budget"]: r["step"] for r in rows}
    for old in [*earlier.get("rows", []), *earlier.get("tasks", [])]:
        if steps.get(old["budget"], old["step"]) != old["step"]:
            raise BertkitError(
                f"{source}: its {old['budget']} is step {old['step']}, this study's is step "
                f"{steps[old['budget']]}: another run of the recipe, whose rows would mix with "
                "these (reproduce it with --reproduce, or --report into another folder)")
    kept: list[str] = []
    scored = {r["budget"] for r in rows if r["scores"]}
    merged = {r["budget"]: r for r in rows}
    for old in earlier.get("rows", []):
        if old["budget"] not in scored and old.get("scores"):
            merged[old["budget"]] = old
            kept.append(old["budget"])
    have = {(r["budget"], r["task"]) for r in tasks}
    extra = [t for t in earlier.get("tasks", []) if (t["budget"], t["task"]) not in have]
    order = {label: i for i, label in enumerate(point_labels(settings))}
    recipes = list(dict.fromkeys(t["task"] for t in [*earlier.get("tasks", []), *tasks]))
    # (a status line is "LABEL: ..."; the horizon's is this folder's own, and what was kept is
    # said anew below)
    here = {line.split(":")[0] for line in status}
    lines = [*status, *(line for line in earlier.get("status", [])
                        if line.split(":")[0] not in here | {"horizon"}
                        and not line.startswith(KEPT))]
    if kept or extra:
        lines.append(f"{KEPT} (not fine-tuned in this work folder): "
                     f"the rows of {', '.join(kept) or 'no point'} and {len(extra)} whole-task "
                     "or other-recipe row(s)")
    return (sorted(merged.values(), key=lambda r: order.get(r["budget"], len(order))),
            sorted([*tasks, *extra], key=lambda t: (recipes.index(t["task"]),
                                                    order.get(t["budget"], len(order)))),
            lines)
