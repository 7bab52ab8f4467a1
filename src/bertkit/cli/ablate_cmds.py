"""`bertkit ablate`: the paper's ablations at small scale (objectives; model sizes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.studies.ablate import (
    OBJECTIVE_VARIANTS,
    SIZE_VARIANTS,
    STUDIES,
    TASKS,
    AblationConfig,
    run_ablation,
)
from bertkit.studies.pipeline import FinetunePlan, PretrainPlan


def default_data_root() -> Path:
    """../shared/data beside the repository (a source checkout), else ./data."""
    shared = Path(__file__).resolve().parents[4] / "shared" / "data"
    return shared if shared.is_dir() else Path("data")


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
                   help="folder with glue/ and squad/ (default: ../shared/data beside the repo)")
    p.add_argument("--corpus", nargs="+", default=None, metavar="FILE",
                   help="pre-training text (default: DATA/books/*.txt)")
    p.add_argument("--study", choices=STUDIES, default="objectives")
    p.add_argument("--variants", type=_csv, default=None,
                   help=f"comma list; objectives: {','.join(OBJECTIVE_VARIANTS)}; sizes: "
                   f"{','.join(SIZE_VARIANTS)} (default: all)")
    p.add_argument("--tasks", type=_csv, default=TASKS, help=f"comma list ({','.join(TASKS)})")
    p.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per cell (3)")
    p.add_argument("--budget-minutes", type=float, default=20.0,
                   help="pre-training time of the whole study, split equally among the "
                   "pre-trained variants (20)")
    p.add_argument("--model", default="tiny", help="architecture of the objectives study (tiny)")
    p.add_argument("--tokenizer", default=None, metavar="DIR", help="use this vocabulary")
    p.add_argument("--vocab-size", type=int, default=8000, help="vocabulary to learn (8000)")
    p.add_argument("--vocab-criterion", choices=("frequency", "likelihood"), default="frequency",
                   help="WordPiece merge criterion (frequency; see docs/ablations.md)")
    p.add_argument("--max-seq-length", type=int, default=128, help="pre-training length (128)")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout of every model (0.1)")
    p.add_argument("--pretrain-batch-size", type=int, default=32)
    p.add_argument("--pretrain-lr", type=float, default=1e-3)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--finetune-lr", type=float, default=1e-3,
                   help="1e-3 (at 1e-4-3e-4 tiny random-init models can stay at one class; "
                   "docs/ablations.md, finding 3)")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--finetune-batch-size", type=int, default=32)
    p.add_argument("--max-train-examples", type=int, default=2000,
                   help="training examples per task (2000; 0 = all)")
    p.add_argument("--max-eval-examples", type=int, default=0, help="dev examples (0 = all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> AblationConfig:
    data = args.data or default_data_root()
    corpus = args.corpus or sorted(str(p) for p in (data / "books").glob("*.txt"))
    if not corpus:
        raise BertkitError(f"no pre-training corpus: {data / 'books'} holds no .txt files; pass "
                           "--corpus FILE... (or --data DIR with books/)")
    pretrain = PretrainPlan(BertConfig.preset("tiny"), batch_size=args.pretrain_batch_size,
                            lr=args.pretrain_lr, precision=args.precision)
    finetune = FinetunePlan(lr=args.finetune_lr, epochs=args.epochs,
                            batch_size=args.finetune_batch_size,
                            max_train_examples=args.max_train_examples or None,
                            max_eval_examples=args.max_eval_examples or None,
                            precision=args.precision)
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
