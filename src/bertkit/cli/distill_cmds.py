"""`bertkit distill`: a smaller, faster student from a fine-tuned teacher, scored and timed
next to it (`bertkit.runs.distill`)."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit.cli.common import add_hardware
from bertkit.cli.finetune_cmds import (
    _columns,
    _common,
    _feature_options,
    add_packing,
    add_state_options,
    add_step_options,
    add_training_data_options,
)
from bertkit.config import PRESETS
from bertkit.errors import BertkitError
from bertkit.runs.distill import UNLABELLED_FORMATS, DistillConfig, resolve_task, run_distill
from bertkit.runs.finetune import (
    FinetuneConfig,
    build_task,
    check_data,
    finetune_train_config,
)
from bertkit.tasks import ColumnSpec

DEFAULTS = DistillConfig("", "tiny", FinetuneConfig("", "", ""))  # defined once, in the library


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "distill", help="distil a fine-tuned model into a smaller, faster student",
        description="Train a student on the teacher's soft targets (temperature T, times T^2) "
        "mixed with the hard labels by --alpha (regression: MSE to the teacher's score). The "
        "teacher's outputs are computed once and cached in --output. At the end the student's "
        "dev score is printed next to the teacher's (and, with --baseline, next to the same "
        "student fine-tuned without the teacher) with both models' texts/s; the same goes to "
        "OUTPUT/results.json. The student is a fine-tuned model folder: `bertkit predict`, "
        "`bertkit serve` and transformers load it.")
    p.add_argument("teacher", help="a `bertkit finetune` output folder (or an HF folder of "
                   "the task's head, with --task): sequence classification or regression, "
                   "token tagging, span QA, multiple choice")
    p.add_argument("--student", required=True,
                   help=f"layers:I,J,... (those teacher layers, DistilBERT-style), a preset "
                   f"({', '.join(PRESETS)}; random init, the teacher's vocabulary) or a "
                   "pre-trained encoder folder (any size, its own tokenizer)")
    p.add_argument("--data", required=True, help="folder with the task's train/dev files")
    p.add_argument("--output", required=True,
                   help="new or empty folder (or this command's earlier run, with --resume)")
    p.add_argument("--task", default=None, help="default: the task named in the teacher's "
                   "config.json")
    _distill_options(p.add_argument_group("distillation"))
    recipe = p.add_argument_group("the recipe (fine-tuning's, the same defaults)")
    recipe.add_argument("--lr", type=float, default=DEFAULTS.finetune.train.lr)
    recipe.add_argument("--epochs", type=float, default=DEFAULTS.finetune.epochs)
    add_step_options(recipe, DEFAULTS.finetune.train)
    data = p.add_argument_group("the data")
    add_training_data_options(data)
    _common(data)
    speed = p.add_argument_group("hardware and speed")
    add_hardware(speed, DEFAULTS.finetune.train)
    add_packing(speed)
    add_state_options(p.add_argument_group("the run's files"), DEFAULTS.finetune.train)
    p.set_defaults(func=distill_cmd)


def _distill_options(p: argparse._ActionsContainer) -> None:
    p.add_argument("--temperature", type=float, default=DEFAULTS.temperature,
                   help="softmax temperature of the soft targets (every task but regression)")
    p.add_argument("--alpha", type=float, default=DEFAULTS.alpha,
                   help="weight of the teacher's loss; 1 - alpha goes to the hard labels")
    p.add_argument("--hidden-weight", type=float, default=DEFAULTS.hidden_weight,
                   metavar="BETA",
                   help="add BETA x TinyBERT's hidden-state loss: the squared error between "
                   "each student layer's output (through a learned map when the widths differ) "
                   "and its teacher layer's (the layers a layers: student was taken from, else "
                   "evenly spaced), embeddings included. The teacher then runs beside the "
                   "student on every batch (about its forward's cost per step) and batches are "
                   "not packed. Students that read the teacher's tokens only (layers:, a "
                   "preset). Default 0: off (docs/reports/distillation.md says what it measured)")
    p.add_argument("--attention-weight", type=float, default=DEFAULTS.attention_weight,
                   metavar="GAMMA",
                   help="add GAMMA x MiniLM's attention loss: the KL divergence between the "
                   "teacher's and the student's attention distributions, head by head, of each "
                   "student layer and its teacher layer (mapped as for --hidden-weight). The "
                   "student needs the teacher's heads (layers: keeps them). The teacher runs "
                   "beside the student, as for --hidden-weight. Default 0: off "
                   "(docs/reports/distillation.md says what it measured)")
    p.add_argument("--unlabelled", default=None, metavar="FILE",
                   help="more texts, labelled by the teacher only: one per line, JSONL "
                   "(\"text\", \"pair\") or the task's own format; see --unlabelled-format")
    p.add_argument("--unlabelled-format", default=None, choices=UNLABELLED_FORMATS,
                   help="lines: as `predict` reads; any other: a corpus format of `prepare`, "
                   f"one text per sentence (default: {DEFAULTS.unlabelled_format})")
    p.add_argument("--baseline", action="store_true",
                   help="also fine-tune the same student without the teacher (doubles the "
                   "cost; into OUTPUT/baseline)")
    p.add_argument("--speed-texts", type=int, default=DEFAULTS.speed_texts,
                   help="dev texts timed through predict's path, teacher and student (0: none)")
    p.add_argument("--speed-repeats", type=int, default=DEFAULTS.speed_repeats,
                   help="timed passes per model; the fastest counts")


def distill_config(args: argparse.Namespace) -> DistillConfig:
    if args.unlabelled_format and not args.unlabelled:
        raise BertkitError("--unlabelled-format without --unlabelled: there is no file to read "
                           "in that format")
    task = resolve_task(args.teacher, args.task, _columns(args))
    train = finetune_train_config(
        args.output, lr=args.lr, seed=args.seed, batch_size=args.batch_size,
        max_steps=args.max_steps, micro_batch_size=args.micro_batch_size,
        warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay,
        precision=args.precision, device=args.device, eval_every=args.eval_every,
        save_every=args.save_every, log_every=args.log_every,
        loader_workers=args.loader_workers, resume=args.resume,
        progress=not args.no_progress)
    finetune = FinetuneConfig(
        task=task.name, model_dir=args.teacher, data_dir=args.data, train=train,
        epochs=args.epochs, train_file=args.train_file, dev_file=args.dev_file,
        split_dev=args.split_dev, max_train_examples=args.max_train_examples,
        columns=getattr(task, "columns", ColumnSpec()), predict_test=False,
        keep_training_state=args.keep_training_state, packed=not args.no_packing,
        **_feature_options(args))
    return DistillConfig(
        teacher_dir=args.teacher, student=args.student, finetune=finetune,
        temperature=args.temperature, alpha=args.alpha, unlabelled=args.unlabelled,
        unlabelled_format=args.unlabelled_format or DEFAULTS.unlabelled_format,
        baseline=args.baseline,
        speed_texts=args.speed_texts, speed_repeats=args.speed_repeats,
        hidden_weight=args.hidden_weight, attention_weight=args.attention_weight)


def distill_cmd(args: argparse.Namespace) -> int:
    cfg = distill_config(args)
    check_data(build_task(cfg.finetune), cfg.finetune)
    results = run_distill(cfg)
    print(json.dumps(results, indent=2, default=str))
    print(summary_line(results), file=sys.stderr)
    return 0


def summary_line(results: dict) -> str:
    """One line a person reads: the scores side by side and the speed-up."""
    def pct(value) -> str:
        return "-" if value is None else f"{value:.4f}"

    parts = [f"{results['metric']}: teacher {pct(results['teacher_dev'])}, student "
             f"{pct(results['student_dev'])} ({pct(results['student_fraction_of_teacher'])} of "
             "the teacher's)"]
    if results.get("baseline_dev") is not None:
        parts.append(f"without the teacher {pct(results['baseline_dev'])}")
    speed = results.get("speed") or {}
    if speed.get("texts"):
        parts.append(f"speed {speed['student_texts_per_s']} vs {speed['teacher_texts_per_s']} "
                     f"texts/s ({speed['speedup']}x wall, {speed['cpu_speedup']}x CPU time, "
                     f"{speed['threads']} threads)")
    return "; ".join(parts)
