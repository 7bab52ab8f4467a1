"""`bertkit study pretrain-curve`'s options: what they refuse before any work starts, the
default folders of the other curves (bf16, a named recipe), and a report written from a curve
made again."""

import dataclasses

import pytest

from bertkit.cli.main import main


@pytest.mark.parametrize("args, says", [
    (["--finetune-task", "mrpc"], "give --finetune too"),
    (["--finetune-dropout", "0.1"], "give --finetune too"),
    (["--finetune", "--finetune-dropout", "1"], "must be in [0, 1)"),
    (["--points", "1h"], "give one of them too"),
    (["--cooldown", "--finetune"], "drop --finetune"),
    (["--cooldown"], "no study here yet"),
    (["--finetune"], "no study here yet"),
    (["--task-text", "sst2"], "give --init MODEL too"),
    (["--finetune", "--points", " , "], "name budgets"),
    (["--threads", "0", "--status"], "at least one thread"),
    (["--batch-size", "0", "--status"], "must be >= 1"),
    (["--vocab-size", "-5", "--status"], "must be >= 1"),
    (["--lr", "nan", "--status"], "--lr must be a finite number > 0"),
    (["--lr", "0"], "--lr must be a finite number > 0"),
    (["--hours", "0"], "--hours must be > 0"),
    (["--hours", "nan"], "--hours must be > 0"),
    (["--model", "huge"], "invalid choice: 'huge'"),
    (["--budget", "0.5"], "choose pretrain-recipes' runs"),
    (["--variants", "mask40"], "choose pretrain-recipes' runs"),
    (["--finetune", "--hours", "1"], "--hours limits a pre-training sitting"),
    (["--cooldown", "--hours", "1"], "--hours limits a pre-training sitting"),
    (["--status", "--hours", "1"], "--status and --report read the records"),
    (["--status", "--finetune", "--points", "1h"], "drop --points"),
    (["--task-text", "conll2003"], "invalid choice: 'conll2003'"),
    (["--recipe", "paper"], "invalid choice: 'paper'"),  # (the curve's own is not the paper's)
    (["--recipe", "small-budget", "--init", "model"], "keeps the model's shape"),
    (["--reproduce", "r.json", "--finetune"], "--reproduce begins a pretrain-curve's"),
    (["--reproduce", "r.json", "--status"], "--reproduce begins a pretrain-curve's"),
])
def test_options_that_need_another_are_refused(shared_data, tmp_path, capsys, args, says):
    work = tmp_path / "work"
    try:
        code = main(["study", "pretrain-curve", "--data", str(shared_data), "--work", str(work),
                     *args])
    except SystemExit as stop:  # argparse's own refusals (a --model that is no preset)
        code = stop.code
    assert code == (2 if "invalid choice" in says else 1)  # argparse's usage error: 2
    assert says in capsys.readouterr().err and not work.exists()


def test_an_unknown_budget_is_refused(shared_data, tmp_path, capsys):
    work = tmp_path / "work"
    assert main(["study", "pretrain-curve", "--data", str(shared_data), "--work", str(work),
                 "--finetune", "--finetune-task", "mrpc", "--points", "1h,3h"]) == 1
    assert "no budget 3h" in capsys.readouterr().err


def test_a_report_of_nothing_keeps_the_records_there(shared_data, tmp_path, capsys):
    """A wrong --work has nothing recorded: the committed table and records stay as they are."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "pretrain_curve.json").write_text('{"rows": [1]}')
    for name in ("pretrain-curve", "pretrain-recipes"):
        assert main(["study", name, "--data", str(shared_data), "--work",
                     str(tmp_path / "nowhere"), "--report", str(docs)]) == 1
        assert "no report written" in capsys.readouterr().err
    assert [p.name for p in docs.iterdir()] == ["pretrain_curve.json"]
    assert (docs / "pretrain_curve.json").read_text() == '{"rows": [1]}'


@pytest.mark.parametrize("args, folder", [
    (["--precision", "bf16"], "pretrain-curve-bf16"),
    (["--recipe", "small-budget"], "pretrain-curve-small-budget"),
    (["--recipe", "small-budget", "--precision", "bf16"], "pretrain-curve-small-budget-bf16"),
])
def test_another_curve_has_a_folder_of_its_own(shared_data, tmp_path, monkeypatch, capsys,
                                               args, folder):
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    assert main(["study", "pretrain-curve", "--data", str(shared_data), *args, "--status"]) == 0
    assert f"/{folder}: nothing recorded yet" in capsys.readouterr().out


def test_recipes_refuse_what_they_cannot_do(shared_data, tmp_path, capsys):
    base = ["study", "pretrain-recipes", "--data", str(shared_data), "--work", str(tmp_path)]
    assert main([*base, "--finetune"]) == 1
    assert "drop --init / --finetune" in capsys.readouterr().err
    assert main([*base, "--recipe", "small-budget"]) == 1
    assert "pretrain-recipes varies the curve's own" in capsys.readouterr().err
    assert main([*base, "--variants", "mask40,mask99"]) == 1
    assert "unknown recipe variant(s) mask99" in capsys.readouterr().err
    for bad in ("0", "nan", "inf"):
        assert main([*base, "--budget", bad]) == 1
        assert "--budget must be > 0" in capsys.readouterr().err
    assert main([*base, "--status"]) == 0
    assert "no variant recorded yet" in capsys.readouterr().out


def test_a_report_from_a_curve_made_again_keeps_the_committed_rows(shared_data, tmp_path,
                                                                   monkeypatch, capsys):
    """`--report docs/reports` from a work folder whose point is reproduced but not fine-tuned again:
    the committed row stays in the table and its records, said in the status lines."""
    import json

    from bertkit.studies.pretraining import curve, curve_finetune

    monkeypatch.setattr(curve_finetune, "first_guesses", lambda point: [])  # (no export here)
    work, docs = tmp_path / "work", tmp_path / "docs"
    settings = curve.CurveSettings(corpus=curve.corpus_files(shared_data))
    store = curve.open_store(work, settings)
    store.put_pretrain("horizon", {"steps": 100, "cpu_seconds_per_step": 1.0})
    store.put_pretrain("0.25h", {"step": 50, "tokens_seen": 10**6, "cpu_seconds": 900.0,
                                 "eval_mlm_acc": 0.1, "hours": 0.25})
    docs.mkdir()
    (docs / "pretraining.md").write_text(
        f"{curve_finetune.CURVE_BEGIN}\nold\n{curve_finetune.CURVE_END}\n")
    row = {"budget": "0.25h", "cpu_hours": 0.25, "step": 50, "tokens": 10**6, "mlm_acc": 0.1,
           "fill_mask": [",", ","], "scores": [68.0, 70.0], "random": [71.0, 72.0],
           "baseline": "random init", "gain": -2.5, "gain_se": 1.0}
    (docs / "pretrain_curve.json").write_text(json.dumps(
        {"settings": json.loads(json.dumps(dataclasses.asdict(settings))), "rows": [row],
         "tasks": [], "status": []}))
    assert main(["study", "pretrain-curve", "--data", str(shared_data), "--work", str(work),
                 "--report", str(docs)]) == 0
    written = json.loads((docs / "pretrain_curve.json").read_text())
    assert written["rows"][0]["scores"] == [68.0, 70.0]
    assert written["plan"]["point_steps"] == {"0.25h": 50}
    page = (docs / "pretraining.md").read_text()
    assert "69.0 ± 1.4" in page and "kept from the earlier report" in page
