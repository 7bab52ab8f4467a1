"""The recipe table: variants of the curve's recipe, each one change, each a one-point curve at
a fixed budget, fine-tuned beside its own random twin; the table reads them against the base."""

from __future__ import annotations

import dataclasses
import json

import pytest

from bertkit.errors import BertkitError
from bertkit.studies.pretraining import curve, curve_finetune, curve_points, recipes
from bertkit.studies.report import pyplot
from bertkit.training.state import saved_cost
from tests.helpers import held_elsewhere, small_glue

pytestmark = pytest.mark.usefixtures("one_thread")

BUDGET = 0.0006  # CPU-hours: about 2 CPU-seconds


def test_variants_are_one_change_each_and_the_base_runs_first():
    assert recipes.parse_variants("mask40,sop") == ("base", "mask40", "sop")
    assert recipes.parse_variants("mask40,base") == ("base", "mask40")
    assert recipes.parse_variants(None)[0] == "base" and len(recipes.parse_variants(None)) > 5
    with pytest.raises(BertkitError, match="unknown recipe variant"):
        recipes.parse_variants("mask99")
    base = curve.CurveSettings(corpus=("x",))
    for name, (changes, _) in recipes.VARIANTS.items():
        settings = recipes.variant_settings(base, name, 0.5)
        changed = {k for k in vars(base) if getattr(settings, k) != getattr(base, k)}
        assert changed == {"budgets_hours", *changes}, name
        assert settings.budgets_hours == (0.5,)  # the schedule ends at the fixed budget


def test_a_small_study_pre_trains_fine_tunes_and_reports(shared_data, tmp_path):
    text = (shared_data / "wikitext-2" / "wiki.test.raw").read_text(encoding="utf-8")[:60_000]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    base = curve.CurveSettings(corpus=(str(corpus),), vocab_size=300, model="tiny",
                               batch_size=8, max_seq_length=32)
    ft = curve_finetune.FinetuneSettings(train_examples=32, epochs=1.0, lr_grid=(1e-3,), seeds=2)
    names, work = ("base", "mask40"), tmp_path / "work"
    data = small_glue(shared_data, tmp_path / "data")
    # a sitting's pre-training hours are shared by the variants: used up in the base's run
    recipes.run_recipes(base, BUDGET, names, work, data, ft, hours_left=1e-7)
    assert "0.0006h" not in json.loads((work / "0.0006h" / "base" / "study.json").read_text()
                                       )["pretrain"]
    assert not (work / "0.0006h" / "mask40").exists()
    # a second study on the other core holds the base: this one leaves it and goes on
    base_files = {p: p.read_bytes() for p in (work / "0.0006h" / "base").glob("*.json")}
    with held_elsewhere(work / "0.0006h" / "base" / "sitting-pretrain"):
        recipes.run_recipes(base, BUDGET, names, work, data, ft)
    assert {p: p.read_bytes() for p in (work / "0.0006h" / "base").glob("*.json")} == base_files
    assert json.loads((work / "0.0006h" / "mask40" / "cells.json").read_text())["cells"]
    recipes.run_recipes(base, BUDGET, names, work, data, ft)
    recorded = {p: p.read_bytes() for p in work.rglob("*.json")}
    recipes.run_recipes(base, BUDGET, names, work, data, ft)  # done: nothing to redo
    assert {p: p.read_bytes() for p in work.rglob("*.json")} == recorded
    study = json.loads((work / "0.0006h" / "mask40" / "study.json").read_text())
    assert study["settings"]["masked_lm_prob"] == 0.4
    horizon = study["pretrain"]["horizon"]  # the base's steps over the two steps' cost ratio
    base_steps = json.loads((work / "0.0006h" / "base" / "study.json").read_text()
                            )["pretrain"]["horizon"]["steps"]
    # (relative_cost is stored rounded to 4 digits: the steps were counted from the exact ratio)
    assert abs(horizon["steps"] - max(100, round(base_steps / horizon["relative_cost"]))) <= 1
    assert not list(work.glob("0.0006h/*/probe*"))  # the probes' runs are removed
    rows = recipes.recipe_rows(base, BUDGET, names, work, ft)
    assert [r["variant"] for r in rows] == ["base", "mask40"]
    for row, steps in zip(rows, (base_steps, horizon["steps"])):
        # each run trains its steps to the end, whatever its CPU seconds came to
        assert row["step"] == steps and len(row["scores"]) == len(row["random"]) == 2
        assert "gain" in row and 0 <= row["mlm_acc"] <= 1
    table = recipes.recipes_markdown(rows, ft)
    assert "| `mask40` | 40% masking (Wettig et al. 2023) |" in table
    docs = tmp_path / "docs"
    docs.mkdir()
    stem, begin, end = recipes.report_name(BUDGET)
    other = recipes.report_name(0.5)  # another budget's table on the same page, kept
    (docs / "pretraining.md").write_text(f"# P\n\n{begin}\nold\n{end}\n\n{other[1]}\nkept\n"
                                         f"{other[2]}\n\nafter\n")
    recipes.write_recipes_report(docs, rows, ft, base, BUDGET)
    page = (docs / "pretraining.md").read_text()
    assert "old" not in page and "| `base` |" in page and page.endswith("\n\nafter\n")
    assert f"{other[1]}\nkept\n{other[2]}" in page
    assert stem == "pretrain_recipes_0.0006h"
    assert json.loads((docs / f"{stem}.json").read_text())["rows"][1]["variant"] == "mask40"
    if pyplot() is not None:
        assert (docs / f"{stem}.png").stat().st_size > 0 and f"]({stem}.png)" in page


def test_a_variant_that_changes_only_rates_takes_the_bases_steps_unprobed(tmp_path):
    base = curve.CurveSettings(corpus=("x",))
    with pytest.raises(BertkitError, match="the base has not run"):
        recipes.variant_horizon(base, 1.0, "lr5e-4", tmp_path)
    store = curve.open_store(recipes.variant_folder(tmp_path, 1.0, "base"),
                             recipes.variant_settings(base, "base", 1.0))
    store.put_pretrain("horizon", {"steps": 1700, "cpu_seconds_per_step": 2.1})
    # no vocabulary or shards exist: a probe would fail
    assert recipes.variant_horizon(base, 1.0, "lr5e-4", tmp_path) == {
        "steps": 1700, "cpu_seconds_per_step": 2.1, "relative_cost": 1.0}


def test_a_two_phase_variant_spends_its_share_at_the_bases_length(shared_data, tmp_path):
    """`seq64-128`: T = 64 for 90% of the budget at its own step's cost, then T = 128 at the
    base's step for the rest; the point counts both phases' steps and tokens, and its held-out
    accuracy is read at T = 128 (the base's length)."""
    text = (shared_data / "wikitext-2" / "wiki.test.raw").read_text(encoding="utf-8")[:60_000]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    base = curve.CurveSettings(corpus=(str(corpus),), vocab_size=300, model="tiny",
                               batch_size=8, max_seq_length=128)
    budget, work = 0.0001, tmp_path / "work"  # (the base takes its floor, 100 steps)
    for name in ("base", "seq64-128"):
        settings = recipes.variant_settings(base, name, budget)
        folder = recipes.variant_folder(work, budget, name)
        store = curve.open_store(folder, settings)
        curve.prepare_data(settings, folder)
        if name != "base":
            store.put_pretrain("horizon", recipes.variant_horizon(base, budget, name, work))
        curve_points.pretrain_points(store, settings, folder, fixed_steps=True)
    horizon = store.pretrain_info("horizon")
    assert horizon["phase2_steps"] == 10  # 10% of the base's 100 steps
    assert abs(horizon["steps"] - max(100, round(90 / horizon["relative_cost"]))) <= 1
    point = store.pretrain_info(curve.budget_label(budget))
    assert point["phase2_steps"] == 10 and point["step"] == horizon["steps"] + 10
    run = folder / "run"
    tokens = [saved_cost(run / d)["tokens_seen"] for d in (".", "phase2")]
    assert point["tokens_seen"] == sum(tokens) and min(tokens) > 0
    # phase 1 read the T = 64 shards, phase 2 and its held-out evaluation the T = 128 ones
    assert json.loads((folder / "shards" / "meta.json").read_text())["params"][
        "max_seq_length"] == 64
    assert json.loads((folder / curve.PHASE2_SHARDS / "meta.json").read_text())["params"][
        "max_seq_length"] == 128
    assert 0 <= point["eval_mlm_acc"] <= 1
    assert not (folder / "branches").exists()  # (phase 2's state is no decay branch's start)
    with pytest.raises(BertkitError, match="phase 2 runs at the base's length"):
        recipes.variant_horizon(dataclasses.replace(base, max_seq_length=96), budget,
                                "seq64-128", work)


def test_a_second_phase_is_for_a_one_budget_run_and_a_longer_length():
    with pytest.raises(BertkitError, match="one budget"):
        curve.CurveSettings(corpus=("x",), max_seq_length=64, phase2_seq_length=128)
    with pytest.raises(BertkitError, match="must exceed"):
        curve.CurveSettings(corpus=("x",), budgets_hours=(1.0,), phase2_seq_length=128)
    with pytest.raises(BertkitError, match="share"):
        curve.CurveSettings(corpus=("x",), budgets_hours=(1.0,), max_seq_length=64,
                            phase2_seq_length=128, phase2_share=1.0)


def test_points_drawn_on_top_of_each_other_share_one_label():
    # the 0.5h table's corner: four collapsed runs at (3.4-3.7%, -20), three near (12.5%, -4)
    points = [(5.0, -16.2), (3.4, -20.0), (3.6, -20.0), (12.2, -3.9), (12.7, -3.5),
              (12.8, -4.0), (25.1, -3.1), (3.7, -19.8)]
    assert recipes.near_groups(points) == [[0], [1, 2, 7], [3, 4, 5], [6]]
    assert recipes.near_groups([(1.0, 1.0), (2.0, 2.0)]) == [[0], [1]]
    assert recipes.near_groups([]) == []


def test_a_variant_waits_while_another_process_measures_the_bases_steps(tmp_path):
    base = curve.CurveSettings(corpus=("x",))
    folder = recipes.variant_folder(tmp_path, 1.0, "base")
    curve.open_store(folder, recipes.variant_settings(base, "base", 1.0)).begin()
    assert not recipes.base_measuring(base, 1.0, tmp_path)  # not held: the base runs here
    with held_elsewhere(curve.sitting_folder(folder, "pretrain")):
        assert recipes.base_measuring(base, 1.0, tmp_path)
        # no vocabulary, shards or base steps exist: sizing mask40 now would fail
        recipes.run_recipes(base, 1.0, ("mask40",), tmp_path, tmp_path, None)
        assert not recipes.variant_folder(tmp_path, 1.0, "mask40").joinpath("vocab").exists()
        curve.open_store(folder, recipes.variant_settings(base, "base", 1.0)).put_pretrain(
            "horizon", {"steps": 10, "cpu_seconds_per_step": 1.0})
        assert not recipes.base_measuring(base, 1.0, tmp_path)  # measured: variants may go
