"""Fine-tuning orchestration: task -> head + collate -> the training loop -> predictions, metrics.

Defaults are the paper's recipe (Devlin et al., 2019, section A.3): AdamW, batch 32, 3 epochs,
10% linear warmup then linear decay, dropout 0.1, learning rate picked on dev from
{5e-5, 3e-5, 2e-5}. `run_one` does one (lr, epochs, seed) run into its own folder: the fine-tuned
model in Hugging Face's layout (with `id2label` / `label2id`), its tokenizer, `metrics.json` and the
predictions. `run_grid` runs a grid of them and picks on the dev metric.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.io import atomic_path, atomic_write_text
from bertkit.tasks import ColumnSpec, FeatureSettings, Task, get_task
from bertkit.tasks.base import run_model

log = logging.getLogger(__name__)

OUTPUT_KEYS = {"BertForQuestionAnswering": ("start_logits", "end_logits")}
TASK_KEY = "bertkit_task"  # config.json key naming the task a model was fine-tuned on


@dataclass(frozen=True)
class FinetuneConfig:
    """One fine-tuning run's settings (saved beside the run as finetune_config.json)."""

    task: str
    model_dir: str
    data_dir: str
    output_dir: str
    lr: float = 2e-5
    epochs: float = 3.0
    seed: int = 0
    batch_size: int = 32
    micro_batch_size: int | None = None
    eval_batch_size: int = 64
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_seq_length: int | None = None  # None: the task's default (128; SQuAD 384)
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best_size: int = 20
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    train_file: str | None = None
    dev_file: str | None = None
    split_dev: float | None = None  # no train file: train on dev's first 1 - f (by article)
    freeze_encoder: bool = False
    features: str = "cls"  # "cls" | "concat-last-4" (NER: frozen features into a BiLSTM)
    columns: ColumnSpec = field(default_factory=ColumnSpec)
    precision: str = "fp32"
    device: str = "auto"
    eval_every: int = 0
    predict_test: bool = True  # also label the test file(s) when present (GLUE submissions)
    resume: bool = False
    progress: bool = True

    def settings(self, task: Task) -> FeatureSettings:
        return FeatureSettings(max_seq_length=self.max_seq_length or task.max_seq_length,
                               doc_stride=self.doc_stride, max_query_length=self.max_query_length,
                               max_answer_length=self.max_answer_length,
                               n_best_size=self.n_best_size)


@dataclass
class Split:
    """One data split, read and featurized."""

    name: str
    path: Path
    examples: list[Any]
    features: list[dict[str, Any]]


def build_task(cfg: FinetuneConfig) -> Task:
    return get_task(cfg.task, cfg.columns)


def split_path(task: Task, cfg: FinetuneConfig, split: str) -> Path:
    override = {"train": cfg.train_file, "dev": cfg.dev_file}.get(split)
    return Path(override) if override else task.find_file(Path(cfg.data_dir), split)


def load_split(task: Task, path: Path, name: str, tokenizer: Any, settings: FeatureSettings,
               label2id: dict[str, int] | None, limit: int | None, train: bool) -> Split:
    examples = task.read(path)
    if limit is not None:
        examples = examples[:limit]
    features = task.featurize(examples, tokenizer, settings, label2id, train=train)
    log.info("%s: %d examples -> %d features (%s)", name, len(examples), len(features), path)
    return Split(name, path, examples, features)


def load_model(task: Task, model_dir: str | Path, labels: list[str] | None,
               cfg: FinetuneConfig | None = None) -> nn.Module:
    """The task's head on the checkpoint; `labels` become id2label / label2id in config.json."""
    from bertkit.heads import HEAD_CLASSES
    from bertkit.tasks.feature_based import load_feature_model

    changes: dict[str, Any] = {}
    if labels is not None:
        changes["id2label"] = dict(enumerate(labels))
        changes["label2id"] = {label: i for i, label in enumerate(labels)}
    elif getattr(task, "regression", False):
        changes["id2label"], changes["label2id"] = {0: "score"}, {"score": 0}
    if cfg is not None and cfg.freeze_encoder:
        return load_feature_model(task, model_dir, changes, cfg.features)
    return HEAD_CLASSES[task.head].from_pretrained(model_dir, **changes)


def predict_split(task: Task, model: nn.Module, split: Split, settings: FeatureSettings,
                  batch_size: int, progress: bool = False) -> dict[str, Any]:
    keys = OUTPUT_KEYS.get(task.head, ("logits",))
    outputs = run_model(model, split.features, task.collate, keys, batch_size, progress)
    id2label = getattr(model.config, "id2label", None)
    return task.decode(split.examples, split.features, outputs, id2label, settings)


def collapsed(task: Task, predictions: dict[str, Any]) -> bool:
    """A classifier that answers one class for every dev example (a known BERT failure on
    small sets, Devlin et al. 2019 section 4.1; Dodge et al. 2020)."""
    if task.head != "BertForSequenceClassification" or getattr(task, "regression", False):
        return False
    return len(predictions) > 1 and len({str(v) for v in predictions.values()}) == 1


def max_steps_for(n_features: int, batch_size: int, epochs: float) -> int:
    return max(1, math.ceil(math.ceil(n_features / batch_size) * epochs))


def evaluate_splits(task: Task, model: nn.Module, splits: list[Split],
                    settings: FeatureSettings, batch_size: int, out_dir: Path | None,
                    progress: bool = False) -> dict[str, Any]:
    """Metrics of every split (a split's suffix is added to its metric names, e.g. MNLI's
    `accuracy_mismatched`); predictions written under `out_dir` when given."""
    suffixes = task.eval_splits()
    metrics: dict[str, Any] = {}
    for split in splits:
        predictions = predict_split(task, model, split, settings, batch_size, progress)
        suffix = suffixes.get(split.name, f"_{split.name}")
        scores = task.score(split.examples, predictions)
        metrics.update({f"{k}{suffix}": v for k, v in scores.items()})
        if collapsed(task, predictions) and scores:
            metrics[f"collapsed{suffix}"] = True
            log.warning("%s: every prediction is the same class (collapsed run)", split.name)
        if out_dir is not None:
            task.write_predictions(predictions, split.examples, out_dir, split.name)
    return metrics


def run_one(cfg: FinetuneConfig) -> dict[str, Any]:
    """Fine-tune once with cfg's lr / epochs / seed; returns (and writes) metrics.json."""
    from bertkit.tokenization.wordpiece import BertTokenizer
    from bertkit.training.loop import train

    out = Path(cfg.output_dir)
    task = build_task(cfg)
    settings = cfg.settings(task)
    tokenizer = BertTokenizer.from_pretrained(cfg.model_dir)
    data = prepare_data(task, cfg, tokenizer, settings)
    torch.manual_seed(cfg.seed)  # the new head's initialization follows the run's seed
    model = load_model(task, cfg.model_dir, data.labels, cfg)
    dev = data.dev_splits
    evaluate = None
    if cfg.eval_every and dev:
        def evaluate(m: nn.Module) -> dict[str, float]:
            scores = evaluate_splits(task, m, dev[:1], settings, cfg.eval_batch_size, None)
            return {k: float(v) for k, v in scores.items() if isinstance(v, (int, float))}
    result = train(model, data.train.features, task.collate,
                   train_config(cfg, len(data.train.features)), evaluate=evaluate)
    metrics = evaluate_splits(task, model, dev, settings, cfg.eval_batch_size, out, cfg.progress)
    save_release(task, model, tokenizer, out)
    record = {"task": task.name, "lr": cfg.lr, "epochs": cfg.epochs, "seed": cfg.seed,
              "steps": result.step, "train_examples": len(data.train.examples),
              "train_file": str(data.train.path),
              "final_loss": result.losses[-1] if result.losses else None, **metrics}
    if data.note:
        record["data_note"] = data.note
    write_json(out / "metrics.json", record)
    write_json(out / "finetune_config.json", asdict(cfg))
    return record


@dataclass
class TaskData:
    train: Split
    labels: list[str] | None
    dev_splits: list[Split]
    note: str | None = None  # how the data was obtained, when not as usual


def prepare_data(task: Task, cfg: FinetuneConfig, tokenizer: Any,
                 settings: FeatureSettings) -> TaskData:
    """Train features (labels discovered from the whole training file, even when subsetting),
    then the dev (and test) splits featurized with the same label ids."""
    if cfg.split_dev:
        examples, held_out, train_path, note = split_dev_examples(task, cfg)
    else:
        train_path, note = split_path(task, cfg, "train"), None
        examples = task.read(train_path)
    labels = task.discover_labels(examples)
    examples = examples[: cfg.max_train_examples]
    label2id = {label: i for i, label in enumerate(labels)} if labels else None
    features = task.featurize(examples, tokenizer, settings, label2id, train=True)
    if cfg.split_dev:
        held_out = held_out[: cfg.max_eval_examples]
        dev_splits = [Split("dev", train_path, held_out, task.featurize(
            held_out, tokenizer, settings, label2id, train=False))]
    else:
        dev_splits = load_dev_splits(task, cfg, tokenizer, settings, label2id)
    if not cfg.predict_test:
        dev_splits = [s for s in dev_splits if not s.name.startswith("test")]
    return TaskData(Split("train", train_path, examples, features), labels, dev_splits, note)


def split_dev_examples(task: Task, cfg: FinetuneConfig) -> tuple[list, list, Path, str]:
    """For a task whose training set is missing (SQuAD here): the dev file cut in two in file
    order, by article where examples have one (so no paragraph is in both halves), else by
    example; the first 1 - f trains, the last f evaluates. Returns (train, dev, path, note)."""
    from bertkit.tasks.inputs import example_id

    path = split_path(task, cfg, "dev")
    examples = task.read(path)

    def group(e: Any) -> str:
        return getattr(e, "title", "") or example_id(e)

    keys = list(dict.fromkeys(group(e) for e in examples))
    n_train = round(len(keys) * (1 - float(cfg.split_dev or 0)))
    if not 0 < n_train < len(keys):
        raise BertkitError(f"--split-dev {cfg.split_dev}: {path} has {len(keys)} groups; the "
                           "fraction must leave at least one for training and one for dev")
    first = set(keys[:n_train])
    unit = "articles" if any(getattr(e, "title", "") for e in examples) else "examples"
    note = (f"no training file: trained on the first {n_train} of the {len(keys)} {unit} of "
            f"{path}, evaluated on the other {len(keys) - n_train}")
    log.warning(note)
    return ([e for e in examples if group(e) in first],
            [e for e in examples if group(e) not in first], path, note)


def train_config(cfg: FinetuneConfig, n_features: int):
    """The loop's settings: the paper's schedule (warmup ratio, then linear decay to 0)."""
    from bertkit.training.loop import TrainConfig

    steps = max_steps_for(n_features, cfg.batch_size, cfg.epochs)
    steps_per_epoch = max(1, math.ceil(n_features / cfg.batch_size))
    return TrainConfig(output_dir=cfg.output_dir, max_steps=steps, batch_size=cfg.batch_size,
                       micro_batch_size=cfg.micro_batch_size, lr=cfg.lr,
                       warmup_ratio=cfg.warmup_ratio, weight_decay=cfg.weight_decay,
                       precision=cfg.precision, seed=cfg.seed, device=cfg.device,
                       # A resumable state every epoch; the loop always saves the last step.
                       save_every=steps_per_epoch if steps > steps_per_epoch else 0,
                       eval_every=cfg.eval_every, keep=1, resume=cfg.resume,
                       progress=cfg.progress)


def load_dev_splits(task: Task, cfg: FinetuneConfig, tokenizer: Any, settings: FeatureSettings,
                    label2id: dict[str, int] | None) -> list[Split]:
    """The dev split(s) that exist (MNLI has two), plus test files for GLUE-style predictions."""
    splits = []
    for name in [*task.eval_splits(), "test", "test_matched", "test_mismatched"]:
        path = Path(cfg.dev_file) if name == "dev" and cfg.dev_file else task.find_file(
            Path(cfg.data_dir), name)
        if path.is_file():
            splits.append(load_split(task, path, name, tokenizer, settings, label2id,
                                     cfg.max_eval_examples, train=False))
        elif not name.startswith("test"):
            log.warning("no %s file at %s: no dev metrics for this split", name, path)
    return splits


def save_release(task: Task, model: nn.Module, tokenizer: Any, out: Path) -> None:
    """The fine-tuned model in HF layout (config.json names the task) plus its tokenizer."""
    extra = dict(model.config.extra)
    extra[TASK_KEY] = task.name
    if task.name == "squad2":
        extra["squad_null_threshold"] = task.null_threshold  # type: ignore[attr-defined]
    if task.name == "custom":
        extra["bertkit_columns"] = asdict(task.columns)  # type: ignore[attr-defined]
    model.config = model.config.replace(extra=extra)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def check_data(task: Task, cfg: FinetuneConfig) -> None:
    path = split_path(task, cfg, "dev" if cfg.split_dev else "train")
    if not path.is_file():
        raise BertkitError(f"{path}: no such file for {task.name} (pass --train-file, "
                           f"--split-dev F to train on part of dev, or --data pointing at the "
                           f"folder that holds it)")


# --- grid search over lr x epochs x seeds -------------------------------------------------------


def run_name(lr: float, epochs: float, seed: int) -> str:
    return f"lr{lr:g}-ep{epochs:g}-seed{seed}"


def run_grid(base: FinetuneConfig, lrs: list[float], epochs: list[float],
             seeds: list[int]) -> dict[str, Any]:
    """Fine-tune every (lr, epochs, seed) under `output_dir/runs/`, pick the (lr, epochs) with
    the best mean dev metric, copy that setting's best seed to `output_dir` and write the summary
    (mean, median and std over seeds; collapsed runs flagged) as `output_dir/metrics.json`.
    With `resume`, finished runs are kept and interrupted ones continue from their checkpoint."""
    import numpy as np

    out = Path(base.output_dir)
    task = build_task(base)
    check_data(task, base)
    records = []
    for lr in lrs:
        for ep in epochs:
            for seed in seeds:
                records.append(_grid_run(base, out / "runs" / run_name(lr, ep, seed), lr, ep,
                                         seed))
    metric = task.main_metric
    grid = []
    for lr in lrs:
        for ep in epochs:
            runs = [r for r in records if r["lr"] == lr and r["epochs"] == ep]
            values = np.array([float(r.get(metric, float("nan"))) for r in runs])
            grid.append({"lr": lr, "epochs": ep, "n": len(runs), "mean": float(np.mean(values)),
                         "median": float(np.median(values)), "std": float(np.std(values)),
                         "collapsed_runs": sum(bool(r.get("collapsed")) for r in runs),
                         "values": values.tolist()})
    best = max(grid, key=lambda g: -np.inf if np.isnan(g["mean"]) else g["mean"])
    best_run = max((r for r in records if r["lr"] == best["lr"] and r["epochs"] == best["epochs"]),
                   key=lambda r: float(r.get(metric, -np.inf)))
    _copy_release(out / "runs" / run_name(best_run["lr"], best_run["epochs"], best_run["seed"]),
                  out)
    summary = {**best_run, "selection_metric": metric, "selected": best, "grid": grid,
               "best_run": run_name(best_run["lr"], best_run["epochs"], best_run["seed"])}
    write_json(out / "metrics.json", summary)
    return summary


def _grid_run(base: FinetuneConfig, run_dir: Path, lr: float, ep: float, seed: int
              ) -> dict[str, Any]:
    from dataclasses import replace

    from bertkit.training.state import list_checkpoints

    done = run_dir / "metrics.json"
    if base.resume and done.is_file():
        log.info("%s: finished earlier, kept", run_dir)
        return json.loads(done.read_text(encoding="utf-8"))
    resume = base.resume and bool(list_checkpoints(run_dir))
    log.info("fine-tuning %s", run_dir.name)
    return run_one(replace(base, lr=lr, epochs=ep, seed=seed, output_dir=str(run_dir),
                           resume=resume))


RELEASE_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json",
                 "tokenizer_config.json", "special_tokens_map.json")


def _copy_release(src: Path, dst: Path) -> None:
    """The selected run's model, tokenizer and predictions, into the output folder."""
    import shutil

    for path in sorted(src.iterdir()):
        keep = path.name in RELEASE_FILES or path.name.startswith(("predictions", "null_odds"))
        if path.is_file() and (keep or path.suffix == ".tsv"):
            with atomic_path(dst / path.name) as tmp:
                shutil.copyfile(path, tmp)


# --- evaluate / predict with a fine-tuned model -------------------------------------------------


def task_of(model_dir: str | Path, name: str | None, columns: ColumnSpec | None = None) -> Task:
    """The task a model was fine-tuned on (config.json's `bertkit_task`) unless `name` is given."""
    from bertkit.config import BertConfig

    extra = BertConfig.load(model_dir).extra
    name = name or extra.get(TASK_KEY)
    if name is None:
        raise BertkitError(f"{model_dir}: config.json does not name its task; pass --task")
    if columns is None and "bertkit_columns" in extra:
        columns = ColumnSpec(**extra["bertkit_columns"])
    task = get_task(name, columns)
    if "squad_null_threshold" in extra:
        task.null_threshold = float(extra["squad_null_threshold"])  # type: ignore[attr-defined]
    return task


def evaluate_model(model_dir: str | Path, task: Task, path: Path, settings: FeatureSettings,
                   batch_size: int = 64, limit: int | None = None, out_dir: Path | None = None,
                   split: str = "dev", progress: bool = False) -> dict[str, Any]:
    """Metrics of a fine-tuned model on one labeled file (predictions written to `out_dir`)."""
    from bertkit.tasks.feature_based import load_finetuned
    from bertkit.tokenization.wordpiece import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(model_dir)
    model = load_finetuned(task, model_dir)
    label2id = model.config.label2id
    data = load_split(task, path, split, tokenizer, settings, label2id, limit, train=False)
    metrics = evaluate_splits(task, model, [data], settings, batch_size, out_dir, progress)
    metrics = {"task": task.name, "file": str(path), "examples": len(data.examples), **metrics}
    if out_dir is not None:
        write_json(out_dir / "metrics.json", metrics)
    return metrics


def predict_examples(model_dir: str | Path, task: Task, examples: list[Any],
                     settings: FeatureSettings, batch_size: int = 64) -> list[tuple[Any, Any]]:
    """(example, prediction) pairs; SQuAD v2.0 answers "" above the model's tuned threshold."""
    from bertkit.tasks.feature_based import load_finetuned
    from bertkit.tasks.inputs import example_id
    from bertkit.tokenization.wordpiece import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(model_dir)
    model = load_finetuned(task, model_dir)
    features = task.featurize(examples, tokenizer, settings, model.config.label2id, train=False)
    predictions = predict_split(task, model, Split("input", Path("-"), examples, features),
                                settings, batch_size)
    final = task.final_texts(predictions) if hasattr(task, "final_texts") else None
    pairs = []
    for example in examples:
        key = example_id(example)
        value = predictions[key]
        if final is not None:
            value = {**value, "text": final[key]}
        pairs.append((example, value))
    return pairs
