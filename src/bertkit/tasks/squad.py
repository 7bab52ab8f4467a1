"""SQuAD v1.1 and v2.0 (Rajpurkar et al., 2016, 2018): span extraction with sliding windows.

Featurization follows google-research/bert's `run_squad.py`: the context is WordPiece-tokenized
once, cut into windows of `max_seq_length - len(question) - 3` tokens every `doc_stride` tokens,
and each window becomes `[CLS] question [SEP] window [SEP]`. Answers are mapped from character
offsets to token positions through the tokenizer's offsets into the original context (so the
answer text comes back from the original string, without run_squad's `get_final_text` heuristic).
An answer not wholly inside a window, or a v2.0 unanswerable question, points at [CLS] (0, 0).

Decoding takes the n best start and end logits of every window, keeps spans inside the context
with start <= end, length <= `max_answer_length` and a start token that has its maximal context
in this window, and picks the best. For v2.0 the null score is [CLS]'s start + end logit (the
minimum over windows) and `null_odds` = null score - best span score; a question is answered ""
when its odds exceed the threshold tau, which is tuned on dev to maximize F1.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import metrics as M
from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.tasks.base import (
    Feature,
    FeatureSettings,
    Task,
    pad_collate,
    record_text,
    require_file,
)
from bertkit.tokenization.windows import context_score, window_starts

NO_SPAN_ODDS = 1e6


@dataclass(frozen=True)
class SquadExample:
    qid: str
    question: str
    context: str
    answers: tuple[str, ...]
    answer_starts: tuple[int, ...]
    is_impossible: bool = False
    title: str = ""

    @property
    def guid(self) -> str:
        return self.qid


def read_squad(path: Path) -> list[SquadExample]:
    """Every question of a SQuAD JSON file; each answer is checked against its context."""
    require_file(path, "a SQuAD JSON file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise BertkitError(f"{path}: line {err.lineno}: invalid JSON ({err.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise BertkitError(f'{path}: expected a SQuAD object {{"data": [...], "version": ...}}')
    examples = []
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            if not isinstance(paragraph.get("context"), str):
                raise BertkitError(f"{path}: article {a} paragraph {p}: missing 'context'")
            for q, qa in enumerate(paragraph.get("qas", [])):
                examples.append(_read_question(qa, paragraph["context"], article, path,
                                               f"article {a} paragraph {p} question {q}"))
    return examples


def _read_question(qa: dict, context: str, article: dict, path: Path, position: str
                   ) -> SquadExample:
    for key in ("id", "question"):
        if key not in qa:
            raise BertkitError(f"{path}: {position}: a question without {key!r}")
    where = f"{path}: question id {qa['id']}"
    texts, starts = [], []
    for answer in qa.get("answers", []):
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not isinstance(start, int):
            raise BertkitError(f"{where}: an answer needs 'text' (string) and 'answer_start' (int)")
        if start < 0 or context[start:start + len(text)] != text:
            raise BertkitError(f"{where}: answer {text!r} at character {start} is not in its "
                               f"context ({len(context)} characters)")
        texts.append(text)
        starts.append(start)
    impossible = bool(qa.get("is_impossible", False))
    if not texts and not impossible and "is_impossible" not in qa:
        raise BertkitError(f"{where}: no answers (and not marked is_impossible)")
    return SquadExample(str(qa["id"]), qa["question"], context, tuple(texts), tuple(starts),
                        impossible, str(article.get("title", "")))


def char_span_to_tokens(offsets: Sequence[tuple[int, int]], start: int, end: int
                        ) -> tuple[int, int] | None:
    """First and last token overlapping characters [start, end), or None if none does."""
    first = next((i for i, (s, e) in enumerate(offsets) if e > start), None)
    last = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < end), None)
    if first is None or last is None or last < first:
        return None
    return first, last


@functools.lru_cache(maxsize=4096)
def max_context_flags(n_tokens: int, window: int, stride: int, w: int) -> tuple[bool, ...]:
    """For window w: does each of its tokens have its maximal context here? (run_squad's
    `_check_is_max_context`: score = min(left, right context) + 0.01 * window length)."""
    starts = window_starts(n_tokens, window, stride)
    if len(starts) == 1:
        return (True,) * min(window, n_tokens)
    flags = []
    for pos in range(starts[w], min(starts[w] + window, n_tokens)):
        best, best_w = -1.0, -1
        for j, s in enumerate(starts):
            length = min(window, n_tokens - s)
            if s <= pos < s + length:
                score = context_score(pos - s, length)
                if score > best:
                    best, best_w = score, j
        flags.append(best_w == w)
    return tuple(flags)


THRESHOLD_KEY = "squad_null_threshold"  # config.json key of a fine-tuned v2.0 model


class SquadTask(Task):
    """SQuAD v1.1 / v2.0. For v2.0, `null_threshold` (tau) is a value of the task: None while
    fine-tuning (then `score` tunes it on dev and reports it as the metric `null_threshold`,
    which the release saves), the saved value when a fine-tuned model is evaluated or used."""

    head = "BertForQuestionAnswering"
    output_keys = ("start_logits", "end_logits")
    native_suffixes = (".json",)

    def __init__(self, version: int, null_threshold: float | None = None):
        self.version = version
        self.name = f"squad{version}"
        self.main_metric = "f1"
        self.labels = None
        self.max_seq_length = 384
        self.null_threshold = null_threshold

    def find_file(self, data_dir: Path, split: str) -> Path:
        names = {1: ["-v1.1.json"], 2: ["-v2.0.json", "-v2.0.reconstructed.json"]}[self.version]
        for suffix in names:
            if (data_dir / f"{split}{suffix}").is_file():
                return data_dir / f"{split}{suffix}"
        return data_dir / f"{split}{names[0]}"

    def read(self, path: Path) -> list[SquadExample]:
        return read_squad(path)

    def featurize(self, examples: Sequence[SquadExample], tokenizer: Any,
                  settings: FeatureSettings, label2id, train: bool) -> list[Feature]:
        contexts = list(dict.fromkeys(e.context for e in examples))
        encoded = tokenizer.encode_batch(contexts, add_special_tokens=False, truncation=False)
        by_context = {c: (enc.input_ids, enc.offsets) for c, enc in zip(contexts, encoded)}
        questions = tokenizer.encode_batch([e.question for e in examples],
                                           add_special_tokens=False, truncation=False)
        features: list[Feature] = []
        for i, (example, q) in enumerate(zip(examples, questions)):
            ids, offsets = by_context[example.context]
            q_ids = q.input_ids[: settings.max_query_length]
            features += self._windows(i, example, q_ids, ids, offsets, tokenizer, settings, train)
        return features

    def _windows(self, index, example, q_ids, ids, offsets, tokenizer, settings, train):
        window = settings.max_seq_length - len(q_ids) - 3
        if window <= 0:
            raise BertkitError(f"max_seq_length {settings.max_seq_length} leaves no room for the "
                               f"context after a {len(q_ids)}-token question")
        starts = window_starts(len(ids), window, settings.doc_stride)
        answer = self._answer_tokens(example, offsets) if train else None
        prefix = [tokenizer.cls_token_id, *q_ids, tokenizer.sep_token_id]
        features = []
        for w, start in enumerate(starts):
            piece = ids[start:start + window]
            feature: Feature = {
                "input_ids": [*prefix, *piece, tokenizer.sep_token_id],
                "token_type_ids": [0] * len(prefix) + [1] * (len(piece) + 1),
                "example_index": index,
                "context_start": len(prefix),  # model position of window token 0
                "doc_start": start,  # its position in the whole context
                "max_context": max_context_flags(len(ids), window, settings.doc_stride, w),
                "offsets": offsets,  # of the whole context, shared by its windows
            }
            feature["attention_mask"] = [1] * len(feature["input_ids"])
            if train:
                feature["start_positions"], feature["end_positions"] = self._positions(
                    answer, start, len(piece), len(prefix))
            features.append(feature)
        return features

    @staticmethod
    def _answer_tokens(example: SquadExample, offsets) -> tuple[int, int] | None:
        if example.is_impossible or not example.answers:
            return None
        start = example.answer_starts[0]
        return char_span_to_tokens(offsets, start, start + len(example.answers[0]))

    @staticmethod
    def _positions(answer, doc_start: int, length: int, shift: int) -> tuple[int, int]:
        # Unanswerable, or the answer not wholly in this window: point at [CLS] (run_squad.py).
        if answer is None or answer[0] < doc_start or answer[1] >= doc_start + length:
            return 0, 0
        return answer[0] - doc_start + shift, answer[1] - doc_start + shift

    def collate(self, features: Sequence[Feature]) -> dict[str, torch.Tensor]:
        pads = {"input_ids": 0, "token_type_ids": 0, "attention_mask": 0}
        return pad_collate(features, pads, scalars=("start_positions", "end_positions"))

    def decode(self, examples, features, outputs, id2label, settings) -> dict[str, Any]:
        """qid -> {"text": best non-null span, "null_odds": null score - best span score}."""
        per_example: dict[int, list[int]] = {}
        for f_index, feature in enumerate(features):
            per_example.setdefault(feature["example_index"], []).append(f_index)
        predictions = {}
        for e_index, f_indices in per_example.items():
            example = examples[e_index]
            predictions[example.qid] = best_span(
                example.context, features[f_indices[0]]["offsets"], [features[i] for i in f_indices],
                [outputs["start_logits"][i].numpy() for i in f_indices],
                [outputs["end_logits"][i].numpy() for i in f_indices], settings)
        return predictions

    def score(self, examples, predictions) -> dict[str, float]:
        golds = {e.qid: list(e.answers) for e in examples}
        if self.version == 1:
            texts = {q: p["text"] for q, p in predictions.items()}
            out = M.squad_v1_scores(golds, texts)
            out.pop("total")
            return out
        texts = {q: p["text"] for q, p in predictions.items()}
        odds = {q: p["null_odds"] for q, p in predictions.items()}
        tuned = M.squad_v2_scores(golds, texts, odds)
        # The saved tau when there is one: re-tuning on the scored file would report best-case
        # numbers. The tuned ("oracle") figures are reported beside it, under best_*.
        threshold = tuned["best_f1_thresh"] if self.null_threshold is None else self.null_threshold
        out = M.squad_v2_scores(golds, texts, odds, threshold=threshold)
        out["null_threshold"] = threshold
        out["null_threshold_tuned_here"] = self.null_threshold is None
        out["best_f1"], out["best_exact_match"] = tuned["best_f1"], tuned["best_exact_match"]
        out["best_f1_thresh"] = tuned["best_f1_thresh"]
        return {k: v for k, v in out.items() if not k.endswith("total")}

    def threshold(self, metrics: dict[str, Any]) -> float:
        """tau: the task's own, else the one `score` tuned (in `metrics`), else 0."""
        if self.null_threshold is not None:
            return self.null_threshold
        return float(metrics.get("null_threshold", 0.0))

    def final_predictions(self, predictions: dict[str, Any], metrics: dict[str, Any]
                          ) -> dict[str, Any]:
        """Each prediction with its reported answer `text`: "" where v2.0's null odds exceed
        tau; the best span stays under `span`."""
        if self.version == 1:
            return predictions
        tau = self.threshold(metrics)
        return {q: {**p, "span": p["text"], "text": "" if p["null_odds"] > tau else p["text"]}
                for q, p in predictions.items()}

    def release_info(self, metrics: dict[str, Any]) -> dict[str, Any]:
        return {THRESHOLD_KEY: self.threshold(metrics)} if self.version == 2 else {}

    def with_release_info(self, info: dict[str, Any]) -> SquadTask:
        if self.version == 2 and THRESHOLD_KEY in info:
            return SquadTask(self.version, float(info[THRESHOLD_KEY]))
        return self

    def untuned(self) -> SquadTask:
        return SquadTask(self.version)

    def example_from_record(self, guid: str, record: dict[str, Any], where: str) -> SquadExample:
        return SquadExample(guid, record_text(record, ["question"], where),
                            record_text(record, ["context"], where), (), ())

    def output_record(self, example: SquadExample, prediction: dict[str, Any]) -> dict[str, Any]:
        return {"id": example.qid, "question": example.question, "answer": prediction["text"],
                "null_odds": prediction["null_odds"]}

    def collapse_reason(self, examples, predictions) -> str | None:
        if len(predictions) > 1 and all(not p["text"] for p in predictions.values()):
            return "every answer is empty"
        return None

    def write_predictions(self, predictions, examples, out_dir: Path, split: str,
                          metrics: dict[str, Any]) -> list[Path]:
        """predictions.json ({qid: answer}) and, for v2.0, null_odds.json: the official
        evaluation scripts read both as they are."""
        name = "predictions.json" if split == "dev" else f"predictions_{split}.json"
        paths = [out_dir / name]
        final = {q: p["text"] for q, p in self.final_predictions(predictions, metrics).items()}
        atomic_write_text(paths[0], json.dumps(final, indent=1) + "\n")
        if self.version == 2:
            odds = {q: p["null_odds"] for q, p in predictions.items()}
            paths.append(out_dir / name.replace("predictions", "null_odds"))
            atomic_write_text(paths[1], json.dumps(odds, indent=1) + "\n")
        return paths


def best_span(context: str, offsets, features, starts, ends, settings: FeatureSettings
              ) -> dict[str, Any]:
    """The best valid span over all windows of one question, and its null odds."""
    best_score, best_text = -np.inf, ""
    null_score = np.inf
    for feature, start_logits, end_logits in zip(features, starts, ends):
        null_score = min(null_score, float(start_logits[0] + end_logits[0]))
        c0, n_ctx = feature["context_start"], len(feature["max_context"])
        top_s = np.argsort(start_logits)[::-1][: settings.n_best_size]
        top_e = np.argsort(end_logits)[::-1][: settings.n_best_size]
        for s in top_s:
            if not (c0 <= s < c0 + n_ctx) or not feature["max_context"][s - c0]:
                continue
            for e in top_e:
                if e < s or e >= c0 + n_ctx or e - s + 1 > settings.max_answer_length:
                    continue
                score = float(start_logits[s] + end_logits[e])
                if score > best_score:
                    doc_s, doc_e = feature["doc_start"] + s - c0, feature["doc_start"] + e - c0
                    best_score = score
                    best_text = context[offsets[doc_s][0]:offsets[doc_e][1]]
    # No valid span at all (e.g. a window of only the question): as good as a certain "no answer".
    odds = null_score - best_score if np.isfinite(best_score) else NO_SPAN_ODDS
    return {"text": best_text, "null_odds": float(odds)}
