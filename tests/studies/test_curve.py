"""The pre-training budget curve: its records and settings, the lock on a sitting, continued
pre-training and its corpus, the bf16 curve's records. (Taking the points off the run:
test_curve_points.py; fine-tuning the points and the report: test_curve_finetune.py.)"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing

import pytest

from bertkit.errors import BertkitError
from bertkit.studies.pretraining import curve, curve_points
from tests.studies.conftest import BUDGETS

pytestmark = pytest.mark.usefixtures("one_thread")


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
    curve_points.pretrain_points(store, cont, work)
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
