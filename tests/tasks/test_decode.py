"""Every task's `decode` on crafted logits (no model, no data), and the hooks around it:
score, final_predictions, collapse_reason, release_info, example_from_record, output_record."""

from __future__ import annotations

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.tasks import ColumnSpec, get_task
from bertkit.tasks.base import FeatureSettings
from bertkit.tasks.glue import TextExample
from bertkit.tasks.ner import TaggedSentence
from bertkit.tasks.squad import SquadExample, SquadTask
from bertkit.tasks.swag import ChoiceExample

SETTINGS = FeatureSettings()


def _features(n: int) -> list[dict]:
    return [{"example_index": i} for i in range(n)]


def _logits(*rows) -> dict[str, list[torch.Tensor]]:
    return {"logits": [torch.tensor(r, dtype=torch.float) for r in rows]}


def test_glue_classification_decode_and_score():
    task = get_task("rte")
    id2label = dict(enumerate(task.labels))
    examples = [TextExample("g7", "a", "b", "entailment"), TextExample("g8", "c", "d", "not_entailment"),
                TextExample("g9", "e", "f", "entailment")]
    outputs = _logits([2.0, 0.1], [-1.0, 0.5], [0.0, 3.0])
    preds = task.decode(examples, _features(3), outputs, id2label, SETTINGS)
    assert preds == {"g7": "entailment", "g8": "not_entailment", "g9": "not_entailment"}
    assert task.score(examples, preds) == {"accuracy": pytest.approx(2 / 3)}
    # Features in another order than the examples: each prediction still lands on its guid.
    features = [{"example_index": 2}, {"example_index": 0}]
    preds = task.decode(examples, features, _logits([0.0, 1.0], [1.0, 0.0]), id2label, SETTINGS)
    assert preds == {"g9": "not_entailment", "g7": "entailment"}


@pytest.mark.parametrize("task", [get_task("stsb"), get_task("custom", ColumnSpec(regression=True))],
                         ids=["stsb", "custom"])
def test_regression_decode_returns_the_first_logit(task):
    examples = [TextExample("x", "a", "b", 1.0), TextExample("y", "c", "d", 4.0)]
    preds = task.decode(examples, _features(2), _logits([1.25], [3.5]), None, SETTINGS)
    assert preds == {"x": 1.25, "y": 3.5}
    assert all(type(v) is float for v in preds.values())
    assert task.score(examples, preds)["spearman"] == pytest.approx(1.0)


def test_ner_decode_reads_word_starts_and_pads_with_o():
    task = get_task("conll2003")
    id2label = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC"}
    words = ("John", "Smith", "visits", "Paris", "today")
    example = TaggedSentence("s1", words, ("B-PER", "I-PER", "O", "B-LOC", "O"))
    logits = torch.zeros(8, 4)  # (T, num_labels): [CLS] John Smi ##th visits Paris [SEP] pad
    logits[:, 3] = 0.5  # B-LOC second everywhere, so only the marked positions choose
    logits[1, 1] = 5.0  # John -> B-PER
    logits[2, 2] = 5.0  # Smi -> I-PER
    logits[3, 1] = 9.0  # ##th is not a word start: ignored
    logits[4, 0] = 5.0  # visits -> O
    logits[5, 3] = 5.0  # Paris -> B-LOC; "today" was cut off -> O
    feature = {"example_index": 0, "word_starts": [1, 2, 4, 5]}
    preds = task.decode([example], [feature], {"logits": [logits]}, id2label, SETTINGS)
    assert preds == {"s1": ["B-PER", "I-PER", "O", "B-LOC", "O"]}
    assert task.score([example], preds)["f1"] == pytest.approx(1.0)


def test_swag_decode_argmax_over_four_choices():
    task = get_task("swag")
    examples = [ChoiceExample(f"v{i}", "c", "s", ("a", "b", "c", "d"), label) for i, label in
                enumerate([2, 0, 3])]
    outputs = _logits([0.1, 0.2, 0.9, 0.3], [1.0, -1.0, 0.0, 0.5], [0.0, 2.0, 1.0, -3.0])
    preds = task.decode(examples, _features(3), outputs, None, SETTINGS)
    assert preds == {"v0": 2, "v1": 0, "v2": 1}
    assert task.score(examples, preds) == {"accuracy": pytest.approx(2 / 3)}


# --- SQuAD: one window of 8 one-letter context tokens at model positions 3..10 ------------------

CONTEXT = " ".join("abcdefgh")
OFFSETS = [(2 * i, 2 * i + 1) for i in range(8)]


def _squad_feature(index: int) -> dict:
    return {"example_index": index, "context_start": 3, "doc_start": 0,
            "max_context": (True,) * 8, "offsets": OFFSETS}


def _squad_outputs() -> dict[str, list[torch.Tensor]]:
    s1, e1 = torch.full((12,), -5.0), torch.full((12,), -5.0)
    s1[0], e1[0], s1[5], e1[6] = 1.0, 1.0, 3.0, 3.0  # "c d" scores 6, null 2: odds -4
    s2, e2 = torch.full((12,), -5.0), torch.full((12,), -5.0)
    s2[0], e2[0], s2[7], e2[7] = 5.0, 5.0, 2.0, 2.0  # "e" scores 4, null 10: odds 6
    return {"start_logits": [s1, s2], "end_logits": [e1, e2]}


def _squad_decode(task, answers2=()):
    examples = [SquadExample("q1", "?", CONTEXT, ("c d",), (4,)),
                SquadExample("q2", "?", CONTEXT, answers2, (8,) * len(answers2), not answers2)]
    features = [_squad_feature(0), _squad_feature(1)]
    settings = FeatureSettings(max_answer_length=3)
    return examples, task.decode(examples, features, _squad_outputs(), None, settings)


def test_squad_v1_decode_and_score():
    task = get_task("squad1")
    examples, preds = _squad_decode(task, answers2=("e",))
    assert {q: p["text"] for q, p in preds.items()} == {"q1": "c d", "q2": "e"}
    assert preds["q1"]["null_odds"] == pytest.approx(-4.0)
    assert task.score(examples, preds) == {"exact_match": 100.0, "f1": 100.0}
    assert task.final_predictions(preds, {}) == preds
    assert task.release_info({}) == {}


def test_squad_v2_tunes_the_threshold_when_it_has_none():
    task = get_task("squad2")
    examples, preds = _squad_decode(task)
    assert preds == {"q1": {"text": "c d", "null_odds": pytest.approx(-4.0)},
                     "q2": {"text": "e", "null_odds": pytest.approx(6.0)}}
    metrics = task.score(examples, preds)
    assert metrics["null_threshold_tuned_here"] is True
    assert metrics["null_threshold"] == pytest.approx(-4.0)
    assert metrics["f1"] == 100.0 and metrics["exact_match"] == 100.0
    final = task.final_predictions(preds, metrics)
    assert {q: (p["text"], p["span"]) for q, p in final.items()} == {"q1": ("c d", "c d"),
                                                                     "q2": ("", "e")}
    info = task.release_info(metrics)
    assert info == {"squad_null_threshold": pytest.approx(-4.0)}
    again = task.with_release_info(info)
    assert isinstance(again, SquadTask) and again.version == 2
    assert again.null_threshold == pytest.approx(-4.0)


def test_squad_v2_uses_its_given_threshold_without_retuning():
    task = SquadTask(2, null_threshold=10.0)
    examples, preds = _squad_decode(task)
    metrics = task.score(examples, preds)
    assert metrics["null_threshold"] == 10.0
    assert metrics["null_threshold_tuned_here"] is False
    assert metrics["f1"] == 50.0  # q2's odds 6 do not exceed 10: answered "e", wrong
    assert metrics["best_f1"] == 100.0  # the oracle figure is only reported beside it
    final = task.final_predictions(preds, {})
    assert {q: p["text"] for q, p in final.items()} == {"q1": "c d", "q2": "e"}
    assert task.release_info(metrics) == {"squad_null_threshold": 10.0}
    assert task.with_release_info({}) is task


# --- collapse_reason ------------------------------------------------------------------------------


def test_collapse_reason_classification():
    task = get_task("sst2")
    examples = [TextExample(str(i), "t", None, str(i % 2)) for i in range(4)]
    assert isinstance(task.collapse_reason(examples, {e.guid: "1" for e in examples}), str)
    assert task.collapse_reason(examples, {e.guid: e.label for e in examples}) is None


@pytest.mark.parametrize("task", [get_task("stsb"), get_task("custom", ColumnSpec(regression=True))],
                         ids=["stsb", "custom"])
def test_collapse_reason_regression(task):
    examples = [TextExample(str(i), "t", "u", float(i)) for i in range(6)]  # gold std ~1.71
    flat = {e.guid: 2.5 + 0.01 * i for i, e in enumerate(examples)}  # std ~0.017
    assert isinstance(task.collapse_reason(examples, flat), str)
    varied = {e.guid: 0.8 * e.label + 0.3 for e in examples}
    assert task.collapse_reason(examples, varied) is None


def test_collapse_reason_ner_swag_squad():
    ner = get_task("conll2003")
    sents = [TaggedSentence(g, ("a", "b"), ("O", "O")) for g in ("s1", "s2")]
    assert isinstance(ner.collapse_reason(sents, {"s1": ["O", "O"], "s2": ["O", "O"]}), str)
    assert ner.collapse_reason(sents, {"s1": ["O", "O"], "s2": ["B-PER", "O"]}) is None
    swag = get_task("swag")
    choices = [ChoiceExample(g, "c", "s", ("a", "b", "c", "d"), 0) for g in ("v1", "v2")]
    assert isinstance(swag.collapse_reason(choices, {"v1": 3, "v2": 3}), str)
    assert swag.collapse_reason(choices, {"v1": 3, "v2": 1}) is None
    squad = get_task("squad2")
    qs = [SquadExample(q, "?", CONTEXT, (), (), True) for q in ("q1", "q2")]
    empty = {q.qid: {"text": "", "null_odds": 1.0} for q in qs}
    assert isinstance(squad.collapse_reason(qs, empty), str)
    assert squad.collapse_reason(qs, {**empty, "q2": {"text": "e", "null_odds": -1.0}}) is None


# --- predict records ------------------------------------------------------------------------------


def test_records_classification_and_regression():
    task = get_task("rte")
    example = task.example_from_record("r1", {"text": "A man.", "pair": "A person."}, "in:1")
    assert example == TextExample("r1", "A man.", "A person.", None, "in:1")
    assert task.output_record(example, "entailment") == {
        "id": "r1", "text": "A man.", "pair": "A person.", "label": "entailment"}
    single = get_task("sst2").example_from_record("r2", {"sentence": "Fine."}, "in:2")
    assert single.text_b is None
    assert get_task("sst2").output_record(single, "1") == {"id": "r2", "text": "Fine.", "label": "1"}
    assert get_task("stsb").output_record(example, 3.5)["score"] == 3.5


def test_records_swag_ner_squad():
    swag = get_task("swag")
    example = swag.example_from_record(
        "w1", {"context": "He sat.", "start": "Then he", "endings": ["a", "b", "c", "d"]}, "in:1")
    assert example == ChoiceExample("w1", "He sat.", "Then he", ("a", "b", "c", "d"), None, "in:1")
    assert swag.output_record(example, 2) == {"id": "w1", "choice": 2, "ending": "c"}
    ner = get_task("conll2003")
    sent = ner.example_from_record("n1", {"text": "John  lives here"}, "in:2")
    assert sent.words == ("John", "lives", "here") and sent.tags is None
    assert ner.output_record(sent, ["B-PER", "O", "O"]) == {
        "id": "n1", "words": ["John", "lives", "here"], "tags": ["B-PER", "O", "O"]}
    squad = get_task("squad2")
    q = squad.example_from_record("s1", {"question": "Who?", "context": "John."}, "in:3")
    assert (q.qid, q.question, q.context, q.answers) == ("s1", "Who?", "John.", ())
    assert squad.output_record(q, {"text": "John", "null_odds": -2.0}) == {
        "id": "s1", "question": "Who?", "answer": "John", "null_odds": -2.0}


ENDINGS = {"endings": ["a", "b", "c", "d"]}


@pytest.mark.parametrize("name, record", [
    ("sst2", {"text": ""}), ("sst2", {"text": "   "}), ("sst2", {"text": 5}), ("sst2", {}),
    ("rte", {"text": "a", "pair": ""}), ("rte", {"text": "a", "pair": 5}),
    ("custom", {"text": None}),
    ("conll2003", {"text": ""}), ("conll2003", {"text": 5}), ("conll2003", {"words": []}),
    ("swag", {"context": "", **ENDINGS}), ("swag", {"context": 5, **ENDINGS}),
    ("swag", {"context": "c", "endings": ["a", "b"]}),
    ("squad1", {"question": "", "context": "c"}), ("squad2", {"question": "q", "context": 5}),
])
def test_bad_records_raise(name, record):
    with pytest.raises(BertkitError, match="in:9"):
        get_task(name).example_from_record("id", record, "in:9")
