"""Fine-tuning: task -> head + collate -> the training loop -> predictions, metrics, release.

Defaults are the paper's recipe (Devlin et al., 2019, section A.3): AdamW, batch 32, 3 epochs,
10% linear warmup then linear decay, dropout 0.1, learning rate picked on dev from
{5e-5, 3e-5, 2e-5}. `run_one` does one (lr, epochs, seed) run into its own folder: the fine-tuned
model in Hugging Face's layout (with `id2label` / `label2id`), its tokenizer, `metrics.json` and
the predictions. `bertkit.runs.grid` runs a grid of them and picks on the dev metric.

Random streams (each derived from the run's seed by `training.stream.stream_seed`, none
sharing numbers with another): the new head's initial weights ("head"), the data order (the
loop's "order/<epoch>") and dropout (the loop's "dropout/<rank>", saved in every training state).

Under torchrun (`distributed.setup` called by the CLI) every process reads and featurizes the
same data and trains its slice of each global batch (the loop's DDP): at the same global and
micro-batch sizes the optimizer sees the one-process run's gradients, so with dropout off the
losses and metrics are one process's up to float rounding (with dropout on, each rank draws its
own masks: the same recipe, other numbers). Rank 0 alone claims the folder and, once training
ends, evaluates, exports and writes; see `run_one`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.checkpoint import check_model_dir, check_vocab
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import HEAD_CLASSES
from bertkit.io import atomic_write_json
from bertkit.tasks import ColumnSpec, FeatureSettings, Task, get_task
from bertkit.tasks.base import Feature, split_dev
from bertkit.tasks.feature_based import load_feature_model
from bertkit.tasks.splits import Split, evaluate_splits, featurized, load_split, save_release
from bertkit.tokenization import BertTokenizer
from bertkit.training import distributed
from bertkit.training.loop import TrainConfig, TrainResult, train
from bertkit.training.packing import feature_lengths, packed_collate
from bertkit.training.run_folder import RunFolder
from bertkit.training.stream import stream_seed

log = logging.getLogger(__name__)

FINETUNE_MARKER = "finetune_config.json"  # written first: marks a folder as a fine-tuning run
REGRESSION_BIASES = ("mean", "zero")  # FinetuneConfig.regression_bias


def check_regression_bias(value: str) -> None:
    """FinetuneConfig's `regression_bias`, and every recipe that passes one on to it."""
    if value not in REGRESSION_BIASES:
        raise BertkitError(f"--regression-bias must be one of {', '.join(REGRESSION_BIASES)}, "
                           f"got {value!r}")


def finetune_train_config(output_dir: str = "", **changes: Any) -> TrainConfig:
    """The loop's settings for fine-tuning: the paper's recipe, the one place it is written.
    `max_steps` stays None (the run derives it from epochs; set it to cap the steps)."""
    recipe = TrainConfig(output_dir=output_dir, lr=2e-5, batch_size=32, warmup_ratio=0.1,
                         weight_decay=0.01, keep=1)
    return dataclasses.replace(recipe, **changes)


@dataclass(frozen=True)
class FinetuneConfig:
    """One fine-tuning run (saved beside the run as finetune_config.json). The loop's settings,
    output folder included, are `train`; the rest says what to train on and how to featurize."""

    task: str
    model_dir: str
    data_dir: str
    train: TrainConfig = field(default_factory=finetune_train_config)
    epochs: float = 3.0
    eval_batch_size: int = 64
    max_seq_length: int | None = None  # None: the task's default (128; SQuAD 384)
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best_size: int = 20
    max_train_examples: int | None = None
    max_eval_examples: int | None = None  # cuts the dev split only, never the test predictions
    train_file: str | None = None
    dev_file: str | None = None
    split_dev: float | None = None  # no train file: train on dev's first 1 - f (by article)
    freeze_encoder: bool = False
    features: str = "cls"  # "cls" | "concat-last-4" (NER: frozen features into a BiLSTM)
    columns: ColumnSpec = field(default_factory=ColumnSpec)
    predict_test: bool = True  # also label the test file(s) when present (GLUE submissions)
    keep_training_state: bool = False  # keep checkpoints/ of a finished run (else only the model)
    # Batches of similar lengths (shuffled groups; less padding in attention). Off by default:
    # such batches are not i.i.d. samples (where length correlates with the label, as in STS-B,
    # their label means vary more than random batches') and runs are less stable. Measured:
    # docs/reports/results.md, "Fine-tuning stability".
    group_by_length: bool = False
    packed: bool = True  # dense layers on real tokens only, where the head's loss allows it
    # Dropout while fine-tuning (hidden, attention and the classifier's); None: the checkpoint's
    # own. A model pre-trained without dropout (Cramming's recipe, the pre-training curve's)
    # exports 0, and would otherwise fine-tune without any.
    dropout: float | None = None
    # A regression head's starting bias: "mean" starts its output at the training labels' mean;
    # "zero" is Hugging Face's init. From zero, a short run (few labels: tens of steps) spends
    # its updates moving the output to the labels' mean (STS-B's is 2.7, each AdamW step moves a
    # weight about one lr): the pooled vector saturates and the predictions barely vary. Measured:
    # docs/reports/learning-curve.md, "STS-B". A classification head is not affected.
    regression_bias: str = "mean"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise BertkitError(f"--epochs must be > 0, got {self.epochs}")
        for name in ("eval_batch_size", "doc_stride", "max_query_length", "max_answer_length",
                     "n_best_size", "max_seq_length", "max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise BertkitError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise BertkitError(f"--dropout must be in [0, 1), got {self.dropout}")
        check_regression_bias(self.regression_bias)
        if self.split_dev is not None and not 0 < self.split_dev < 1:
            raise BertkitError(f"--split-dev must be between 0 and 1, got {self.split_dev}")

    @property
    def output_dir(self) -> str:
        return self.train.output_dir

    def settings(self, task: Task, positions: int | None = None) -> FeatureSettings:
        """The featurization for `task`, on a model with `positions` positions when given
        (its max_position_embeddings): a --max-seq-length beyond them is refused before any
        work (it would fail at the first step); the task's default length is cut to them, its
        SQuAD stride with it."""
        length, stride = self.max_seq_length or task.max_seq_length, self.doc_stride
        if positions is not None and length > positions:
            if self.max_seq_length is not None:
                raise BertkitError(f"--max-seq-length {length} is beyond the model's {positions} "
                                   f"positions (max_position_embeddings); use at most {positions}")
            log.debug("%s's default length %d cut to the model's %d positions", task.name,
                     length, positions)
            length, stride = positions, min(stride, positions // 2)
        return FeatureSettings(max_seq_length=length, doc_stride=stride,
                               max_query_length=self.max_query_length,
                               max_answer_length=self.max_answer_length,
                               n_best_size=self.n_best_size)

    def with_run(self, output_dir: str | Path, epochs: float | None = None,
                 **train_changes: Any) -> FinetuneConfig:
        """The same recipe into another folder, with some loop settings changed (lr, seed...)."""
        train_cfg = dataclasses.replace(self.train, output_dir=str(output_dir), **train_changes)
        return dataclasses.replace(self, train=train_cfg,
                                   epochs=self.epochs if epochs is None else epochs)


@dataclass
class TaskData:
    train: Split
    labels: list[str] | None
    dev_splits: list[Split]
    note: str | None = None  # how the data was obtained, when not as usual


def build_task(cfg: FinetuneConfig) -> Task:
    return get_task(cfg.task, cfg.columns)


def split_path(task: Task, cfg: FinetuneConfig, split: str) -> Path:
    override = {"train": cfg.train_file, "dev": cfg.dev_file}.get(split)
    return Path(override) if override else task.find_file(Path(cfg.data_dir), split)


def check_data(task: Task, cfg: FinetuneConfig) -> None:
    path = split_path(task, cfg, "dev" if cfg.split_dev else "train")
    if not path.is_file():
        raise BertkitError(f"{path}: no such file for {task.name} (pass --train-file, "
                           f"--split-dev F to train on part of dev, or --data pointing at the "
                           f"folder that holds it)")


def prepare_data(task: Task, cfg: FinetuneConfig, tokenizer: BertTokenizer,
                 settings: FeatureSettings) -> TaskData:
    """Train features (labels discovered from the whole training file, even when subsetting),
    then the dev (and test) splits featurized with the same label ids."""
    note, held_out = None, None
    if cfg.split_dev:
        train_path = split_path(task, cfg, "dev")
        parts = split_dev(task.read(train_path), cfg.split_dev, train_path)
        examples, held_out, note = parts.train, parts.held_out, parts.note
        log.warning(note)
    else:
        train_path = split_path(task, cfg, "train")
        examples = task.read(train_path)
    if not examples:
        raise BertkitError(f"{train_path}: no training examples")
    labels = task.discover_labels(examples)
    label2id = {label: i for i, label in enumerate(labels)} if labels else None
    train_split = featurized(task, "train", train_path, examples[: cfg.max_train_examples],
                             tokenizer, settings, label2id, train=True)
    if held_out is not None:
        dev_splits = [featurized(task, "dev", train_path, held_out[: cfg.max_eval_examples],
                                 tokenizer, settings, label2id, train=False)]
    else:
        dev_splits = load_dev_splits(task, cfg, tokenizer, settings, label2id)
    if not cfg.predict_test:
        dev_splits = [s for s in dev_splits if not s.name.startswith("test")]
    return TaskData(train_split, labels, dev_splits, note)


def load_dev_splits(task: Task, cfg: FinetuneConfig, tokenizer: BertTokenizer,
                    settings: FeatureSettings, label2id: dict[str, int] | None) -> list[Split]:
    """The dev split(s) that exist (MNLI has two), plus test files for GLUE-style predictions
    (never cut by --max-eval-examples: a submission file labels every test example)."""
    splits = []
    for name in [*task.eval_splits(), "test", "test_matched", "test_mismatched"]:
        path = Path(cfg.dev_file) if name == "dev" and cfg.dev_file else task.find_file(
            Path(cfg.data_dir), name)
        test = name.startswith("test")
        if path.is_file():
            limit = None if test else cfg.max_eval_examples
            splits.append(load_split(task, path, name, tokenizer, settings, label2id, limit,
                                     train=False))
        elif not test:
            log.warning("no %s file at %s: no dev metrics for this split", name, path)
    return splits


def load_model(task: Task, model_dir: str | Path, labels: list[str] | None,
               cfg: FinetuneConfig | None = None) -> nn.Module:
    """The task's head on the checkpoint; `labels` become id2label / label2id in config.json.
    The new head's weights come from the run's own "head" stream (see the module docstring)."""
    changes: dict[str, Any] = {}
    if labels is not None:
        changes["id2label"] = dict(enumerate(labels))
        changes["label2id"] = {label: i for i, label in enumerate(labels)}
    elif task.regression:
        changes["id2label"], changes["label2id"] = {0: "score"}, {"score": 0}
    if cfg is not None and cfg.dropout is not None:
        changes.update(hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
                       classifier_dropout=cfg.dropout)
    seed = stream_seed(cfg.train.seed if cfg is not None else 0, "head")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if cfg is not None and cfg.freeze_encoder:
            return load_feature_model(task, model_dir, changes, cfg.features)
        return HEAD_CLASSES[task.head].from_pretrained(model_dir, **changes)


def run_steps(cfg: FinetuneConfig, n_features: int) -> int:
    """Optimizer steps of the run: `epochs` over the features, capped by train.max_steps."""
    steps = max(1, math.ceil(math.ceil(n_features / cfg.train.batch_size) * cfg.epochs))
    return min(steps, cfg.train.max_steps) if cfg.train.max_steps else steps


STATES_PER_RUN = 10  # at most about this many resumable states a run, by default


def train_config(cfg: FinetuneConfig, n_features: int) -> TrainConfig:
    """The loop's settings with the step count known: a resumable state every `save_every`
    steps where set, else every epoch, or every few epochs where a run has more than
    `STATES_PER_RUN` of them (the loop always saves the last step). Few labels trained for many
    epochs (50 labels at batch 32 are 2 steps an epoch) would otherwise write a whole state, a
    few hundred MB, every other step: more time than rerunning the run would cost."""
    steps = run_steps(cfg, n_features)
    steps_per_epoch = max(1, math.ceil(n_features / cfg.train.batch_size))
    epochs_apart = math.ceil(math.ceil(steps / STATES_PER_RUN) / steps_per_epoch)
    every = cfg.train.save_every or (epochs_apart * steps_per_epoch if steps > steps_per_epoch else 0)
    return dataclasses.replace(cfg.train, max_steps=steps, save_every=every)


def run_one(cfg: FinetuneConfig, *, load: Callable[..., nn.Module] | None = None
            ) -> dict[str, Any]:
    """Fine-tune once with cfg's lr / epochs / seed; returns (and writes) metrics.json.
    `load(task, model_dir, labels, cfg)` builds the model (default `load_model`): the stability
    benchmark passes its own, a `transformers` model or one without dropout.

    Under torchrun every rank trains; rank 0 alone claims the folder and, after training,
    evaluates, exports the model and writes the predictions and metrics.json. The other ranks
    return as soon as training ends, with the training part of the record only (no dev
    metrics): waiting for rank 0 would put its evaluation, however long, under the process
    group's timeout, and nothing on those ranks needs its results."""
    task = build_task(cfg)
    check_model_dir(cfg.model_dir)  # before the output folder is claimed
    folder = RunFolder(Path(cfg.output_dir), FINETUNE_MARKER, run_settings(cfg, task.regression),
                       cfg.train.resume,
                       inputs=[cfg.model_dir])
    earlier = folder.finished("metrics.json")
    if earlier is not None:
        return earlier
    resume = folder.resumes()
    settings = cfg.settings(task, BertConfig.load(cfg.model_dir).max_position_embeddings)
    tokenizer = BertTokenizer.from_pretrained(cfg.model_dir)
    data = prepare_data(task, cfg, tokenizer, settings)  # bad data fails before anything is written
    with folder.claimed():
        return _train_claimed(task, cfg, data, tokenizer, settings, resume, load or load_model)


def _train_claimed(task: Task, cfg: FinetuneConfig, data: TaskData, tokenizer: BertTokenizer,
                   settings: FeatureSettings, resume: bool,
                   load: Callable[..., nn.Module]) -> dict[str, Any]:
    """run_one's training, evaluation and release, in its claimed folder."""
    out = Path(cfg.output_dir)
    main = distributed.is_main()
    model = load(task, cfg.model_dir, data.labels, cfg)
    check_vocab(model.config, tokenizer, cfg.model_dir)
    # (a resumed run then loads its own weights over the head's start)
    start_regression_head(model, task, cfg, data.train.features)
    loop_cfg = dataclasses.replace(train_config(cfg, len(data.train.features)), resume=resume)
    lengths = feature_lengths(data.train.features) if cfg.group_by_length else None
    result = train(model, data.train.features, training_collate(task, model, cfg), loop_cfg,
                   evaluate=dev_evaluator(task, data.dev_splits, settings, cfg), lengths=lengths)
    record = train_record(task, cfg, data, result)
    if not main:
        return record
    metrics = evaluate_splits(task, model, data.dev_splits, settings, cfg.eval_batch_size, out,
                              cfg.train.progress)
    save_release(task, model, tokenizer, out, metrics)
    record.update(metrics)
    if data.note:
        record["data_note"] = data.note
    atomic_write_json(out / "metrics.json", record)
    if not cfg.keep_training_state:  # the release is what a finished run keeps
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return record


def start_regression_head(model: nn.Module, task: Task, cfg: FinetuneConfig,
                          features: list[Feature]) -> None:
    """Where the task is a regression and cfg's `regression_bias` is "mean", set the head's
    bias to the mean of the training labels: the model starts by predicting the average score,
    not 0. Features without a label (a distillation's unlabelled texts: NaN) do not count."""
    if not task.regression or cfg.regression_bias != "mean":
        return
    head = getattr(model, "classifier", None)
    labels = [float(f["labels"]) for f in features if "labels" in f]
    labels = [y for y in labels if math.isfinite(y)]
    if not (isinstance(head, nn.Linear) and head.out_features == 1 and head.bias is not None):
        raise BertkitError(f"--regression-bias mean: {type(model).__name__} has no one-output "
                           "`classifier` layer to start at the labels' mean; use "
                           "--regression-bias zero")
    if labels:
        with torch.no_grad():
            head.bias.fill_(sum(labels) / len(labels))


def train_record(task: Task, cfg: FinetuneConfig, data: TaskData,
                 result: TrainResult) -> dict[str, Any]:
    """The run's settings and training outcome: metrics.json before the dev metrics."""
    return {"task": task.name, "lr": cfg.train.lr, "epochs": cfg.epochs,
            "seed": cfg.train.seed, "steps": result.step,
            "train_examples": len(data.train.examples),
            "train_features": len(data.train.features), "train_file": str(data.train.path),
            "final_loss": result.final_loss,
            # the training's own cost (over every sitting of a resumed run), for studies
            # and benchmarks that report training time apart from loading and evaluation
            "train_seconds": round(result.train_seconds, 3),
            "train_cpu_seconds": round(result.cpu_seconds, 3)}


def training_collate(task: Task, model: nn.Module, cfg: FinetuneConfig):
    """The task's collate; with `cfg.packed`, its training batches carry the layout of their
    real tokens (`training.packing.packed_collate`)."""
    return packed_collate(task.collate, model, packed=cfg.packed, compiled=cfg.train.compile,
                          device=cfg.train.device)


def dev_evaluator(task: Task, dev: list[Split], settings: FeatureSettings, cfg: FinetuneConfig):
    """The loop's periodic evaluation (--eval-every): the first dev split's numeric metrics."""
    if not (cfg.train.eval_every and dev):
        return None

    def evaluate(model: nn.Module) -> dict[str, float]:
        scores = evaluate_splits(task, model, dev[:1], settings, cfg.eval_batch_size, None)
        return {k: float(v) for k, v in scores.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}

    return evaluate


# settings added after runs were made, at the value those runs had: left out of
# finetune_config.json at that value, so that those runs resume
ADDED_LATER = {"regression_bias": "zero"}


def run_settings(cfg: FinetuneConfig, regression: bool) -> dict[str, Any]:
    """finetune_config.json: every setting of the run that shapes it (what --resume must
    match); `regression_bias` only where the task is a regression (it touches no other head)."""
    settings = json.loads(json.dumps(asdict(cfg), default=str))
    if not regression:
        settings.pop("regression_bias")
    return {k: v for k, v in settings.items() if ADDED_LATER.get(k, object()) != v}
