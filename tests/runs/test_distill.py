"""Distillation (runs/distill.py) on tiny models made here: the loss against a hand
computation, students built from teacher layers, the teacher's outputs computed once, a killed
run resumed to the same student, and the student loaded by transformers."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import (
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertkit.model import BertModel
from bertkit.runs import distill
from bertkit.runs.distill import (
    DistillConfig,
    build_student,
    distillation_loss,
    parse_student,
    run_distill,
    soft_cross_entropy,
)
from bertkit.runs.finetune import FinetuneConfig, finetune_train_config
from bertkit.tasks import get_task
from bertkit.tasks.glue import GlueTask, TextExample
from bertkit.tasks.splits import save_release
from bertkit.tokenization import BertTokenizer
from bertkit.training import loop

POSITIVE = ["good", "great", "fine", "nice", "lovely"]
NEGATIVE = ["bad", "awful", "poor", "dull", "boring"]
WORDS = ["a", "the", "film", "movie", "plot", "was", "is", "very", "quite"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


pytestmark = pytest.mark.usefixtures("one_thread")


def tokenizer() -> BertTokenizer:
    tokens = SPECIALS + POSITIVE + NEGATIVE + WORDS
    return BertTokenizer({t: i for i, t in enumerate(tokens)})


def tiny_config(**changes) -> BertConfig:
    return BertConfig(**{**dict(vocab_size=len(SPECIALS + POSITIVE + NEGATIVE + WORDS),
                                hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=64), **changes})


def sentence(i: int) -> tuple[str, str]:
    words = POSITIVE if i % 2 else NEGATIVE
    return f"the {WORDS[2 + i % 3]} was {words[i % 5]} {words[(i + 2) % 5]}", str(i % 2)


def write_sst2(root: Path, n_train: int = 24, n_dev: int = 8) -> Path:
    for split, rows in (("train", range(n_train)), ("dev", range(100, 100 + n_dev))):
        lines = ["sentence\tlabel"] + ["\t".join(sentence(i)) for i in rows]
        (root / "SST-2").mkdir(parents=True, exist_ok=True)
        (root / "SST-2" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def make_teacher(root: Path, task_name: str = "sst2", head=BertForSequenceClassification,
                 labels=("0", "1")) -> Path:
    """A random tiny model with the task's head, saved as `bertkit finetune` saves one."""
    torch.manual_seed(0)
    changes = {"id2label": dict(enumerate(labels))} if labels else {"id2label": {0: "score"}}
    model = head(tiny_config(**changes))
    save_release(get_task(task_name), model, tokenizer(), root / "teacher", {})
    return root / "teacher"


def config(out: Path, teacher: Path, data: Path, student: str = "layers:0,2", resume=False,
           task: str = "sst2", max_seq_length: int | None = None, **changes) -> DistillConfig:
    train = finetune_train_config(str(out), lr=1e-3, batch_size=8, precision="fp32",
                                  progress=False, resume=resume)
    ft = FinetuneConfig(task, str(teacher), str(data), train=train, epochs=2.0,
                        predict_test=False, max_seq_length=max_seq_length)
    return DistillConfig(str(teacher), student, ft, **{"speed_texts": 0, **changes})


# --- the loss --------------------------------------------------------------------------------


def test_soft_cross_entropy_and_mix_equal_a_hand_computation():
    student = torch.tensor([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]])
    teacher = torch.tensor([[0.5, 1.5, -1.0], [2.0, 0.0, 1.0]])
    labels = torch.tensor([1, -100])  # the second row only the teacher labels

    def softmax(row, T):
        e = [math.exp(x / T) for x in row]
        return [x / sum(e) for x in e]

    for T in (1.0, 2.0, 4.0):
        hand = [T * T * -sum(p * math.log(q) for p, q in zip(softmax(t, T), softmax(s, T)))
                for s, t in zip(student.tolist(), teacher.tolist())]
        got = soft_cross_entropy(student, teacher, T)
        assert got.tolist() == pytest.approx(hand, rel=1e-6)
        # alpha x mean soft + (1 - alpha) x CE of the one labelled row at T = 1
        hard = -math.log(softmax(student[0].tolist(), 1.0)[1])
        loss = distillation_loss(student, teacher, labels, torch.ones(2, dtype=torch.bool), T,
                                 0.3, regression=False)
        assert float(loss) == pytest.approx(0.3 * sum(hand) / 2 + 0.7 * hard, rel=1e-6)


def test_the_hard_term_covers_gold_labels_the_teacher_did_not_score():
    """A tagging student with its own tokenizer can keep words the teacher's truncation cut:
    no soft target there, the gold label still counts."""
    student = torch.tensor([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]])
    teacher = torch.tensor([[0.5, 1.5, -1.0], [0.0, 0.0, 0.0]])  # row 2: no teacher output
    labels, scored = torch.tensor([1, 2]), torch.tensor([True, False])
    soft = soft_cross_entropy(student[:1], teacher[:1], 2.0).item()
    hard = torch.nn.functional.cross_entropy(student, labels).item()  # both rows
    loss = distillation_loss(student, teacher, labels, scored, 2.0, 0.4, regression=False)
    assert loss.item() == pytest.approx(0.4 * soft + 0.6 * hard, rel=1e-6)


def test_regression_loss_is_mse_to_the_teacher_and_the_labels():
    student, teacher = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.5], [3.0]])
    labels = torch.tensor([2.0, float("nan")])
    loss = distillation_loss(student, teacher, labels, torch.ones(2, dtype=torch.bool), 5.0, 0.25,
                             regression=True)
    soft = ((1.0 - 0.5) ** 2 + (2.0 - 3.0) ** 2) / 2  # T does not enter
    assert float(loss) == pytest.approx(0.25 * soft + 0.75 * (1.0 - 2.0) ** 2)
    only_teacher = distillation_loss(student, teacher, torch.full((2,), float("nan")),
                                     torch.ones(2, dtype=torch.bool), 1.0, 0.25, regression=True)
    assert float(only_teacher) == pytest.approx(0.25 * soft)  # no label: no hard term, no NaN


# --- students ---------------------------------------------------------------------------------


def test_a_layers_student_reproduces_those_teacher_layers_exactly(tmp_path):
    teacher_dir = make_teacher(tmp_path)
    teacher = BertForSequenceClassification.from_pretrained(teacher_dir)
    folder = build_student(teacher, tokenizer(), parse_student("layers:0,2"), 0,
                           tmp_path / "init")
    student = load_file(folder / "model.safetensors")
    source = load_file(teacher_dir / "model.safetensors")
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 2
    renumbered = {"bert.encoder.layer.1.": "bert.encoder.layer.2."}
    for name, tensor in student.items():
        origin = name
        for new, old in renumbered.items():
            origin = origin.replace(new, old)
        torch.testing.assert_close(tensor, source[origin], rtol=0, atol=0)
    assert sum(".layer.1." in n for n in student) == sum(".layer.2." in n for n in source) > 0
    assert {n for n in source if "classifier" in n or "pooler" in n} <= set(student)
    with pytest.raises(BertkitError, match="the teacher has 3 layers"):
        build_student(teacher, tokenizer(), parse_student("layers:0,3"), 0, tmp_path / "x")
    for bad in ("layers:2,0", "layers:a", "layers:1,1", "huge"):
        with pytest.raises(BertkitError):
            parse_student(bad)


# --- the run ------------------------------------------------------------------------------------


def counting_teacher(monkeypatch) -> list[int]:
    """Rows the teacher is run on, over every forward."""
    rows: list[int] = []
    load = distill.load_teacher

    def load_and_count(task, teacher_dir):
        model, tok = load(task, teacher_dir)
        model.register_forward_pre_hook(lambda m, a, kw: rows.append(kw["input_ids"].shape[0]),
                                        with_kwargs=True)
        return model, tok

    monkeypatch.setattr(distill, "load_teacher", load_and_count)
    return rows


class Killed(BaseException):
    """A kill nothing catches, right after a training state was written."""


def kill_after(monkeypatch, step: int):
    """The loop raises Killed right after saving the state of `step`; returns the undo."""
    save = loop._save

    def save_then_kill(run, cfg, metrics):
        path = save(run, cfg, metrics)
        if run.step == step:
            raise Killed
        return path

    monkeypatch.setattr(loop, "_save", save_then_kill)
    return lambda: monkeypatch.setattr(loop, "_save", save)


def test_teacher_runs_once_and_a_killed_run_resumes_to_the_same_student(tmp_path, monkeypatch):
    """24 training texts, 8 dev, 2 epochs of 3 steps: the teacher sees the 24 once (not once per
    epoch) and the 8 for its dev score; killed after epoch 1 and resumed, it sees only the 8
    (its outputs come from the cache) and the student is the uninterrupted one, bit for bit."""
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    rows = counting_teacher(monkeypatch)
    whole = run_distill(config(tmp_path / "whole", teacher, data))
    assert sum(rows) == 24 + 8
    assert whole["steps"] == 6 and whole["transfer"] == {"labelled": 24, "unlabelled": 0}
    assert (tmp_path / "whole" / "teacher_outputs.safetensors").is_file()

    rows.clear()
    undo = kill_after(monkeypatch, step=3)  # the end of epoch 1
    with pytest.raises(Killed):
        run_distill(config(tmp_path / "cut", teacher, data))
    undo()
    rows.clear()
    with pytest.raises(BertkitError, match="pass --resume"):
        run_distill(config(tmp_path / "cut", teacher, data))
    again = run_distill(config(tmp_path / "cut", teacher, data, resume=True))
    assert sum(rows) == 8  # the dev score only: the transfer set's outputs were cached
    for key in ("student_dev", "teacher_dev", "final_loss", "steps"):
        assert again[key] == whole[key], key
    for name, tensor in load_file(tmp_path / "whole" / "model.safetensors").items():
        torch.testing.assert_close(load_file(tmp_path / "cut" / "model.safetensors")[name],
                                   tensor, rtol=0, atol=0)
    assert not (tmp_path / "cut" / "checkpoints").exists()  # a finished run keeps the model
    assert run_distill(config(tmp_path / "cut", teacher, data, resume=True)) == again
    # killed after its last state, before its records: resumed, it trains no step and its
    # records still say the loss it ended at
    killed_after(monkeypatch, tmp_path / "last", teacher, data, step=6)
    last = run_distill(config(tmp_path / "last", teacher, data, resume=True))
    assert last["final_loss"] == whole["final_loss"] and last["steps"] == 6


def killed_after(monkeypatch, out: Path, teacher: Path, data: Path,
                 step: int = 3) -> dict[Path, bytes]:
    """A run killed after its state of `step` (3: the first epoch's); its files (but the lock)
    as they are then."""
    undo = kill_after(monkeypatch, step=step)
    with pytest.raises(Killed):
        run_distill(config(out, teacher, data))
    undo()
    return {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.suffix != ".lock"}


def test_a_changed_teacher_or_a_damaged_cache_is_refused_before_anything_is_written(
        tmp_path, monkeypatch):
    """The teacher as pytorch_model.bin (HF's older layout): changed in place under a killed
    run, the resumed run refuses its cached outputs, and leaves the folder as it was."""
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    state = load_file(teacher / "model.safetensors")
    torch.save(state, teacher / "pytorch_model.bin")
    (teacher / "model.safetensors").unlink()
    out = tmp_path / "out"
    before = killed_after(monkeypatch, out, teacher, data)
    torch.save({k: v + 0.01 for k, v in state.items()}, teacher / "pytorch_model.bin")
    with pytest.raises(BertkitError, match="another teacher"):
        run_distill(config(out, teacher, data, resume=True))
    assert {p: p.read_bytes() for p in before} == before  # student_init/ included
    torch.save(state, teacher / "pytorch_model.bin")  # the teacher as it was; the cache damaged
    (out / distill.CACHE_NAME).write_bytes(b"not safetensors")
    with pytest.raises(BertkitError, match="unreadable.*delete it"):
        run_distill(config(out, teacher, data, resume=True))


@pytest.mark.parametrize("split", ["dev", "train"])
def test_a_resumed_run_on_changed_labels_is_refused(tmp_path, monkeypatch, split):
    """A label changed under a killed run: the resumed run would score the student and the
    teacher on two dev sets (or train on other labels); refused, the folder as it was."""
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    out = tmp_path / "out"
    before = killed_after(monkeypatch, out, teacher, data)
    tsv = data / "SST-2" / f"{split}.tsv"
    header, first, *rest = tsv.read_text(encoding="utf-8").splitlines()
    text, label = first.rsplit("\t", 1)
    tsv.write_text("\n".join([header, f"{text}\t{1 - int(label)}", *rest]) + "\n",
                   encoding="utf-8")
    with pytest.raises(BertkitError, match="training or dev data or the teacher changed"):
        run_distill(config(out, teacher, data, resume=True))
    assert {p: p.read_bytes() for p in before} == before


def test_a_dev_input_longer_than_the_students_positions_is_refused_first(tmp_path):
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    dev = data / "SST-2" / "dev.tsv"
    dev.write_text(dev.read_text() + " ".join(["good"] * 20) + "\t1\n", encoding="utf-8")
    BertModel(tiny_config(max_position_embeddings=16)).save_pretrained(tmp_path / "short")
    tokenizer().save_pretrained(tmp_path / "short")  # its own tokenizer, the teacher's words
    with pytest.raises(BertkitError, match="an input of the dev split has 22 tokens but the "
                                           "student has 16 positions"):
        run_distill(config(tmp_path / "out", teacher, data, student=str(tmp_path / "short"),
                           max_seq_length=32))
    assert not (tmp_path / "out").exists()


def test_the_student_loads_in_transformers_with_the_same_logits(tmp_path):
    transformers = pytest.importorskip("transformers")
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    out = tmp_path / "student"
    results = run_distill(config(out, teacher, data, student="tiny", speed_texts=8,
                                 speed_repeats=1))
    assert results["student_layers"] == 2 and results["speed"]["texts"] == 8
    assert results["precision"] == "fp32"  # the resolved precision it trained at
    speed = results["speed"]  # the speed-up is the two rates' ratio, wall clock and CPU
    assert speed["speedup"] == pytest.approx(
        speed["student_texts_per_s"] / speed["teacher_texts_per_s"], rel=0.02, abs=0.01)
    assert speed["cpu_speedup"] == pytest.approx(
        speed["student_texts_per_cpu_s"] / speed["teacher_texts_per_cpu_s"], rel=0.02, abs=0.01)
    ours = BertForSequenceClassification.from_pretrained(out)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    batch = tokenizer().encode_padded(["the film was good", "a very dull plot"])
    inputs = {k: torch.as_tensor(batch[k]) for k in ("input_ids", "token_type_ids",
                                                     "attention_mask")}
    with torch.no_grad():
        expected = theirs(**inputs).logits
        got = ours(**inputs).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)  # fp32, same weights
    assert json.loads((out / "config.json").read_text())["bertkit_task"] == "sst2"


def test_unlabelled_texts_join_the_transfer_set_and_a_baseline_runs_beside(tmp_path):
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    texts = tmp_path / "more.txt"
    texts.write_text("a very good film\n\nthe plot was dull\nquite lovely\n", encoding="utf-8")
    results = run_distill(config(tmp_path / "out", teacher, data, student="layers:1",
                                 unlabelled=str(texts), baseline=True))
    assert results["transfer"] == {"labelled": 24, "unlabelled": 3}
    assert results["steps"] == 8  # ceil(27 / 8) x 2 epochs
    assert results["baseline_metrics"]["steps"] == 6  # the labelled 24 alone
    assert isinstance(results["baseline_dev"], float)
    assert (tmp_path / "out" / "baseline" / "model.safetensors").is_file()


def test_regression_with_a_pretrained_folder_student(tmp_path):
    """STS-B-like scores; the student a pre-trained encoder of another width."""
    root = tmp_path / "glue" / "STS-B"
    root.mkdir(parents=True)
    for split, rows in (("train", range(16)), ("dev", range(50, 58))):
        lines = ["sentence1\tsentence2\tscore"] + [
            f"{sentence(i)[0]}\t{sentence(i + 1)[0]}\t{i % 5}.0" for i in rows]
        (root / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    teacher = make_teacher(tmp_path, "stsb", labels=None)
    torch.manual_seed(1)
    BertModel(tiny_config(hidden_size=8, num_hidden_layers=1)).save_pretrained(tmp_path / "pre")
    tokenizer().save_pretrained(tmp_path / "pre")
    results = run_distill(config(tmp_path / "out", teacher, tmp_path / "glue", task="stsb",
                                 student=str(tmp_path / "pre")))
    assert results["metric"] == "spearman" and results["student_parameters"] < \
        results["teacher_parameters"]
    assert BertConfig.load(tmp_path / "out").hidden_size == 8


def test_teacher_features_pair_with_the_students_by_example(tmp_path, monkeypatch):
    """A folder student has its own tokenizer, so the teacher's features are made apart. Here
    the teacher's featurize returns them reversed: each student feature still trains on the
    teacher's logits for its own text; and a teacher side that lost an example is refused,
    naming the example and both counts, before the output folder is made."""
    data, teacher_dir = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    torch.manual_seed(1)
    BertModel(tiny_config(hidden_size=8, num_hidden_layers=1)).save_pretrained(tmp_path / "pre")
    tokenizer().save_pretrained(tmp_path / "pre")
    teacher_tok, drop = [], []
    load, featurize, train = distill.load_teacher, GlueTask.featurize, distill.train

    def load_and_keep(task, path):
        model, tok = load(task, path)
        teacher_tok.append(tok)
        return model, tok

    def reversed_for_the_teacher(self, examples, tok, *args, **kwargs):
        features = featurize(self, examples, tok, *args, **kwargs)
        if tok is not teacher_tok[-1] or len(examples) != 24:
            return features
        return [f for f in features[::-1] if f["example_index"] not in drop]

    trained = []

    def train_and_keep(objective, features, *args, **kwargs):
        trained.extend(features)
        return train(objective, features, *args, **kwargs)

    monkeypatch.setattr(distill, "load_teacher", load_and_keep)
    monkeypatch.setattr(GlueTask, "featurize", reversed_for_the_teacher)
    monkeypatch.setattr(distill, "train", train_and_keep)
    run_distill(config(tmp_path / "out", teacher_dir, data, student=str(tmp_path / "pre")))
    teacher = BertForSequenceClassification.from_pretrained(teacher_dir).eval()

    def logits(feature):
        with torch.no_grad():
            return teacher(**{k: torch.tensor([feature[k]]) for k in
                              ("input_ids", "token_type_ids", "attention_mask")}).logits

    # a random teacher's logits are small (~3e-3) and close together: the same text gives the
    # same logits to ~1e-9, another text differs by > 8e-7 (so a wrong pairing fails here)
    assert [f["example_index"] for f in trained] == list(range(24))
    for i, feature in enumerate(trained):
        torch.testing.assert_close(feature["teacher"], logits(feature), rtol=0, atol=2e-7)
        assert not torch.allclose(feature["teacher"], logits(trained[23 - i]), rtol=0, atol=2e-7)

    drop.append(5)
    with pytest.raises(BertkitError, match=r"train.tsv:7: 1 student feature\(s\) but 0 teacher "
                       r"feature\(s\) \(the transfer set: 24 student, 23 teacher"):
        run_distill(config(tmp_path / "lost", teacher_dir, data, student=str(tmp_path / "pre")))
    assert not (tmp_path / "lost").exists()


def test_targets_and_features_must_pair_one_to_one():
    features = [{"input_ids": [2, 5, 3], "example_index": i} for i in range(3)]
    with pytest.raises(BertkitError, match="3 student training features but 2 teacher outputs"):
        distill.with_targets(features, [torch.zeros(1, 2)] * 2)
    examples = [TextExample(str(i), "a", None, None, f"x.tsv:{i + 2}") for i in range(3)]
    shuffled = [features[2], features[0], features[1]]
    assert distill.align_teacher([0, 1, 2], shuffled, examples) == features
    assert distill.align_teacher([2, 0], shuffled, examples) == [features[2], features[0]]
    with pytest.raises(BertkitError, match=r"x.tsv:3: 2 student feature\(s\) but 1 teacher"):
        distill.align_teacher([0, 1, 1], features, examples)
    with pytest.raises(BertkitError, match=r"x.tsv:2: 1 student feature\(s\) but 2 teacher"):
        distill.align_teacher([0], features + [features[0]], examples)


def seen_batches(monkeypatch) -> list[tuple[list[dict], dict]]:
    """Every training batch the run collates, with its features (filled as the run goes)."""
    batches = []
    collate = distill.distill_collate

    def seen(task, features):
        batch = collate(task, features)
        batches.append((features, batch))
        return batch

    monkeypatch.setattr(distill, "distill_collate", seen)
    return batches


def test_token_tagging_is_distilled_at_first_word_pieces(tmp_path, monkeypatch):
    conll = tmp_path / "conll"
    conll.mkdir()
    for split in ("train", "valid"):
        sentences = [f"the O\n{POSITIVE[i % 5]} B-PER\nfilm O\n" for i in range(10)]
        (conll / f"{split}.txt").write_text("\n".join(sentences), encoding="utf-8")
    labels = get_task("conll2003").discover_labels(get_task("conll2003").read(conll / "train.txt"))
    teacher = make_teacher(tmp_path, "conll2003", BertForTokenClassification, labels)
    batches = seen_batches(monkeypatch)
    results = run_distill(config(tmp_path / "out", teacher, conll, task="conll2003",
                                 student="layers:2"))
    assert results["metric"] == "f1" and results["steps"] == 4
    assert len(batches) == 4
    for features, batch in batches:  # the teacher's logits at each word's first piece, only
        mask = batch["teacher_mask"]
        assert int(mask.sum()) == sum(len(f["word_starts"]) for f in features) == 3 * len(features)
        for row, f in zip(mask, features):
            assert row.nonzero().flatten().tolist() == f["word_starts"]
        assert batch["teacher_logits"][~mask].abs().sum() == 0
        assert bool((batch["teacher_logits"][mask].abs().sum(-1) > 0).all())
    assert results["final_loss"] > 0  # an empty mask would score nothing: a loss of 0
    # a tagger's hidden states transfer too (the tagging head returns them)
    hidden = run_distill(config(tmp_path / "hidden", teacher, conll, task="conll2003",
                                student="tiny", hidden_weight=0.5))
    assert hidden["hidden_weight"] == 0.5 and hidden["steps"] == 4


def test_labels_other_than_the_teachers_are_refused(tmp_path):
    data = write_sst2(tmp_path / "glue")
    teacher = make_teacher(tmp_path, "sst2", labels=("1", "0"))
    with pytest.raises(BertkitError, match="differ from the teacher's"):
        run_distill(config(tmp_path / "out", teacher, data))
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_run_killed_after_the_student_trained_keeps_it(tmp_path, monkeypatch):
    """Killed during the baseline: the resumed run neither trains the student again nor runs
    the teacher over the transfer set; it goes on with the baseline."""
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    baseline = distill.run_baseline

    def killed(*args):
        raise Killed

    monkeypatch.setattr(distill, "run_baseline", killed)
    with pytest.raises(Killed):
        run_distill(config(tmp_path / "out", teacher, data, baseline=True))
    trained = (tmp_path / "out" / "model.safetensors").read_bytes()
    monkeypatch.setattr(distill, "run_baseline", baseline)
    rows = counting_teacher(monkeypatch)
    monkeypatch.setattr(distill, "train", lambda *a, **k: pytest.fail("trained again"))
    results = run_distill(config(tmp_path / "out", teacher, data, baseline=True, resume=True))
    assert sum(rows) == 8 and results["baseline_metrics"]["steps"] == 6
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == trained


def test_unlabelled_texts_from_a_corpus_are_its_sentences_and_pairs_need_pairs(tmp_path):
    book = tmp_path / "book.txt"
    book.write_text("The film was good. The plot was dull.\n\nA lovely movie!\n", encoding="utf-8")
    examples = distill.read_unlabelled(get_task("sst2"), str(book), "text")
    assert [e.text_a for e in examples] == ["The film was good.", "The plot was dull.",
                                            "A lovely movie!"]
    assert len({e.guid for e in examples}) == 3
    mrpc = get_task("mrpc")
    train = [mrpc.example_from_record("0", {"text": "a", "pair": "b"}, "x")]
    with pytest.raises(BertkitError, match="sentence pairs and a corpus gives single"):
        distill.read_unlabelled(mrpc, str(book), "text")
    with pytest.raises(BertkitError, match="sentence pairs"):  # (a custom task's own)
        distill.check_pairs(train, examples, str(book))
    records = tmp_path / "pairs.jsonl"
    records.write_text('{"text": "a good film", "pair": "a fine movie"}\n', encoding="utf-8")
    sst2 = get_task("sst2")
    with pytest.raises(BertkitError, match="pairs.jsonl:1: sst2 reads one text"):
        distill.read_unlabelled(sst2, str(records), "lines")
    with pytest.raises(BertkitError, match="single texts"):
        distill.check_pairs([sst2.example_from_record("0", {"text": "a"}, "x")],
                            [mrpc.example_from_record("0", {"text": "a", "pair": "b"}, "x")],
                            str(records))


# --- hidden-state transfer (--hidden-weight) ----------------------------------------------------


def test_the_hidden_layer_map():
    assert distill.hidden_layer_map(2, 3, (0, 2)) == [0, 1, 3]  # the layers taken, then renumbered
    assert distill.hidden_layer_map(2, 6) == [0, 3, 6]  # TinyBERT's uniform map
    assert distill.hidden_layer_map(3, 12) == [0, 4, 8, 12]
    # more student layers than the teacher's: each learns from a teacher layer, never from the
    # embeddings (round(0.5) is 0), so never from the teacher's last attention (index -1)
    assert distill.hidden_layer_map(12, 6) == [0, 1, 1, 2, 2, 2, 3, 4, 4, 4, 5, 6, 6]


def test_the_hidden_state_loss_equals_a_hand_computation():
    torch.manual_seed(0)
    teacher = BertModel(tiny_config()).eval()
    ids = torch.tensor([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        states = teacher(ids, None, mask, output_hidden_states=True).hidden_states
    layer_map = [0, 1, 3]
    same = distill.LayerTransfer(teacher, 16, layer_map, hidden_weight=1.0)
    assert isinstance(same.project, torch.nn.Identity) and not list(same.parameters())
    exact = tuple(states[i].clone() for i in layer_map)
    assert float(same(exact, None, ids, None, mask)) == pytest.approx(0.0, abs=1e-10)
    # off by 1 at every real token of the first mapped state, 3 at the second, 0 at the third,
    # and anything at padding (not scored): mean of (1, 9, 0) over the three states
    shifted = [exact[0] + 1.0, exact[1] + 3.0, exact[2].clone()]
    for s in shifted:
        s[mask == 0] = 100.0
    assert float(same(tuple(shifted), None, ids, None, mask)) == pytest.approx(10.0 / 3,
                                                                               rel=1e-5)
    # its weight multiplies it
    half = distill.LayerTransfer(teacher, 16, layer_map, hidden_weight=0.5)
    assert float(half(tuple(shifted), None, ids, None, mask)) == pytest.approx(5.0 / 3, rel=1e-5)
    # another width: a learned map W_h (trained, saved), the teacher outside the module tree
    wide = distill.LayerTransfer(teacher, 24, layer_map, hidden_weight=1.0)
    assert [n for n, _ in wide.named_parameters()] == ["project.weight"]
    assert wide.project.weight.shape == (16, 24)
    student = tuple(torch.randn(2, 5, 24) for _ in layer_map)
    errors = [((wide.project(s) - states[i]) ** 2)[mask == 1].mean() for s, i in
              zip(student, layer_map)]
    with torch.no_grad():
        assert float(wide(student, None, ids, None, mask)) == pytest.approx(
            float(sum(errors) / 3), rel=1e-5)
    # attention alone needs no map, whatever the widths
    assert not list(distill.LayerTransfer(teacher, 24, layer_map, attention_weight=1.0)
                    .parameters())


def test_the_attention_loss_equals_a_hand_computation():
    """KL(teacher || student) per head and real query, averaged; padded queries do not count,
    padded keys (probability 0 on both sides) add nothing."""
    mask = torch.tensor([[1, 1, 0]])
    teacher = torch.tensor([[[[0.5, 0.5, 0.0], [0.9, 0.1, 0.0], [0.2, 0.3, 0.5]]]])  # (1, 1, 3, 3)
    student = torch.tensor([[[[0.25, 0.75, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]]])
    hand = [0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75),
            0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)]  # the third query: padding
    got = distill.attention_kl(student, teacher, mask)
    assert float(got) == pytest.approx(sum(hand) / 2, rel=1e-6)
    assert float(distill.attention_kl(teacher, teacher, mask)) == pytest.approx(0.0, abs=1e-7)
    # two heads: the mean over heads too
    two = distill.attention_kl(torch.cat([student, teacher], 1), torch.cat([teacher, teacher], 1),
                               mask)
    assert float(two) == pytest.approx(sum(hand) / 4, rel=1e-6)


def test_the_attention_transfer_maps_student_layers_to_teacher_layers():
    """Student layer i learns from the attention of the teacher layer it maps to (hidden-state
    numbering: map entry j is teacher layer j - 1's attention)."""
    torch.manual_seed(0)
    teacher = BertModel(tiny_config()).eval()
    with torch.no_grad():  # (at BERT's init every attention is near uniform: nothing to tell)
        for layer in teacher.layers:
            torch.nn.init.normal_(layer.attention.qkv.weight, std=1.0)
    ids = torch.tensor([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        probs = teacher(ids, None, mask, output_attentions=True).attentions  # 3 layers
    transfer = distill.LayerTransfer(teacher, 16, [0, 1, 3], attention_weight=2.0)
    assert float(transfer(None, (probs[0], probs[2]), ids, None, mask)) == pytest.approx(
        0.0, abs=1e-6)
    swapped = (probs[2], probs[0])
    hand = (distill.attention_kl(probs[2], probs[0], mask)
            + distill.attention_kl(probs[0], probs[2], mask)) / 2
    assert float(hand) > 0.01
    assert float(transfer(None, swapped, ids, None, mask)) == pytest.approx(2.0 * float(hand),
                                                                            rel=1e-5)


def test_distilling_with_hidden_states_runs_and_resumes_with_its_map(tmp_path, monkeypatch):
    """A `tiny` student (width 128 against the teacher's 16: a learned map) with the hidden-state
    loss; killed after epoch 1 and resumed, the student is the uninterrupted one, bit for bit,
    so the map W_h resumed with it."""
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    whole = run_distill(config(tmp_path / "whole", teacher, data, student="tiny",
                               hidden_weight=1.0))
    plain = run_distill(config(tmp_path / "plain", teacher, data, student="tiny"))
    assert whole["hidden_weight"] == 1.0 and plain["hidden_weight"] == 0.0
    assert whole["final_loss"] != plain["final_loss"]  # the hidden-state term is in the loss
    undo = kill_after(monkeypatch, step=3)
    with pytest.raises(Killed):
        run_distill(config(tmp_path / "cut", teacher, data, student="tiny", hidden_weight=1.0))
    undo()
    again = run_distill(config(tmp_path / "cut", teacher, data, student="tiny",
                               hidden_weight=1.0, resume=True))
    assert again["final_loss"] == whole["final_loss"]
    for name, tensor in load_file(tmp_path / "whole" / "model.safetensors").items():
        torch.testing.assert_close(load_file(tmp_path / "cut" / "model.safetensors")[name],
                                   tensor, rtol=0, atol=0)
    # the released student is a plain model: no trace of the map
    assert not any("project" in k for k in load_file(tmp_path / "cut" / "model.safetensors"))


def test_distilling_with_attentions_runs_with_the_teachers_heads_only(tmp_path):
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    plain = run_distill(config(tmp_path / "plain", teacher, data))
    attention = run_distill(config(tmp_path / "attention", teacher, data, attention_weight=1.0))
    assert attention["attention_weight"] == 1.0 and plain["attention_weight"] == 0.0
    assert attention["final_loss"] != plain["final_loss"]  # the attention term is in the loss
    assert "attention_weight" in json.loads(
        (tmp_path / "attention" / "distill_config.json").read_text())
    # a run made before the option (its settings without it) resumes: left out at 0
    assert "attention_weight" not in json.loads(
        (tmp_path / "plain" / "distill_config.json").read_text())
    with pytest.raises(BertkitError, match="needs the teacher's 2 heads; --student mini has 4"):
        run_distill(config(tmp_path / "refused", teacher, data, student="mini",
                           attention_weight=1.0, unlabelled=str(tmp_path / "absent.txt")))
    assert not (tmp_path / "refused").exists()


def test_layer_transfer_needs_a_student_that_reads_the_teachers_tokens(tmp_path):
    teacher = make_teacher(tmp_path)
    for flag, option in (("--hidden-weight", "hidden_weight"),
                         ("--attention-weight", "attention_weight")):
        with pytest.raises(BertkitError, match=f"{flag} compares .* read the teacher's tokens"):
            config(tmp_path / "out", teacher, tmp_path, student=str(teacher), **{option: 0.5})
        with pytest.raises(BertkitError, match=f"{flag} must be"):
            config(tmp_path / "out", teacher, tmp_path, **{option: -1.0})


# --- span QA and multiple choice ---------------------------------------------------------------


@pytest.mark.parametrize("T", [2.0, 1000.0])  # padding counts for nothing at any temperature
def test_span_loss_equals_a_hand_computation_over_real_positions_only(T):
    start = torch.tensor([[1.0, 0.0, 2.0, 9.0]])  # (B=1, T=4); position 3 is padding
    end = torch.tensor([[0.0, 3.0, 1.0, -9.0]])
    teacher = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [5.0, 5.0]]])  # (1, 4, 2)
    mask = torch.tensor([[True, True, True, False]])
    hard = torch.tensor(0.7)
    alpha = 0.25

    def soft(s, t):  # over the three real positions, by hand
        p = [math.exp(x / T) for x in t]
        p = [x / sum(p) for x in p]
        z = math.log(sum(math.exp(x / T) for x in s))
        return -sum(pi * (si / T - z) for pi, si in zip(p, s)) * T * T

    expected = (alpha * (soft([1.0, 0.0, 2.0], [2.0, 0.0, 1.0])
                         + soft([0.0, 3.0, 1.0], [0.0, 1.0, 0.0])) / 2 + (1 - alpha) * 0.7)
    got = distill.span_distillation_loss(start, end, teacher, mask, hard, T, alpha)
    assert got.item() == pytest.approx(expected, rel=1e-6)


def write_squad(root: Path, n: int = 12) -> Path:
    """SQuAD v1.1 files: contexts naming a colour, questions asking it."""
    articles = []
    for i in range(n):
        word = (POSITIVE + NEGATIVE)[i % 10]
        context = f"the film was {word} and the plot was {WORDS[i % 3]}"
        start = context.index(word)
        articles.append({"title": f"t{i}", "paragraphs": [{"context": context, "qas": [{
            "id": f"q{i}", "question": "the film was",
            "answers": [{"text": word, "answer_start": start}]}]}]})
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        (root / f"{split}-v1.1.json").write_text(json.dumps({"data": articles}), encoding="utf-8")
    return root


def test_span_qa_is_distilled_position_by_position(tmp_path, monkeypatch):
    data = write_squad(tmp_path / "squad")
    teacher = make_teacher(tmp_path, "squad1", BertForQuestionAnswering, labels=None)
    batches = seen_batches(monkeypatch)
    results = run_distill(config(tmp_path / "out", teacher, data, task="squad1",
                                 student="layers:0,2", max_seq_length=32))
    assert results["metric"] == "f1" and results["steps"] == 4 and results["student_layers"] == 2
    assert len(batches) == 4  # (collated here, not in loader workers the patch would miss)
    for features, batch in batches:  # the teacher's start/end logits at every real position
        mask = batch["teacher_mask"]
        assert mask.tolist() == [[j < len(f["input_ids"]) for j in range(mask.shape[1])]
                                 for f in features]
        assert batch["teacher_logits"].shape == (*mask.shape, 2)
        assert batch["teacher_logits"][~mask].abs().sum() == 0
        assert "start_positions" in batch  # the hard loss's gold positions
    assert results["final_loss"] > 0
    assert "exact_match" in results["student_metrics"]
    # what span QA rules out, refused before any work
    for changes, says in (({"hidden_weight": 1.0}, "returns no hidden states"),
                          ({"attention_weight": 1.0}, "--attention-weight: the span QA head"),
                          ({"unlabelled": str(tmp_path / "u.txt")}, "more than texts")):
        with pytest.raises(BertkitError, match=says):
            run_distill(config(tmp_path / "refused", teacher, data, task="squad1", **changes))
    folder = tmp_path / "pretrained"
    BertModel(tiny_config()).save_pretrained(folder)
    tokenizer().save_pretrained(folder)
    with pytest.raises(BertkitError, match="must read the teacher's tokens"):
        run_distill(config(tmp_path / "refused", teacher, data, task="squad1",
                           student=str(folder)))
    assert not (tmp_path / "refused").exists()


def test_multiple_choice_is_distilled_over_the_choices(tmp_path):
    swag = tmp_path / "swag"
    swag.mkdir()
    rows = ["sent1,sent2,ending0,ending1,ending2,ending3,label"]
    for i in range(12):
        rows.append(f"the film,was,{POSITIVE[i % 5]},{NEGATIVE[i % 5]},{WORDS[0]},{WORDS[1]},"
                    f"{i % 2}")
    for split in ("train", "val"):
        (swag / f"{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    teacher = make_teacher(tmp_path, "swag", BertForMultipleChoice, labels=None)
    results = run_distill(config(tmp_path / "out", teacher, swag, task="swag", student="tiny",
                                 speed_texts=4, baseline=True))
    assert results["metric"] == "accuracy" and results["steps"] == 4
    assert results["student_layers"] == 2 and results["baseline_dev"] is not None
    assert results["speed"]["texts"] == 4


def test_the_objective_distils_choices_and_spans_with_the_teachers_logits():
    """alpha = 1: the loss is the soft term alone, over the choices (multiple choice) or the
    positions (span QA), computed from the student's own logits."""
    torch.manual_seed(0)
    ids = torch.randint(5, 24, (2, 4, 6))  # (B, choices, T)
    inputs = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
              "attention_mask": torch.ones_like(ids)}
    choices = BertForMultipleChoice(tiny_config()).eval()
    teacher = torch.randn(2, 4)
    loss = distill.DistillationObjective(choices, 2.0, 1.0, False)(
        teacher_logits=teacher, labels=torch.tensor([0, 3]), **inputs).loss
    expected = soft_cross_entropy(choices(**inputs).logits, teacher, 2.0).mean()
    torch.testing.assert_close(loss, expected)

    spans = BertForQuestionAnswering(tiny_config()).eval()
    flat = {k: v[:, 0] for k, v in inputs.items()}  # (B, T)
    teacher, mask = torch.randn(2, 6, 2), torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    loss = distill.DistillationObjective(spans, 3.0, 1.0, False)(
        teacher_logits=teacher, teacher_mask=mask, start_positions=torch.tensor([1, 2]),
        end_positions=torch.tensor([2, 3]), **flat).loss
    out = spans(**flat)
    expected = sum(soft_cross_entropy(s, teacher[..., k], 3.0, mask).mean() / 2
                   for k, s in enumerate((out.start_logits, out.end_logits)))
    torch.testing.assert_close(loss, expected)


def test_a_squad2_student_tunes_its_own_null_threshold(tmp_path):
    """The teacher's tuned threshold scores the teacher; the student tunes its own on dev, as
    fine-tuning does, and its release carries that one."""
    data = write_squad(tmp_path / "squad")
    for split in ("train", "dev"):
        (data / f"{split}-v1.1.json").rename(data / f"{split}-v2.0.json")
    teacher = make_teacher(tmp_path, "squad2", BertForQuestionAnswering, labels=None)
    saved = json.loads((teacher / "config.json").read_text())
    (teacher / "config.json").write_text(json.dumps({**saved, "squad_null_threshold": 7.5}))
    results = run_distill(config(tmp_path / "out", teacher, data, task="squad2",
                                 student="layers:1", max_seq_length=32))
    student, teacher_metrics = results["student_metrics"], results["teacher_metrics"]
    assert student["null_threshold_tuned_here"] and student["null_threshold"] != 7.5
    assert json.loads((tmp_path / "out" / "config.json").read_text()
                      )["squad_null_threshold"] == student["null_threshold"]
    assert teacher_metrics["null_threshold"] == 7.5  # the teacher, scored with its own
    assert not teacher_metrics["null_threshold_tuned_here"]


def test_a_regression_student_starts_where_its_baseline_does(shared_data, tmp_path):
    """STS-B: the student's head and the baseline's (a plain fine-tuning run) both start at the
    training labels' mean (the recipe's `regression_bias`); at a rate too small to move them the
    exported biases are that mean."""
    from safetensors.torch import load_file

    from tests.helpers import small_glue

    data = small_glue(shared_data, tmp_path / "data", task="STS-B", train=24, dev=8) / "glue"
    scores = [float(line.split("\t")[-1])
              for line in (data / "STS-B" / "train.tsv").read_text().splitlines()[1:]]
    mean = sum(scores) / len(scores)
    teacher = make_teacher(tmp_path, "stsb", labels=None)
    cfg = config(tmp_path / "out", teacher, data, task="stsb", baseline=True)
    cfg = dataclasses.replace(cfg, finetune=dataclasses.replace(
        cfg.finetune, train=dataclasses.replace(cfg.finetune.train, lr=1e-9)))
    run_distill(cfg)
    for folder in (tmp_path / "out", tmp_path / "out" / "baseline"):
        bias = load_file(folder / "model.safetensors")["classifier.bias"].item()
        assert bias == pytest.approx(mean, abs=1e-4), folder
