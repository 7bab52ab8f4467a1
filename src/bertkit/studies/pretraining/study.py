"""`bertkit study pretrain-curve` and `pretrain-recipes` as one request: what the options ask
for (`StudyRequest`, its combinations checked once, when it is made) and the call that runs it
(`run_study`). The studies themselves are `curve`, `curve_points`, `curve_finetune`,
`cooldown`, `reproduce` and `recipes`."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bertkit.errors import BertkitError
from bertkit.io import read_json_object
from bertkit.studies.pretraining import cooldown, curve, curve_finetune, curve_points, recipes, reproduce
from bertkit.studies.report import check_report_target

log = logging.getLogger(__name__)

DEFAULTS = curve.CurveSettings(corpus=("-",))  # the defaults, defined once in the library
STUDIES = ("pretrain-curve", "pretrain-recipes")
# (+ "-small-budget" for --recipe small-budget, "-bf16" for --precision bf16)
DEFAULT_WORK = Path("../bertkit-studies/pretrain-curve")


@dataclass(frozen=True)
class StudyRequest:
    """What `bertkit study` was asked, one field an option. `data_dir` gives the data folder
    (the CLI's rule: --data, else $BERTKIT_DATA, else ../shared/data); it is called only once
    the options are known to mean something."""

    name: str
    data_dir: Callable[[], Path] = field(compare=False, repr=False)
    work: Path | None = None
    hours: float = float("inf")
    reproduce: Path | None = None
    status: bool = False
    report: Path | None = None
    finetune: bool = False
    finetune_task: str | None = None
    finetune_dropout: float | None = None
    cooldown: bool = False
    points: str | None = None
    init: str | None = None
    task_text: str | None = None
    recipe: str | None = None
    model: str = DEFAULTS.model
    vocab_size: int = DEFAULTS.vocab_size
    batch_size: int | None = None
    lr: float | None = None
    precision: str = DEFAULTS.precision
    threads: int = DEFAULTS.threads
    budget: float | None = None
    variants: str | None = None

    def __post_init__(self) -> None:
        """The combinations that mean nothing, refused before any folder is written."""
        if self.name not in STUDIES:
            raise BertkitError(f"unknown study {self.name!r}; choose one of {', '.join(STUDIES)}")
        if self.name == "pretrain-recipes" and (self.init or self.finetune):
            raise BertkitError("pretrain-recipes runs pre-training and fine-tuning itself, from "
                               "random weights: drop --init / --finetune")
        if self.name == "pretrain-recipes" and self.cooldown:
            raise BertkitError("--cooldown branches the curve's points; a recipe's run already "
                               "decays to 0 at its budget")
        if self.cooldown and (self.finetune or self.init):
            raise BertkitError("--cooldown is a pre-training sitting of its own: drop --finetune "
                               "(fine-tune its points after, with --points BUDGET+cool)"
                               if self.finetune else "--cooldown branches the curve from random "
                               "init; a continued study (--init) is not branched")
        if (self.finetune_task or self.finetune_dropout is not None) and not self.finetune:
            raise BertkitError("--finetune-task and --finetune-dropout choose how --finetune "
                               "fine-tunes: give --finetune too")
        if self.finetune_dropout is not None and not 0 <= self.finetune_dropout < 1:
            raise BertkitError(f"--finetune-dropout must be in [0, 1), got {self.finetune_dropout}")
        if self.points and not (self.finetune or self.cooldown):
            raise BertkitError("--points chooses what --finetune fine-tunes or --cooldown branches: "
                               "give one of them too")
        if not self.hours > 0:  # (nan too)
            raise BertkitError(f"--hours must be > 0 CPU-hours, got {self.hours:g}")
        if self.recipe and (self.init or self.name == "pretrain-recipes"):
            raise BertkitError("--recipe names the curve's recipe: "
                               + ("pretrain-recipes varies the curve's own, one change a variant"
                                  if self.name == "pretrain-recipes" else
                                  "a continued study (--init) keeps the model's shape and its own "
                                  "fine-tuning-sized rates"))
        if self.task_text and not self.init:
            raise BertkitError("--task-text is for continued pre-training: give --init MODEL too")
        if self.name == "pretrain-curve" and (self.budget is not None or self.variants):
            raise BertkitError("--budget and --variants choose pretrain-recipes' runs; the curve's "
                               "budgets are its points")
        reads_only = self.status or self.report
        if math.isfinite(self.hours) and (reads_only or self.finetune or self.cooldown):
            raise BertkitError("--hours limits a pre-training sitting's CPU-hours; "
                               + ("--status and --report read the records" if reads_only else
                                  "--finetune and --cooldown run to the end of what they do "
                                  "(a decay branch is 20% of its point's steps)"))
        if self.report is not None and self.report.exists() and not self.report.is_dir():
            raise BertkitError(f"--report {self.report}: a file, not a folder")
        if self.reproduce is not None and (self.name != "pretrain-curve" or reads_only
                                           or self.finetune or self.cooldown):
            raise BertkitError("--reproduce begins a pretrain-curve's pre-training sitting: drop "
                               "--status, --report, --finetune and --cooldown (they read or use "
                               "the points it records)")
        if self.points and reads_only:
            raise BertkitError("--status and --report show every recorded point: drop --points")


def run_study(args: StudyRequest) -> int:
    """Start or continue the study `args` names (or print its status, or write its report)."""
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
                                       args.data_dir(), labels)
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


def study_settings(args: StudyRequest) -> tuple[curve.CurveSettings, Path]:
    """The study's recipe from the options, and its work folder."""
    work = args.work
    given = {k: v for k, v in (("batch_size", args.batch_size), ("lr", args.lr))
             if v is not None}
    if args.init is None:
        recipe = curve.recipe_fields(args.recipe) if args.recipe else {}
        settings = curve.CurveSettings(
            corpus=curve.corpus_files(args.data_dir()), model=args.model,
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
    corpus = (curve.task_text(args.task_text, args.data_dir(), work) if args.task_text
              else curve.corpus_files(args.data_dir()))
    fmt = {"corpus_format": "google"} if args.task_text else {}  # (curve.task_text)
    return curve.CurveSettings.continued(args.init, corpus, threads=args.threads,
                                         precision=args.precision, **fmt, **given), work


def points(args: StudyRequest) -> list[str] | None:
    """--points as budget labels (None: every recorded one)."""
    if args.points is None:
        return None
    labels = [p.strip() for p in args.points.split(",") if p.strip()]
    if not labels:
        raise BertkitError(f"--points {args.points!r}: name budgets, e.g. 1h,2h")
    return labels


def report_curve(args: StudyRequest, settings: curve.CurveSettings,
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


def run_recipes(args: StudyRequest, base: curve.CurveSettings,
                ft: curve_finetune.FinetuneSettings, work: Path) -> int:
    """`bertkit study pretrain-recipes`: every variant to the budget, then fine-tuned; or its
    table (--status, --report)."""
    budget = 1.0 if args.budget is None else args.budget
    if not (math.isfinite(budget) and budget > 0):
        raise BertkitError(f"--budget must be > 0 CPU-hours, got {budget:g}")
    names = recipes.parse_variants(args.variants)
    if not (args.status or args.report):
        torch.set_num_threads(base.threads)
        recipes.run_recipes(base, budget, names, work, args.data_dir(), ft,
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
