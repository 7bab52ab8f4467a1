"""The user's own sentence (pair) classification or regression data.

CSV (quoted fields allowed), TSV (tab-separated, no quoting, header row) or JSONL (one object per
line), with named text, optional pair and label columns. For classification the label set is
whatever the training file holds (numbers in numeric order, other strings alphabetically).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bertkit import metrics as M
from bertkit.data.tables import iter_table
from bertkit.errors import BertkitError
from bertkit.tasks.base import require_file
from bertkit.tasks.glue import ClassificationTask, TextExample

FORMATS = (".csv", ".tsv", ".jsonl", ".json")


COLUMNS_KEY = "bertkit_columns"  # config.json key of a fine-tuned custom model


@dataclass(frozen=True)
class ColumnSpec:
    text: str = "text"
    pair: str | None = None
    label: str = "label"
    regression: bool = False


def read_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of every record in a CSV, TSV or JSONL file (the rules of
    `bertkit.data.tables`)."""
    require_file(path, "a CSV, TSV or JSONL file")
    if path.suffix.lower() not in FORMATS:
        raise BertkitError(f"{path}: unknown format {path.suffix.lower()!r}; expected "
                           f"{', '.join(FORMATS)}")
    return [(row.number, row.fields) for row in iter_table(path)]


class CustomTask(ClassificationTask):
    name = "custom"

    def __init__(self, columns: ColumnSpec | None = None):
        self.columns_given = columns is not None  # else a fine-tuned model's saved ones apply
        self.columns = columns or ColumnSpec()
        self.regression = self.columns.regression
        self.main_metric = "spearman" if self.regression else "accuracy"
        self.labels = None
        self.text_fields = ("text", "sentence", self.columns.text)
        self.pair_fields = ("pair", "text_b", *([self.columns.pair] if self.columns.pair else []))

    def release_info(self, metrics: dict[str, Any]) -> dict[str, Any]:
        return {COLUMNS_KEY: asdict(self.columns)}

    def with_release_info(self, info: dict[str, Any]) -> CustomTask:
        if self.columns_given or COLUMNS_KEY not in info:
            return self
        return CustomTask(ColumnSpec(**info[COLUMNS_KEY]))

    def find_file(self, data_dir: Path, split: str) -> Path:
        if data_dir.is_file():
            return data_dir
        for suffix in FORMATS:
            if (data_dir / f"{split}{suffix}").is_file():
                return data_dir / f"{split}{suffix}"
        return data_dir / f"{split}.csv"

    def read(self, path: Path) -> list[TextExample]:
        return [self._example(path, number, row) for number, row in read_rows(path)]

    def _example(self, path: Path, number: int, row: dict[str, Any]) -> TextExample:
        where = f"{path}:{number}"
        cols = self.columns
        for name in (cols.text, cols.pair):
            if name is not None and (row.get(name) is None):
                raise BertkitError(f"{where}: missing column {name!r} (found "
                                   f"{', '.join(str(k) for k in row)})")
        label = row.get(cols.label)
        if label in ("", None):
            label = None
        elif self.regression:
            try:
                label = float(label)
            except (TypeError, ValueError):
                raise BertkitError(f"{where}: expected a numeric {cols.label!r}, "
                                   f"got {label!r}") from None
        else:
            label = str(label)
        guid = str(row.get("id", row.get("idx", number)))
        pair = None if cols.pair is None else str(row[cols.pair])
        return TextExample(guid, str(row[cols.text]), pair, label, where)

    def score(self, examples, predictions) -> dict[str, float]:
        gold, pred = self.gold_and_predicted(examples, predictions)
        if not gold:
            return {}
        if self.regression:
            return {"pearson": M.pearson(pred, gold), "spearman": M.spearman(pred, gold)}
        out = {"accuracy": M.accuracy(pred, gold)}
        if len(set(gold) | set(pred)) <= 2 and len(set(gold)) == 2:
            positive = sorted(set(gold), key=str)[-1]
            out["f1"] = M.f1_binary([p == positive for p in pred], [g == positive for g in gold],
                                    positive=True)
        return out
