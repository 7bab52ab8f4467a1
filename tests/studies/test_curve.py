"""The pre-training budget curve: points at CPU-second budgets from one resumable run, sittings
that stop and continue, the lock, continued pre-training and its corpus, the bf16 curve's
records. (Fine-tuning the points and the report: test_curve_finetune.py.)"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.studies import cooldown, curve, curve_finetune, reproduce
from tests.studies.conftest import BUDGETS, STEP_CPU_SECONDS

pytestmark = pytest.mark.usefixtures("one_thread")


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
    assert curve.pretrain_points(curve.open_store(work, settings), settings, work) == 0.0
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
    curve.pretrain_points(store, settings, work)
    assert store.pretrain_info("0.0006h")["step"] == 60
    assert store.pretrain_info("0.0012h") is None
    assert "the run ended at step 60" in caplog.text and "0.0012h gets none" in caplog.text
    assert curve.pretrain_points(store, settings, work) == 0.0  # and so in every later sitting
    assert store.pretrain_info("0.0012h") is None


def test_a_budget_passed_without_its_record_is_refused(settings, tmp_path):
    """A sitting killed between exporting a point and recording it: the run is past the budget,
    and training on would take the point at the wrong step."""
    work = tmp_path / "work"
    curve.prepare_data(settings, work)
    store = curve.open_store(work, settings)
    curve.pretrain_points(store, settings, work)
    study = json.loads((work / "study.json").read_text())
    del study["pretrain"]["0.0006h"], study["pretrain"]["0.0012h"]
    (work / "study.json").write_text(json.dumps(study))
    with pytest.raises(BertkitError, match="already past the 0.0006h budget"):
        curve.pretrain_points(curve.open_store(work, settings), settings, work)


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
    curve.pretrain_points(store, settings, first)
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
    curve.pretrain_points(again, settings, same)
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
    curve.pretrain_points(other, settings, work, hours_left=1e-7)  # a sitting's sliver
    assert other.pretrain_info("0.0006h") is None
    curve.pretrain_points(other, settings, work)
    assert [other.pretrain_info(x)["step"] for x in ("0.0006h", "0.0012h")] == [50, 100]
    assert other.pretrain_info("horizon")["steps"] == 143  # the same schedule
    with pytest.raises(BertkitError, match="point_steps differ from r.json's"):
        reproduce.adopt_plan(other, settings, report, "r.json")
    with pytest.raises(BertkitError, match=r"other settings \(lr\)"):
        reproduce.adopt_plan(curve.open_store(tmp_path / "lr", dataclasses.replace(settings, lr=5e-4)),
                         dataclasses.replace(settings, lr=5e-4), report, "r.json")
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
        curve.pretrain_points(curve.open_store(work, settings), settings, work)


def test_two_sittings_writing_one_file_keep_each_others_records(settings, tmp_path):
    """The pre-training sitting and a decay branch's both record points in study.json, each
    from the store it opened: neither loses the other's."""
    first, second = (curve.open_store(tmp_path, settings) for _ in range(2))
    first.put_pretrain("0.0006h+cool", {"step": 12})
    second.put_pretrain("0.0012h", {"step": 20})
    first.put_pretrain("0.0006h+cool", {"tokens_seen": 99})  # merged into its own entry
    on_disk = json.loads((tmp_path / "study.json").read_text())["pretrain"]
    assert on_disk == {"0.0006h+cool": {"step": 12, "tokens_seen": 99}, "0.0012h": {"step": 20}}
    assert first.pretrain_info("0.0012h") == {"step": 20}  # the store sees the other's too


def test_settings_are_written_when_a_sitting_begins(settings, tmp_path):
    """Before the vocabulary and shards: a sitting killed while making them and begun again
    with other settings is refused, not handed the first one's data."""
    store = curve.open_store(tmp_path, settings)
    store.begin()
    assert json.loads((tmp_path / "study.json").read_text())["pretrain"] == {}
    with pytest.raises(BertkitError, match="other settings.*vocab_size"):
        curve.open_store(tmp_path, dataclasses.replace(settings, vocab_size=400))
    store.put_pretrain("horizon", {"steps": 5})
    store.begin()  # a file already there is kept as it is
    assert curve.open_store(tmp_path, settings).pretrain_info("horizon") == {"steps": 5}


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


def test_continued_pretraining_starts_from_the_model(settings, tmp_path):
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


def test_a_bf16_curve_is_a_second_curve(tmp_path):
    fp32 = curve.CurveSettings(corpus=("x",))
    bf16 = dataclasses.replace(fp32, precision="bf16")
    assert curve.run_config(bf16, tmp_path, tmp_path / "run", 10).train.precision == "bf16"
    curve.open_store(tmp_path, fp32).put_pretrain("horizon", {"steps": 1})
    # the fp32 curve's records keep the shape they had before the field existed
    assert "precision" not in json.loads((tmp_path / "study.json").read_text())["settings"]
    with pytest.raises(BertkitError, match="other settings"):
        curve.open_store(tmp_path, bf16)
    with pytest.raises(BertkitError, match="precision"):  # "auto" would differ by machine
        curve.CurveSettings(corpus=("x",), precision="auto")


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
    curve.pretrain_points(store, settings, work)
    assert store.pretrain_info("0.0006h")["step"] == 40
    assert [s for s, _ in curve.list_checkpoints(work / "branches" / "0.0006h")] == [43]
    cooldown.branch_points(store, settings, work, ["0.0006h"])
    branch = store.pretrain_info("0.0006h+cool")
    assert (branch["from_step"], branch["step"]) == (43, 52)
    assert reproduce.curve_plan(store)["branch_steps"] == {"0.0006h": 43}


def test_the_documented_bf16_curve_has_a_plan_to_reproduce():
    """docs/pretrain_curve_bf16.json predates plans: its status lines give the horizon and
    the budget points' steps (the decay branches follow from them)."""
    from pathlib import Path

    report = json.loads((Path(__file__).parents[2] / "docs" / "pretrain_curve_bf16.json")
                        .read_text(encoding="utf-8"))
    plan = reproduce.report_plan(report, "pretrain_curve_bf16.json")
    assert plan["steps"] == 27740
    assert plan["point_steps"] == {"0.25h": 520, "0.5h": 1000, "1h": 1980, "2h": 3780,
                                   "4h": 6740}
    assert plan["branch_steps"] == {"2h": 3784}  # 4h's began at its point (6740 + 1348 = 8088)
