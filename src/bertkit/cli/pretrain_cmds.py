"""`bertkit pretrain`, `bertkit plot`, `bertkit fill-mask`, `bertkit nsp`."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from bertkit.cli.common import add_hardware, add_join_timeout, add_resume, run_together
from bertkit.config import BertConfig
from bertkit.data.meta import read_meta
from bertkit.errors import BertkitError
from bertkit.inference.pretraining import fill_mask, is_next_probability, load_pretraining_model
from bertkit.io import check_new_file
from bertkit.runs.pretrain import OBJECTIVES, PretrainConfig, pretrain_train_config, run_pretraining
from bertkit.runs.pretrain_recipes import RECIPES, pretrain_settings, recipe_help
from bertkit.studies.report import plot_run
from bertkit.training import distributed
from bertkit.training.optim import OPTIMIZERS, SCHEDULES

PRETRAIN_DEFAULTS = PretrainConfig(data="")  # the defaults, defined once in the library
TRAIN_DEFAULTS = PRETRAIN_DEFAULTS.train
# the paper's values of the options a --recipe may set (warmup: TRAIN_DEFAULTS' steps)
PAPER = {"objective": PRETRAIN_DEFAULTS.objective, "batch_size": TRAIN_DEFAULTS.batch_size,
         "lr": TRAIN_DEFAULTS.lr, "dropout": None}

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    _register_pretrain(sub)
    p = sub.add_parser("plot", help="draw loss and accuracy curves of a run to PNG",
                       description="Read RUN_DIR/metrics.jsonl (and RUN_DIR/phase2/metrics.jsonl) "
                       "and draw training/eval loss and accuracy curves (needs matplotlib: "
                       "pip install 'bertkit[plot]').")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--output", type=Path, help="a new PNG file (default RUN_DIR/curves.png, "
                   "which a later plot of the run replaces)")
    p.set_defaults(func=run_plot)
    p = sub.add_parser("fill-mask", help="top-k predictions for each [MASK] in a text",
                       description="Show what a pre-trained model predicts at each [MASK].")
    p.add_argument("model", type=Path, metavar="MODEL_DIR")
    p.add_argument("text", help='text with one or more "[MASK]"')
    p.add_argument("--top-k", type=int, default=5)
    p.set_defaults(func=run_fill_mask)
    p = sub.add_parser("nsp", help="probability that B follows A (next-sentence prediction)",
                       description="Print the IsNext probability of the sentence pair (A, B).")
    p.add_argument("model", type=Path, metavar="MODEL_DIR")
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.set_defaults(func=run_nsp)


def _register_pretrain(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pretrain", help="pre-train (or continue pre-training) BERT on prepared shards",
        description="Pre-train BertForPreTraining on shards from `bertkit prepare`, with the "
        "paper's recipe by default (AdamW, lr 1e-4, 10k warmup steps then linear decay, weight "
        "decay 0.01, clipping 1.0). Under `torchrun --nproc_per_node N -m bertkit pretrain ...` "
        "it runs DDP; --batch-size stays the global batch.")
    p.add_argument("--data", required=True, nargs="+", metavar="DIR",
                   help="shard folder(s) from `bertkit prepare`; several (e.g. Wikipedia and "
                   "books, one tokenizer) are trained on as one dataset")
    p.add_argument("--output", required=True, help="run folder (checkpoints, metrics, model/)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", help="preset: tiny|mini|small|medium|base|large (default mini)")
    which.add_argument("--config", dest="config_file", help="a config.json for the architecture")
    which.add_argument("--init", help="continue from a checkpoint directory (HF layout)")
    p.add_argument("--tokenizer", help="tokenizer dir (vocab check, dynamic masking, export); "
                   "default: the --init dir when it has vocab.txt")
    _recipe_options(p)
    p.add_argument("--max-steps", type=int, default=TRAIN_DEFAULTS.max_steps)
    p.add_argument("--micro-batch-size", type=int, help="per forward per process "
                   "(gradient accumulation = batch / (micro x processes))")
    p.add_argument("--weight-decay", type=float, default=TRAIN_DEFAULTS.weight_decay)
    p.add_argument("--optimizer", default=TRAIN_DEFAULTS.optimizer, choices=OPTIMIZERS,
                   help="adamw_google: Google's AdamWeightDecayOptimizer (no bias correction)")
    p.add_argument("--schedule", default=TRAIN_DEFAULTS.schedule, choices=SCHEDULES,
                   help="linear: warm up to the peak, then decay (HF); google: decay from step 0, "
                   "warmup overriding it (Google's optimization.py)")
    p.add_argument("--max-grad-norm", type=float, default=TRAIN_DEFAULTS.max_grad_norm)
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--seed", type=int, default=TRAIN_DEFAULTS.seed)
    p.add_argument("--log-every", type=int, default=TRAIN_DEFAULTS.log_every)
    p.add_argument("--eval-every", type=int, default=0, help="0 = only at the end")
    p.add_argument("--save-every", type=int, default=TRAIN_DEFAULTS.save_every, help="0 = only at the end")
    p.add_argument("--keep", type=int, default=TRAIN_DEFAULTS.keep, help="training states kept (0 = all)")
    add_hardware(p, TRAIN_DEFAULTS)
    add_resume(p)
    add_join_timeout(p)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--tensorboard", action="store_true",
                   help="also log to OUTPUT/tensorboard (needs: pip install tensorboard)")
    p.add_argument("--eval-data", help="held-out shard folder (default: hold out the last "
                   "--eval-holdout instances of --data)")
    p.add_argument("--eval-holdout", type=int, help="default min(2000, 5%% of the data)")
    p.add_argument("--eval-batches", type=int, default=PRETRAIN_DEFAULTS.eval_batches)
    p.add_argument("--phase2-data", help="phase-2 shards (the paper: length 512)")
    p.add_argument("--phase2-steps", type=int, default=0)
    p.set_defaults(func=run_pretrain)


def _recipe_options(p: argparse.ArgumentParser) -> None:
    """--recipe and the options it fills when they are not given (`apply_recipe`)."""
    p.add_argument("--recipe", choices=tuple(RECIPES), default="paper",
                   help="the defaults of --objective, --batch-size, --lr, the warmup and a "
                   "--model preset's --dropout (the options given win); the shards from "
                   f"`bertkit prepare` with the same --recipe. {recipe_help()}")
    p.add_argument("--objective", default=None, choices=OBJECTIVES,
                   help=f"(default: {PAPER['objective']}, or the --recipe's)")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"global examples per step (default: {PAPER['batch_size']}, or the "
                   "--recipe's)")
    p.add_argument("--lr", type=float, default=None,
                   help=f"(default: {PAPER['lr']:g}, or the --recipe's)")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help=f"(default: {TRAIN_DEFAULTS.warmup_steps}, or the --recipe's ratio) "
                   "capped at 10%% of --max-steps when it is not shorter than the run")
    p.add_argument("--warmup-ratio", type=float, help="fraction of --max-steps (overrides steps)")
    p.add_argument("--dropout", type=float, default=None,
                   help="a --model preset's hidden and attention dropout while pre-training, "
                   f"kept in the export (default: {BertConfig.hidden_dropout_prob:g}, or the "
                   "--recipe's)")


def run_pretrain(args: argparse.Namespace) -> int:
    distributed.setup(os.environ, device=args.device, join_timeout=args.join_timeout)
    if not distributed.is_main():
        logging.getLogger().setLevel(logging.WARNING)  # rank 0 alone reports progress
    return run_together(lambda: _pretrain(args))


def apply_recipe(args: argparse.Namespace) -> None:
    """Fill the options the command line left unset from --recipe, then the paper's values."""
    recipe = pretrain_settings(args.recipe)
    if args.warmup_steps is not None or args.warmup_ratio is not None:
        recipe.pop("warmup_ratio", None)  # a warmup given in either unit wins
    if args.config_file is not None or args.init is not None:
        if recipe.pop("dropout", None) is not None and distributed.is_main():
            log.warning("--recipe %s: its dropout is for a --model preset; the %s model keeps "
                        "its own", args.recipe, "--config" if args.config_file else "--init")
    for key, value in {**PAPER, **recipe}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.warmup_steps is None:  # (with a ratio, the ratio wins)
        args.warmup_steps = TRAIN_DEFAULTS.warmup_steps
    want = RECIPES[args.recipe].settings.get("max_seq_length")
    for folder in [] if want is None or not distributed.is_main() else args.data:
        prepared = int(read_meta(folder).params["max_seq_length"])
        if prepared != want:
            log.warning("--recipe %s is measured at T = %d; %s was prepared at T = %d "
                        "(`bertkit prepare --recipe %s` prepares it)", args.recipe, want,
                        folder, prepared, args.recipe)


def _pretrain(args: argparse.Namespace) -> int:
    apply_recipe(args)
    train_cfg = pretrain_train_config(
        args.output, max_steps=args.max_steps, batch_size=args.batch_size,
        micro_batch_size=args.micro_batch_size, lr=args.lr, warmup_steps=args.warmup_steps,
        warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay,
        optimizer=args.optimizer, schedule=args.schedule, max_grad_norm=args.max_grad_norm,
        precision=args.precision, seed=args.seed, log_every=args.log_every,
        eval_every=args.eval_every, save_every=args.save_every, keep=args.keep,
        device=args.device, compile=args.compile, resume=args.resume,
        loader_workers=args.loader_workers,
        progress=args.progress, tensorboard=args.tensorboard)
    cfg = PretrainConfig(
        data=args.data[0] if len(args.data) == 1 else tuple(args.data), train=train_cfg,
        model=args.model, config_file=args.config_file,
        init=args.init, tokenizer=args.tokenizer, objective=args.objective,
        eval_data=args.eval_data, eval_holdout=args.eval_holdout,
        eval_batches=args.eval_batches, phase2_data=args.phase2_data,
        phase2_steps=args.phase2_steps, dropout=args.dropout)
    result = run_pretraining(cfg)
    if distributed.is_main():
        shown = {k: round(v, 4) for k, v in result.metrics.items() if isinstance(v, float)}
        print(json.dumps({"step": result.step, **shown}))
        print(f"model exported to {Path(args.output) / 'model'}")
    return 0


def run_plot(args: argparse.Namespace) -> int:
    if args.output is not None:  # the user's file, never replaced (curves.png is the plot's own)
        check_new_file(args.output, inputs=[args.run_dir])
        if args.output.suffix.lower() != ".png":
            raise BertkitError(f"--output {args.output}: give a .png file name")
    print(plot_run(args.run_dir, args.output or args.run_dir / "curves.png"))
    return 0


def run_fill_mask(args: argparse.Namespace) -> int:
    model, tokenizer = load_pretraining_model(args.model, "mlm")
    for position, top in fill_mask(model, tokenizer, args.text, args.top_k):
        print(f"[MASK] at token {position}:")
        for token, p in top:
            print(f"  {token:<20} {p:.4f}")
    return 0


def run_nsp(args: argparse.Namespace) -> int:
    model, tokenizer = load_pretraining_model(args.model, "nsp")
    print(f"IsNext probability: {is_next_probability(model, tokenizer, args.a, args.b):.4f}")
    return 0
