"""`bertkit finetune`, `bertkit evaluate`, `bertkit predict`: fine-tune on a task, score a
fine-tuned model on a labeled file, label new inputs (JSONL out)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bertkit.errors import BertkitError

TASK_HELP = ("cola sst2 mrpc stsb qqp mnli qnli rte wnli squad1 squad2 conll2003 swag custom")


def register(subparsers) -> None:
    _add_finetune(subparsers)
    _add_evaluate(subparsers)
    _add_predict(subparsers)


def _add_finetune(subparsers) -> None:
    p = subparsers.add_parser("finetune", help="fine-tune a BERT checkpoint on a task",
                              description="Fine-tune with the paper's recipe (AdamW, batch 32, "
                              "3 epochs, 10%% warmup then linear decay). Comma-separated --lr / "
                              "--epochs and --seeds N run a grid and select on dev.")
    p.add_argument("task", help=TASK_HELP)
    p.add_argument("--model", required=True, help="HF-layout checkpoint directory")
    p.add_argument("--data", required=True, help="folder with the task's train/dev(/test) files")
    p.add_argument("--output", required=True, help="output folder (model, metrics.json, ...)")
    p.add_argument("--lr", default="2e-5", help="learning rate(s), e.g. 2e-5,3e-5,5e-5")
    p.add_argument("--epochs", default="3", help="epoch count(s), e.g. 2,3,4")
    p.add_argument("--seeds", type=int, default=1, help="runs per setting (seeds seed..seed+N-1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--micro-batch-size", type=int, default=None)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--train-file", default=None, help="use this training file instead")
    p.add_argument("--dev-file", default=None, help="use this dev file instead")
    p.add_argument("--split-dev", type=float, default=None, metavar="F",
                   help="no train file (e.g. SQuAD here): train on the dev file's first 1-F "
                   "(by article), evaluate on the rest; metrics.json says so")
    p.add_argument("--max-train-examples", type=int, default=None)
    p.add_argument("--freeze-encoder", action="store_true",
                   help="feature-based: train only the head on a frozen encoder")
    p.add_argument("--features", default="cls", choices=["cls", "concat-last-4"],
                   help="with --freeze-encoder: concat-last-4 = the paper's BiLSTM tagger (NER)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--eval-every", type=int, default=0, help="steps between dev evaluations")
    p.add_argument("--no-test-predictions", action="store_true",
                   help="do not label the test file(s) found beside train/dev")
    p.add_argument("--resume", action="store_true", help="continue interrupted runs")
    _common(p)
    p.set_defaults(func=finetune_cmd)


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
    p.add_argument("--output", default=None, help="JSONL file (default: stdout)")
    _common(p)
    p.set_defaults(func=predict_cmd)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-seq-length", type=int, default=None, help="default 128; SQuAD 384")
    p.add_argument("--doc-stride", type=int, default=128)
    p.add_argument("--max-query-length", type=int, default=64)
    p.add_argument("--max-answer-length", type=int, default=30)
    p.add_argument("--n-best-size", type=int, default=20)
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--max-eval-examples", type=int, default=None)
    p.add_argument("--text-column", default=None, help="custom data: text column (text)")
    p.add_argument("--pair-column", default=None, help="custom data: second text column")
    p.add_argument("--label-column", default=None, help="custom data: label column (label)")
    p.add_argument("--regression", action="store_true", help="custom data: numeric labels")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _columns(args: argparse.Namespace):
    from bertkit.tasks import ColumnSpec

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


def finetune_cmd(args: argparse.Namespace) -> int:
    from bertkit.tasks import ColumnSpec
    from bertkit.training.finetune import FinetuneConfig, build_task, check_data, run_grid, run_one

    lrs, epochs = _floats(args.lr, "lr"), _floats(args.epochs, "epochs")
    if args.seeds < 1:
        raise BertkitError(f"--seeds must be >= 1, got {args.seeds}")
    cfg = FinetuneConfig(
        task=args.task, model_dir=args.model, data_dir=args.data, output_dir=args.output,
        lr=lrs[0], epochs=epochs[0], seed=args.seed, batch_size=args.batch_size,
        micro_batch_size=args.micro_batch_size, eval_batch_size=args.eval_batch_size,
        warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay,
        max_seq_length=args.max_seq_length, doc_stride=args.doc_stride,
        max_query_length=args.max_query_length, max_answer_length=args.max_answer_length,
        n_best_size=args.n_best_size, max_train_examples=args.max_train_examples,
        max_eval_examples=args.max_eval_examples, train_file=args.train_file,
        dev_file=args.dev_file, split_dev=args.split_dev, freeze_encoder=args.freeze_encoder,
        features=args.features,
        columns=_columns(args) or ColumnSpec(), precision=args.precision, device=args.device,
        eval_every=args.eval_every, predict_test=not args.no_test_predictions,
        resume=args.resume, progress=not args.no_progress)
    check_data(build_task(cfg), cfg)
    seeds = list(range(args.seed, args.seed + args.seeds))
    if len(lrs) == 1 and len(epochs) == 1 and len(seeds) == 1:
        metrics = run_one(cfg)
    else:
        metrics = run_grid(cfg, lrs, epochs, seeds)
        metrics = {k: v for k, v in metrics.items() if k != "grid"}
    print(json.dumps(metrics, indent=2, default=str))
    return 0


def _settings(args: argparse.Namespace, task):
    from bertkit.tasks import FeatureSettings

    return FeatureSettings(max_seq_length=args.max_seq_length or task.max_seq_length,
                           doc_stride=args.doc_stride, max_query_length=args.max_query_length,
                           max_answer_length=args.max_answer_length,
                           n_best_size=args.n_best_size)


def evaluate_cmd(args: argparse.Namespace) -> int:
    from bertkit.training.finetune import evaluate_model, task_of

    task = task_of(args.model, args.task, _columns(args))
    if args.file:
        path = Path(args.file)
    elif args.data:
        path = task.find_file(Path(args.data), args.split)
    else:
        raise BertkitError("evaluate: pass --data DIR (with --split) or --file FILE")
    out = Path(args.output) if args.output else None
    metrics = evaluate_model(args.model, task, path, _settings(args, task), args.eval_batch_size,
                             args.max_eval_examples, out, args.split, not args.no_progress)
    print(json.dumps(metrics, indent=2))
    return 0


def predict_cmd(args: argparse.Namespace) -> int:
    from bertkit.io import atomic_write_text
    from bertkit.tasks.inputs import from_records, output_record, read_input
    from bertkit.training.finetune import predict_examples, task_of

    task = task_of(args.model, args.task, _columns(args))
    if args.input:
        examples = read_input(task, Path(args.input))
    else:
        record = {"text": args.text, "context": args.text, "question": args.question}
        if args.pair is not None:
            record["pair"] = args.pair
        examples = from_records(task, [("--text", {k: v for k, v in record.items()
                                                    if v is not None})])
    pairs = predict_examples(args.model, task, examples, _settings(args, task),
                             args.eval_batch_size)
    lines = [json.dumps(output_record(e, p), ensure_ascii=False) for e, p in pairs]
    text = "\n".join(lines) + ("\n" if lines else "")
    if args.output:
        atomic_write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return 0
