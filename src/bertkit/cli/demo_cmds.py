"""`bertkit demo` (what `make demo` runs): the main demo, see `bertkit.studies.demo.run`."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertkit.cli.common import data_root
from bertkit.data.download import demo_missing
from bertkit.errors import BertkitError
from bertkit.studies.demo.config import CURVE_SIZES, SCALES
from bertkit.studies.demo.run import DemoConfig, run
from bertkit.vocab.trainer import CRITERIA

DEMO_DEFAULTS = DemoConfig(Path("."))  # the defaults, defined once in the library
FETCH_DEMO = "run `bertkit data download demo` (the demo's books and SST-2, into ./data)"


def _grid(rates: tuple[float, ...]) -> str:
    return " ".join(f"{lr:g}" for lr in rates)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo", help="the main demo: vocabulary -> pre-training -> fine-tuning, with a report",
        description="Learn a WordPiece vocabulary on the book corpus, pre-train a small BERT for a "
        "fixed time, show what it learned (held-out MLM/NSP, fill-mask, NSP), fine-tune it and "
        "the same architecture from random initialization on SST-2 (each at the lr selected on "
        "dev from its own grid), measure a small learning curve (frozen features beside "
        "fine-tuning at a few label counts), and write OUTPUT/REPORT.md with plots. On a CUDA machine the "
        "model, batch and data scale up for the same minutes. Every step is cached under "
        "OUTPUT/work: run it again to continue.")
    p.add_argument("--data", type=Path, default=None, metavar="DIR",
                   help="folder holding books/ and glue/SST-2 or glue-sst-2/SST-2 (default: "
                   "$BERTKIT_DATA, else ../shared/data from the working directory, else ./data "
                   "as `bertkit data download demo` fills it)")
    p.add_argument("--corpus", nargs="+", default=None, metavar="FILE",
                   help="pre-training text (default: DATA/books/*.txt)")
    p.add_argument("--output", type=Path, default=DEMO_DEFAULTS.output, metavar="DIR")
    p.add_argument("--device", default=DEMO_DEFAULTS.device,
                   help="where the demo trains: auto (CUDA when there is one, else cpu), cpu, "
                   "cuda, cuda:N; it picks the defaults of --model, --pretrain-batch-size, "
                   "--pretrain-mb and --dupe-factor")
    p.add_argument("--budget-minutes", type=float, default=DEMO_DEFAULTS.budget_minutes,
                   help="pre-training time")
    p.add_argument("--model", default=DEMO_DEFAULTS.model,
                   help=f"architecture preset (default: {SCALES['cpu'].model} on a CPU, "
                   f"{SCALES['cuda'].model} on CUDA)")
    p.add_argument("--pretrain-batch-size", type=int, default=DEMO_DEFAULTS.pretrain_batch_size,
                   help=f"pre-training batch (default: {SCALES['cpu'].pretrain_batch_size} on a "
                   f"CPU, {SCALES['cuda'].pretrain_batch_size} on CUDA)")
    p.add_argument("--max-seq-length", type=int, default=DEMO_DEFAULTS.max_seq_length)
    p.add_argument("--dropout", type=float, default=DEMO_DEFAULTS.dropout,
                   help="dropout of the architecture, pre-training and fine-tuning alike")
    p.add_argument("--pretrain-lr", type=float, default=DEMO_DEFAULTS.pretrain_lr)
    p.add_argument("--vocab-size", type=int, default=DEMO_DEFAULTS.vocab_size)
    p.add_argument("--vocab-criterion", choices=CRITERIA,
                   default=DEMO_DEFAULTS.vocab_criterion,
                   help="WordPiece merge criterion (docs/reports/ablations.md)")
    p.add_argument("--pretrain-mb", type=float, default=DEMO_DEFAULTS.pretrain_mb,
                   help="MB of the corpus turned into pre-training instances (default: "
                   f"{SCALES['cpu'].pretrain_mb:g} on a CPU, {SCALES['cuda'].pretrain_mb:g} "
                   "(all of it) on CUDA)")
    p.add_argument("--dupe-factor", type=int, default=DEMO_DEFAULTS.dupe_factor,
                   help="copies of each document with different masks (default: "
                   f"{SCALES['cpu'].dupe_factor} on a CPU, {SCALES['cuda'].dupe_factor} on CUDA)")
    p.add_argument("--seeds", type=int, default=DEMO_DEFAULTS.seeds, help="fine-tuning seeds per model")
    p.add_argument("--train-examples", type=int, default=DEMO_DEFAULTS.train_examples,
                   help="SST-2 training subset")
    p.add_argument("--dev-examples", type=int, default=DEMO_DEFAULTS.dev_examples,
                   help="SST-2 dev subset (default: all 872)")
    p.add_argument("--finetune-lr", type=float, nargs="+", default=DEMO_DEFAULTS.finetune_lr,
                   help="fine-tuning lr grid of both small models, selected on dev (at 3e-4 "
                   "random-init runs can stay at the majority class; docs/reports/ablations.md; "
                   f"default: {_grid(DEMO_DEFAULTS.finetune_lr)})")
    p.add_argument("--epochs", type=float, default=DEMO_DEFAULTS.epochs)
    _add_reference_options(p)
    p.add_argument("--curve-sizes", type=int, nargs="*", default=DEMO_DEFAULTS.curve_sizes,
                   metavar="N", help="the small learning curve's label counts below "
                   "--train-examples (its last point; default: those of "
                   f"{' '.join(map(str, CURVE_SIZES))} below it)")
    p.add_argument("--curve-seeds", type=int, default=DEMO_DEFAULTS.curve_seeds,
                   help="seeds of each learning-curve cell")
    p.add_argument("--curve-min-steps", type=int, default=DEMO_DEFAULTS.curve_min_steps,
                   help="fine-tuning's floor of optimizer steps on the curve's small subsets")
    p.add_argument("--no-curve", action="store_true",
                   help="skip the learning curve (frozen features beside fine-tuning, by labels)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_demo)


def _add_reference_options(p: argparse.ArgumentParser) -> None:
    """The MiniLM opening probe and the MiniLM pre-trained vs random-init reference pair."""
    p.add_argument("--skip-probe", action="store_true", help="skip the MiniLM opening section")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the MiniLM pre-trained vs random-init reference pair")
    p.add_argument("--reference-lr", type=float, nargs="+", default=DEMO_DEFAULTS.reference_lr,
                   help=f"fine-tuning lr grid of all-MiniLM-L6-v2, selected on dev (default: "
                   f"{_grid(DEMO_DEFAULTS.reference_lr)})")
    p.add_argument("--reference-random-lr", type=float, nargs="+", default=DEMO_DEFAULTS.reference_random_lr,
                   help="fine-tuning lr grid of MiniLM's random-init copy, selected on dev "
                   f"(default: {_grid(DEMO_DEFAULTS.reference_random_lr)})")
    p.add_argument("--reference-epochs", type=float, default=DEMO_DEFAULTS.reference_epochs,
                   help="fine-tuning epochs of all-MiniLM-L6-v2")
    p.add_argument("--reference-random-epochs", type=float, default=DEMO_DEFAULTS.reference_random_epochs,
                   help="fine-tuning epochs of MiniLM's random-init copy")


def run_demo(args: argparse.Namespace) -> int:
    options = {k: v for k, v in vars(args).items()
               if k in DemoConfig.__dataclass_fields__ and k != "data"}
    for name in ("corpus", "finetune_lr", "reference_lr", "reference_random_lr", "curve_sizes"):
        if options[name] is not None:
            options[name] = tuple(options[name])
    run(DemoConfig(data=demo_data_root(args.data, corpus_given=args.corpus is not None), **options))
    return 0


def demo_data_root(given: Path | None, corpus_given: bool = False) -> Path:
    """The data folder as every command finds it, holding what the demo reads (or one line
    saying to run `bertkit data download demo`)."""
    root = data_root(given, fetch=FETCH_DEMO)
    problem = demo_missing(root, corpus_given)
    if problem:
        raise BertkitError(problem)
    return root
