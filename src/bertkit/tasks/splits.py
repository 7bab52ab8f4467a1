"""A task's data splits, read and featurized, then predicted and scored; and the release of a
fine-tuned model that names its task. Shared by the run kinds (fine-tuning, distillation) and by
what loads a fine-tuned model again (`bertkit evaluate`, `predict`, `serve`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from bertkit.tasks.base import FeatureSettings, Task, run_model
from bertkit.tokenization import BertTokenizer

log = logging.getLogger(__name__)

TASK_KEY = "bertkit_task"  # config.json key naming the task a model was fine-tuned on


@dataclass
class Split:
    """One data split, read and featurized."""

    name: str
    path: Path
    examples: list[Any]
    features: list[dict[str, Any]]


def load_split(task: Task, path: Path, name: str, tokenizer: BertTokenizer,
               settings: FeatureSettings, label2id: dict[str, int] | None, limit: int | None,
               train: bool) -> Split:
    examples = task.read(path)[:limit]
    return featurized(task, name, path, examples, tokenizer, settings, label2id, train)


def featurized(task: Task, name: str, path: Path, examples: list[Any], tokenizer: BertTokenizer,
               settings: FeatureSettings, label2id: dict[str, int] | None, train: bool) -> Split:
    features = task.featurize(examples, tokenizer, settings, label2id, train=train)
    log.info("%s: %d examples -> %d features (%s)", name, len(examples), len(features), path)
    return Split(name, path, examples, features)


def predict_split(task: Task, model: nn.Module, split: Split, settings: FeatureSettings,
                  batch_size: int, progress: bool = False,
                  require_finite: bool = False) -> dict[str, Any]:
    outputs = run_model(model, split.features, task.collate, task.output_keys, batch_size,
                        progress, require_finite)
    id2label = getattr(model.config, "id2label", None)
    return task.decode(split.examples, split.features, outputs, id2label, settings)


def evaluate_splits(task: Task, model: nn.Module, splits: list[Split],
                    settings: FeatureSettings, batch_size: int, out_dir: Path | None,
                    progress: bool = False, require_finite: bool = False) -> dict[str, Any]:
    """Metrics of every split (a split's suffix is added to its metric names, e.g. MNLI's
    `accuracy_mismatched`); a collapsed run is flagged (`collapsed` + `collapse_reason`);
    predictions written under `out_dir` when given. `require_finite`: `run_model`'s (a model
    evaluated on its own, `bertkit evaluate`; a diverged training run is flagged, not stopped)."""
    suffixes = task.eval_splits()
    metrics: dict[str, Any] = {}
    for split in splits:
        predictions = predict_split(task, model, split, settings, batch_size, progress,
                                    require_finite)
        suffix = suffixes.get(split.name, f"_{split.name}")
        scores = task.score(split.examples, predictions)
        metrics.update({f"{k}{suffix}": v for k, v in scores.items()})
        final = task.final_predictions(predictions, scores)
        reason = task.collapse_reason(split.examples, final) if scores else None
        if reason:
            metrics[f"collapsed{suffix}"] = True
            metrics[f"collapse_reason{suffix}"] = reason
            log.warning("%s: collapsed run: %s", split.name, reason)
        if out_dir is not None:
            task.write_predictions(predictions, split.examples, out_dir, split.name, scores)
    return metrics


def save_release(task: Task, model: nn.Module, tokenizer: BertTokenizer, out: Path,
                 metrics: dict[str, Any]) -> None:
    """The fine-tuned model in HF layout (config.json names the task and carries what the task
    needs to be used again, e.g. SQuAD v2.0's tuned threshold) plus its tokenizer."""
    extra = {**model.config.extra, TASK_KEY: task.name, **task.release_info(metrics)}
    model.config = model.config.replace(extra=extra)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
