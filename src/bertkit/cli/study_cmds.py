"""`bertkit study`: the long, resumable studies (the pre-training budget curve and its recipes;
the learning curve): argv -> one request dataclass -> one call."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import types
from pathlib import Path

from bertkit.cli.common import data_root
from bertkit.config import PRESETS
from bertkit.runs.finetune import REGRESSION_BIASES
from bertkit.runs.pretrain_recipes import RECIPES, recipe_help
from bertkit.studies.learning_curve import study as learning_curve
from bertkit.studies.pretraining import cooldown, curve, curve_finetune, recipes
from bertkit.studies.pretraining.study import DEFAULT_WORK, DEFAULTS, StudyRequest, run_study
from bertkit.tasks.glue import GLUE_TASKS

log = logging.getLogger(__name__)



def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "study", help="long, resumable studies (the pre-training budget curve, its recipes, "
        "learning curves)",
        description="Start or continue a study: the same command continues where the last "
        "run of it stopped, and prints the status first. `pretrain-curve`: one pre-training run on "
        "book text, exported at budgets of its own CPU-hours, each point fine-tuned against the "
        "same architecture from random initialization (docs/reports/pretraining.md). "
        "`pretrain-recipes`: the curve's recipe and one-change variants of it (--variants), "
        "each pre-trained for one fixed budget (--budget) and fine-tuned the same way. "
        "`learning-curve`: fine-tuning against frozen features, each model beside its "
        "random-init twin, by labelled examples (docs/reports/learning-curve.md).")
    studies = p.add_subparsers(dest="name", metavar="STUDY", required=True)
    for name, what in (("pretrain-curve", "the pre-training budget curve"),
                       ("pretrain-recipes", "the curve's recipe and one-change variants of it")):
        q = studies.add_parser(name, help=what, description=p.description)
        _run_options(q.add_argument_group("this run of the study"))
        _point_options(q.add_argument_group("fine-tuning and branching the points (pretrain-curve)"))
        _recipe_options(q.add_argument_group("the pre-training recipe"))
        _fixed_budget_options(q.add_argument_group("pretrain-recipes"))
        q.set_defaults(func=run)
    _learning_curve_parser(studies)


def _run_options(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--work", type=Path, default=None,
                   metavar="DIR", help="the study's folder: data, the run, the points, study.json "
                   f"(default: {DEFAULT_WORK}, -RECIPE added for --recipe, -bf16 for "
                   "--precision bf16; outside the checkout, though a new machine may not keep "
                   "it: --report docs/reports keeps the records)")
    p.add_argument("--data", type=Path, default=None, metavar="DIR",
                   help="folder with books/, gutenberg/, wikitext-2/, glue/ (default: "
                   "$BERTKIT_DATA, else ../shared/data)")
    p.add_argument("--hours", type=float, default=float("inf"),
                   help="CPU-hours of pre-training this command may spend (default: to the end)")
    p.add_argument("--reproduce", type=Path, default=None, metavar="REPORT",
                   help="pretrain-curve: begin --work as a reproduction of the curve whose "
                   "records REPORT holds (the JSON --report writes, e.g. "
                   "docs/reports/pretrain_curve_bf16.json): its horizon, and each budget point taken at "
                   "the step it was recorded at rather than at this machine's CPU seconds; the "
                   "options must make its settings. Same CPU class and threads: the same models")
    p.add_argument("--status", action="store_true", help="print the status and stop")
    p.add_argument("--report", type=Path, default=None, metavar="DIR",
                   help="write DIR/pretrain_curve.md (the table) and DIR/pretrain_curve.png "
                   "from what is recorded, and stop")


def _point_options(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--finetune", action="store_true",
                   help="fine-tune the recorded points (and the random-init twin) instead of "
                   "pre-training; run it beside the pre-training command (its own file); a second "
                   "--finetune on the other core shares the cells (each claims the one it runs)")
    p.add_argument("--finetune-task", choices=curve_finetune.WHOLE_TASKS, default=None,
                   metavar="TASK",
                   help="with --finetune: fine-tune on TASK's whole training set (one of "
                   f"{', '.join(curve_finetune.WHOLE_TASKS)}) instead of the SST-2 subset: the "
                   "rows at the budgets that matter (choose them with --points); its own records, "
                   "beside the subset's")
    p.add_argument("--finetune-dropout", type=float, default=None, metavar="P",
                   help="with --finetune: fine-tune the points and the twin with dropout P "
                   "(the curve pre-trains, and exports, without dropout, so by default they "
                   "fine-tune without it); records of their own")
    p.add_argument("--cooldown", action="store_true",
                   help="run the decay branch of each recorded point (or of --points): the run "
                   f"continued from its state there for {cooldown.FRACTION:.0%}% more steps "
                   "with the rate falling to 0 (Hägele et al. 2024), recorded as the point "
                   "BUDGET+cool and fine-tuned like any point; beside the pre-training command "
                   "(its own lock)")
    p.add_argument("--points", default=None, metavar="LIST",
                   help="with --finetune: only these points, e.g. 1h,2h,2h+cool; with "
                   "--cooldown: the budgets to branch from (default: every recorded one)")


def _recipe_options(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--init", default=None, metavar="MODEL",
                   help="continued pre-training: start from this model folder (its vocabulary, "
                   "shape and weights) and compare each point with the model as it came, not "
                   "with random init; with --task-text, on a task's own text (Gururangan et "
                   "al.'s task-adaptive pre-training). Defaults then: lr 1e-4, batch 32, 10%% "
                   "warmup, the model's dropout, budgets 0.25-2 CPU-hours; use its own --work")
    p.add_argument("--task-text", default=None, metavar="TASK", choices=GLUE_TASKS,
                   help="with --init: pre-train on TASK's training texts without their labels, "
                   f"a GLUE task ({', '.join(GLUE_TASKS)}; default: the book text)")
    named = tuple(n for n in RECIPES if n != "paper")  # (the paper's is not the curve's)
    p.add_argument("--recipe", default=None, choices=named,
                   help="pretrain-curve with a named recipe (`bertkit pretrain --recipe`) "
                   "instead of the curve's own (the recipe study's base), in a folder and "
                   f"report of its own ({recipe_help(named)}); --batch-size and --lr still win")
    p.add_argument("--model", default=DEFAULTS.model, choices=tuple(PRESETS), metavar="PRESET",
                   help=f"the architecture, a preset: {', '.join(PRESETS)}")
    p.add_argument("--vocab-size", type=int, default=DEFAULTS.vocab_size, metavar="N",
                   help="WordPiece vocabulary size, trained on the study's corpus")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"(default: {DEFAULTS.batch_size}; with --init 32)")
    p.add_argument("--lr", type=float, default=None, help=f"(default: {DEFAULTS.lr:g}; "
                   "with --init 1e-4)")
    p.add_argument("--precision", choices=curve.PRECISIONS, default=DEFAULTS.precision,
                   help="the pre-training's arithmetic, fixed for the study (fine-tuning stays "
                   "fp32): bf16 autocast halves a step's CPU seconds on a CPU with AMX, and "
                   "makes a second curve (its own --work and report) beside the fp32 one")
    p.add_argument("--threads", type=int, default=DEFAULTS.threads,
                   help="torch threads for the pre-training")


def _fixed_budget_options(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--budget", type=float, default=None, metavar="HOURS",
                   help="each variant's CPU-hours, as steps: the base's step cost probed once, each "
                   "variant's against the base's side by side; every run trains its steps to the "
                   "end whatever the load does to its CPU seconds (default: 1; folder "
                   "WORK/BUDGET/VARIANT)")
    p.add_argument("--variants", default=None, metavar="LIST",
                   help="which variants, comma-separated (the base always "
                   f"runs, first; default: all): {', '.join(recipes.VARIANTS)}")


def run(args: argparse.Namespace) -> int:
    fields = {f: getattr(args, f) for f in StudyRequest.__dataclass_fields__ if f != "data_dir"}
    return run_study(StudyRequest(**fields, data_dir=lambda: data_root(args.data)))


def _learning_curve_parser(studies: argparse._SubParsersAction) -> None:
    defaults = types.SimpleNamespace(**{f.name: f.default for f in dataclasses.fields(
        learning_curve.LearningCurveRequest)})  # the defaults, defined once in the library
    p = studies.add_parser(
        "learning-curve", help="fine-tuning against frozen features, by labelled examples",
        description="With N labels, fine-tune or use frozen features, and does pre-training help? "
        "Each --model and its random-init twin (same architecture and vocabulary, random "
        "weights), each approach (fine-tuned with the task's recipe at a rate chosen on a seed "
        "not reported; frozen mean-pooled vectors into logistic or ridge regression, "
        "regularized by cross-validation on the subset), at each label count (the first N of a "
        "seeded shuffle of the training set) and seed, scored on dev. One record a run in "
        "WORK/runs.jsonl: the same command continues, and a second worker shares the runs.")
    p.add_argument("task", metavar="TASK", choices=GLUE_TASKS,
                   help=f"a GLUE task: {', '.join(GLUE_TASKS)}")
    p.add_argument("--data", type=Path, default=None, metavar="DIR",
                   help="folder with glue/ (default: $BERTKIT_DATA, else ../shared/data)")
    p.add_argument("--model", dest="models", action="append", default=None, metavar="[NAME=]PATH",
                   help="a model folder (repeat for more); named after its folder unless NAME= is given")
    p.add_argument("--sizes", default=defaults.sizes, metavar="LIST",
                   help="label counts, rising, `all` for the whole training set")
    p.add_argument("--approach", default=defaults.approach, metavar="LIST",
                   help="finetune, frozen, frozen-apart (a pair task's two texts embedded "
                   "apart, the linear model reading [u, v, |u-v|, u*v, cosine]) (default: "
                   "%(default)s)")
    p.add_argument("--seeds", type=int, default=defaults.seeds, help="reported seeds per cell")
    p.add_argument("--work", type=Path, default=None, metavar="DIR",
                   help=f"the study's folder (default: {learning_curve.DEFAULT_WORK}/"
                   f"{learning_curve.NAME}-TASK)")
    p.add_argument("--max-seq-length", type=int, default=defaults.max_seq_length)
    p.add_argument("--dev-examples", type=int, default=None, metavar="N",
                   help="score on the first N dev examples (default: all)")
    p.add_argument("--lr-grid", type=_rates, default=defaults.lr_grid, metavar="LIST",
                   help="fine-tuning rates, one chosen per model and label count (default: "
                   f"{','.join(f'{lr:g}' for lr in defaults.lr_grid)})")
    p.add_argument("--epochs", type=float, default=defaults.epochs)
    p.add_argument("--min-steps", type=int, default=defaults.min_steps,
                   help="fine-tuning's floor of optimizer steps (a small subset trains more epochs)")
    p.add_argument("--regression-bias", default=defaults.regression_bias,
                   choices=REGRESSION_BIASES,
                   help="a regression task's head starts at the training labels' mean (mean) or "
                   "at 0 (zero, Hugging Face's init) (default: %(default)s)")
    p.add_argument("--threads", type=int, default=defaults.threads, help="torch threads")
    p.add_argument("--status", action="store_true", help="print the tables of what is recorded")
    p.add_argument("--report", type=Path, default=None, metavar="DIR",
                   help="write DIR/learning-curve.md (TASK's block; or learning-curve-TASK.md) "
                   "with its PNG and records, and stop")
    p.set_defaults(func=run_learning_curve)


def _rates(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of rates: {text!r}") from None


def run_learning_curve(args: argparse.Namespace) -> int:
    fields = {f: getattr(args, f) for f in learning_curve.LearningCurveRequest.__dataclass_fields__
              if f != "data_dir"}
    return learning_curve.run_learning_curve(learning_curve.LearningCurveRequest(
        **{**fields, "models": tuple(args.models or ())}, data_dir=lambda: data_root(args.data)))
