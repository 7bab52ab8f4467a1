"""GLUE (Wang et al., 2018): the nine sentence and sentence-pair tasks in their official TSV layout.

Files are read with quoting off (MRPC, QNLI, RTE, STS-B contain unbalanced `"`), as UTF-8 with an
optional BOM (MRPC's train/dev start with one), and a header row only where the file has one
(CoLA's train/dev have none). Test-set predictions are written the way the GLUE server takes
them: `<Task>.tsv` with `index<TAB>prediction`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import metrics as M
from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text, read_text_lines
from bertkit.tasks.base import (
    Feature,
    FeatureSettings,
    Task,
    check_label,
    pad_collate,
    record_text,
    require_file,
)


@dataclass(frozen=True)
class TextExample:
    """One sentence (pair) with its label: a label string, a float score (regression) or None
    (unlabeled test data). `where` is `file:line`, for error messages."""

    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None
    where: str = ""


class ClassificationTask(Task):
    """Sequence classification or regression on [CLS] (GLUE, the user's own data)."""

    head = "BertForSequenceClassification"
    native_suffixes = (".tsv", ".csv")
    text_fields: tuple[str, ...] = ("text", "sentence")
    pair_fields: tuple[str, ...] = ("pair", "text_b")

    def featurize(self, examples: Sequence[TextExample], tokenizer: Any, settings: FeatureSettings,
                  label2id: dict[str, int] | None, train: bool) -> list[Feature]:
        has_pairs = bool(examples) and examples[0].text_b is not None
        for example in examples:
            require_text(example, has_pairs)
        pairs = [e.text_b or "" for e in examples] if has_pairs else None
        encodings = tokenizer.encode_batch([e.text_a for e in examples], pairs,
                                           max_length=settings.max_seq_length)
        features = []
        for i, (example, enc) in enumerate(zip(examples, encodings)):
            feature: Feature = {"input_ids": enc.input_ids, "token_type_ids": enc.token_type_ids,
                                "attention_mask": enc.attention_mask, "example_index": i}
            if example.label is not None:
                feature["labels"] = self._label_value(example, label2id)
            elif train:
                raise BertkitError(f"{example.where}: training example has no label")
            features.append(feature)
        return features

    def _label_value(self, example: TextExample, label2id: dict[str, int] | None) -> int | float:
        if self.regression:
            return float(example.label)  # type: ignore[arg-type]
        assert label2id is not None, "a classification task needs its label2id"
        return check_label(str(example.label), label2id, example.where)

    def collate(self, features: Sequence[Feature]) -> dict[str, torch.Tensor]:
        pads = {"input_ids": 0, "token_type_ids": 0, "attention_mask": 0}
        return pad_collate(features, pads, scalars=("labels",))

    def decode(self, examples, features, outputs, id2label, settings) -> dict[str, Any]:
        predictions: dict[str, Any] = {}
        for feature, logits in zip(features, outputs["logits"]):
            example = examples[feature["example_index"]]
            if self.regression:
                predictions[example.guid] = float(logits[0])
            else:
                predictions[example.guid] = id2label[int(torch.argmax(logits))]
        return predictions

    def prediction_scores(self, examples, features, outputs, id2label) -> dict[str, dict[str, Any]]:
        """Classification: the probability of every label (softmax of the logits)."""
        if self.regression or id2label is None:
            return {}
        return {examples[f["example_index"]].guid:
                {"scores": {id2label[i]: round(float(p), 6) for i, p in enumerate(row.softmax(-1))}}
                for f, row in zip(features, outputs["logits"])}

    def gold_and_predicted(self, examples: Sequence[TextExample], predictions: dict[str, Any]
                           ) -> tuple[list, list]:
        pairs = [(e.label, predictions[e.guid]) for e in examples if e.label is not None]
        return [g for g, _ in pairs], [p for _, p in pairs]

    def example_from_record(self, guid: str, record: dict[str, Any], where: str) -> TextExample:
        pair = next((record[n] for n in self.pair_fields if n in record), None)
        if pair is not None:
            pair = record_text(record, [n for n in self.pair_fields if n in record], where)
        takes_pairs = getattr(self, "takes_pairs", None)  # (a GLUE task's; custom data: either)
        if takes_pairs and pair is None:
            raise BertkitError(f"{where}: {self.name} reads a pair of texts; give the second "
                               "(\"pair\"; on the command line --pair)")
        if takes_pairs is False and pair is not None:
            raise BertkitError(f"{where}: {self.name} reads one text; drop the pair (the model "
                               "never saw one, and it would change the answer)")
        return TextExample(guid, record_text(record, self.text_fields, where), pair, None, where)

    def output_record(self, example: TextExample, prediction: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"id": example.guid, "text": example.text_a}
        if example.text_b is not None:
            out["pair"] = example.text_b
        return {**out, ("score" if self.regression else "label"): prediction}

    def collapse_reason(self, examples: Sequence[TextExample], predictions: dict[str, Any]
                        ) -> str | None:
        values = [predictions[e.guid] for e in examples if e.guid in predictions]
        if len(values) < 2:
            return None
        if not self.regression:
            classes = set(map(str, values))
            return f"every prediction is {classes.pop()!r}" if len(classes) == 1 else None
        gold = [float(e.label) for e in examples if e.label is not None]
        spread, gold_spread = float(np.std(values)), float(np.std(gold)) if len(gold) > 1 else 0.0
        if gold_spread > 0 and spread < 0.1 * gold_spread:
            return (f"the predicted scores barely vary (std {spread:.3g}, under 10% of the "
                    f"labels' std {gold_spread:.3g})")
        return None

    def discover_labels(self, examples: Sequence[TextExample]) -> list[str] | None:
        if self.regression:
            return None
        if self.labels is not None:
            return self.labels
        return sorted({str(e.label) for e in examples if e.label is not None}, key=_label_order)


def require_text(example: TextExample, has_pairs: bool) -> None:
    """An empty sentence is a broken row, not data: training or scoring on it would be silently
    wrong, so it is an error naming the file and line."""
    texts = [("text", example.text_a)] + ([("pair", example.text_b)] if has_pairs else [])
    for name, text in texts:
        if text is None or not str(text).strip():
            raise BertkitError(f"{example.where or example.guid}: empty {name}; every example needs "
                               "non-empty text (fix or remove the row)")


def _label_order(label: str) -> tuple[int, float | str]:
    """Numeric labels in numeric order ("2" before "10"), then the rest alphabetically."""
    try:
        return (0, float(label))
    except ValueError:
        return (1, label)


# --- reading the GLUE TSV files -----------------------------------------------------------------


def read_tsv(path: Path) -> list[tuple[int, list[str]]]:
    """(1-based line number, fields) of every non-empty line; quoting off, BOM dropped."""
    require_file(path, "a tab-separated GLUE file")
    # (bytes that are not UTF-8: an error naming the file and line)
    return [(number, line.split("\t")) for number, line in read_text_lines(path) if line.strip()]


def column_indices(header: list[str], names: Sequence[str | None], path: Path
                   ) -> list[int | None]:
    found: list[int | None] = []
    for name in names:
        if name is not None and name not in header:
            raise BertkitError(f"{path}:1: missing column {name!r}; the header has "
                               f"{', '.join(header)}")
        found.append(None if name is None else header.index(name))
    return found


@dataclass(frozen=True)
class GlueSpec:
    folder: str
    main_metric: str
    labels: list[str] | None  # None: regression (STS-B)
    text_a: str
    text_b: str | None
    label: str
    no_header: tuple[str, ...] = ()  # column names of files without a header row (CoLA)
    names: tuple[str, ...] | None = None  # what numeric labels mean, for people (0 -> negative)
    dev_splits: tuple[tuple[str, str], ...] = (("dev", ""),)  # split, metric-name suffix


GLUE_TASKS: dict[str, GlueSpec] = {
    "cola": GlueSpec("CoLA", "mcc", ["0", "1"], "sentence", None, "label",
                     no_header=("source", "label", "mark", "sentence"),
                     names=("unacceptable", "acceptable")),
    "sst2": GlueSpec("SST-2", "accuracy", ["0", "1"], "sentence", None, "label",
                     names=("negative", "positive")),
    "mrpc": GlueSpec("MRPC", "f1", ["0", "1"], "#1 String", "#2 String", "Quality",
                     names=("not_equivalent", "equivalent")),
    "stsb": GlueSpec("STS-B", "spearman", None, "sentence1", "sentence2", "score"),
    "qqp": GlueSpec("QQP", "f1", ["0", "1"], "question1", "question2", "is_duplicate",
                    names=("not_duplicate", "duplicate")),
    "mnli": GlueSpec("MNLI", "accuracy", ["contradiction", "entailment", "neutral"],
                     "sentence1", "sentence2", "gold_label",
                     dev_splits=(("dev_matched", ""), ("dev_mismatched", "_mismatched"))),
    "qnli": GlueSpec("QNLI", "accuracy", ["entailment", "not_entailment"], "question", "sentence",
                     "label"),
    "rte": GlueSpec("RTE", "accuracy", ["entailment", "not_entailment"], "sentence1", "sentence2",
                    "label"),
    "wnli": GlueSpec("WNLI", "accuracy", ["0", "1"], "sentence1", "sentence2", "label",
                     names=("not_entailment", "entailment")),
}


def _metric_fn(name: str) -> Callable[[list, list], dict[str, float]]:
    def score(gold: list, pred: list) -> dict[str, float]:
        if name == "spearman":  # STS-B: the paper reports Spearman; Pearson beside it
            g, p = [float(x) for x in gold], [float(x) for x in pred]
            return {"pearson": M.pearson(p, g), "spearman": M.spearman(p, g)}
        out = {"accuracy": M.accuracy(pred, gold)}
        if name == "mcc":
            out["mcc"] = M.matthews_corrcoef(pred, gold)
        if name == "f1":
            out["f1"] = M.f1_binary([int(x) for x in pred], [int(x) for x in gold])
        return out
    return score


class GlueTask(ClassificationTask):
    def __init__(self, name: str):
        self.name = name
        self.spec = GLUE_TASKS[name]
        self.main_metric = self.spec.main_metric
        self.labels = self.spec.labels
        self.regression = self.spec.labels is None
        self.takes_pairs = self.spec.text_b is not None
        self.label_names = (dict(zip(self.spec.labels, self.spec.names))
                            if self.spec.names and self.spec.labels else None)
        self._score = _metric_fn(self.spec.main_metric)

    def find_file(self, data_dir: Path, split: str) -> Path:
        # Accept the task folder itself or the GLUE root holding it.
        folder = data_dir / self.spec.folder if (data_dir / self.spec.folder).is_dir() else data_dir
        return folder / f"{split}.tsv"

    def eval_splits(self) -> dict[str, str]:
        return dict(self.spec.dev_splits)

    def read(self, path: Path) -> list[TextExample]:
        rows = read_tsv(path)
        if not rows:
            return []
        spec = self.spec
        has_header = spec.text_a in rows[0][1]
        header = rows[0][1] if has_header else list(spec.no_header)
        if not header:
            raise BertkitError(f"{path}:1: expected a header row with column {spec.text_a!r}")
        label_name = spec.label if spec.label in header else None  # test files have no label
        cols = column_indices(header, [spec.text_a, spec.text_b, label_name], path)
        index_col = header.index("index") if "index" in header else None
        return [self._example(path, number, fields, header, cols, index_col)
                for number, fields in rows[1 if has_header else 0:]]

    def _example(self, path, number, fields, header, cols, index_col) -> TextExample:
        where = f"{path}:{number}"
        needed = max(c for c in cols if c is not None) + 1
        if len(fields) < needed:
            raise BertkitError(f"{where}: expected {len(header)} tab-separated columns "
                               f"({', '.join(header)}), found {len(fields)}")
        a, b, lab = (None if c is None else fields[c] for c in cols)
        label: str | float | None = lab
        if lab is not None and self.regression:
            try:
                label = float(lab)
            except ValueError:
                raise BertkitError(f"{where}: expected a numeric score, got {lab!r}") from None
        guid = fields[index_col] if index_col is not None else str(number)
        return TextExample(guid=guid, text_a=a, text_b=b, label=label, where=where)

    def score(self, examples, predictions) -> dict[str, float]:
        gold, pred = self.gold_and_predicted(examples, predictions)
        return self._score(gold, pred) if gold else {}

    def write_predictions(self, predictions, examples, out_dir: Path, split: str,
                          metrics: dict[str, Any]) -> list[Path]:
        paths = super().write_predictions(predictions, examples, out_dir, split, metrics)
        if split.startswith("test"):
            # GLUE server layout: <Task>[-m|-mm].tsv, "index<TAB>prediction".
            suffix = {"test_matched": "-m", "test_mismatched": "-mm"}.get(split, "")
            lines = ["index\tprediction"]
            for e in examples:
                value = predictions[e.guid]
                lines.append(f"{e.guid}\t{value:.3f}" if self.regression else f"{e.guid}\t{value}")
            path = out_dir / f"{self.spec.folder}{suffix}.tsv"
            atomic_write_text(path, "\n".join(lines) + "\n")
            paths.append(path)
        return paths
