"""SQuAD: reader counts, windows, offsets -> token spans on the real v1.1 dev set, n-best
decoding and the v2.0 null threshold, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.tasks.base import FeatureSettings
from bertkit.tasks.squad import (
    SquadExample,
    SquadTask,
    best_span,
    char_span_to_tokens,
    max_context_flags,
)
from bertkit.tokenization.windows import window_starts


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    from bertkit.tokenization.wordpiece import BertTokenizer

    return BertTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="module")
def v1_dev(shared_data):
    return SquadTask(1).read(shared_data / "squad" / "dev-v1.1.json")


def test_reader_counts(shared_data, v1_dev):
    assert len(v1_dev) == 10570
    assert sum(len(e.answers) for e in v1_dev) == 34726
    assert len({e.context for e in v1_dev}) == 2067
    v2 = SquadTask(2).read(SquadTask(2).find_file(shared_data / "squad", "dev"))
    assert len(v2) == 11873
    assert sum(e.is_impossible for e in v2) == 5945
    assert all(not e.answers for e in v2 if e.is_impossible)


def test_windows_cover_the_context_like_run_squad():
    assert window_starts(10, 20, 5) == [0]
    assert window_starts(30, 20, 5) == [0, 5, 10]
    assert window_starts(20, 20, 128) == [0]
    # 30 tokens, windows [0, 20), [5, 25), [10, 30): each token is owned by exactly one window,
    # the one where min(left, right) context is largest (the first one on ties).
    starts = [0, 5, 10]
    flags = [max_context_flags(30, 20, 5, w) for w in range(3)]
    owners = []
    for t in range(30):
        mine = [w for w in range(3) if 0 <= t - starts[w] < 20 and flags[w][t - starts[w]]]
        assert len(mine) == 1
        owners.append(mine[0])
    # t=12: min(12, 7) = 7 in window 0 ties min(7, 12) = 7 in window 1 -> window 0.
    assert owners == [0] * 13 + [1] * 5 + [2] * 12


def test_char_span_to_tokens():
    offsets = [(0, 3), (4, 9), (9, 12), (13, 16)]  # "The foo##bar baz"
    assert char_span_to_tokens(offsets, 4, 12) == (1, 2)
    assert char_span_to_tokens(offsets, 5, 10) == (1, 2)  # inside pieces: widened to whole pieces
    assert char_span_to_tokens(offsets, 13, 16) == (3, 3)
    assert char_span_to_tokens(offsets, 20, 22) is None


def test_v11_dev_answers_decode_back_to_gold(v1_dev, tokenizer):
    """Every answer of v1.1 dev, mapped to tokens through the offsets and back, gives the gold
    text for >= 99.5% of them. The exceptions (~0.2%) are answers that start or end inside a
    WordPiece-tokenized word: 'gold' in 'golden', '10.' in '2010.', 'four' in 'fourth',
    '20,980' after '£' (£20 is one word for BERT's basic tokenizer) - token spans cannot split a
    word piece, so the span widens to the whole piece (as run_squad.py does)."""
    contexts = list(dict.fromkeys(e.context for e in v1_dev))
    offsets = {c: enc.offsets for c, enc in zip(contexts, tokenizer.encode_batch(
        contexts, add_special_tokens=False, truncation=False))}
    total = exact = 0
    for e in v1_dev:
        for text, start in zip(e.answers, e.answer_starts):
            span = char_span_to_tokens(offsets[e.context], start, start + len(text))
            off = offsets[e.context]
            total += 1
            exact += e.context[off[span[0]][0]:off[span[1]][1]] == text
    assert total == 34726
    assert exact / total >= 0.995


def test_featurized_windows_point_at_the_gold_answer(v1_dev, tokenizer):
    task = SquadTask(1)
    settings = FeatureSettings(max_seq_length=384, doc_stride=128)
    features = task.featurize(v1_dev, tokenizer, settings, None, train=True)
    assert len(features) >= len(v1_dev)
    assert max(len(f["input_ids"]) for f in features) <= 384
    found = np.zeros(len(v1_dev), dtype=bool)
    for f in features:
        s, e = f["start_positions"], f["end_positions"]
        assert f["token_type_ids"][f["context_start"]] == 1
        if s == 0:
            continue
        ex = v1_dev[f["example_index"]]
        off, c0, d = f["offsets"], f["context_start"], f["doc_start"]
        text = ex.context[off[d + s - c0][0]:off[d + e - c0][1]]
        found[f["example_index"]] |= text == ex.answers[0]
    assert found.mean() >= 0.995


def _one_window(context_tokens: int, n_best: int = 20):
    offsets = [(2 * i, 2 * i + 1) for i in range(context_tokens)]  # "a b c ..." style
    feature = {"context_start": 3, "doc_start": 0, "max_context": (True,) * context_tokens,
               "offsets": offsets}
    return feature, offsets, FeatureSettings(max_answer_length=3, n_best_size=n_best)


@pytest.mark.parametrize("traps", [
    {"start": {1: 9.0}, "end": {1: 9.0}},  # a span inside the question
    {"start": {8: 8.0}, "end": {4: 8.0}},  # end before start
    {"start": {3: 8.0}, "end": {10: 8.0}},  # 8 tokens > max_answer_length 3
    {"start": {}, "end": {}, "not_max_context": 4},  # start token owned by another window
])
def test_best_span_skips_invalid_spans(traps):
    context = " ".join("abcdefgh")  # 8 one-letter tokens, at model positions 3..10
    feature, offsets, settings = _one_window(8)
    start, end = np.full(12, -5.0), np.full(12, -5.0)
    start[0], end[0] = 1.0, 1.0  # [CLS]: null score 2
    start[5], end[6] = 3.0, 3.0  # the best valid span: context tokens 2..3 = "c d"
    for i, v in traps["start"].items():
        start[i] = v
    for i, v in traps["end"].items():
        end[i] = v
    if "not_max_context" in traps:
        start[4], end[4] = 9.0, 9.0
        feature["max_context"] = tuple(i != traps["not_max_context"] - 3 for i in range(8))
    out = best_span(context, offsets, [feature], [start], [end], settings)
    assert out["text"] == "c d"
    assert out["null_odds"] == pytest.approx(2.0 - 6.0)


def test_v2_threshold_tuned_on_dev_and_written(tmp_path):
    task = SquadTask(2)
    ex = [SquadExample("a", "q", "ctx", ("x",), (0,)), SquadExample("b", "q", "ctx", (), (), True)]
    preds = {"a": {"text": "x", "null_odds": -3.0}, "b": {"text": "y", "null_odds": -1.0}}
    scores = task.score(ex, preds)
    # tau between the two odds answers a and leaves b empty: both right.
    assert scores["f1"] == 100.0 and scores["exact_match"] == 100.0
    assert -3.0 <= scores["null_threshold"] < -1.0
    assert scores["has_ans_f1"] == 100.0 and scores["no_ans_f1"] == 100.0
    paths = task.write_predictions(preds, ex, tmp_path, "dev", scores)
    assert json.loads(paths[0].read_text()) == {"a": "x", "b": ""}
    assert json.loads(paths[1].read_text()) == {"a": -3.0, "b": -1.0}


def test_answer_outside_context_names_question_id(tmp_path):
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
        "context": "short context", "qas": [
            {"id": "ok1", "question": "q?", "answers": [{"text": "short", "answer_start": 0}]},
            {"id": "bad7", "question": "q?", "answers": [{"text": "text", "answer_start": 40}]},
        ]}]}]}
    path = tmp_path / "dev-v1.1.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BertkitError, match=r"dev-v1\.1\.json: question id bad7: answer 'text'"):
        SquadTask(1).read(path)
    path.write_text('{"data": [')
    with pytest.raises(BertkitError, match=r"dev-v1\.1\.json: line 1: invalid JSON"):
        SquadTask(1).read(path)
