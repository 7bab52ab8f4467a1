"""Knowledge distillation: a small, fast student from a fine-tuned teacher, on the one loop.

    teacher (a `bertkit finetune` folder) ─► its outputs on the transfer set, computed once and
    cached ─► student (teacher layers | preset | pre-trained encoder) trained on soft + hard
    targets by `training.loop.train` ─► a fine-tuned model folder, scored next to the teacher
    (and next to the same student fine-tuned without the teacher) and timed next to it.

Loss (Hinton et al. 2015): `alpha` x the soft cross-entropy between the teacher's and the
student's distributions at temperature T, times T² (so that the soft gradients keep their size
as T changes), plus (1 - `alpha`) x the usual hard-label loss on the examples that have a label.
Regression (one output): mean squared error to the teacher's score, T unused. Multiple choice:
the same soft and hard terms over the choices; span QA: over each window's real positions, for
the start and the end (`distill_loss.span_distillation_loss`). As an option
(`hidden_weight`), TinyBERT's intermediate-layer transfer adds that much of the squared error
between the student's hidden states and the teacher's, and (`attention_weight`) MiniLM's
attention transfer that much of the KL divergence between their attention distributions
(`distill_loss.LayerTransfer`: the teacher runs beside the student on each batch, since
per-token states are too large to cache).

Students (`--student`, runs/distill_student.py): teacher layers (`layers:0,2,4`,
DistilBERT's initialization), a preset from random initialization, or a pre-trained encoder folder
with its own tokenizer (Turc et al. 2019's "pre-trained distillation").

The transfer set is the task's training examples plus, with `unlabelled`, texts only the teacher
labels (Turc et al.). The teacher runs over it once; its logits (fp32, a few numbers per
example) are saved in the output folder (`teacher_outputs.safetensors`) with a fingerprint of
the inputs it saw and of its weights, so that no epoch and no resumed run pays for its forward
again, and a changed data file is found, not trained on with stale targets.

The output folder follows fine-tuning's rules (`io.claim_output_dir`, `--resume`); it holds the
student (HF layout, loadable by `bertkit predict`/`serve` and by `transformers`), its dev
`metrics.json` and predictions, `student_init/` (the student before training, which the
baseline also starts from), `baseline/` (a plain `bertkit finetune` run, when asked for) and
`results.json`: the scores side by side and the speed of both models through `predict`'s path
(runs/distill_report.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.checkpoint import check_vocab
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import HEAD_KEY
from bertkit.inference.finetuned import load_for, task_of
from bertkit.io import atomic_write_json
from bertkit.runs.distill_config import UNLABELLED_FORMATS, DistillConfig, Transfer
from bertkit.runs.distill_loss import (
    IGNORE,
    DistillationObjective,
    LayerTransfer,
    attention_kl,
    distillation_loss,
    hidden_layer_map,
    masked_mean,
    soft_cross_entropy,
    span_distillation_loss,
)
from bertkit.runs.distill_report import measure_speed, summarize
from bertkit.runs.distill_student import (
    StudentSpec,
    build_student,
    parse_student,
    student_config,
    student_from_layers,
    student_tokenizer,
)
from bertkit.runs.distill_targets import (
    CACHE_NAME,
    align_teacher,
    cached_teacher_outputs,
    check_pairs,
    compute_teacher_outputs,
    corpus_examples,
    distill_collate,
    fingerprint,
    no_label,
    read_cached_outputs,
    read_unlabelled,
    teacher_targets,
    with_targets,
)
from bertkit.runs.finetune import (
    FinetuneConfig,
    dev_evaluator,
    load_model,
    prepare_data,
    run_one,
    start_regression_head,
    train_config,
)
from bertkit.runs.finetune import run_settings as finetune_settings
from bertkit.tasks import ColumnSpec, FeatureSettings, Task
from bertkit.tasks.splits import evaluate_splits, featurized, save_release
from bertkit.tokenization import BertTokenizer
from bertkit.training.hardware import resolve_device, resolve_precision
from bertkit.training.loop import train
from bertkit.training.packing import feature_lengths, packed_collate
from bertkit.training.run_folder import RunFolder
from bertkit.training.state import RESUME_AUTO, resolve_resume
from bertkit.training.stream import stream_seed

# The loss lives in runs/distill_loss.py, the transfer set and the teacher's outputs in
# runs/distill_targets.py, the student in runs/distill_student.py, the report in
# runs/distill_report.py; their names are imported from here too, with the run's.
__all__ = ["CACHE_NAME", "IGNORE", "DistillConfig", "DistillationObjective", "LayerTransfer",
           "StudentSpec",
           "UNLABELLED_FORMATS", "align_teacher", "attention_kl", "build_student",
           "cached_teacher_outputs", "check_pairs", "compute_teacher_outputs", "corpus_examples",
           "distill_collate",
           "distillation_loss", "fingerprint", "hidden_layer_map", "masked_mean",
           "measure_speed", "no_label", "parse_student", "read_unlabelled", "resolve_task",
           "run_distill", "soft_cross_entropy", "span_distillation_loss", "student_config",
           "student_from_layers", "student_tokenizer", "summarize", "teacher_targets",
           "with_targets"]

log = logging.getLogger(__name__)

DISTILL_MARKER = "distill_config.json"  # written first: marks a folder as a distillation run
RESULTS_NAME = "results.json"
STUDENT_INIT = "student_init"
BASELINE = "baseline"
# the heads with soft targets: a distribution over classes, over each word's classes (tagging),
# over the positions a span starts and ends at (span QA) or over the choices (multiple choice)
HEADS = ("BertForSequenceClassification", "BertForTokenClassification",
         "BertForQuestionAnswering", "BertForMultipleChoice")
# heads whose examples are more than texts (a question and its context; a context and its
# endings): no --unlabelled file, and (their forwards return no hidden states) no hidden-state
# transfer
STRUCTURED = ("BertForQuestionAnswering", "BertForMultipleChoice")


def resolve_task(teacher_dir: str | Path, name: str | None, columns: ColumnSpec | None) -> Task:
    """The teacher's task (config.json's `bertkit_task`, or `name` for an HF folder), refused
    when its head has no soft targets to distill."""
    task = task_of(teacher_dir, name, columns)
    if task.head not in HEADS:
        raise BertkitError(f"distill: task {task.name} ({task.head}) is not supported; "
                           "sequence classification, regression, token tagging, span QA and "
                           "multiple choice are")
    if BertConfig.load(teacher_dir).extra.get(HEAD_KEY):
        raise BertkitError(f"{teacher_dir}: a frozen-encoder tagger (--features concat-last-4) "
                           "cannot teach a BERT student; use a fully fine-tuned teacher")
    return task


def load_teacher(task: Task, teacher_dir: str | Path) -> tuple[nn.Module, BertTokenizer]:
    return load_for(task, teacher_dir)


# --- the run -----------------------------------------------------------------------------------


def read_transfer(task: Task, cfg: DistillConfig, teacher: nn.Module, teacher_tok: BertTokenizer,
                  student_tok: BertTokenizer, settings: FeatureSettings) -> Transfer:
    """The transfer set and the dev splits; the labels must be the teacher's."""
    data = prepare_data(task, cfg.finetune, student_tok, settings)
    check_labels(task, teacher, data.labels, cfg.teacher_dir, data.train.path)
    label2id = {label: i for i, label in enumerate(data.labels)} if data.labels else None
    extra = []
    if cfg.unlabelled:
        extra = read_unlabelled(task, cfg.unlabelled, cfg.unlabelled_format)
        check_pairs(data.train.examples, extra, cfg.unlabelled)
    train_examples = data.train.examples[: cfg.finetune.max_train_examples] + extra
    student_extra = task.featurize(extra, student_tok, settings, label2id, train=False)
    student_train = data.train.features + [no_label(task, f) for f in student_extra]
    labelled = len(train_examples) - len(extra)  # examples (span QA: questions, not windows)
    if student_tok is teacher_tok:
        teacher_train, teacher_dev = student_train, data.dev_splits
    else:
        student_ids = ([f["example_index"] for f in data.train.features]
                       + [labelled + f["example_index"] for f in student_extra])
        teacher_train = align_teacher(student_ids, task.featurize(
            train_examples, teacher_tok, settings, label2id, train=False), train_examples)
        teacher_dev = [featurized(task, s.name, s.path, s.examples, teacher_tok, settings,
                                  label2id, train=False) for s in data.dev_splits]
    return Transfer(student_train, teacher_train, data.dev_splits, teacher_dev,
                    labelled, len(extra), data.labels, data.note)


def check_labels(task: Task, teacher: nn.Module, labels: list[str] | None,
                 teacher_dir: str, path: Path) -> None:
    """The student learns the teacher's outputs: same labels, same order (span QA and multiple
    choice have none: positions, choices)."""
    if task.head in STRUCTURED:
        return
    config = teacher.config
    if task.regression or labels is None:
        if config.num_labels != 1:
            raise BertkitError(f"{teacher_dir}: a {config.num_labels}-label teacher for a "
                               "regression task")
        return
    theirs = [config.id2label[i] for i in range(config.num_labels)] if config.id2label else None
    if theirs != list(labels):
        raise BertkitError(f"{path}: labels {labels} differ from the teacher's {theirs} "
                           f"({teacher_dir}/config.json); distill on the data it was "
                           "fine-tuned on")


def check_task_options(task: Task, cfg: DistillConfig, spec: StudentSpec) -> None:
    """What a task's examples rule out, refused before any work."""
    if task.head not in STRUCTURED:
        return
    what = "span QA" if task.head == "BertForQuestionAnswering" else "multiple choice"
    if cfg.unlabelled:
        raise BertkitError(f"--unlabelled: {what} ({task.name}) examples are more than texts "
                           "(questions with contexts, contexts with endings); not read from a "
                           "text file: distil on the task's training set")
    for flag, weight in cfg.layer_weights.items():
        if weight:
            raise BertkitError(f"{flag}: the {what} head returns no hidden states or "
                               "attentions; distil without it")
    if task.head == "BertForQuestionAnswering" and spec.kind == "folder":
        raise BertkitError("span QA is distilled position by position, so the student must read "
                           "the teacher's tokens: layers:I,J,... or a preset, not a model folder "
                           "with a tokenizer of its own")


def check_lengths(data: Transfer, teacher: BertConfig, student: BertConfig) -> None:
    """Every input, training and dev, fits the positions of the model that reads it (found
    before any work, not at the first evaluation)."""
    for who, config, trained, dev in (("teacher", teacher, data.teacher_train, data.teacher_dev),
                                      ("student", student, data.student_train, data.student_dev)):
        for what, features in (("the training set", trained),
                               *((f"the {s.name} split", s.features) for s in dev)):
            longest = max(feature_lengths(features), default=0)
            if longest > config.max_position_embeddings:
                raise BertkitError(f"an input of {what} has {longest} tokens but the {who} has "
                                   f"{config.max_position_embeddings} positions; pass "
                                   f"--max-seq-length {config.max_position_embeddings}")


def run_distill(cfg: DistillConfig) -> dict[str, Any]:
    """Distil once; returns (and writes) results.json."""
    out = Path(cfg.output_dir)
    spec = parse_student(cfg.student)
    columns = None if cfg.finetune.columns == ColumnSpec() else cfg.finetune.columns
    task = resolve_task(cfg.teacher_dir, cfg.finetune.task, columns)
    check_task_options(task, cfg, spec)
    inputs = [cfg.teacher_dir] + ([spec.name] if spec.kind == "folder" else [])
    resume = cfg.finetune.train.resume
    folder = RunFolder(out, DISTILL_MARKER, run_settings(cfg, task.regression), resume,
                       inputs=inputs)
    earlier = folder.finished(RESULTS_NAME)
    if earlier is not None:
        return earlier
    folder.check()
    # a student trained before a later step died continues from its release (train_student);
    # otherwise bare --resume with no checkpoint is refused here, before anything is written
    student_done = bool(resume) and (out / "metrics.json").is_file()
    continues = student_done or resolve_resume(out, resume)
    teacher, teacher_tok = load_teacher(task, cfg.teacher_dir)
    teacher.to(resolve_device(cfg.finetune.train.device))
    init_dir = Path(spec.name) if spec.kind == "folder" else out / STUDENT_INIT
    student_tok = student_tokenizer(spec, init_dir, teacher_tok)
    settings = cfg.finetune.settings(task, teacher.config.max_position_embeddings)
    shape = student_config(spec, teacher.config)
    if cfg.attention_weight and shape.num_attention_heads != teacher.config.num_attention_heads:
        raise BertkitError(f"--attention-weight compares the attention of each head, so the "
                           f"student needs the teacher's {teacher.config.num_attention_heads} "
                           f"heads; --student {cfg.student} has {shape.num_attention_heads} "
                           "(layers:I,J,... keeps them)")
    data = read_transfer(task, cfg, teacher, teacher_tok, student_tok, settings)
    check_lengths(data, teacher.config, shape)
    # the teacher's features are the student's when they share a tokenizer: hashed once
    teacher_own = ([] if data.teacher_train is data.student_train else
                   [data.teacher_train, *([s.name, s.features] for s in data.teacher_dev)])
    key = fingerprint(cfg.teacher_dir, data.student_train,
                      *([s.name, s.examples, s.features] for s in data.student_dev), *teacher_own)
    cached = read_cached_outputs(out, key)  # another teacher's or data's: refused, nothing written
    with folder.claimed():
        build_student(teacher, teacher_tok, spec, cfg.finetune.train.seed, init_dir)
        targets = (cached if cached is not None
                   else teacher_outputs(task, cfg, teacher, data.teacher_train, out, key))
        layers = (functools.partial(layer_transfer, teacher, spec, cfg)
                  if any(cfg.layer_weights.values()) else None)
        # the student tunes what the teacher tuned on dev (SQuAD v2.0's threshold) for itself
        student, student_record = train_student(task.untuned(), cfg, init_dir, student_tok,
                                                data, targets=targets, settings=settings,
                                                resume=continues, layers=layers)
        teacher_metrics = evaluate_splits(task, teacher, data.teacher_dev, settings,
                                          cfg.finetune.eval_batch_size, None)
        baseline = run_baseline(task, cfg, init_dir) if cfg.baseline else None
        speed = measure_speed(task, teacher, student, data, cfg) if cfg.speed_texts else None
        results = summarize(task, cfg, data, teacher=teacher, student=student,
                            teacher_metrics=teacher_metrics, student_record=student_record,
                            baseline=baseline, speed=speed)
        atomic_write_json(out / RESULTS_NAME, results)
        return results


def teacher_outputs(task: Task, cfg: DistillConfig, teacher: nn.Module,
                    features: list[dict[str, Any]], out: Path, key: str) -> list[torch.Tensor]:
    """The teacher's outputs on `features`, computed once and cached under `key` (`fingerprint`)."""
    train_cfg = cfg.finetune.train
    precision = resolve_precision(train_cfg.precision, resolve_device(train_cfg.device))
    return cached_teacher_outputs(out, key, functools.partial(
        compute_teacher_outputs, task, teacher, features, cfg.finetune.eval_batch_size,
        precision, train_cfg.progress))


def layer_transfer(teacher: nn.Module, spec: StudentSpec, cfg: DistillConfig,
                   student: nn.Module) -> LayerTransfer:
    """The teacher's hidden states and attentions as targets for `student`'s
    (`--hidden-weight`, `--attention-weight`); the map W_h starts from its own stream of the
    run's seed, so that a run is the same run every time."""
    layer_map = hidden_layer_map(student.config.num_hidden_layers,
                                 teacher.config.num_hidden_layers, spec.layers)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(cfg.finetune.train.seed, "hidden-map"))
        return LayerTransfer(teacher.bert, student.config.hidden_size, layer_map,
                             cfg.hidden_weight, cfg.attention_weight)


def train_student(task: Task, cfg: DistillConfig, init_dir: Path, tokenizer: BertTokenizer,
                  data: Transfer, *, targets: list[torch.Tensor], settings: FeatureSettings,
                  resume: bool, layers: Callable[[nn.Module], LayerTransfer] | None = None
                  ) -> tuple[nn.Module, dict[str, Any]]:
    """Train (or, finished earlier, load) the student; its release and dev metrics.json land
    in the output folder as a fine-tuning run's do. `resume`: the run continues (resolved).
    `layers` makes the student's intermediate layers' transfer (`--hidden-weight`,
    `--attention-weight`)."""
    ft = cfg.finetune
    out = Path(ft.output_dir)
    if (out / "metrics.json").is_file() and resume:  # trained before a later step died
        # on the run's device, as a student just trained is: the speed is timed beside the teacher
        model = load_model(task, out, data.labels, ft).to(resolve_device(ft.train.device))
        return model, json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    student = load_model(task, init_dir, data.labels, ft)
    check_vocab(student.config, tokenizer, init_dir)
    start_regression_head(student, task, ft, data.student_train)  # as the baseline's starts
    objective = DistillationObjective(student, cfg.temperature, cfg.alpha, task.regression,
                                      layers(student) if layers else None)
    features = with_targets(data.student_train, targets)
    loop_cfg = dataclasses.replace(train_config(ft, len(features)), resume=resume)
    evaluate = dev_evaluator(task, data.student_dev, settings, ft)
    # the teacher's hidden states and attentions come from its padded forward: no packed
    # batches then
    collate = training_collate(task, student, ft, packed=layers is None)
    result = train(objective, features, collate, loop_cfg,
                   evaluate=None if evaluate is None else lambda m: evaluate(m.student))
    metrics = evaluate_splits(task, student, data.student_dev, settings, ft.eval_batch_size, out,
                              ft.train.progress)
    save_release(task, student, tokenizer, out, metrics)
    record = {"task": task.name, "steps": result.step,
              "final_loss": result.final_loss, **metrics,
              **({"data_note": data.note} if data.note else {})}
    atomic_write_json(out / "metrics.json", record)
    if not ft.keep_training_state:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return student, record


def training_collate(task: Task, student: nn.Module, cfg: FinetuneConfig, packed: bool = True):
    """`distill_collate`, packed as fine-tuning's batches are (`training.packing`)."""
    return packed_collate(functools.partial(distill_collate, task), student,
                          packed=packed and cfg.packed, compiled=cfg.train.compile,
                          device=cfg.train.device)


def run_baseline(task: Task, cfg: DistillConfig, init_dir: Path) -> dict[str, Any]:
    """The same student, the same recipe, the labelled data alone: a `bertkit finetune` run
    (of the task as the teacher names it: a custom task's columns come from its config.json).
    A resumed run's baseline may not have started yet: it continues or starts ("auto")."""
    resume = RESUME_AUTO if cfg.finetune.train.resume else False
    ft = dataclasses.replace(cfg.finetune.with_run(Path(cfg.output_dir) / BASELINE, resume=resume),
                             model_dir=str(init_dir), task=task.name,
                             columns=getattr(task, "columns", cfg.finetune.columns))
    return run_one(ft)


# settings added after runs were made, at the value those runs had: left out of
# distill_config.json at that value, so that those runs resume
ADDED_LATER = {"attention_weight": 0.0}


def run_settings(cfg: DistillConfig, regression: bool) -> dict[str, Any]:
    """distill_config.json: every setting of the run (what --resume must match); the
    fine-tuning recipe's as a fine-tuning run records them."""
    settings = json.loads(json.dumps(asdict(cfg), default=str))
    settings["finetune"] = finetune_settings(cfg.finetune, regression)
    return {k: v for k, v in settings.items() if ADDED_LATER.get(k, object()) != v}
