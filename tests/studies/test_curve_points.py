"""Taking the curve's points off its one run (bertkit.studies.pretraining.curve_points): points at CPU-second
budgets across sittings that stop and continue, a run that ends below a budget, a budget passed
without its record."""

from __future__ import annotations

import json

import pytest

from bertkit.errors import BertkitError
from bertkit.studies.pretraining import curve, curve_finetune, curve_points
from tests.studies.conftest import BUDGETS, STEP_CPU_SECONDS

pytestmark = pytest.mark.usefixtures("one_thread")


def test_points_at_cpu_budgets_across_sittings(settings, tmp_path):
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    # a sitting allowed a sliver of CPU time stops before the first budget and records nothing
    curve_points.pretrain_points(store, settings, work, hours_left=1e-7)
    assert store.pretrain_info("0.0006h") is None
    assert store.pretrain_info("horizon")["steps"] >= 100
    curve_points.pretrain_points(store, settings, work)  # the next sitting goes on to the end
    first, last = (store.pretrain_info(curve.budget_label(h)) for h in BUDGETS)
    horizon = store.pretrain_info("horizon")["steps"]
    assert horizon == int(BUDGETS[-1] * 3600 / STEP_CPU_SECONDS)  # the probe read the clock
    assert (first["step"], last["step"]) == (80, horizon)  # the first log line past 72; the end
    assert first["cpu_seconds"] >= BUDGETS[0] * 3600 and last["cpu_seconds"] > first["cpu_seconds"]
    assert 0 < first["step"] < last["step"] and first["tokens_seen"] < last["tokens_seen"]
    assert 0 <= first["eval_mlm_acc"] <= 1 and first["machine"]["cores"] >= 1
    assert (work / "points" / "0.0006h" / "config.json").is_file()
    # the export has its MLM head
    guesses = curve_finetune.first_guesses(work / "points" / "0.0006h")
    assert len(guesses) == 5 and all(isinstance(g, str) and g for g in guesses)
    # a later sitting with the same settings finds nothing to do; other settings are refused
    recorded = (work / "study.json").read_bytes()
    assert curve_points.pretrain_points(curve.open_store(work, settings), settings, work) == 0.0
    assert (work / "study.json").read_bytes() == recorded
    with pytest.raises(BertkitError, match="other settings"):
        curve.open_store(work, curve.CurveSettings(**{**settings.__dict__, "lr": 5e-4}))
    lines = curve.status_lines(store)
    assert lines[0].startswith("horizon:") and lines[1].startswith("0.0006h: step")


def test_a_run_that_ends_below_a_budget_records_its_end_once(settings, tmp_path, caplog):
    """A probe that over-measured the step: the run reaches its horizon below the budgets'
    CPU seconds. Its end is the first such budget's point; a later budget is not the same
    model recorded again."""
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    store.put_pretrain("horizon", {"steps": 60, "cpu_seconds_per_step": 0.03})  # 1.8 CPU-s
    curve_points.pretrain_points(store, settings, work)
    assert store.pretrain_info("0.0006h")["step"] == 60
    assert store.pretrain_info("0.0012h") is None
    assert "the run ended at step 60" in caplog.text and "0.0012h gets none" in caplog.text
    # and so in every later sitting
    assert curve_points.pretrain_points(store, settings, work) == 0.0
    assert store.pretrain_info("0.0012h") is None


def test_a_budget_passed_without_its_record_is_refused(settings, tmp_path):
    """A sitting killed between exporting a point and recording it: the run is past the budget,
    and training on would take the point at the wrong step."""
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    curve_points.pretrain_points(store, settings, work)
    study = json.loads((work / "study.json").read_text())
    del study["pretrain"]["0.0006h"], study["pretrain"]["0.0012h"]
    (work / "study.json").write_text(json.dumps(study))
    with pytest.raises(BertkitError, match="already past the 0.0006h budget"):
        curve_points.pretrain_points(curve.open_store(work, settings), settings, work)
