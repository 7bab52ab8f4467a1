"""Decay branches of the curve's points: a branch starts from the state kept at a point, anneals
the rate from where the run had it to 0, and is recorded as a point of its own; the main run is
not touched."""

from __future__ import annotations

import json
import shutil

import pytest

from bertkit.errors import BertkitError
from bertkit.studies.pretraining import cooldown, curve, curve_finetune, curve_points
from bertkit.training.optim import lr_at
from bertkit.training.state import list_checkpoints
from tests.studies.conftest import BUDGETS

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def study(settings, tmp_path):
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    # one sitting that stops at the first point: the run's latest state is that point's
    curve_points.pretrain_points(store, settings, work, hours_left=BUDGETS[0])
    assert store.pretrain_info("0.0012h") is None
    return settings, work, store


def test_a_branch_anneals_the_run_from_the_state_kept_at_a_point(study):
    settings, work, store = study
    first = store.pretrain_info("0.0006h")
    assert [s for s, _ in list_checkpoints(work / "branches" / "0.0006h")] == [first["step"]]
    run_states = list_checkpoints(work / "run")
    with pytest.raises(BertkitError, match="no budget 3h"):
        cooldown.branch_points(store, settings, work, ["3h"])
    with pytest.raises(BertkitError, match="0.0012h recorded yet"):
        cooldown.branch_points(store, settings, work, ["0.0012h"])
    cooldown.branch_points(store, settings, work, ["0.0006h"])
    branch = store.pretrain_info("0.0006h+cool")
    steps = max(1, round(cooldown.FRACTION * first["step"]))
    assert branch["from_step"] == first["step"] and branch["step"] == first["step"] + steps
    horizon = store.pretrain_info("horizon")["steps"]
    assert branch["from_lr"] == pytest.approx(lr_at(
        first["step"], peak_lr=settings.lr, warmup_steps=round(settings.warmup_ratio * horizon),
        max_steps=horizon))
    assert branch["tokens_seen"] > first["tokens_seen"]
    assert branch["cpu_seconds"] > first["cpu_seconds"] and 0 <= branch["eval_mlm_acc"] <= 1
    assert (work / "points" / "0.0006h+cool" / "config.json").is_file()
    assert list_checkpoints(work / "run") == run_states  # the main run is untouched
    ft = curve_finetune.FinetuneSettings()
    rows = curve_finetune.curve_rows(store, curve_finetune.open_cells(work, ft), settings, ft)
    assert [r["budget"] for r in rows] == ["0.0006h", "0.0006h+cool"]
    assert any(line.startswith("0.0006h+cool: step") for line in curve.status_lines(store))
    # the run to its end: the last point's rate is 0
    curve_points.pretrain_points(store, settings, work)
    with pytest.raises(BertkitError, match="0.0012h: the run's end"):
        cooldown.branch_points(store, settings, work, ["0.0012h"])


def test_a_study_begun_before_states_were_kept_branches_from_the_runs_state(study, monkeypatch):
    settings, work, store = study
    shutil.rmtree(work / "branches")  # (as a study begun before states were kept)
    point = store.pretrain_info("0.0006h")
    cooldown.branch_points(store, settings, work)
    assert store.pretrain_info("0.0006h+cool")["from_step"] == point["step"]
    # once the run has ended, its branch cannot start from the run's last state, however near
    # the point (a short run's end can lie within the slack: the rate there is 0, nothing to
    # anneal from)
    curve_points.pretrain_points(store, settings, work)
    monkeypatch.setattr(cooldown, "SLACK_STEPS", 10**6)
    shutil.rmtree(work / "branches")
    study = json.loads((work / "study.json").read_text())
    del study["pretrain"]["0.0006h+cool"]  # (the store rereads its file before each record)
    (work / "study.json").write_text(json.dumps(study))
    store = curve.open_store(work, settings)
    cooldown.branch_points(store, settings, work)  # (all points: said in the log)
    assert store.pretrain_info("0.0006h+cool") is None
    with pytest.raises(BertkitError, match="no training state kept"):  # (by name: an error)
        cooldown.branch_points(store, settings, work, ["0.0006h"])
