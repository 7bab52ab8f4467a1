"""What every fine-tuning task provides, and the small helpers they share.

A task reads its files into examples, featurizes them into model inputs (plain dicts of int lists),
collates features into padded tensors, and after a forward pass over the evaluation features
decodes the outputs back into predictions per example and scores them. The training loop never
sees anything task-specific beyond the model head and the collate function.
"""

from __future__ import annotations

import abc
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text, progress_bar

logger = logging.getLogger(__name__)

Feature = dict[str, Any]


@dataclass(frozen=True)
class FeatureSettings:
    """How examples become model inputs (the paper's defaults for SQuAD windows)."""

    max_seq_length: int = 128
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best_size: int = 20


class Task(abc.ABC):
    """One fine-tuning task: files -> examples -> features -> outputs -> predictions -> metrics.

    `head` names a class of `bertkit.heads.HEAD_CLASSES`; `main_metric` is the dev metric used to
    pick among runs; `labels` is the fixed label list (None when discovered from the training
    file or when the task has no labels, e.g. SQuAD or regression)."""

    name: str
    head: str
    main_metric: str
    labels: list[str] | None = None
    max_seq_length: int = 128
    regression: bool = False
    output_keys: tuple[str, ...] = ("logits",)  # the head's outputs that `decode` reads
    native_suffixes: tuple[str, ...] = ()  # `bertkit predict` reads these with `read`

    @abc.abstractmethod
    def find_file(self, data_dir: Path, split: str) -> Path:
        """The file of `split` ("train", "dev", "test", ...) under `data_dir`."""

    @abc.abstractmethod
    def read(self, path: Path) -> list[Any]:
        """Examples of one file, with a clear error (file, line/record) on bad input."""

    @abc.abstractmethod
    def featurize(self, examples: Sequence[Any], tokenizer: Any, settings: FeatureSettings,
                  label2id: dict[str, int] | None, train: bool) -> list[Feature]:
        """Model inputs; with `train`, every feature carries its label."""

    @abc.abstractmethod
    def collate(self, features: Sequence[Feature]) -> dict[str, torch.Tensor]:
        """Padded tensors for the model's forward, labels included when the features have them."""

    @abc.abstractmethod
    def decode(self, examples: Sequence[Any], features: Sequence[Feature],
               outputs: dict[str, torch.Tensor], id2label: dict[int, str] | None,
               settings: FeatureSettings) -> dict[str, Any]:
        """Predictions, one per example id, from the stacked model outputs of `features`."""

    @abc.abstractmethod
    def score(self, examples: Sequence[Any], predictions: dict[str, Any]) -> dict[str, float]:
        """The task's metrics under plain names (`accuracy`, `f1`, `mcc`, ...)."""

    def discover_labels(self, examples: Sequence[Any]) -> list[str] | None:
        """The label list: fixed for the task, else whatever the training file holds."""
        return self.labels

    def eval_splits(self) -> dict[str, str]:
        """Split name -> metric suffix; MNLI has matched ("") and mismatched ("_mismatched")."""
        return {"dev": ""}

    @abc.abstractmethod
    def example_from_record(self, guid: str, record: dict[str, Any], where: str) -> Any:
        """An unlabeled example from a `bertkit predict` record (JSONL object or --text)."""

    @abc.abstractmethod
    def output_record(self, example: Any, prediction: Any) -> dict[str, Any]:
        """One JSONL line of `bertkit predict`: the input's id and text, and the prediction."""

    def prediction_scores(self, examples: Sequence[Any], features: Sequence[Feature],
                          outputs: dict[str, Any], id2label: dict[int, str] | None
                          ) -> dict[str, dict[str, Any]]:
        """Fields to add to each example's output record beside its prediction, by guid (e.g.
        every label's probability); default: none."""
        return {}

    def final_predictions(self, predictions: dict[str, Any], metrics: dict[str, Any]
                          ) -> dict[str, Any]:
        """The answers to report, given the split's metrics (SQuAD v2.0 applies its null
        threshold here); default: the decoded predictions as they are."""
        return predictions

    def collapse_reason(self, examples: Sequence[Any], predictions: dict[str, Any]) -> str | None:
        """Why these predictions look like a collapsed run (one answer for everything), or
        None. A known failure of BERT fine-tuning on small sets (Devlin et al. 2019, section
        4.1; Dodge et al. 2020; Mosbach et al. 2021)."""
        return None

    def release_info(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """What a fine-tuned model's config.json must carry to be used again (e.g. the tuned
        SQuAD v2.0 threshold); `metrics` are the run's dev metrics."""
        return {}

    def with_release_info(self, info: dict[str, Any]) -> Task:
        """This task configured from a fine-tuned model's config.json (see `release_info`)."""
        return self

    def untuned(self) -> Task:
        """This task as a new fine-tuning run starts it: what a run tunes on dev (SQuAD v2.0's
        threshold) left for the new run to tune, what describes the data (columns) kept."""
        return self

    def write_predictions(self, predictions: dict[str, Any], examples: Sequence[Any],
                          out_dir: Path, split: str, metrics: dict[str, Any]) -> list[Path]:
        """Write predictions in the task's own format; default: one JSON object per line."""
        final = self.final_predictions(predictions, metrics)
        return [write_jsonl_predictions(final, out_dir / f"predictions_{split}.jsonl")]


# --- shared helpers -----------------------------------------------------------------------------


def pad_collate(features: Sequence[Feature], pad_ids: dict[str, int],
                scalars: Sequence[str] = ()) -> dict[str, torch.Tensor]:
    """Pad each list field to the batch's longest row (B, T); scalar fields become (B,).

    `pad_ids` maps each padded field to its pad value (`input_ids` -> [PAD], labels -> -100)."""
    batch: dict[str, torch.Tensor] = {}
    for key, pad in pad_ids.items():
        if key not in features[0]:
            continue
        rows = [f[key] for f in features]
        width = max(len(r) for r in rows)
        out = torch.full((len(rows), width), pad, dtype=torch.long)  # (B, T)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
        batch[key] = out
    for key in scalars:
        if key in features[0]:
            values = [f[key] for f in features]
            dtype = torch.float if isinstance(values[0], float) else torch.long
            batch[key] = torch.tensor(values, dtype=dtype)  # (B,)
    return batch


def run_model(model: nn.Module, features: Sequence[Feature],
              collate: Callable[[Sequence[Feature]], dict[str, torch.Tensor]],
              output_keys: Sequence[str], batch_size: int = 64,
              progress: bool = False, require_finite: bool = False
              ) -> dict[str, list[torch.Tensor]]:
    """Forward every feature in eval mode without labels; returns, per output key, one tensor
    per feature (on CPU, float32, padding stripped by the caller). Restores the train flag.
    `require_finite` (answering, not training): a NaN or infinite output is an error, never
    decoded into an answer that looks like one (argmax of NaN is a label)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    outputs: dict[str, list[torch.Tensor]] = {k: [] for k in output_keys}
    starts = range(0, len(features), batch_size)
    try:
        with torch.no_grad():
            for start in progress_bar(starts, desc="evaluate", disable=not progress, leave=False):
                batch = collate(features[start:start + batch_size])
                batch = {k: v.to(device) for k, v in batch.items() if not _is_label(k)}
                out = model(**batch)
                for key in output_keys:
                    values = getattr(out, key).float()
                    if require_finite and not torch.isfinite(values).all():
                        raise BertkitError("the model's outputs are not finite (NaN or inf): its "
                                           "weights or config.json are damaged")
                    outputs[key].extend(values.cpu().unbind(0))
    finally:
        model.train(was_training)
    return outputs


def _is_label(key: str) -> bool:
    return key in ("labels", "start_positions", "end_positions")


def check_label(label: str, label2id: dict[str, int], where: str) -> int:
    if label not in label2id:
        known = ", ".join(sorted(label2id))
        raise BertkitError(f"{where}: unknown label {label!r}; the training labels are {known}")
    return label2id[label]


def write_jsonl_predictions(predictions: dict[str, Any], path: Path) -> Path:
    """One `{"id": ..., "prediction": ...}` object per line, written atomically."""
    lines = [json.dumps({"id": key, "prediction": value}, ensure_ascii=False)
             for key, value in predictions.items()]
    atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))
    return path


def json_object(line: str, where: str) -> dict[str, Any]:
    """One JSONL record, which must be an object; `where` ("file:line") names it in errors."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise BertkitError(f"{where}: invalid JSON ({err.msg})") from None
    if not isinstance(record, dict):
        raise BertkitError(f"{where}: expected a JSON object")
    return record


def record_field(record: dict[str, Any], names: Sequence[str], where: str) -> Any:
    """The first of `names` present in a predict record, else an error naming them."""
    for name in names:
        if name in record:
            return record[name]
    raise BertkitError(f"{where}: expected a field {' or '.join(repr(n) for n in names)}")


def record_text(record: dict[str, Any], names: Sequence[str], where: str) -> str:
    """A text field of a predict record: a non-empty string."""
    value = record_field(record, names, where)
    if not isinstance(value, str) or not value.strip():
        raise BertkitError(f"{where}: {names[0]!r} must be a non-empty string, got {value!r}")
    return value


@dataclass
class DevSplit:
    """A dev file cut in two: train on the first part, evaluate on the rest (see split_dev)."""

    train: list[Any]
    held_out: list[Any]
    note: str


def split_dev(examples: Sequence[Any], fraction: float, path: Path) -> DevSplit:
    """The one rule for training on part of a dev file (SQuAD has no train file here): cut in
    file order by article where examples have one (no paragraph in both halves), else by
    example; the first 1 - `fraction` of the groups train, the last `fraction` evaluate."""
    def group(e: Any) -> str:
        return getattr(e, "title", "") or e.guid

    keys = list(dict.fromkeys(group(e) for e in examples))
    n_train = round(len(keys) * (1 - fraction))
    if not 0 < n_train < len(keys):
        raise BertkitError(f"--split-dev {fraction}: {path} has {len(keys)} groups; the "
                           "fraction must leave at least one for training and one for dev")
    first = set(keys[:n_train])
    unit = "articles" if any(getattr(e, "title", "") for e in examples) else "examples"
    note = (f"no training file: trained on the first {n_train} of the {len(keys)} {unit} of "
            f"{path}, evaluated on the other {len(keys) - n_train}")
    return DevSplit([e for e in examples if group(e) in first],
                    [e for e in examples if group(e) not in first], note)


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise BertkitError(f"{path}: no such file ({what})")
    return path
