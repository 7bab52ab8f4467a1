"""Metrics against their references: scikit-learn / scipy for GLUE, the official SQuAD scripts'
behaviour on crafted cases, conlleval on crafted IOB1 / IOB2 tag sequences."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from bertkit import metrics as M


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_glue_metrics_match_sklearn_and_scipy(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=200)
    preds = np.where(rng.random(200) < 0.7, labels, 1 - labels)
    assert M.accuracy(preds, labels) == pytest.approx(skm.accuracy_score(labels, preds))
    assert M.f1_binary(preds, labels) == pytest.approx(skm.f1_score(labels, preds))
    assert M.matthews_corrcoef(preds, labels) == pytest.approx(skm.matthews_corrcoef(labels, preds))
    three = rng.integers(0, 3, size=150)
    guess = np.where(rng.random(150) < 0.5, three, rng.integers(0, 3, size=150))
    assert M.matthews_corrcoef(guess, three) == pytest.approx(skm.matthews_corrcoef(three, guess))
    # Scores with many ties (STS-B gold scores are multiples of 0.2 or so).
    x = np.round(rng.random(300) * 5, 1)
    y = x + rng.normal(0, 1.0, 300).round(1)
    assert M.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert M.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    assert np.allclose(M.rank_average(x), stats.rankdata(x))


def test_degenerate_glue_cases_match_sklearn():
    labels = [0, 1, 0, 1]
    all_zero = [0, 0, 0, 0]
    assert M.matthews_corrcoef(all_zero, labels) == skm.matthews_corrcoef(labels, all_zero) == 0
    assert M.f1_binary(all_zero, labels) == 0.0
    assert M.f1_binary([0, 0], [0, 0]) == 0.0


@pytest.mark.parametrize("pred,gold,em,f1", [
    ("The Eiffel Tower", "eiffel tower", 1.0, 1.0),  # case + article
    ("an  apple,", "apple", 1.0, 1.0),  # article, punctuation, spaces
    ("theater", "the ater", 0.0, 0.0),  # 'the' only removed as a whole word
    ("Denver Broncos", "the Denver Broncos team", 0.0, 0.8),
    ("1,000 dollars", "1000 dollars", 1.0, 1.0),  # the comma is punctuation
    ("A-B", "AB", 1.0, 1.0),
    ("Paris Paris", "Paris", 0.0, 2 * 0.5 * 1.0 / 1.5),
])
def test_squad_normalization_and_token_f1(pred, gold, em, f1):
    assert M.squad_exact(pred, gold) == em
    assert M.squad_f1(pred, gold) == pytest.approx(f1)


def test_squad_v1_takes_max_over_gold_answers():
    golds = {"q1": ["Denver Broncos", "the Broncos"], "q2": ["1990", "in 1990"], "q3": ["x y"]}
    preds = {"q1": "Broncos", "q2": "in 1990", "q3": "nothing"}
    out = M.squad_v1_scores(golds, preds)
    # q1: 'the Broncos' normalizes to 'broncos' (EM 1); q2 exact; q3 no overlap.
    assert out["exact_match"] == pytest.approx(100 * 2 / 3)
    assert out["f1"] == pytest.approx(100 * 2 / 3)
    assert out["total"] == 3
    # v1.1 scores an empty prediction 0 even against a gold that normalizes to empty.
    assert M.squad_f1("", "the", version=1) == 0.0
    assert M.squad_f1("", "the", version=2) == 1.0


def test_squad_v2_breakdown_and_threshold():
    golds = {"a": ["blue"], "b": ["red car"], "n1": [], "n2": []}
    preds = {"a": "blue", "b": "car", "n1": "green", "n2": ""}
    na = {"a": 0.1, "b": 0.5, "n1": 0.9, "n2": 0.2}
    out = M.squad_v2_scores(golds, preds, na, threshold=1.0)
    assert out["has_ans_total"] == 2 and out["no_ans_total"] == 2
    assert out["has_ans_exact_match"] == 50.0
    assert out["has_ans_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert out["no_ans_exact_match"] == 50.0  # 'green' for n1 is wrong, '' for n2 right
    # Sweep by na prob: a(+1) b(+2/3) n2(0) n1(-1): best after b, at threshold 0.5.
    assert out["best_f1_thresh"] == 0.5
    assert out["best_f1"] == pytest.approx(100 * (2 + 1 + 2 / 3) / 4)
    at_best = M.squad_v2_scores(golds, preds, na, threshold=out["best_f1_thresh"])
    assert at_best["f1"] == pytest.approx(out["best_f1"])


IOB2_GOLD = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "O", "B-ORG", "I-ORG", "I-ORG"]


def test_entity_spans_iob2_and_iob1_agree():
    assert M.entity_spans(IOB2_GOLD) == [("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 4),
                                         ("ORG", 6, 8)]
    # The same entities in IOB1: B- only where two same-type chunks touch.
    iob1 = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "O", "I-ORG", "I-ORG", "I-ORG"]
    assert M.entity_spans(iob1) == M.entity_spans(IOB2_GOLD)
    # conlleval: a type change inside a run starts a new chunk; a stray I- starts one too.
    assert M.entity_spans(["B-PER", "I-LOC", "O", "I-MISC"]) == [
        ("PER", 0, 0), ("LOC", 1, 1), ("MISC", 3, 3)]


def test_entity_scores_like_conlleval():
    pred = ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "B-ORG", "I-ORG", "O"]
    # gold 4 chunks; pred 3 chunks (PER 0-1 correct, LOC 3-4 wrong, ORG 6-7 wrong).
    out = M.entity_scores([IOB2_GOLD, ["O", "B-MISC"]], [pred, ["O", "B-MISC"]])
    assert out["precision"] == pytest.approx(2 / 4)
    assert out["recall"] == pytest.approx(2 / 5)
    assert out["f1"] == pytest.approx(2 * 0.5 * 0.4 / 0.9)
    assert out["f1_PER"] == 1.0 and out["f1_MISC"] == 1.0 and out["f1_ORG"] == 0.0
    assert out["accuracy"] == pytest.approx(9 / 11)
    assert M.entity_scores([["O"]], [["O"]])["f1"] == 0.0


def test_v2_threshold_with_negative_null_odds():
    """BERT's null odds go negative; "no answer everywhere" must get a threshold below all
    of them (the official script's 0.0 would answer everything)."""
    golds = {"a": [], "b": [], "c": ["x"]}
    preds = {"a": "y", "b": "y", "c": "z"}  # the one answerable question is wrong anyway
    na = {"a": -2.0, "b": -1.0, "c": -3.0}
    out = M.squad_v2_scores(golds, preds, na)
    assert out["best_f1"] == pytest.approx(100 * 2 / 3)
    assert out["best_f1_thresh"] < -3.0
    at_best = M.squad_v2_scores(golds, preds, na, threshold=out["best_f1_thresh"])
    assert at_best["f1"] == pytest.approx(out["best_f1"])
