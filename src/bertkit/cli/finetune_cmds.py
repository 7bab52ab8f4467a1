"""`bertkit finetune`, `bertkit evaluate`, `bertkit predict`: fine-tune on a task, score a
fine-tuned model on a labeled file, label new inputs (JSONL out). `finetune` also runs under
`torchrun` (DDP, one run per launch); the other two refuse there (`cli.main`)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from bertkit.cli.common import add_hardware, add_join_timeout, add_resume, run_together
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.inference.finetuned import PREDICT_WINDOW, evaluate_model, predict_windows, task_of
from bertkit.io import atomic_path, check_new_file, claim_output_dir, progress_bar
from bertkit.runs.finetune import (
    REGRESSION_BIASES,
    FinetuneConfig,
    build_task,
    check_data,
    finetune_train_config,
    run_one,
)
from bertkit.runs.grid import run_grid
from bertkit.tasks import ColumnSpec, FeatureSettings
from bertkit.tasks.inputs import from_records, iter_input, scan_input
from bertkit.training import distributed
from bertkit.training.config import TrainConfig
from bertkit.training.optim import OPTIMIZERS, SCHEDULES

TASK_HELP = ("cola sst2 mrpc stsb qqp mnli qnli rte wnli squad1 squad2 conll2003 swag custom")


def register(subparsers) -> None:
    _add_finetune(subparsers)
    _add_evaluate(subparsers)
    _add_predict(subparsers)


FINETUNE_DEFAULTS = FinetuneConfig("", "", "")  # the defaults, defined once in the library


def _add_finetune(subparsers) -> None:
    p = subparsers.add_parser("finetune", help="fine-tune a BERT checkpoint on a task",
                              description="Fine-tune with the paper's recipe (AdamW, batch 32, "
                              "3 epochs, 10% warmup then linear decay). Comma-separated --lr / "
                              "--epochs and --seeds N run a grid and select on dev. Under "
                              "`torchrun --nproc_per_node N -m bertkit finetune ...` one run "
                              "trains with DDP; --batch-size stays the global batch.")
    p.add_argument("task", help=TASK_HELP)
    p.add_argument("--model", required=True, help="HF-layout checkpoint directory")
    p.add_argument("--data", required=True, help="folder with the task's train/dev(/test) files")
    p.add_argument("--output", required=True,
                   help="new or empty folder (or this command's earlier run, with --resume)")
    recipe = p.add_argument_group("the recipe")
    recipe.add_argument("--lr", default=f"{FINETUNE_DEFAULTS.train.lr:g}",
                        help="learning rate(s), e.g. 2e-5,3e-5,5e-5")
    recipe.add_argument("--epochs", default=f"{FINETUNE_DEFAULTS.epochs:g}",
                        help="epoch count(s), e.g. 2,3,4")
    recipe.add_argument("--seeds", type=int, default=1,
                        help="runs per setting (seeds seed..seed+N-1)")
    add_step_options(recipe, FINETUNE_DEFAULTS.train)
    recipe.add_argument("--optimizer", default=FINETUNE_DEFAULTS.train.optimizer,
                        choices=OPTIMIZERS,
                        help="adamw_google: Google's AdamWeightDecayOptimizer (no bias correction)")
    recipe.add_argument("--schedule", default=FINETUNE_DEFAULTS.train.schedule, choices=SCHEDULES,
                        help="linear: warm up to the peak, then decay (HF); google: decay from "
                        "step 0, warmup overriding it (Google's optimization.py)")
    recipe.add_argument("--dropout", type=float, default=None, metavar="P",
                        help="dropout while fine-tuning (hidden, attention, classifier; default: "
                        "the checkpoint's own config: a model pre-trained without dropout has 0 "
                        "there)")
    recipe.add_argument("--regression-bias", default=FINETUNE_DEFAULTS.regression_bias,
                        choices=REGRESSION_BIASES,
                        help="a regression task's head (STS-B, custom with --regression): mean = start "
                        "its output at the training labels' mean, so that a short run learns the "
                        "ranking instead of the offset; zero = Hugging Face's init (default: "
                        "%(default)s)")
    data = p.add_argument_group("the data")
    add_training_data_options(data)
    _common(data)
    frozen = p.add_argument_group("feature-based (the paper's section 5.3)")
    frozen.add_argument("--freeze-encoder", action="store_true",
                        help="train only the head on a frozen encoder")
    frozen.add_argument("--features", default=FINETUNE_DEFAULTS.features,
                        choices=["cls", "concat-last-4"],
                        help="with --freeze-encoder: concat-last-4 = the paper's BiLSTM tagger (NER)")
    speed = p.add_argument_group("hardware and speed")
    add_hardware(speed, FINETUNE_DEFAULTS.train)
    speed.add_argument("--compile", action="store_true",
                       help="torch.compile the model (padded batches; see docs/reports/benchmarks.md)")
    add_packing(speed)
    speed.add_argument("--group-by-length", action="store_true",
                       help="batches of similar lengths: less padding in attention, but batches "
                       "are no longer i.i.d. and runs are less stable (docs/reports/results.md)")
    state = p.add_argument_group("the run's files")
    add_state_options(state, FINETUNE_DEFAULTS.train)
    state.add_argument("--no-test-predictions", action="store_true",
                       help="do not label the test file(s) found beside train/dev")
    add_join_timeout(state)
    p.set_defaults(func=finetune_cmd)


def add_step_options(p: argparse._ActionsContainer, train: TrainConfig) -> None:
    """The loop's recipe beside the rate and the epochs (finetune, distill), with `train`'s
    defaults."""
    p.add_argument("--max-steps", type=int, default=None,
                   help="cap on optimizer steps (per run)")
    p.add_argument("--seed", type=int, default=train.seed)
    p.add_argument("--batch-size", type=int, default=train.batch_size,
                   help="global examples per step, whatever the number of processes")
    p.add_argument("--micro-batch-size", type=int, default=None,
                   help="per forward per process (accumulation = batch / (micro x processes))")
    p.add_argument("--warmup-ratio", type=float, default=train.warmup_ratio)
    p.add_argument("--weight-decay", type=float, default=train.weight_decay)


def add_training_data_options(p: argparse._ActionsContainer) -> None:
    """Which training and dev files, and how much of the training set (finetune, distill)."""
    p.add_argument("--train-file", default=None, help="use this training file instead")
    p.add_argument("--dev-file", default=None, help="use this dev file instead")
    p.add_argument("--split-dev", type=float, default=None, metavar="F",
                   help="no train file (e.g. SQuAD here): train on the dev file's first 1-F "
                   "(by article), evaluate on the rest; metrics.json says so")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="train on the first N training examples")


def add_packing(p: argparse._ActionsContainer) -> None:
    p.add_argument("--no-packing", action="store_true",
                   help="the padded forward (dense layers on padding too); the packed one gives "
                   "the same loss and gradients, faster")


def add_state_options(p: argparse._ActionsContainer, train: TrainConfig) -> None:
    """Evaluation, logging, resumable states, --resume (finetune, distill)."""
    p.add_argument("--eval-every", type=int, default=0,
                   help="steps between dev evaluations (under torchrun the other processes "
                   "wait for rank 0's: see docs/reports/scaling.md for the time limit)")
    p.add_argument("--log-every", type=int, default=train.log_every,
                   help="steps between lines of OUTPUT/metrics.jsonl")
    p.add_argument("--save-every", type=int, default=0,
                   help="steps between resumable states (default 0: one per epoch, or per few "
                   "epochs where a run has more than 10); an hour-long "
                   "epoch killed midway then resumes from its last state")
    p.add_argument("--keep-training-state", action="store_true",
                   help="keep checkpoints/ of finished runs (default: only the model)")
    add_resume(p)


def _add_evaluate(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="score a fine-tuned model on a labeled file")
    p.add_argument("model", help="fine-tuned model directory")
    p.add_argument("--task", default=None, help="default: the task named in config.json")
    p.add_argument("--data", default=None, help="folder holding the split's file")
    p.add_argument("--file", default=None, help="the labeled file itself (instead of --data)")
    p.add_argument("--split", default="dev")
    p.add_argument("--output", default=None, help="write metrics.json and predictions here")
    _common(p)
    p.set_defaults(func=evaluate_cmd)


def _add_predict(subparsers) -> None:
    p = subparsers.add_parser("predict", help="label new inputs with a fine-tuned model (JSONL)")
    p.add_argument("model", help="fine-tuned model directory")
    p.add_argument("--task", default=None, help="default: the task named in config.json")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help="JSONL, the task's own format, or one text per line")
    src.add_argument("--text", help="one text (a sentence; a context with --question)")
    p.add_argument("--pair", default=None, help="second sentence for pair tasks (with --text)")
    p.add_argument("--question", default=None, help="the question, for SQuAD (with --text)")
    p.add_argument("--start", default=None,
                   help="SWAG: the first words of every ending (with --text as the context)")
    p.add_argument("--ending", action="append", default=None,
                   help="SWAG: one candidate ending; give it four times (with --text)")
    p.add_argument("--output", default=None, help="JSONL file (default: stdout)")
    p.add_argument("--scores", action="store_true",
                   help="add every label's (or ending's) probability to each record")
    _common(p)
    p.set_defaults(func=predict_cmd)


def _common(p: argparse._ActionsContainer) -> None:
    p.add_argument("--max-seq-length", type=int, default=None, help="default 128; SQuAD 384")
    p.add_argument("--doc-stride", type=int, default=FINETUNE_DEFAULTS.doc_stride)
    p.add_argument("--max-query-length", type=int, default=FINETUNE_DEFAULTS.max_query_length)
    p.add_argument("--max-answer-length", type=int, default=FINETUNE_DEFAULTS.max_answer_length)
    p.add_argument("--n-best-size", type=int, default=FINETUNE_DEFAULTS.n_best_size)
    p.add_argument("--eval-batch-size", type=int, default=FINETUNE_DEFAULTS.eval_batch_size)
    p.add_argument("--max-eval-examples", type=int, default=None)
    p.add_argument("--text-column", default=None, help="custom data: text column (text)")
    p.add_argument("--pair-column", default=None, help="custom data: second text column")
    p.add_argument("--label-column", default=None, help="custom data: label column (label)")
    p.add_argument("--regression", action="store_true", help="custom data: numeric labels")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _columns(args: argparse.Namespace) -> ColumnSpec | None:
    if not (args.text_column or args.pair_column or args.label_column or args.regression):
        return None
    return ColumnSpec(text=args.text_column or "text", pair=args.pair_column,
                      label=args.label_column or "label", regression=args.regression)


def _floats(text: str, name: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BertkitError(f"--{name}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise BertkitError(f"--{name}: no value given")
    return values


def _feature_options(args: argparse.Namespace) -> dict:
    """The featurization options shared by finetune, evaluate and predict."""
    return dict(max_seq_length=args.max_seq_length, doc_stride=args.doc_stride,
                max_query_length=args.max_query_length, max_answer_length=args.max_answer_length,
                n_best_size=args.n_best_size, eval_batch_size=args.eval_batch_size,
                max_eval_examples=args.max_eval_examples)


def finetune_config(args: argparse.Namespace) -> tuple[FinetuneConfig, list[float], list[float]]:
    lrs, epochs = _floats(args.lr, "lr"), _floats(args.epochs, "epochs")
    train = finetune_train_config(
        args.output, lr=lrs[0], seed=args.seed, batch_size=args.batch_size,
        max_steps=args.max_steps, micro_batch_size=args.micro_batch_size,
        warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay,
        optimizer=args.optimizer, schedule=args.schedule, precision=args.precision,
        device=args.device, eval_every=args.eval_every, save_every=args.save_every,
        log_every=args.log_every, compile=args.compile,
        loader_workers=args.loader_workers,
        resume=args.resume, progress=not args.no_progress)
    for lr in lrs[1:]:
        dataclasses.replace(train, lr=lr)  # each grid value is validated before any work
    cfg = FinetuneConfig(
        task=args.task, model_dir=args.model, data_dir=args.data, train=train,
        epochs=epochs[0], train_file=args.train_file, dev_file=args.dev_file,
        split_dev=args.split_dev, max_train_examples=args.max_train_examples,
        freeze_encoder=args.freeze_encoder, features=args.features,
        columns=_columns(args) or ColumnSpec(), predict_test=not args.no_test_predictions,
        keep_training_state=args.keep_training_state, group_by_length=args.group_by_length,
        packed=not args.no_packing, dropout=args.dropout,
        regression_bias=args.regression_bias, **_feature_options(args))
    for ep in epochs[1:]:
        dataclasses.replace(cfg, epochs=ep)
    return cfg, lrs, epochs


def finetune_cmd(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise BertkitError(f"--seeds must be >= 1, got {args.seeds}")
    cfg, lrs, epochs = finetune_config(args)
    seeds = list(range(args.seed, args.seed + args.seeds))
    grid = not (len(lrs) == 1 and len(epochs) == 1 and len(seeds) == 1)
    if grid and _launched_processes(os.environ) > 1:
        # every process refuses alike; rank 0 alone says so (one line, as cli.main's refusals)
        if os.environ.get("RANK", "0") == "0":
            raise BertkitError("a grid (several --lr, --epochs or --seeds) runs as one process; "
                               "under torchrun fine-tune one setting per launch")
        return 1
    check_data(build_task(cfg), cfg)
    distributed.setup(os.environ, device=args.device, join_timeout=args.join_timeout)
    if not distributed.is_main():
        # every rank reads the same data: rank 0's warnings are everyone's, said once
        logging.getLogger().setLevel(logging.ERROR)

    def work() -> int:
        metrics = run_one(cfg) if not grid else run_grid(cfg, lrs, epochs, seeds)
        if distributed.is_main():  # the other ranks hold no dev metrics (run_one)
            print(json.dumps({k: v for k, v in metrics.items() if k != "grid"}, indent=2,
                             default=str))
        return 0

    return run_together(work)


def _launched_processes(environ: Mapping[str, str]) -> int:
    """How many processes a launcher (torchrun) started for this command: its WORLD_SIZE."""
    world = environ.get("WORLD_SIZE", "1")
    return int(world) if world.isdigit() else 1


def _settings(args: argparse.Namespace, task) -> FeatureSettings:
    """The featurization of evaluate / predict: FinetuneConfig's rule, with these options."""
    positions = BertConfig.load(args.model).max_position_embeddings
    return FinetuneConfig("", "", "", **_feature_options(args)).settings(task, positions)


def evaluate_cmd(args: argparse.Namespace) -> int:
    task = task_of(args.model, args.task, _columns(args))
    if args.file:
        path = Path(args.file)
    elif args.data:
        path = task.find_file(Path(args.data), args.split)
    else:
        raise BertkitError("evaluate: pass --data DIR (with --split) or --file FILE")
    out = Path(args.output) if args.output else None
    if out is not None:
        claim_output_dir(out, "evaluate.json", {"model": args.model, "file": str(path)},
                         resume=True, inputs=[args.model])
    metrics = evaluate_model(args.model, task, path, _settings(args, task),
                             batch_size=args.eval_batch_size, limit=args.max_eval_examples,
                             out_dir=out, split=args.split, progress=not args.no_progress)
    print(json.dumps(metrics, indent=2))
    return 0


def predict_cmd(args: argparse.Namespace) -> int:
    if args.output:
        check_new_file(args.output, inputs=[args.model] + ([args.input] if args.input else []))
    task = task_of(args.model, args.task, _columns(args))
    if args.input:
        # checked whole before any model work, then read again a window at a time
        count = scan_input(task, Path(args.input))
        examples = iter_input(task, Path(args.input))
    else:
        record = {"text": args.text, "context": args.text, "question": args.question,
                  "start": args.start, "endings": args.ending}
        if args.pair is not None:
            record["pair"] = args.pair
        examples = from_records(task, [("--text", {k: v for k, v in record.items()
                                                    if v is not None})])
        count = len(examples)
    windows = predict_windows(args.model, task, examples, _settings(args, task),
                              args.eval_batch_size, scores=args.scores)
    with contextlib.ExitStack() as stack:
        out = sys.stdout
        if args.output:
            out = stack.enter_context(stack.enter_context(atomic_path(args.output)).open(
                "w", encoding="utf-8"))
        bar = stack.enter_context(progress_bar(total=count, desc="predict", unit="input",
                                               disable=count <= PREDICT_WINDOW))
        for records in windows:
            out.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            bar.update(len(records))
    return 0
