"""SWAG (Zellers et al., 2018): pick the most plausible of four endings.

As in the paper (section 4.4), each choice is the pair `[CLS] sent1 [SEP] sent2 ending [SEP]`;
the multiple-choice head scores each from its [CLS] vector and a softmax runs over the four.
Files are real CSV (quoted fields) in `val.csv`'s layout: `sent1`, `sent2`, `ending0..3`, `label`.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit import metrics as M
from bertkit.errors import BertkitError
from bertkit.tasks.base import Feature, FeatureSettings, Task, record_text, require_file

N_CHOICES = 4


@dataclass(frozen=True)
class ChoiceExample:
    guid: str
    context: str
    start: str
    endings: tuple[str, ...]
    label: int | None
    where: str = ""


def read_swag(path: Path) -> list[ChoiceExample]:
    require_file(path, "a SWAG CSV file")
    needed = ["sent1", "sent2", *(f"ending{k}" for k in range(N_CHOICES))]
    examples = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in needed if c not in (reader.fieldnames or [])]
        if missing:
            raise BertkitError(f"{path}:1: missing column(s) {', '.join(missing)}")
        for row in reader:
            examples.append(_example(path, reader.line_num, row))
    return examples


def _example(path: Path, line: int, row: dict[str, str]) -> ChoiceExample:
    where = f"{path}:{line}"
    if any(v is None for v in row.values()):
        raise BertkitError(f"{where}: fewer columns than the header")
    label = row.get("label")
    if label not in (None, ""):
        if label not in {str(k) for k in range(N_CHOICES)}:
            raise BertkitError(f"{where}: label {label!r} is not an ending index 0-3")
    guid = row.get("") or row.get("video-id") or str(line)
    return ChoiceExample(guid=f"{guid}", context=row["sent1"], start=row["sent2"],
                         endings=tuple(row[f"ending{k}"] for k in range(N_CHOICES)),
                         label=int(label) if label not in (None, "") else None, where=where)


class SwagTask(Task):
    name = "swag"
    head = "BertForMultipleChoice"
    native_suffixes = (".csv",)
    main_metric = "accuracy"
    labels = None

    def find_file(self, data_dir: Path, split: str) -> Path:
        name = {"dev": "val"}.get(split, split)
        for candidate in (f"{name}.csv", f"{split}.csv"):
            if (data_dir / candidate).is_file():
                return data_dir / candidate
        return data_dir / f"{name}.csv"

    def read(self, path: Path) -> list[ChoiceExample]:
        return read_swag(path)

    def featurize(self, examples: Sequence[ChoiceExample], tokenizer: Any,
                  settings: FeatureSettings, label2id, train: bool) -> list[Feature]:
        firsts = [e.context for e in examples for _ in range(N_CHOICES)]
        seconds = [f"{e.start} {ending}" for e in examples for ending in e.endings]
        encodings = tokenizer.encode_batch(firsts, seconds, max_length=settings.max_seq_length)
        features = []
        for i, example in enumerate(examples):
            choices = encodings[i * N_CHOICES:(i + 1) * N_CHOICES]
            feature: Feature = {
                "input_ids": [c.input_ids for c in choices],
                "token_type_ids": [c.token_type_ids for c in choices],
                "attention_mask": [c.attention_mask for c in choices],
                "example_index": i,
            }
            if example.label is not None:
                feature["labels"] = example.label
            elif train:
                raise BertkitError(f"{example.where}: training example has no label")
            features.append(feature)
        return features

    def collate(self, features: Sequence[Feature]) -> dict[str, torch.Tensor]:
        width = max(len(row) for f in features for row in f["input_ids"])
        batch = {}
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            out = torch.zeros((len(features), N_CHOICES, width), dtype=torch.long)  # (B, K, T)
            for i, f in enumerate(features):
                for k, row in enumerate(f[key]):
                    out[i, k, : len(row)] = torch.as_tensor(row, dtype=torch.long)
            batch[key] = out
        if "labels" in features[0]:
            batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.long)
        return batch

    def decode(self, examples, features, outputs, id2label, settings) -> dict[str, Any]:
        return {examples[f["example_index"]].guid: int(torch.argmax(logits))
                for f, logits in zip(features, outputs["logits"])}

    def prediction_scores(self, examples, features, outputs, id2label) -> dict[str, dict[str, Any]]:
        """The probability of every ending (softmax over the four choices)."""
        return {examples[f["example_index"]].guid:
                {"probabilities": [round(float(p), 6) for p in row.softmax(-1)]}
                for f, row in zip(features, outputs["logits"])}

    def example_from_record(self, guid: str, record: dict[str, Any], where: str) -> ChoiceExample:
        endings = record.get("endings") or [record.get(f"ending{k}") for k in range(N_CHOICES)]
        if (not isinstance(endings, list) or len(endings) != N_CHOICES
                or not all(isinstance(e, str) for e in endings)):
            raise BertkitError(f"{where}: expected 'endings' with {N_CHOICES} strings "
                               f"(or 'ending0'..'ending{N_CHOICES - 1}')")
        start = record.get("start", record.get("sent2", ""))
        return ChoiceExample(guid, record_text(record, ["context", "sent1"], where), str(start),
                             tuple(endings), None, where)

    def output_record(self, example: ChoiceExample, prediction: int) -> dict[str, Any]:
        return {"id": example.guid, "choice": prediction, "ending": example.endings[prediction]}

    def collapse_reason(self, examples, predictions) -> str | None:
        values = set(predictions.values())
        if len(predictions) > 1 and len(values) == 1:
            return f"every prediction is ending {values.pop()}"
        return None

    def score(self, examples, predictions) -> dict[str, float]:
        labeled = [e for e in examples if e.label is not None]
        if not labeled:
            return {}
        return {"accuracy": M.accuracy([predictions[e.guid] for e in labeled],
                                       [e.label for e in labeled])}
