"""Fine-tuning the curve's points and the report: the gain's standard error, the rows and the
table, the rate chosen on the selection seed, the page's block between its markers, the
whole-task records, what the demo report reads off the records, each curve's page and
baseline."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math

import pytest

from bertkit.errors import BertkitError
from bertkit.studies.pretraining import curve, curve_finetune
from tests.helpers import held_elsewhere


def test_gain_and_its_standard_error():
    g, se = curve_finetune.gain([80.0, 82.0, 84.0], [70.0, 71.0, 72.0])
    assert g == pytest.approx(11.0)
    assert se == pytest.approx(math.sqrt(4.0 / 3 + 1.0 / 3))  # Welch: s1²/n1 + s0²/n0


def test_report_rows_and_table(tmp_path):
    settings = curve.CurveSettings(corpus=("x",), budgets_hours=(0.5, 1.0))
    ft = curve_finetune.FinetuneSettings(seeds=2)
    store, cells = curve.open_store(tmp_path, settings), curve_finetune.open_cells(tmp_path, ft)
    store.put_pretrain("0.5h", {"hours": 0.5, "step": 90, "tokens_seen": 1_500_000,
                                "cpu_seconds": 1800.0, "eval_mlm_acc": 0.25})
    for seed, (pre, rnd) in enumerate([(80.0, 75.0), (82.0, 77.0)]):
        cells.put(cells.key("0.5h", "sst2", seed), {"score": pre})
        cells.put(cells.key(curve_finetune.RANDOM, "sst2", seed), {"score": rnd})
    rows = curve_finetune.curve_rows(store, cells, settings, ft)
    assert [r["budget"] for r in rows] == ["0.5h"]  # 1h is not recorded yet
    assert rows[0]["gain"] == pytest.approx(5.0)
    table = curve_finetune.report_markdown(rows, ft).splitlines()
    assert table[2].startswith("| 0.5h | 0.50 | 90 | 1.5M | 25.0 | — | 81.0 ± 1.4 | 76.0 ± 1.4 |")
    assert curve_finetune.plot_curve(rows, tmp_path / "curve.png").stat().st_size > 1000
    # a decay branch is a row of its own after its point, and a marker of its own in the plot
    store.put_pretrain("0.5h+cool", {"hours": 0.5, "step": 108, "tokens_seen": 1_800_000,
                                     "cpu_seconds": 2160.0, "eval_mlm_acc": 0.3})
    rows = curve_finetune.curve_rows(store, cells, settings, ft)
    assert [r["budget"] for r in rows] == ["0.5h", "0.5h+cool"] and "gain" not in rows[1]
    assert curve_finetune.plot_curve(rows, tmp_path / "both.png").stat().st_size > 1000


def test_selected_lr_skips_collapsed_runs(tmp_path):
    ft = curve_finetune.FinetuneSettings(lr_grid=(1e-4, 1e-3))
    cells = curve_finetune.open_cells(tmp_path, ft)
    cells.put(cells.key("random@lr0.0001", "sst2", ft.selection_seed), {"score": 60.0})
    assert curve_finetune.selected_lr(cells, ft, "random") is None  # the grid is unfinished
    cells.put(cells.key("random@lr0.001", "sst2", ft.selection_seed),
              {"score": 70.0, "collapsed": True})
    assert curve_finetune.selected_lr(cells, ft, "random") == 1e-4


def fake_cells(monkeypatch, best: dict[str, float]) -> list[tuple[str, float, int]]:
    """`pipeline.finetune_cell` replaced by one that scores 80 at the variant's `best` rate and
    60 elsewhere; returns the list of (variant, lr, seed) it ran."""
    runs = []

    def fake_cell(recipe, model_dir, task, folder, seed):
        variant = model_dir.name
        lr = recipe.train.lr
        runs.append((variant, lr, seed))
        score = 80.0 if lr == best[variant] else 60.0
        return {"task": task, "lr": lr, "epochs": 3.0, "seed": seed, "steps": 5,
                "final_loss": 0.5, "train_seconds": 1.5, "train_cpu_seconds": 1.4,
                "f1": score / 100, "accuracy": 0.7, "score": score, "seconds": 2.0}

    monkeypatch.setattr(curve_finetune.pipeline, "finetune_cell", fake_cell)
    return runs


def test_the_rate_is_chosen_on_the_selection_seed_and_the_seeds_run_at_it(settings, tmp_path,
                                                                          shared_data,
                                                                          monkeypatch):
    """Two rates: each model's grid runs on the selection seed alone, the reported seeds all at
    the rate that scored best there (a different one for each model here)."""
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    store.put_pretrain("0.0006h", {"hours": 0.0006, "step": 3})
    (work / "points" / "0.0006h").mkdir(parents=True)
    best = {curve_finetune.RANDOM: 1e-4, "0.0006h": 1e-3}
    runs = fake_cells(monkeypatch, best)
    ft = curve_finetune.FinetuneSettings(lr_grid=(1e-4, 1e-3), seeds=3)
    cells = curve_finetune.open_cells(work, ft)
    curve_finetune.finetune_points(store, cells, settings, ft, work, shared_data)
    for variant, lr in best.items():
        grid = [(r, s) for v, r, s in runs if v == variant and s == ft.selection_seed]
        reported = [(r, s) for v, r, s in runs if v == variant and s != ft.selection_seed]
        assert sorted(grid) == [(1e-4, ft.selection_seed), (1e-3, ft.selection_seed)]
        assert reported == [(lr, 0), (lr, 1), (lr, 2)]
        assert cells.scores(variant, "sst2") == [80.0, 80.0, 80.0]  # the grid's runs not among them
        assert cells.data["cells"][f"{variant}/sst2/0"]["dev"] == {"f1": 0.8, "accuracy": 0.7}
    with pytest.raises(BertkitError, match="--points 0.0012h: not recorded yet"):
        curve_finetune.finetune_points(store, cells, settings, ft, work, shared_data, ["0.0012h"])


def test_two_workers_share_the_cells(settings, tmp_path, shared_data, monkeypatch):
    """Cells another worker holds are passed over and looked at again: one it records is never
    run twice (nor one it recorded since this worker read the records), a rate-grid cell's
    record decides the seeds' rate, and a cell whose holder ended unrecorded is taken over."""
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    store.put_pretrain("0.0006h", {"hours": 0.0006, "step": 3})
    (work / "points" / "0.0006h").mkdir(parents=True)
    runs = fake_cells(monkeypatch, {curve_finetune.RANDOM: 1e-3, "0.0006h": 1e-3})
    ft = curve_finetune.FinetuneSettings(lr_grid=(1e-4, 1e-3), seeds=3)
    cells = curve_finetune.open_cells(work, ft)
    other = curve_finetune.open_cells(work, ft)  # the other worker's view of the records
    other.put(cells.key("random@lr0.001", "sst2", 100), {"lr": 1e-3, "score": 50.0})
    claims = work / "cells" / "claims"
    waits, running = [], []
    with contextlib.ExitStack() as grid_holder, contextlib.ExitStack() as seed_holder:
        grid_holder.enter_context(held_elsewhere(claims / "random@lr0.0001-s100"))
        seed_holder.enter_context(held_elsewhere(claims / "0.0006h-s1"))

        def the_other_worker_moves_on():  # (the waiting worker's pause)
            assert len(waits) < 3, "the worker waits on cells already settled"
            waits.append(len(runs))
            running.extend(curve_finetune.running_cells(work))  # (what --status says)
            other.put(cells.key("random@lr0.0001", "sst2", 100), {"lr": 1e-4, "score": 90.0})
            seed_holder.close()  # this holder ends without recording its cell

        monkeypatch.setattr(curve_finetune, "wait_for_another_worker", the_other_worker_moves_on)
        curve_finetune.finetune_points(store, cells, settings, ft, work, shared_data)
    assert waits == [4]  # once, after 0.0006h's grid and its seeds 0 and 2
    assert [line.split(" (")[0] for line in running] == [
        "fine-tuning now: 0.0006h-s1", "fine-tuning now: random@lr0.0001-s100"]
    assert all(" (pid " in line for line in running)
    # the twin's grid is the other worker's; its seeds run at the rate its records chose
    assert [(lr, s) for v, lr, s in runs if v == "random"] == [(1e-4, 0), (1e-4, 1), (1e-4, 2)]
    assert [(lr, s) for v, lr, s in runs if v == "0.0006h"] == [
        (1e-4, 100), (1e-3, 100), (1e-3, 0), (1e-3, 2), (1e-3, 1)]  # seed 1 taken over
    assert all(cells.has(cells.key(v, "sst2", s)) for v in ("random", "0.0006h") for s in range(3))
    assert curve_finetune.running_cells(work) == []


def test_a_worker_does_not_wait_once_no_cell_is_held(settings, tmp_path, shared_data,
                                                      monkeypatch):
    """A cell held during a pass whose holder has ended (recorded or not) by the pass's end is
    settled by the next pass at once: nothing is held to wait for."""
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    runs = fake_cells(monkeypatch, {curve_finetune.RANDOM: 1e-3})
    ft = curve_finetune.FinetuneSettings(lr_grid=(1e-4, 1e-3), seeds=2)
    cells = curve_finetune.open_cells(work, ft)
    other = curve_finetune.open_cells(work, ft)
    fake_cell = curve_finetune.pipeline.finetune_cell

    def wait():
        raise AssertionError("waited with no cell held")

    monkeypatch.setattr(curve_finetune, "wait_for_another_worker", wait)
    with contextlib.ExitStack() as holder:
        holder.enter_context(held_elsewhere(work / "cells" / "claims" / "random@lr0.0001-s100"))

        def cell_then_the_holder_records(*args, **kwargs):  # (its cell passed over by now)
            other.put(cells.key("random@lr0.0001", "sst2", 100), {"lr": 1e-4, "score": 60.0})
            holder.close()
            return fake_cell(*args, **kwargs)

        monkeypatch.setattr(curve_finetune.pipeline, "finetune_cell",
                            cell_then_the_holder_records)
        curve_finetune.finetune_points(store, cells, settings, ft, work, shared_data)
    assert runs == [("random", 1e-3, 100), ("random", 1e-3, 0), ("random", 1e-3, 1)]


def test_a_report_never_replaces_files_it_did_not_write(tmp_path):
    from bertkit.studies.report import check_report_target

    begin, page, own = curve_finetune.CURVE_BEGIN, tmp_path / "pretraining.md", tmp_path / "c.md"
    png = tmp_path / "c.png"
    assert check_report_target(page, begin, own, [png]) == own  # a new folder
    png.write_bytes(b"the user's own figure")
    with pytest.raises(BertkitError, match="c.png: exists and is not a report's"):
        check_report_target(page, begin, own, [png])
    own.write_text("# my notes\n")  # a page of the report's name, without its block
    with pytest.raises(BertkitError, match="c.md: exists and is not a report's"):
        check_report_target(page, begin, own, [png])
    own.write_text(f"{begin}\nold\n{curve_finetune.CURVE_END}\n")  # the report's own
    assert check_report_target(page, begin, own, [png]) == own
    page.write_text(f"prose\n{begin}\nold\n{curve_finetune.CURVE_END}\n")  # docs/
    assert check_report_target(page, begin, own, [png]) == page


def test_damaged_records_are_named(tmp_path):
    settings = curve.CurveSettings(corpus=("x",))
    for text in ("[]", '{"settings": {}', "", '{"settings": 5, "pretrain": {}, "cells": {}}'):
        (tmp_path / "study.json").write_text(text)
        with pytest.raises(BertkitError, match="study.json"):
            curve.open_store(tmp_path, settings)
    (tmp_path / "cells-mrpc.json").write_text('{"settings": 5}')
    with pytest.raises(BertkitError, match="cells-mrpc.json"):
        curve_finetune.recorded_settings(tmp_path)


def test_report_rewrites_only_the_block_between_the_markers(tmp_path):
    page = tmp_path / "pretraining.md"
    page.write_text(f"# Title\n\nprose before\n\n{curve_finetune.CURVE_BEGIN}\nold table\n"
                    f"{curve_finetune.CURVE_END}\n\nprose after\n")
    rows = [{"budget": "1h", "cpu_hours": 1.0, "step": 7, "tokens": 2e6, "mlm_acc": 0.3,
             "fill_mask": ["the", ","],
             "scores": [80.0, 82.0], "random": [75.0, 77.0], "gain": 5.0, "gain_se": 1.4}]
    ft = curve_finetune.FinetuneSettings()
    curve_finetune.write_report(tmp_path, rows, ft, ["1h: step 7"],
                                plan={"steps": 9, "point_steps": {"1h": 7}})
    # the plan beside the records: what --reproduce reads
    assert json.loads((tmp_path / "pretrain_curve.json").read_text())["plan"]["steps"] == 9
    text = page.read_text()
    assert "old table" not in text and text.startswith("# Title\n\nprose before\n\n")
    assert text.endswith(f"{curve_finetune.CURVE_END}\n\nprose after\n")
    assert "| 1h | 1.00 | 7 | 2.0M | 30.0 | `the` `,` | 81.0 ± 1.4 | 76.0 ± 1.4 | +5.0 ± 1.4 | 2 |" in text
    assert "- 1h: step 7" in text and (tmp_path / "pretrain_curve.json").is_file()
    page.write_text(f"{curve_finetune.CURVE_BEGIN}\nno end\n")
    with pytest.raises(BertkitError, match="without"):
        curve_finetune.write_report(tmp_path, rows, ft, [])


def test_the_demo_report_states_what_the_curves_measured(tmp_path):
    from bertkit.studies.demo.report import curve_lines

    fp32, bf16 = tmp_path / "pretrain_curve.json", tmp_path / "pretrain_curve_bf16.json"
    assert "not found" in curve_lines([fp32, bf16])[0]
    rows = [{"budget": "1h", "tokens": 2e6, "mlm_acc": 0.1, "gain": -1.0, "gain_se": 1.0},
            {"budget": "4h", "tokens": 8e6, "mlm_acc": 0.3, "gain": 3.0, "gain_se": 1.0}]
    fp32.write_text(json.dumps({"rows": rows[:1], "status": []}))  # (no settings: an old record)
    assert curve_lines([fp32, bf16])[-1].startswith(
        "No budget measured so far (up to 2.0M tokens) pays")
    fp32.write_text(json.dumps({"rows": rows, "status": []}))
    lines = curve_lines([fp32, bf16])
    assert lines[-1] == "Own pre-training first paid at 8.0M tokens (4h of CPU, fp32): +3.0 ± 1.0 points."
    assert "| 8.0M | fp32 | 4h | 30.0% | +3.0 ± 1.0 |" in lines[2]  # the table
    # a bf16 curve's rows join by tokens seen; the first paying row is the fewest tokens
    bf16_rows = [{"budget": "2h", "tokens": 5e6, "mlm_acc": 0.25, "gain": 2.5, "gain_se": 1.0}]
    bf16.write_text(json.dumps({"settings": {"precision": "bf16"}, "rows": bf16_rows}))
    lines = curve_lines([fp32, bf16])
    assert lines[-1].startswith("Own pre-training first paid at 5.0M tokens (2h of CPU, bf16)")
    assert lines[2].splitlines()[2:] == ["| 2.0M | fp32 | 1h | 10.0% | -1.0 ± 1.0 |",
                                         "| 5.0M | bf16 | 2h | 25.0% | +2.5 ± 1.0 |",
                                         "| 8.0M | fp32 | 4h | 30.0% | +3.0 ± 1.0 |"]
    # the other recipes' rows (the records' "tasks") are said too, paying or not
    tasks = [{"budget": "2h", "tokens": 5e6, "task": "conll2003", "metric": "f1", "gain": 13.5,
              "gain_se": 0.6}, {"budget": "2h", "tokens": 5e6, "task": "mrpc", "metric": "f1",
                                "gain": -2.6, "gain_se": 0.5}]
    bf16.write_text(json.dumps({"settings": {"precision": "bf16"}, "rows": bf16_rows,
                                "tasks": tasks}))
    assert curve_lines([fp32, bf16])[-1] == (
        "Other fine-tuning recipes of the same points (whole training sets, fine-tuning dropout; "
        "gain over random init): conll2003 +13.5 ± 0.6 f1 at 2h (5.0M tokens, bf16) (pays); "
        "mrpc -2.6 ± 0.5 f1 at 2h (5.0M tokens, bf16).")


def test_whole_task_rows_live_in_records_of_their_own(tmp_path):
    settings = curve.CurveSettings(corpus=("x",), budgets_hours=(0.5, 1.0))
    store = curve.open_store(tmp_path, settings)
    store.put_pretrain("0.5h", {"hours": 0.5, "step": 90, "tokens_seen": 1_500_000,
                                "cpu_seconds": 1800.0, "eval_mlm_acc": 0.25})
    ft = curve_finetune.FinetuneSettings.whole("mrpc")
    cells = curve_finetune.open_cells(tmp_path, ft)
    for seed, (pre, rnd) in enumerate([(85.0, 80.0), (87.0, 82.0)]):
        cells.put(cells.key("0.5h", "mrpc", seed), {"score": pre})
        cells.put(cells.key(curve_finetune.RANDOM, "mrpc", seed), {"score": rnd})
    assert ft.train_examples is None and cells.path.name == "cells-mrpc.json"
    subset = curve_finetune.FinetuneSettings()
    assert curve_finetune.open_cells(tmp_path, subset).path.name == "cells.json"
    rows = curve_finetune.task_rows(store, settings, tmp_path)
    assert [(r["task"], r["budget"], r["metric"]) for r in rows] == [("mrpc", "0.5h", "f1")]
    assert rows[0]["gain"] == pytest.approx(5.0)
    # a fine-tuning dropout is a recipe with records of its own, listed beside the whole tasks
    dropped = curve_finetune.FinetuneSettings(dropout=0.1)
    cells_d = curve_finetune.open_cells(tmp_path, dropped)
    assert cells_d.path.name == "cells-dropout0.1.json"
    for seed in range(2):
        cells_d.put(cells_d.key("0.5h", "sst2", seed), {"score": 70.0 + seed})
    assert [(r["task"], r["budget"]) for r in curve_finetune.task_rows(store, settings, tmp_path)
            ] == [("sst2 (2,000), dropout 0.1", "0.5h"), ("mrpc", "0.5h")]
    assert curve_finetune.FinetuneSettings.whole("stsb", dropout=0.1).name == "stsb-dropout0.1"
    curve_finetune.write_report(tmp_path, [], subset, [], tasks=rows)
    text = (tmp_path / "pretrain_curve.md").read_text()
    assert "| 0.5h | 1.5M | mrpc | f1 | 86.0 ± 1.4 | 81.0 ± 1.4 | +5.0 ± 1.4 | 2 / 2 |" in text
    assert json.loads((tmp_path / "pretrain_curve.json").read_text())["tasks"][0]["task"] == "mrpc"
    with pytest.raises(BertkitError, match="no budget 3h"):  # before any work is done
        curve_finetune.finetune_points(store, cells, settings, ft, tmp_path, tmp_path,
                                       points=["3h"])


def test_each_curve_reports_to_a_page_of_its_own_against_its_own_baseline():
    fp32 = curve.CurveSettings(corpus=("x",))
    bf16 = dataclasses.replace(fp32, precision="bf16")
    cont = dataclasses.replace(fp32, init="model")  # continued pre-training (--init)
    assert curve_finetune.report_name(fp32) == ("pretrain_curve", curve_finetune.CURVE_BEGIN,
                                                curve_finetune.CURVE_END)
    assert curve_finetune.report_name(bf16) == ("pretrain_curve_bf16",
                                                "<!-- curve-bf16:begin -->",
                                                "<!-- curve-bf16:end -->")
    assert curve_finetune.report_name(cont)[0] == "continued_pretraining"
    small = dataclasses.replace(bf16, **curve.recipe_fields("small-budget"))
    assert curve_finetune.report_name(small) == ("pretrain_curve_small-budget-bf16",
                                                 "<!-- curve-small-budget-bf16:begin -->",
                                                 "<!-- curve-small-budget-bf16:end -->")
    assert curve_finetune.report_name(dataclasses.replace(fp32, lr=5e-4))[0] == \
        "pretrain_curve_lr0.0005"
    assert curve_finetune.baseline(cont) == curve_finetune.INIT
    assert curve_finetune.baseline(fp32) == curve_finetune.RANDOM
