"""The ablation's bookkeeping (resumable results, mean ± std tables, plots) and its smoke run."""

from __future__ import annotations

import json
import multiprocessing
import sys

import pytest

from bertkit.cli.main import main
from bertkit.errors import BertkitError
from bertkit.metrics import mean_std
from bertkit.studies import pipeline, report
from bertkit.studies.ablate import AblationConfig
from bertkit.studies.results import Progress, ResultsStore, run_cells, steps_for_budget
from bertkit.tasks import get_task
from bertkit.tasks.base import split_dev


def test_mean_std_and_formatting():
    assert mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)  # sample std (n - 1)
    assert mean_std([0.5]) == (0.5, 0.0)
    assert report.format_mean_std([0.80, 0.84]) == "82.0 ± 2.8"
    assert report.format_mean_std([81.25], scale=1.0) == "81.2"
    assert report.format_mean_std([]) == "—"
    assert report.format_gain({"gain": 2.31, "gain_se": 0.64}) == "+2.3 ± 0.6"
    assert report.format_gain({"gain": -1.0, "gain_se": 0.4}) == "-1.0 ± 0.4"
    assert report.format_gain({"scores": [80.0]}) == "—"  # fewer than two seeds a side
    with pytest.raises(ValueError):
        mean_std([])
    table = report.markdown_table(["a", "b|c"], [[1, "x"], [2, "y"]])
    assert table.splitlines() == ["| a | b\\|c |", "|---|---|", "| 1 | x |", "| 2 | y |"]


def test_read_records_names_the_bad_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n\n{"step": 2,\n')
    with pytest.raises(BertkitError, match=r"metrics.jsonl:3: not a JSON line"):
        report.read_records(path)
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n')
    assert [r["loss"] for r in report.read_records(path)] == [2.0, 1.5]


def test_plots_are_pngs_or_skipped_without_matplotlib(tmp_path, monkeypatch, caplog):
    runs = {"a": [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0, "eval_mlm_acc": 0.1}]}
    curves = report.plot_curves(runs, [("loss",), ("eval_mlm_acc",)], tmp_path / "c.png")
    bars = report.plot_bars({"sst2": {"pre": [80.0, 82.0], "none": [60.0]}}, tmp_path / "b.png",
                            "acc", scale=1.0)
    for png in (curves, bars):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    monkeypatch.setattr(report, "_NOTICED", [])
    assert report.plot_curves(runs, [("loss",)], tmp_path / "none.png") is None
    assert report.plot_bars({"t": {"x": [1.0]}}, tmp_path / "none2.png", "acc") is None
    assert not (tmp_path / "none.png").exists()
    assert sum("matplotlib is not installed" in r.message for r in caplog.records) == 1


def _put_cells(path, first, n):
    store = ResultsStore(path, {"budget": 1.0})
    for seed in range(first, first + n):
        store.put(ResultsStore.key("mlm", "sst2", seed), {"score": float(seed)})


def test_two_processes_recording_into_one_store_lose_nothing(tmp_path):
    """Each rewrite reads the file again under its lock: two sittings recording at once (each
    from the store it opened) end with every record of both."""
    path = tmp_path / "results.json"
    ResultsStore(path, {"budget": 1.0}).begin()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_put_cells, args=(path, first, 40)) for first in (0, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cells = json.loads(path.read_text())["cells"]
    assert sorted(int(k.split("/")[-1]) for k in cells) == [*range(40), *range(100, 140)]


def test_results_store_resumes_and_refuses_other_settings(tmp_path):
    path = tmp_path / "results.json"
    store = ResultsStore(path, {"budget": 1.0, "corpus": ("a.txt",)})
    store.put(ResultsStore.key("mlm", "sst2", 0), {"score": 80.0})
    store.put_pretrain("mlm", {"steps": 10})
    store.put_pretrain("mlm", {"seconds": 5.0})
    again = ResultsStore(path, {"budget": 1.0, "corpus": ["a.txt"]})  # tuples saved as lists
    assert again.has("mlm/sst2/0") and not again.has("mlm/sst2/1")
    assert again.pretrain_info("mlm") == {"steps": 10, "seconds": 5.0}
    assert again.scores("mlm", "sst2") == [80.0]
    with pytest.raises(BertkitError, match="other settings.*budget"):
        ResultsStore(path, {"budget": 2.0, "corpus": ["a.txt"]})
    # a setting added later opens the store begun before it while at its default, not otherwise
    later = {"budget": 1.0, "corpus": ["a.txt"], "dropout": None}
    assert ResultsStore(path, later, added_later={"dropout": None}).has("mlm/sst2/0")
    with pytest.raises(BertkitError, match="other settings.*dropout"):
        ResultsStore(path, {**later, "dropout": 0.1}, added_later={"dropout": None})
    # a setting the file has and the study no longer makes is named too, not "()"
    with pytest.raises(BertkitError, match=r"other settings \(corpus\)"):
        ResultsStore(path, {"budget": 1.0})
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_run_cells_continues_after_a_kill(tmp_path):
    cells = [(v, "sst2", s) for v in ("mlm", "none") for s in range(2)]
    calls = []

    def flaky(variant, task, seed):
        calls.append((variant, seed))
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed in the middle of the third cell
        return {"score": 50.0 + len(calls)}

    store = ResultsStore(tmp_path / "results.json", {})
    with pytest.raises(KeyboardInterrupt):
        run_cells(store, cells, flaky)
    resumed = ResultsStore(tmp_path / "results.json", {})
    assert sorted(resumed.data["cells"]) == ["mlm/sst2/0", "mlm/sst2/1"]
    calls.clear()
    run_cells(resumed, cells, lambda v, t, s: calls.append((v, s)) or {"score": 1.0},
              Progress(len(cells), 2))
    assert calls == [("none", 0), ("none", 1)]  # only the unfinished cells ran
    assert resumed.scores("mlm", "sst2") == [51.0, 52.0]
    assert resumed.data["cells"]["none/sst2/1"] == {"variant": "none", "task": "sst2", "seed": 1,
                                                   "score": 1.0}


def test_steps_for_budget():
    assert steps_for_budget(60.0, 0.5) == 108  # 90% of the time, the rest for eval and saving
    assert steps_for_budget(1.0, 10.0) == 2  # never fewer than the minimum


def test_config_validation_and_identity(tmp_path):
    base = dict(output_dir=str(tmp_path), corpus=("c.txt",), data_root=str(tmp_path))
    with pytest.raises(BertkitError, match="unknown variant"):
        AblationConfig(**base, variants=("mlm", "bogus"))
    with pytest.raises(BertkitError, match="unknown task"):
        AblationConfig(**base, tasks=("sst3",))
    with pytest.raises(BertkitError, match="unknown study"):
        AblationConfig(**base, study="colors")
    a = AblationConfig(**base, seeds=1, tasks=("sst2",))
    b = AblationConfig(**base, seeds=5, tasks=("sst2", "mrpc"))  # more seeds/tasks: same study
    assert a.identity() == b.identity()
    assert a.identity() != AblationConfig(**base, budget_minutes=3.0).identity()
    # the regression head's start, added later at the value the recorded ablations had: their
    # results.json (no such key) is the same study
    assert "regression_bias" not in a.identity()["finetune"]
    assert AblationConfig(**base, study="sizes").variant_names == ("tiny", "mini", "small")


def test_task_files_finds_both_layouts(tmp_path):
    for folder in (tmp_path / "shared" / "glue" / "SST-2", tmp_path / "dl" / "glue-sst-2" / "SST-2"):
        folder.mkdir(parents=True)
        for split in ("train", "dev"):
            (folder / f"{split}.tsv").write_text("sentence\tlabel\nok\t1\n")
    for root in ("shared", "dl"):
        files, note = pipeline.task_files("sst2", tmp_path / root)
        assert files["train_file"].endswith("SST-2/train.tsv") and note == ""
    with pytest.raises(BertkitError, match="rte: no train/dev files"):
        pipeline.task_files("rte", tmp_path / "shared")


def test_squad_dev_is_split_by_article_with_the_finetuning_rule(shared_data):
    files, note = pipeline.task_files("squad1", shared_data)
    assert "split by article" in note and files["split_dev"] == pipeline.SQUAD_HELD_OUT
    examples = get_task("squad1").read(shared_data / "squad" / "dev-v1.1.json")
    parts = split_dev(examples, files["split_dev"], shared_data / "squad" / "dev-v1.1.json")
    titles = [{e.title for e in part} for part in (parts.train, parts.held_out)]
    assert titles[0].isdisjoint(titles[1])
    assert (len(titles[0]), len(titles[1])) == (38, 10)  # 48 articles: the last 20% held out
    assert len(parts.train) + len(parts.held_out) == 10570


@pytest.mark.slow
def test_ablate_smoke_runs_and_resumes(shared_data, tmp_path, capsys):
    """`bertkit ablate --budget-minutes 0.2 --tasks sst2 --seeds 1` on a small corpus and a tiny
    model: checks the structure of the results and that a rerun only redoes what is missing
    (never the accuracy, which a 12-second budget cannot promise; 4 s a variant is still many
    steps of the tiny model)."""
    books = shared_data / "books"
    args = ["ablate", "--budget-minutes", "0.2", "--tasks", "sst2", "--seeds", "1",
            "--output", str(tmp_path / "abl"), "--data", str(shared_data),
            "--corpus", str(books / "paine-common_sense.txt"), str(books / "carroll-alice.txt"),
            "--vocab-size", "1000", "--model", "tiny", "--max-seq-length", "64",
            "--max-train-examples", "32", "--max-eval-examples", "32", "--epochs", "1",
            "--no-progress"]
    assert main(args) == 0
    out = tmp_path / "abl"
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["cells"]) == ["ltr/sst2/0", "mlm+nsp/sst2/0", "mlm/sst2/0", "none/sst2/0"]
    for cell in results["cells"].values():
        assert 0.0 <= cell["score"] <= 100.0 and cell["steps"] == 1
    for v in ("mlm+nsp", "mlm", "ltr"):
        assert results["pretrain"][v]["steps"] >= 2 and "eval_mlm_acc" in results["pretrain"][v]
        assert (out / "pretrain" / v / "model" / "config.json").is_file()
    text = (out / "REPORT.md").read_text()
    assert text.count("\n| ") == 5 and "LTR & No NSP" in text and "No pre-training" in text
    # A kill before the last cell was recorded: the rerun does that cell only.
    del results["cells"]["none/sst2/0"]
    (out / "results.json").write_text(json.dumps(results))
    exported = (out / "pretrain" / "mlm+nsp" / "model" / "model.safetensors").stat().st_mtime_ns
    kept = (out / "finetune" / "mlm" / "sst2" / "seed-0" / "metrics.json").stat().st_mtime_ns
    assert main(args) == 0
    again = json.loads((out / "results.json").read_text())
    assert sorted(again["cells"]) == sorted(results["cells"]) + ["none/sst2/0"]
    assert again["pretrain"] == results["pretrain"]
    assert (out / "pretrain" / "mlm+nsp" / "model" / "model.safetensors").stat().st_mtime_ns == exported
    assert (out / "finetune" / "mlm" / "sst2" / "seed-0" / "metrics.json").stat().st_mtime_ns == kept
    capsys.readouterr()
    assert main([*args[:-1], "--vocab-size", "1200"]) == 1  # other settings: refused
    assert "other settings (vocab_size)" in capsys.readouterr().err
