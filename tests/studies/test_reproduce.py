"""A curve made again from its report (`--reproduce`): the plan a report carries, points
taken at their recorded steps, a decay branch begun past its point, and a report rewritten
from such a folder keeping the earlier report's rows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.studies.pretraining import cooldown, curve, curve_points, reproduce
from bertkit.training.state import list_checkpoints

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_reproduction_takes_each_point_at_its_recorded_step(settings, tmp_path):
    """`--reproduce`: a new work folder begun from a curve's report JSON takes its horizon and
    stops at each point's recorded step, whatever its own CPU seconds say (here 50 and 100,
    where the clock alone gives 80 and 143), across sittings; the point at the original's
    own steps is the original's model, bit for bit; a report written before plans were
    (status lines only) gives the same plan; other settings and a run past a step are
    refused."""
    from safetensors.torch import load_file

    first = tmp_path / "first"
    curve.prepare_data(settings, first)
    store = curve.open_store(first, settings)
    curve_points.pretrain_points(store, settings, first)
    plan = reproduce.curve_plan(store)
    assert plan["point_steps"] == {"0.0006h": 80, "0.0012h": 143} and plan["steps"] == 143
    report = {"settings": dataclasses.asdict(settings), "plan": plan,
              "status": curve.status_lines(store)}
    old_style = {k: v for k, v in report.items() if k != "plan"}
    assert reproduce.report_plan(old_style, "r.json") == reproduce.report_plan(report, "r.json")

    same = tmp_path / "same"
    curve.prepare_data(settings, same)
    again = curve.open_store(same, settings)
    reproduce.adopt_plan(again, settings, json.loads(json.dumps(report, default=str)), "r.json")
    curve_points.pretrain_points(again, settings, same)
    for label in ("0.0006h", "0.0012h"):
        ours, theirs = (load_file(w / "points" / label / "model.safetensors")
                        for w in (same, first))
        assert again.pretrain_info(label)["step"] == store.pretrain_info(label)["step"]
        assert all(torch.equal(ours[k], theirs[k]) for k in theirs), label
    assert "reproducing r.json: 0.0006h, 0.0012h at their recorded steps" in \
        curve.status_lines(again)[0]

    moved = {**report, "plan": {**plan, "point_steps": {"0.0006h": 50, "0.0012h": 100}}}
    work = tmp_path / "moved"
    curve.prepare_data(settings, work)
    other = curve.open_store(work, settings)
    reproduce.adopt_plan(other, settings, moved, "m.json")
    reproduce.adopt_plan(other, settings, moved, "m.json")  # the same plan again: continues
    curve_points.pretrain_points(other, settings, work, hours_left=1e-7)  # a sitting's sliver
    assert other.pretrain_info("0.0006h") is None
    curve_points.pretrain_points(other, settings, work)
    assert [other.pretrain_info(x)["step"] for x in ("0.0006h", "0.0012h")] == [50, 100]
    assert other.pretrain_info("horizon")["steps"] == 143  # the same schedule
    with pytest.raises(BertkitError, match="point_steps differ from r.json's"):
        reproduce.adopt_plan(other, settings, report, "r.json")
    with pytest.raises(BertkitError, match=r"other settings \(lr\)"):
        reproduce.adopt_plan(curve.open_store(tmp_path / "lr", dataclasses.replace(settings, lr=5e-4)),
                         dataclasses.replace(settings, lr=5e-4), report, "r.json")
    moved_corpus = dataclasses.replace(settings, corpus=("/elsewhere/corpus.txt",))
    with pytest.raises(BertkitError, match=r"\(corpus\).*its corpus begins .*corpus.txt"):
        reproduce.adopt_plan(curve.open_store(tmp_path / "c", moved_corpus), moved_corpus,
                             report, "r.json")
    with pytest.raises(BertkitError, match="no horizon and budget points"):
        reproduce.report_plan({"status": []}, "empty.json")
    fresh = curve.open_store(tmp_path / "fresh", settings)
    with pytest.raises(BertkitError, match="records no settings"):
        reproduce.adopt_plan(fresh, settings, {"status": old_style["status"]}, "o.json")
    for steps, says in (({"0.0006h": 50, "3h": 90}, "3h are no budgets"),
                        ({"0.0006h": 100, "0.0012h": 50}, "must rise with the budgets"),
                        ({"0.0006h": 50, "0.0012h": 144}, "within the horizon's 143")):
        bad = {**report, "plan": {**plan, "point_steps": steps}}
        with pytest.raises(BertkitError, match=says):
            reproduce.adopt_plan(fresh, settings, bad, "b.json")
    assert fresh.pretrain_info("horizon") is None  # nothing adopted
    study = json.loads((work / "study.json").read_text())
    del study["pretrain"]["0.0012h"]
    study["pretrain"]["horizon"]["point_steps"]["0.0012h"] = 90  # behind the run's 100
    (work / "study.json").write_text(json.dumps(study))
    with pytest.raises(BertkitError, match="past 0.0012h's recorded step 90"):
        curve_points.pretrain_points(curve.open_store(work, settings), settings, work)


def test_a_branch_that_began_past_its_point_is_reproduced_from_there(settings, tmp_path):
    """The committed bf16 curve's 2h branch began 4 steps past its point (a study begun before
    states were kept). A reproduction keeps the run's state at the branch's recorded start, not
    at the point, so its decay branch is the recorded one; an old report's status lines give
    that start from the branch's end step."""
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    report = {"settings": dataclasses.asdict(settings),
              "status": ["horizon: 143 steps at 0.03 CPU-s a step",
                         "0.0006h: step 40, 0.1M tokens, 0.00 CPU-h, held-out MLM accuracy 1.0%",
                         "0.0006h+cool: step 52, 0.1M tokens, 0.00 CPU-h, held-out MLM accuracy 1.0%"]}
    plan = reproduce.report_plan(report, "r.json")
    assert plan["branch_steps"] == {"0.0006h": 43}  # 43 + round(0.2 x 43) = 52; 40 + 8 = 48
    reproduce.adopt_plan(store, settings, report, "r.json")
    curve_points.pretrain_points(store, settings, work)
    assert store.pretrain_info("0.0006h")["step"] == 40
    assert [s for s, _ in list_checkpoints(work / "branches" / "0.0006h")] == [43]
    cooldown.branch_points(store, settings, work, ["0.0006h"])
    branch = store.pretrain_info("0.0006h+cool")
    assert (branch["from_step"], branch["step"]) == (43, 52)
    assert reproduce.curve_plan(store)["branch_steps"] == {"0.0006h": 43}


def test_the_documented_bf16_curve_has_a_plan_to_reproduce():
    """docs/reports/pretrain_curve_bf16.json predates plans: its status lines give the horizon and
    the budget points' steps (the decay branches follow from them)."""
    report = json.loads((Path(__file__).parents[2] / "docs" / "reports" / "pretrain_curve_bf16.json")
                        .read_text(encoding="utf-8"))
    plan = reproduce.report_plan(report, "pretrain_curve_bf16.json")
    assert plan["steps"] == 27740
    assert plan["point_steps"] == {"0.25h": 520, "0.5h": 1000, "1h": 1980, "2h": 3780,
                                   "4h": 6740}
    assert plan["branch_steps"] == {"2h": 3784}  # 4h's began at its point (6740 + 1348 = 8088)


def _row(budget, step, scores=(), task=None):
    row = {"budget": budget, "cpu_hours": 0.5, "step": step, "tokens": 1e6, "mlm_acc": 0.2,
           "fill_mask": [], "scores": list(scores), "random": [70.0, 71.0],
           "baseline": "random init"}
    return {**row, "task": task, "metric": "f1"} if task else row


def test_a_report_rewritten_from_a_reproduction_keeps_the_rows_it_has_not_scored(tmp_path):
    """The next sitting's `--report docs/reports` from a curve made again (points reproduced, few cells
    run again) must not drop the committed rows: a row scored here wins, an earlier scored row
    of the same point (same step) or of a point not reached here is kept and said; another run
    of the recipe (a point at another step) or a report of other settings is refused."""
    settings = curve.CurveSettings(corpus=("a.txt",), budgets_hours=(0.25, 0.5, 1.0))
    earlier = {"settings": json.loads(json.dumps(dataclasses.asdict(settings))),
               "rows": [_row("0.25h", 520, [68.0, 69.0]), _row("0.5h", 1000, [66.0, 67.0]),
                        _row("1h", 1980, [70.0, 71.0])],
               "tasks": [_row("1h", 1980, [80.0, 81.0], task="mrpc"),
                         _row("0.5h", 1000, [60.0, 61.0], task="stsb")],
               "status": ["horizon: 9 steps", "0.25h: step 520, old", "0.5h: step 1000, old",
                          "1h: step 1980, old"]}
    rows = [_row("0.25h", 520), _row("0.5h", 1000, [90.0, 91.0])]  # 0.5h scored again here
    tasks = [_row("0.5h", 1000, [62.0, 63.0], task="stsb")]
    status = ["horizon: 9 steps; reproducing", "0.25h: step 520, new", "0.5h: step 1000, new"]
    here = rows, tasks, status  # this folder's
    rows, tasks, status = reproduce.keep_earlier_rows(earlier, settings, *here, "e.json")
    assert [(r["budget"], r["scores"]) for r in rows] == [
        ("0.25h", [68.0, 69.0]), ("0.5h", [90.0, 91.0]), ("1h", [70.0, 71.0])]
    assert [(t["task"], t["budget"], t["scores"]) for t in tasks] == [
        ("mrpc", "1h", [80.0, 81.0]), ("stsb", "0.5h", [62.0, 63.0])]
    assert status == ["horizon: 9 steps; reproducing", "0.25h: step 520, new",
                      "0.5h: step 1000, new", "1h: step 1980, old",
                      "kept from the earlier report (not fine-tuned in this work folder): the "
                      "rows of 0.25h, 1h and 1 whole-task or other-recipe row(s)"]
    # the next report rewritten from that one: the same rows, what was kept said once
    written = {"settings": earlier["settings"], "rows": rows, "tasks": tasks, "status": status}
    assert reproduce.keep_earlier_rows(written, settings, *here, "e.json") == (rows, tasks, status)
    # and once this folder has scored every row, nothing is kept, and no line says so
    _, _, scored_here = reproduce.keep_earlier_rows(written, settings, rows, tasks, status[:4],
                                                    "e.json")
    assert not [line for line in scored_here if line.startswith(reproduce.KEPT)]
    with pytest.raises(BertkitError, match="its 0.5h is step 1000, this study's is step 990"):
        reproduce.keep_earlier_rows(earlier, settings, [_row("0.5h", 990)], [], [], "e.json")
    with pytest.raises(BertkitError, match="a report of other settings"):
        reproduce.keep_earlier_rows(earlier, dataclasses.replace(settings, lr=5e-4), [], [], [],
                                    "e.json")
