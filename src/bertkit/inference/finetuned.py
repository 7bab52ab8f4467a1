"""Using a fine-tuned model: score it on a labeled file (`bertkit evaluate`) or label new inputs
(`bertkit predict`). The task comes from the model's config.json (`bertkit_task`), configured
from what the fine-tuning run saved there (e.g. SQuAD v2.0's null threshold)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bertkit.checkpoint import check_model_dir, check_vocab
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.io import atomic_write_json
from bertkit.tasks import ColumnSpec, FeatureSettings, Task, get_task
from bertkit.tasks.base import run_model
from bertkit.tasks.feature_based import load_finetuned
from bertkit.tasks.splits import TASK_KEY, evaluate_splits, load_split
from bertkit.tokenization import BertTokenizer


def task_of(model_dir: str | Path, name: str | None, columns: ColumnSpec | None = None) -> Task:
    """The task a model was fine-tuned on (config.json's `bertkit_task`) unless `name` is given;
    a `name` whose head differs from the model's task, or whose outputs the head does not give
    (`check_outputs`), is refused (it would answer nonsense)."""
    config = BertConfig.load(check_model_dir(model_dir))
    extra = config.extra
    saved = extra.get(TASK_KEY)
    if name is None and saved is None:
        raise BertkitError(f"{model_dir}: config.json does not name the task it was fine-tuned "
                           "on (not a `bertkit finetune` model?); pass --task")
    task = get_task(name or saved, columns)
    if saved is not None and get_task(saved).head != task.head:
        raise BertkitError(f"{model_dir}: fine-tuned for {saved!r}, which has another head than "
                           f"{task.name!r}; use a model fine-tuned for {task.name}")
    task = task.with_release_info(extra)  # (a custom task's columns: regression or labels)
    check_outputs(task, config, model_dir)
    return task


def check_outputs(task: Task, config: BertConfig, model_dir: str | Path) -> None:
    """A sequence classifier's outputs fit the task: one score for a regression, as many labels
    as the task has (a 2-label head read as MNLI's 3 would always miss one)."""
    if task.head != "BertForSequenceClassification":
        return
    n, labels = config.num_labels, getattr(task, "labels", None)
    if task.regression and n != 1:
        raise BertkitError(f"{model_dir}: a {n}-label head, but {task.name} is a regression (one "
                           "score); use a model fine-tuned for it")
    if not task.regression and n == 1:
        raise BertkitError(f"{model_dir}: a one-score (regression) head, but {task.name} has "
                           "labels; use a model fine-tuned for it")
    if labels and len(labels) != n:
        raise BertkitError(f"{model_dir}: a {n}-label head, but {task.name} has {len(labels)} "
                           f"labels ({', '.join(labels)}); use a model fine-tuned for it")


def load_for(task: Task, model_dir: str | Path):
    """The fine-tuned model and its tokenizer, checked to belong together."""
    check_model_dir(model_dir)
    model, tokenizer = load_finetuned(task, model_dir), BertTokenizer.from_pretrained(model_dir)
    check_vocab(model.config, tokenizer, model_dir)
    return model, tokenizer


def evaluate_model(model_dir: str | Path, task: Task, path: Path, settings: FeatureSettings, *,
                   batch_size: int = 64, limit: int | None = None, out_dir: Path | None = None,
                   split: str = "dev", progress: bool = False) -> dict[str, Any]:
    """Metrics of a fine-tuned model on one labeled file (predictions written to `out_dir`)."""
    model, tokenizer = load_for(task, model_dir)
    data = load_split(task, path, split, tokenizer, settings, model.config.label2id, limit,
                      train=False)
    if not data.examples:
        raise BertkitError(f"{path}: no examples to evaluate")
    metrics = evaluate_splits(task, model, [data], settings, batch_size, out_dir, progress,
                              require_finite=True)
    metrics = {"task": task.name, "file": str(path), "examples": len(data.examples), **metrics}
    if out_dir is not None:
        atomic_write_json(out_dir / "metrics.json", metrics)
    return metrics


PREDICT_WINDOW = 4096  # inputs featurized, run and decoded at a time: memory is bounded by it


def predict_examples(model_dir: str | Path, task: Task, examples: list[Any],
                     settings: FeatureSettings, batch_size: int = 64, scores: bool = False
                     ) -> list[dict[str, Any]]:
    """One output record per example, as the task writes it (SQuAD v2.0: "" above the model's
    saved threshold); with `scores`, what the task adds beside a prediction (`Task.prediction_scores`:
    label or ending probabilities)."""
    if not examples:
        raise BertkitError("no inputs to predict on")
    return [record for window in predict_windows(model_dir, task, examples, settings,
                                                 batch_size, scores)
            for record in window]


def predict_windows(model_dir: str | Path, task: Task, examples: Iterable[Any],
                    settings: FeatureSettings, batch_size: int = 64, scores: bool = False,
                    window: int = PREDICT_WINDOW) -> Iterator[list[dict[str, Any]]]:
    """The records of `predict_examples`, `window` examples at a time, in input order: the
    examples are read as they are needed, so an input of any length takes the memory of one
    window. Every example is answered on its own, so the windows do not change an answer."""
    model, tokenizer = load_for(task, model_dir)
    id2label = model.config.id2label
    inputs = iter(examples)
    while chunk := list(itertools.islice(inputs, window)):
        features = task.featurize(chunk, tokenizer, settings, model.config.label2id,
                                  train=False)
        outputs = run_model(model, features, task.collate, task.output_keys, batch_size,
                            require_finite=True)
        final = task.final_predictions(task.decode(chunk, features, outputs, id2label, settings),
                                       {})
        extra = task.prediction_scores(chunk, features, outputs, id2label) if scores else {}
        yield [{**task.output_record(e, final[e.guid]), **extra.get(e.guid, {})} for e in chunk]
