"""Task metrics, each written to agree with its reference implementation.

- GLUE: accuracy, binary F1, Matthews correlation (scikit-learn's definitions), Pearson and
  Spearman correlations (scipy's; Spearman with average ranks for ties).
- SQuAD: exact match and F1 with the answer normalization of the official `evaluate-v1.1.py` /
  `evaluate-v2.0.py` scripts, the HasAns / NoAns breakdown and the no-answer threshold search of
  v2.0 (`find_best_thresh`).
- NER: entity-level precision / recall / F1 as `conlleval` computes them, for IOB1 and IOB2 tags.

Numbers come back as fractions in [0, 1] for GLUE and NER, and as percentages for SQuAD, as the
official scripts print them.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence

import numpy as np

# --- GLUE ---------------------------------------------------------------------------------------


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1) over seeds; the std of one value is 0. The
    one definition every seed summary uses (grids, ablations, the demo)."""
    if not len(values):
        raise ValueError("mean_std of no values")
    mean = float(np.mean(values))
    return mean, float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def accuracy(preds: Sequence, labels: Sequence) -> float:
    preds, labels = np.asarray(preds), np.asarray(labels)
    return float((preds == labels).mean()) if len(labels) else 0.0


def f1_binary(preds: Sequence, labels: Sequence, positive: int = 1) -> float:
    """F1 of the positive class (scikit-learn's `f1_score` default; 0 when undefined)."""
    preds, labels = np.asarray(preds) == positive, np.asarray(labels) == positive
    tp = float(np.sum(preds & labels))
    denom = float(np.sum(preds) + np.sum(labels))
    return 2.0 * tp / denom if denom else 0.0


def matthews_corrcoef(preds: Sequence, labels: Sequence) -> float:
    """Multi-class MCC from the confusion matrix (scikit-learn's formula); 0 when undefined."""
    classes, inverse = np.unique(np.concatenate([labels, preds]), return_inverse=True)
    n = len(labels)
    y_true, y_pred = inverse[:n], inverse[n:]
    k = len(classes)
    cm = np.zeros((k, k), dtype=np.float64)
    np.add.at(cm, (y_true, y_pred), 1)
    t_sum, p_sum = cm.sum(axis=1), cm.sum(axis=0)
    correct, total = np.trace(cm), cm.sum()
    cov_ytyp = correct * total - np.dot(t_sum, p_sum)
    cov_ypyp = total**2 - np.dot(p_sum, p_sum)
    cov_ytyt = total**2 - np.dot(t_sum, t_sum)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(cov_ytyt * cov_ypyp))


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    xm, ym = x - x.mean(), y - y.mean()
    denom = np.sqrt(np.dot(xm, xm) * np.dot(ym, ym))
    return float(np.dot(xm, ym) / denom) if denom else 0.0


def rank_average(x: Sequence[float]) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (scipy.stats.rankdata 'average')."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    # Each run of equal values shares the mean of the ranks it spans.
    starts = np.r_[True, sorted_x[1:] != sorted_x[:-1]]
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    last = np.r_[first[1:], len(x)] - 1
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = (first[group] + last[group]) / 2.0 + 1.0
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    return pearson(rank_average(x), rank_average(y))


# --- SQuAD (the official evaluation scripts) ----------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (official order)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def squad_exact(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def squad_f1(prediction: str, gold: str, version: int = 2) -> float:
    """Token-overlap F1. v2.0's script scores two empty answers 1 (no-answer agreement);
    v1.1's scores any empty side 0."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if version == 2 and (not pred_tokens or not gold_tokens):
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_v1_scores(golds: Mapping[str, list[str]], preds: Mapping[str, str]) -> dict[str, float]:
    """evaluate-v1.1.py: max over the gold answers, averaged over questions, in percent.
    A question without a prediction scores 0 (the script warns and counts it)."""
    em = f1 = 0.0
    for qid, answers in golds.items():
        if qid not in preds:
            continue
        em += max(squad_exact(preds[qid], a) for a in answers)
        f1 += max(squad_f1(preds[qid], a, version=1) for a in answers)
    n = max(len(golds), 1)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n, "total": float(len(golds))}


def _raw_v2_scores(golds, preds):
    exact, f1 = {}, {}
    for qid, answers in golds.items():
        # An unanswerable question's only correct answer is the empty string.
        answers = [a for a in answers if normalize_answer(a)] or [""]
        pred = preds.get(qid, "")
        exact[qid] = max(squad_exact(pred, a) for a in answers)
        f1[qid] = max(squad_f1(pred, a) for a in answers)
    return exact, f1


def _apply_threshold(scores, na_probs, has_ans, thresh):
    return {
        qid: (float(not has_ans[qid]) if na_probs[qid] > thresh else s)
        for qid, s in scores.items()
    }


def find_best_threshold(preds, scores, na_probs, has_ans) -> tuple[float, float]:
    """evaluate-v2.0.py's `find_best_thresh`: sweep the questions by no-answer score; returns
    (best score in percent, the threshold reaching it).

    The sweep starts from "no answer everywhere", which the official script labels threshold
    0.0: right for its probabilities in [0, 1], wrong for BERT's null odds, which go negative.
    Here that starting point gets a threshold below every score instead (identical otherwise)."""
    cur = best = float(sum(1 for k in has_ans if not has_ans[k]))
    lowest = min(na_probs.values(), default=0.0)
    best_thresh = 0.0 if lowest >= 0 else lowest - 1.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            cur += scores[qid]
        else:
            cur += -1 if preds.get(qid) else 0
        if cur > best:
            best, best_thresh = cur, na_probs[qid]
    return 100.0 * best / max(len(scores), 1), float(best_thresh)


def squad_v2_scores(golds: Mapping[str, list[str]], preds: Mapping[str, str],
                    na_probs: Mapping[str, float] | None = None,
                    threshold: float = 1.0) -> dict[str, float]:
    """evaluate-v2.0.py: overall, HasAns_* and NoAns_* EM/F1 (percent); with `na_probs` also
    the best threshold for EM and F1 (`best_f1_thresh` is the tuned tau)."""
    has_ans = {qid: bool(answers) for qid, answers in golds.items()}
    na = dict(na_probs) if na_probs is not None else {k: 0.0 for k in golds}
    exact_raw, f1_raw = _raw_v2_scores(golds, preds)
    exact = _apply_threshold(exact_raw, na, has_ans, threshold)
    f1 = _apply_threshold(f1_raw, na, has_ans, threshold)
    out: dict[str, float] = {}
    for prefix, keep in (("", None), ("has_ans_", True), ("no_ans_", False)):
        ids = [q for q in golds if keep is None or has_ans[q] == keep]
        if keep is not None and not ids:
            continue
        out[prefix + "exact_match"] = 100.0 * sum(exact[q] for q in ids) / max(len(ids), 1)
        out[prefix + "f1"] = 100.0 * sum(f1[q] for q in ids) / max(len(ids), 1)
        out[prefix + "total"] = float(len(ids))
    if na_probs is not None:
        out["best_exact_match"], out["best_exact_match_thresh"] = find_best_threshold(
            preds, exact_raw, na, has_ans)
        out["best_f1"], out["best_f1_thresh"] = find_best_threshold(preds, f1_raw, na, has_ans)
    return out


# --- NER (conlleval) ----------------------------------------------------------------------------


def _split_tag(tag: str) -> tuple[str, str]:
    if tag in ("O", "."):
        return tag, ""
    prefix, _, kind = tag.partition("-")
    return (prefix, kind) if kind else ("I", prefix)


def _chunk_ends(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's endOfChunk (IOB1, IOB2 and IOBES)."""
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _chunk_starts(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's startOfChunk: a B always starts one; an I starts one after O or another type
    (that is what makes IOB1, where B only separates two adjacent same-type chunks, work)."""
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def entity_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first, last) of every chunk in one sentence's tags, as conlleval reads them."""
    spans = []
    start, prev_tag, prev_type = None, "O", ""
    for i, full in enumerate([*tags, "O"]):
        tag, type_ = _split_tag(full)
        if start is not None and _chunk_ends(prev_tag, tag, prev_type, type_):
            spans.append((prev_type, start, i - 1))
            start = None
        if _chunk_starts(prev_tag, tag, prev_type, type_):
            start = i
        prev_tag, prev_type = tag, type_
    return spans


def entity_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]
                  ) -> dict[str, float]:
    """Entity-level precision / recall / F1 over sentences (conlleval's overall line, as
    fractions), plus `accuracy` over tokens and per-type `f1_<TYPE>`."""
    correct: collections.Counter = collections.Counter()
    found_gold: collections.Counter = collections.Counter()
    found_pred: collections.Counter = collections.Counter()
    tokens = token_ok = 0
    for g_tags, p_tags in zip(gold, pred, strict=True):
        g_spans, p_spans = set(entity_spans(g_tags)), set(entity_spans(p_tags))
        for spans, counter in ((g_spans, found_gold), (p_spans, found_pred),
                               (g_spans & p_spans, correct)):
            counter.update(kind for kind, _, _ in spans)
        tokens += len(g_tags)
        token_ok += sum(g == p for g, p in zip(g_tags, p_tags))
    out = _prf(sum(correct.values()), sum(found_pred.values()), sum(found_gold.values()))
    out["accuracy"] = token_ok / tokens if tokens else 0.0
    for kind in sorted(set(found_gold) | set(found_pred)):
        out[f"f1_{kind}"] = _prf(correct[kind], found_pred[kind], found_gold[kind])["f1"]
    return out


def _prf(correct: int, guessed: int, gold: int) -> dict[str, float]:
    precision = correct / guessed if guessed else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}
