"""`bertkit study`: the long, resumable studies (the pre-training budget curve)."""

from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path

import torch

from bertkit.cli.common import data_root
from bertkit.config import PRESETS
from bertkit.errors import BertkitError
from bertkit.io import read_json_object
from bertkit.runs.pretrain_recipes import RECIPES, recipe_help
from bertkit.studies.pretraining import cooldown, curve, curve_finetune, curve_points, recipes, reproduce
from bertkit.studies.report import check_report_target
from bertkit.tasks.glue import GLUE_TASKS

log = logging.getLogger(__name__)

DEFAULTS = curve.CurveSettings(corpus=("-",))  # the defaults, defined once in the library
STUDIES = ("pretrain-curve", "pretrain-recipes")
# (+ "-small-budget" for --recipe small-budget, "-bf16" for --precision bf16)
DEFAULT_WORK = Path("../bertkit-studies/pretrain-curve")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "study", help="long, resumable studies (the pre-training budget curve, its recipes)",
        description="Start or continue a study: the same command continues where the last "
        "sitting stopped, and prints the status first. `pretrain-curve`: one pre-training run on "
        "book text, exported at budgets of its own CPU-hours, each point fine-tuned against the "
        "same architecture from random initialization (docs/reports/pretraining.md). "
        "`pretrain-recipes`: the curve's recipe and one-change variants of it (--variants), "
        "each pre-trained for one fixed budget (--budget) and fine-tuned the same way.")
    p.add_argument("name", choices=STUDIES)
    _sitting_options(p.add_argument_group("the sitting"))
    _point_options(p.add_argument_group("fine-tuning and branching the points (pretrain-curve)"))
    _recipe_options(p.add_argument_group("the pre-training recipe"))
    _fixed_budget_options(p.add_argument_group("pretrain-recipes"))
    p.set_defaults(func=run)


def _sitting_options(p: argparse._ArgumentGroup) -> None:
    p.add_argument("--work", type=Path, default=None,
                   metavar="DIR", help="the study's folder: data, the run, the points, study.json "
                   f"(default: {DEFAULT_WORK}, -RECIPE added for --recipe, -bf16 for "
                   "--precision bf16; outside the checkout, though a new machine may not keep "
                   "it: --report docs/reports keeps the records)")
    p.add_argument("--data", type=Path, default=None, metavar="DIR",
                   help="folder with books/, gutenberg/, wikitext-2/, glue/ (default: "
                   "$BERTKIT_DATA, else ../shared/data)")
    p.add_argument("--hours", type=float, default=float("inf"),
                   help="CPU-hours of pre-training this sitting may spend (default: to the end)")
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
                   "pre-training; run it beside a pre-training sitting (its own file); a second "
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
                   "BUDGET+cool and fine-tuned like any point; beside the pre-training sitting "
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


def check_options(args: argparse.Namespace) -> None:
    """The combinations that mean nothing, refused before any folder is written."""
    if args.name == "pretrain-recipes" and (args.init or args.finetune):
        raise BertkitError("pretrain-recipes runs pre-training and fine-tuning itself, from "
                           "random weights: drop --init / --finetune")
    if args.name == "pretrain-recipes" and args.cooldown:
        raise BertkitError("--cooldown branches the curve's points; a recipe's run already "
                           "decays to 0 at its budget")
    if args.cooldown and (args.finetune or args.init):
        raise BertkitError("--cooldown is a pre-training sitting of its own: drop --finetune "
                           "(fine-tune its points after, with --points BUDGET+cool)"
                           if args.finetune else "--cooldown branches the curve from random "
                           "init; a continued study (--init) is not branched")
    if (args.finetune_task or args.finetune_dropout is not None) and not args.finetune:
        raise BertkitError("--finetune-task and --finetune-dropout choose how --finetune "
                           "fine-tunes: give --finetune too")
    if args.finetune_dropout is not None and not 0 <= args.finetune_dropout < 1:
        raise BertkitError(f"--finetune-dropout must be in [0, 1), got {args.finetune_dropout}")
    if args.points and not (args.finetune or args.cooldown):
        raise BertkitError("--points chooses what --finetune fine-tunes or --cooldown branches: "
                           "give one of them too")
    if not args.hours > 0:  # (nan too)
        raise BertkitError(f"--hours must be > 0 CPU-hours, got {args.hours:g}")
    if args.recipe and (args.init or args.name == "pretrain-recipes"):
        raise BertkitError("--recipe names the curve's recipe: "
                           + ("pretrain-recipes varies the curve's own, one change a variant"
                              if args.name == "pretrain-recipes" else
                              "a continued study (--init) keeps the model's shape and its own "
                              "fine-tuning-sized rates"))
    if args.task_text and not args.init:
        raise BertkitError("--task-text is for continued pre-training: give --init MODEL too")
    if args.name == "pretrain-curve" and (args.budget is not None or args.variants):
        raise BertkitError("--budget and --variants choose pretrain-recipes' runs; the curve's "
                           "budgets are its points")
    reads_only = args.status or args.report
    if math.isfinite(args.hours) and (reads_only or args.finetune or args.cooldown):
        raise BertkitError("--hours limits a pre-training sitting's CPU-hours; "
                           + ("--status and --report read the records" if reads_only else
                              "--finetune and --cooldown run to the end of what they do "
                              "(a decay branch is 20% of its point's steps)"))
    if args.report is not None and args.report.exists() and not args.report.is_dir():
        raise BertkitError(f"--report {args.report}: a file, not a folder")
    if args.reproduce is not None and (args.name != "pretrain-curve" or reads_only
                                       or args.finetune or args.cooldown):
        raise BertkitError("--reproduce begins a pretrain-curve's pre-training sitting: drop "
                           "--status, --report, --finetune and --cooldown (they read or use "
                           "the points it records)")
    if args.points and reads_only:
        raise BertkitError("--status and --report show every recorded point: drop --points")


def run(args: argparse.Namespace) -> int:
    check_options(args)
    drop = {"dropout": args.finetune_dropout}
    ft = (curve_finetune.FinetuneSettings.whole(args.finetune_task, **drop) if args.finetune_task
          else curve_finetune.FinetuneSettings(**drop))
    settings, work = study_settings(args)
    if args.name == "pretrain-recipes":
        return run_recipes(args, settings, ft, work)
    if args.status or args.report:
        return report_curve(args, settings, ft, work)
    labels = points(args)  # (refused before anything is written)
    if labels:
        curve.check_points(settings, labels, branches=not args.cooldown)
    if (args.cooldown or args.finetune) and not (work / "study.json").is_file():
        raise BertkitError(f"{work}: no study here yet; its pre-training sitting (the same "
                           "command without --cooldown / --finetune) starts it")
    if args.cooldown:
        with curve.sitting(work, "cooldown"):
            torch.set_num_threads(settings.threads)
            store = curve.open_store(work, settings)
            cooldown.branch_points(store, settings, work, labels)
            for line in curve.status_lines(store):
                log.info("%s", line)
        return 0
    if args.finetune:  # (no sitting: workers on other cores share the cells, claimed one by one)
        torch.set_num_threads(settings.threads)
        curve_finetune.finetune_points(curve.open_store(work, settings),
                                       curve_finetune.open_cells(work, ft), settings, ft, work,
                                       data_root(args.data), labels)
        return 0
    with curve.sitting(work, "pretrain"):
        store = curve.open_store(work, settings)
        if args.reproduce is not None:
            reproduce.adopt_plan(store, settings, read_json_object(args.reproduce),
                                 str(args.reproduce))
        store.begin()  # before the vocabulary and shards it guards are made
        for line in curve.status_lines(store):
            log.info("%s", line)
        torch.set_num_threads(settings.threads)
        curve.prepare_data(settings, work)
        curve_points.pretrain_points(store, settings, work, hours_left=args.hours)
        for line in curve.status_lines(store):
            log.info("%s", line)
    return 0


def study_settings(args: argparse.Namespace) -> tuple[curve.CurveSettings, Path]:
    """The study's recipe from the options, and its work folder."""
    work = args.work
    given = {k: v for k, v in (("batch_size", args.batch_size), ("lr", args.lr))
             if v is not None}
    if args.init is None:
        recipe = curve.recipe_fields(args.recipe) if args.recipe else {}
        settings = curve.CurveSettings(
            corpus=curve.corpus_files(data_root(args.data)), model=args.model,
            vocab_size=args.vocab_size, threads=args.threads, precision=args.precision,
            **{**recipe, **given})
        suffix = "".join(f"-{tag}" for tag in (
            args.recipe, None if args.precision == DEFAULTS.precision else args.precision) if tag)
        return settings, work or DEFAULT_WORK.with_name(args.name + suffix)
    if args.model != DEFAULTS.model or args.vocab_size != DEFAULTS.vocab_size:
        raise BertkitError("--init: the model's own shape and vocabulary are used; "
                           "drop --model / --vocab-size")
    if work is None:
        raise BertkitError("--init: give the continued study a --work folder of its own "
                           f"({DEFAULT_WORK} holds the curve)")
    corpus = (curve.task_text(args.task_text, data_root(args.data), work) if args.task_text
              else curve.corpus_files(data_root(args.data)))
    fmt = {"corpus_format": "google"} if args.task_text else {}  # (curve.task_text)
    return curve.CurveSettings.continued(args.init, corpus, threads=args.threads,
                                         precision=args.precision, **fmt, **given), work


def points(args: argparse.Namespace) -> list[str] | None:
    """--points as budget labels (None: every recorded one)."""
    if args.points is None:
        return None
    labels = [p.strip() for p in args.points.split(",") if p.strip()]
    if not labels:
        raise BertkitError(f"--points {args.points!r}: name budgets, e.g. 1h,2h")
    return labels


def report_curve(args: argparse.Namespace, settings: curve.CurveSettings,
                 ft: curve_finetune.FinetuneSettings, work: Path) -> int:
    """--status (print what is recorded) and --report DIR (the table, PNG and records)."""
    store = curve.open_store(work, settings)
    print("\n".join(curve.status_lines(store)) or f"{work}: nothing recorded yet")
    for line in curve_finetune.running_cells(work):
        print(line)
    rows = curve_finetune.curve_rows(store, curve_finetune.open_cells(work, ft), settings, ft,
                                     work if args.report else None)
    if rows:
        print(curve_finetune.report_markdown(rows, ft))
    if args.report and not rows:
        raise BertkitError(f"{work}: nothing recorded, so no report written (the table and "
                           f"records in {args.report} are kept); is --work the study's folder?")
    if args.report:
        args.report.mkdir(parents=True, exist_ok=True)
        name = curve_finetune.report_name(settings)
        png = args.report / f"{name[0]}.png"
        check_report_target(args.report / "pretraining.md", name[1], args.report / f"{name[0]}.md",
                            [png, args.report / f"{name[0]}.json"])
        tasks = curve_finetune.task_rows(store, settings, work)
        status = curve.status_lines(store)
        records = args.report / f"{name[0]}.json"
        if records.is_file():  # (a curve made again keeps the rows it has not scored again)
            rows, tasks, status = reproduce.keep_earlier_rows(
                read_json_object(records), settings, rows, tasks, status, str(records))
        curve_finetune.plot_curve(rows, png)
        page = curve_finetune.write_report(args.report, rows, ft, status, name, tasks, settings,
                                           reproduce.curve_plan(store))
        print(f"wrote {page} and {png}")
    return 0


def run_recipes(args: argparse.Namespace, base: curve.CurveSettings,
                ft: curve_finetune.FinetuneSettings, work: Path) -> int:
    """`bertkit study pretrain-recipes`: every variant to the budget, then fine-tuned; or its
    table (--status, --report)."""
    budget = 1.0 if args.budget is None else args.budget
    if not (math.isfinite(budget) and budget > 0):
        raise BertkitError(f"--budget must be > 0 CPU-hours, got {budget:g}")
    names = recipes.parse_variants(args.variants)
    if not (args.status or args.report):
        torch.set_num_threads(base.threads)
        recipes.run_recipes(base, budget, names, work, data_root(args.data), ft,
                            hours_left=args.hours)
    rows = recipes.recipe_rows(base, budget, names, work, ft, guesses=bool(args.report))
    print(recipes.recipes_markdown(rows, ft) if rows else f"{work}: no variant recorded yet")
    if args.report and not rows:
        raise BertkitError(f"{work}: no variant recorded, so no report written (the table in "
                           f"{args.report} is kept); is --work the study's folder?")
    if args.report:
        args.report.mkdir(parents=True, exist_ok=True)
        page = recipes.write_recipes_report(args.report, rows, ft, base, budget)
        print(f"wrote {page}")
    return 0
