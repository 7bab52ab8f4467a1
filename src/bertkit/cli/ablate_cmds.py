"""`bertkit ablate`: the paper's ablations at small scale (objectives; model sizes)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from bertkit.cli.common import data_root
from bertkit.errors import BertkitError
from bertkit.studies.ablate import (
    OBJECTIVE_VARIANTS,
    SIZE_VARIANTS,
    STUDIES,
    TASKS,
    AblationConfig,
    run_ablation,
)
from bertkit.vocab.trainer import CRITERIA

ABLATION_DEFAULTS = AblationConfig("", ("-",), "")  # the defaults, defined once in the library
PRETRAIN_TRAIN_DEFAULTS = ABLATION_DEFAULTS.pretrain.train
FINETUNE_TRAIN_DEFAULTS = ABLATION_DEFAULTS.finetune.train


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ablate", help="the paper's ablations at small scale (pre-training objectives, sizes)",
        description="Pre-train equal-budget small models (MLM+NSP, No NSP, LTR & No NSP, none; "
        "or tiny/mini/small), fine-tune each on the tasks with several seeds and write "
        "OUTPUT/REPORT.md with the mean ± std table and plots. Run the same command again to "
        "continue a killed ablation.")
    p.add_argument("--output", default="ablation", metavar="DIR", help="results folder (./ablation)")
    p.add_argument("--data", type=Path, default=None, metavar="DIR",
                   help="folder with glue/ and squad/ (default: $BERTKIT_DATA, else "
                   "../shared/data from the working directory)")
    p.add_argument("--corpus", nargs="+", default=None, metavar="FILE",
                   help="pre-training text (default: DATA/books/*.txt)")
    p.add_argument("--study", choices=STUDIES, default="objectives")
    p.add_argument("--variants", type=_csv, default=None,
                   help=f"comma list; objectives: {','.join(OBJECTIVE_VARIANTS)}; sizes: "
                   f"{','.join(SIZE_VARIANTS)} (default: all)")
    p.add_argument("--tasks", type=_csv, default=TASKS, help=f"comma list ({','.join(TASKS)})")
    p.add_argument("--seeds", type=int, default=ABLATION_DEFAULTS.seeds, help="fine-tuning seeds per cell")
    p.add_argument("--budget-minutes", type=float, default=ABLATION_DEFAULTS.budget_minutes,
                   help="pre-training time of the whole study, split equally among the "
                   "pre-trained variants")
    p.add_argument("--model", default=ABLATION_DEFAULTS.model, help="architecture of the objectives study")
    p.add_argument("--tokenizer", default=None, metavar="DIR", help="use this vocabulary")
    p.add_argument("--vocab-size", type=int, default=ABLATION_DEFAULTS.vocab_size, help="vocabulary to learn")
    p.add_argument("--vocab-criterion", choices=CRITERIA, default=ABLATION_DEFAULTS.vocab_criterion,
                   help="WordPiece merge criterion (docs/reports/ablations.md)")
    p.add_argument("--max-seq-length", type=int, default=ABLATION_DEFAULTS.max_seq_length,
                   help="pre-training length")
    p.add_argument("--dropout", type=float, default=ABLATION_DEFAULTS.dropout, help="dropout of every model")
    p.add_argument("--pretrain-batch-size", type=int, default=PRETRAIN_TRAIN_DEFAULTS.batch_size)
    p.add_argument("--pretrain-lr", type=float, default=PRETRAIN_TRAIN_DEFAULTS.lr)
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default=PRETRAIN_TRAIN_DEFAULTS.precision)
    p.add_argument("--finetune-lr", type=float, default=FINETUNE_TRAIN_DEFAULTS.lr,
                   help="(at 1e-4-3e-4 tiny random-init models can stay at one class; "
                   "docs/reports/ablations.md, finding 3)")
    p.add_argument("--epochs", type=float, default=ABLATION_DEFAULTS.finetune.epochs)
    p.add_argument("--finetune-batch-size", type=int, default=FINETUNE_TRAIN_DEFAULTS.batch_size)
    p.add_argument("--max-train-examples", type=int, default=ABLATION_DEFAULTS.finetune.max_train_examples,
                   help="training examples per task (0 = all)")
    p.add_argument("--max-eval-examples", type=int, default=0, help="dev examples (0 = all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> AblationConfig:
    data = data_root(args.data)
    corpus = args.corpus or sorted(str(p) for p in (data / "books").glob("*.txt"))
    if not corpus:
        raise BertkitError(f"no pre-training corpus: {data / 'books'} holds no .txt files; pass "
                           "--corpus FILE... (or --data DIR with books/)")
    pretrain = replace(ABLATION_DEFAULTS.pretrain, train=replace(
        PRETRAIN_TRAIN_DEFAULTS, batch_size=args.pretrain_batch_size, lr=args.pretrain_lr,
        precision=args.precision))
    finetune = replace(ABLATION_DEFAULTS.finetune, train=replace(
        FINETUNE_TRAIN_DEFAULTS, lr=args.finetune_lr, batch_size=args.finetune_batch_size,
        precision=args.precision),
        epochs=args.epochs, max_train_examples=args.max_train_examples or None,
        max_eval_examples=args.max_eval_examples or None)
    return AblationConfig(
        output_dir=args.output, corpus=tuple(corpus), data_root=str(data), study=args.study,
        variants=args.variants, tasks=args.tasks, seeds=args.seeds,
        budget_minutes=args.budget_minutes, model=args.model, tokenizer=args.tokenizer,
        vocab_size=args.vocab_size, vocab_criterion=args.vocab_criterion,
        max_seq_length=args.max_seq_length, dropout=args.dropout, pretrain=pretrain, finetune=finetune,
        progress=not args.no_progress)


def run(args: argparse.Namespace) -> int:
    report = run_ablation(config_from_args(args))
    print(report.read_text(encoding="utf-8"))
    print(f"report: {report}")
    return 0
