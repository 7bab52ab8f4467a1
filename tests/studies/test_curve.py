"""The pre-training budget curve: points at CPU-second budgets from one resumable run, sittings
that stop and continue, the lock, the gain's standard error, the report."""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing

import pytest

from bertkit.errors import BertkitError
from bertkit.studies import curve

BUDGETS = (0.0006, 0.0012)  # CPU-hours: about 2 and 4 CPU-seconds


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def settings(shared_data, tmp_path):
    text = (shared_data / "wikitext-2" / "wiki.test.raw").read_text(encoding="utf-8")[:60_000]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    return curve.CurveSettings(corpus=(str(corpus),), vocab_size=300, model="tiny",
                               batch_size=8, max_seq_length=32, budgets_hours=BUDGETS)


def test_points_at_cpu_budgets_across_sittings(settings, tmp_path):
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    # a sitting allowed a sliver of CPU time stops before the first budget and records nothing
    curve.pretrain_points(store, settings, work, hours_left=1e-7)
    assert store.pretrain_info("0.0006h") is None
    assert store.pretrain_info("horizon")["steps"] >= 100
    curve.pretrain_points(store, settings, work)  # the next sitting goes on to the end
    first, last = (store.pretrain_info(curve.budget_label(h)) for h in BUDGETS)
    assert first["cpu_seconds"] >= BUDGETS[0] * 3600 and last["cpu_seconds"] > first["cpu_seconds"]
    assert 0 < first["step"] < last["step"] and first["tokens_seen"] < last["tokens_seen"]
    assert 0 <= first["eval_mlm_acc"] <= 1 and first["machine"]["cores"] >= 1
    assert (work / "points" / "0.0006h" / "config.json").is_file()
    guesses = curve.first_guesses(work / "points" / "0.0006h")  # the export has its MLM head
    assert len(guesses) == 5 and all(isinstance(g, str) and g for g in guesses)
    # a later sitting with the same settings finds nothing to do; other settings are refused
    curve.pretrain_points(curve.open_store(work, settings), settings, work)
    with pytest.raises(BertkitError, match="other settings"):
        curve.open_store(work, curve.CurveSettings(**{**settings.__dict__, "lr": 5e-4}))
    lines = curve.status_lines(store)
    assert lines[0].startswith("horizon:") and lines[1].startswith("0.0006h: step")


def _hold(work, part, ready, done):
    with curve.sitting(work, part):
        ready.set()
        done.wait(30)


def test_a_second_sitting_of_the_same_part_is_refused(tmp_path):
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(tmp_path, "pretrain", ready, done))
    child.start()
    try:
        assert ready.wait(30)
        with pytest.raises(BertkitError, match="another pretrain sitting"):
            with curve.sitting(tmp_path, "pretrain"):
                pass
        with curve.sitting(tmp_path, "finetune"):  # the other part may run beside it
            pass
    finally:
        done.set()
        child.join(30)
    with curve.sitting(tmp_path, "pretrain"):  # released when its holder ended
        pass


def test_gain_and_its_standard_error():
    g, se = curve.gain([80.0, 82.0, 84.0], [70.0, 71.0, 72.0])
    assert g == pytest.approx(11.0)
    assert se == pytest.approx(math.sqrt(4.0 / 3 + 1.0 / 3))  # Welch: s1²/n1 + s0²/n0


def test_report_rows_and_table(tmp_path):
    settings = curve.CurveSettings(corpus=("x",), budgets_hours=(0.5, 1.0))
    ft = curve.FinetuneSettings(seeds=2)
    store, cells = curve.open_store(tmp_path, settings), curve.open_cells(tmp_path, ft)
    store.put_pretrain("0.5h", {"hours": 0.5, "step": 90, "tokens_seen": 1_500_000,
                                "cpu_seconds": 1800.0, "eval_mlm_acc": 0.25})
    for seed, (pre, rnd) in enumerate([(80.0, 75.0), (82.0, 77.0)]):
        cells.put(cells.key("0.5h", "sst2", seed), {"score": pre})
        cells.put(cells.key(curve.RANDOM, "sst2", seed), {"score": rnd})
    rows = curve.curve_rows(store, cells, settings, ft)
    assert [r["budget"] for r in rows] == ["0.5h"]  # 1h is not recorded yet
    assert rows[0]["gain"] == pytest.approx(5.0)
    table = curve.report_markdown(rows, ft).splitlines()
    assert table[2].startswith("| 0.5h | 0.50 | 90 | 1.5M | 25.0 | — | 81.0 ± 1.4 | 76.0 ± 1.4 |")
    assert curve.plot_curve(rows, tmp_path / "curve.png").stat().st_size > 1000


def test_selected_lr_skips_collapsed_runs(tmp_path):
    ft = curve.FinetuneSettings(lr_grid=(1e-4, 1e-3))
    cells = curve.open_cells(tmp_path, ft)
    cells.put(cells.key("random@lr0.0001", "sst2", ft.selection_seed), {"score": 60.0})
    assert curve.selected_lr(cells, ft, "random") is None  # the grid is unfinished
    cells.put(cells.key("random@lr0.001", "sst2", ft.selection_seed),
              {"score": 70.0, "collapsed": True})
    assert curve.selected_lr(cells, ft, "random") == 1e-4


def test_report_rewrites_only_the_block_between_the_markers(tmp_path):
    page = tmp_path / "pretraining.md"
    page.write_text(f"# Title\n\nprose before\n\n{curve.CURVE_BEGIN}\nold table\n"
                    f"{curve.CURVE_END}\n\nprose after\n")
    rows = [{"budget": "1h", "cpu_hours": 1.0, "step": 7, "tokens": 2e6, "mlm_acc": 0.3,
             "fill_mask": ["the", ","],
             "scores": [80.0, 82.0], "random": [75.0, 77.0], "gain": 5.0, "gain_se": 1.4}]
    curve.write_report(tmp_path, rows, curve.FinetuneSettings(), ["1h: step 7"])
    text = page.read_text()
    assert "old table" not in text and text.startswith("# Title\n\nprose before\n\n")
    assert text.endswith(f"{curve.CURVE_END}\n\nprose after\n")
    assert "| 1h | 1.00 | 7 | 2.0M | 30.0 | `the` `,` | 81.0 ± 1.4 | 76.0 ± 1.4 | +5.0 ± 1.4 | 2 |" in text
    assert "- 1h: step 7" in text and (tmp_path / "pretrain_curve.json").is_file()
    page.write_text(f"{curve.CURVE_BEGIN}\nno end\n")
    with pytest.raises(BertkitError, match="without"):
        curve.write_report(tmp_path, rows, curve.FinetuneSettings(), [])


def test_the_demo_report_states_what_the_curves_measured(tmp_path):
    from bertkit.studies.demo_report import curve_lines

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


def test_continued_pretraining_starts_from_the_model_and_compares_with_it(settings, tmp_path):
    import torch

    from bertkit.config import BertConfig
    from bertkit.studies import pipeline
    from bertkit.tokenization import BertTokenizer

    curve.prepare_data(settings, tmp_path / "first")  # a vocabulary for the model to continue
    tokenizer = BertTokenizer.from_pretrained(tmp_path / "first" / "vocab")
    init = pipeline.random_init(BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size),
                                tokenizer, tmp_path / "init", seed=123)
    cont = curve.CurveSettings.continued(str(init), settings.corpus, batch_size=8,
                                         max_seq_length=32, budgets_hours=BUDGETS[:1])
    assert (cont.lr, cont.model, cont.vocab_size) == (1e-4, "init", tokenizer.vocab_size)
    work = tmp_path / "work"
    curve.prepare_data(cont, work)
    assert (work / "vocab" / "vocab.txt").read_text() == (init / "vocab.txt").read_text()
    store = curve.open_store(work, cont)
    assert store.data["settings"]["init"] == str(init)
    curve.pretrain_points(store, cont, work)
    point = work / "points" / curve.budget_label(BUDGETS[0])
    from bertkit.checkpoint import read_state_dict

    before, after = read_state_dict(init), read_state_dict(point)
    name = next(k for k in before if k.endswith("word_embeddings.weight"))
    # steps at 1e-4 from the model stay close to it: a fresh model of another seed would be
    # about 0.023 away on average (two N(0, 0.02) draws)
    assert (after[name] - before[name]).abs().mean() < 0.005
    assert not torch.equal(after[name], before[name])
    assert curve.baseline(cont) == curve.INIT and curve.baseline(settings) == curve.RANDOM
    assert curve.report_name(cont)[0] == "continued_pretraining"


def test_a_tasks_training_text_without_labels_is_the_continued_corpus(shared_data, tmp_path):
    from bertkit.data.corpus import CorpusStats, read_corpus

    [path] = curve.task_text("sst2", shared_data, tmp_path)
    train = (shared_data / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8")
    rows = [line.split("\t")[0] for line in train.splitlines()[1:]]
    docs = list(read_corpus([path], "google", CorpusStats()))
    assert len(docs) == math.ceil(len(rows) / curve.DOC_LINES)  # documents to split and fill
    first = docs[0].paragraphs
    assert docs[0].presplit and first[0] == " ".join(rows[0].split())
    assert len(first) == curve.DOC_LINES
    assert sum(len(d.paragraphs) for d in docs) == len(rows)  # every text a sentence
    assert not any("\t" in s for d in docs for s in d.paragraphs)  # no label column


def test_whole_task_rows_live_in_records_of_their_own(tmp_path):
    settings = curve.CurveSettings(corpus=("x",), budgets_hours=(0.5, 1.0))
    store = curve.open_store(tmp_path, settings)
    store.put_pretrain("0.5h", {"hours": 0.5, "step": 90, "tokens_seen": 1_500_000,
                                "cpu_seconds": 1800.0, "eval_mlm_acc": 0.25})
    ft = curve.FinetuneSettings.whole("mrpc")
    cells = curve.open_cells(tmp_path, ft)
    for seed, (pre, rnd) in enumerate([(85.0, 80.0), (87.0, 82.0)]):
        cells.put(cells.key("0.5h", "mrpc", seed), {"score": pre})
        cells.put(cells.key(curve.RANDOM, "mrpc", seed), {"score": rnd})
    assert ft.train_examples is None and cells.path.name == "cells-mrpc.json"
    assert curve.open_cells(tmp_path, curve.FinetuneSettings()).path.name == "cells.json"
    rows = curve.task_rows(store, settings, tmp_path)
    assert [(r["task"], r["budget"], r["metric"]) for r in rows] == [("mrpc", "0.5h", "f1")]
    assert rows[0]["gain"] == pytest.approx(5.0)
    curve.write_report(tmp_path, [], curve.FinetuneSettings(), [], tasks=rows)
    text = (tmp_path / "pretrain_curve.md").read_text()
    assert "| 0.5h | 1.5M | mrpc | f1 | 86.0 ± 1.4 | 81.0 ± 1.4 | +5.0 ± 1.4 | 2 / 2 |" in text
    assert json.loads((tmp_path / "pretrain_curve.json").read_text())["tasks"][0]["task"] == "mrpc"
    with pytest.raises(BertkitError, match="no budget 3h"):  # before any work is done
        curve.finetune_points(store, cells, settings, ft, tmp_path, tmp_path, points=["3h"])


def test_a_bf16_curve_is_a_second_curve(tmp_path):
    fp32 = curve.CurveSettings(corpus=("x",))
    bf16 = dataclasses.replace(fp32, precision="bf16")
    assert curve.report_name(fp32) == ("pretrain_curve", curve.CURVE_BEGIN, curve.CURVE_END)
    assert curve.report_name(bf16) == ("pretrain_curve_bf16", "<!-- curve-bf16:begin -->",
                                       "<!-- curve-bf16:end -->")
    assert curve.run_config(bf16, tmp_path, tmp_path / "run", 10).train.precision == "bf16"
    curve.open_store(tmp_path, fp32).put_pretrain("horizon", {"steps": 1})
    # the fp32 curve's records keep the shape they had before the field existed
    assert "precision" not in json.loads((tmp_path / "study.json").read_text())["settings"]
    with pytest.raises(BertkitError, match="other settings"):
        curve.open_store(tmp_path, bf16)
    with pytest.raises(BertkitError, match="precision"):  # "auto" would differ by machine
        curve.CurveSettings(corpus=("x",), precision="auto")
