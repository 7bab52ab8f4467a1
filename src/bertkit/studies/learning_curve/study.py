"""`bertkit study learning-curve` as one request (`LearningCurveRequest`, its combinations
checked when it is made) and the call that runs it (`run_learning_curve`): with my N labels,
should I fine-tune or use frozen features, and does pre-training help at all?

Every run is one line of WORK/runs.jsonl (`runner.RunLog`) once it ends, and a run in the log is
never run again: a stopped study goes on where it stopped. A run is claimed while it runs
(`runner.hold` on WORK/claims/RUN), so a second worker on another core shares the runs; a worker
returns when every run is recorded. WORK/study.json holds the recipe the runs share: a later
sitting may add models, sizes, seeds or an approach, never change the recipe under them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_json, read_json_object
from bertkit.studies import frozen, pipeline
from bertkit.studies.label_curve import subset_indices
from bertkit.studies.learning_curve import plan
from bertkit.studies.learning_curve.finetune import choose_lr, finetune_run
from bertkit.studies.learning_curve.plan import APPROACHES, DEFAULT_APPROACHES, Recipe, Run, Variant
from bertkit.studies.learning_curve.report import report_markdown, write_report
from bertkit.studies.results import Progress
from bertkit.studies.runner import RunLog, busy, hold, holder, machine_name, try_hold
from bertkit.tasks import get_task
from bertkit.tasks.glue import GLUE_TASKS

log = logging.getLogger(__name__)

NAME = "learning-curve"
DEFAULT_SIZES = "50,100,300,1000,3000,all"
DEFAULT_WORK = Path("../bertkit-studies")  # + learning-curve-TASK
RECIPE = Recipe("sst2", "", "")  # the defaults, defined once


@dataclass(frozen=True)
class LearningCurveRequest:
    """What `bertkit study learning-curve` was asked, one field an option. `data_dir` gives the
    data folder (the CLI's rule); it is called only once the options are known to mean something."""

    task: str
    data_dir: Callable[[], Path] = field(compare=False, repr=False)
    models: tuple[str, ...] = ()
    sizes: str = DEFAULT_SIZES
    approach: str = ",".join(DEFAULT_APPROACHES)
    seeds: int = 5
    work: Path | None = None
    max_seq_length: int = RECIPE.max_seq_length
    dev_examples: int | None = None
    lr_grid: tuple[float, ...] = RECIPE.lr_grid
    epochs: float = RECIPE.epochs
    min_steps: int = RECIPE.min_steps
    regression_bias: str = RECIPE.regression_bias
    threads: int = 1
    status: bool = False
    report: Path | None = None

    def __post_init__(self) -> None:
        """The options that mean nothing, refused before any folder is written."""
        if self.task not in GLUE_TASKS:
            raise BertkitError(f"learning-curve: {self.task!r} is not a GLUE sentence or pair task "
                               f"({', '.join(GLUE_TASKS)})")
        reads_only = self.status or self.report is not None
        if not self.models and not reads_only:
            raise BertkitError("learning-curve: give --model PATH (once per model; each runs beside "
                               "its random-init twin)")
        plan.check_names(self.models)
        plan.parse_sizes(self.sizes)
        parse_approaches(self.approach)
        if self.seeds < 1:
            raise BertkitError(f"--seeds must be >= 1, got {self.seeds}")
        if self.threads < 1:
            raise BertkitError(f"--threads must be >= 1, got {self.threads}")
        Recipe(self.task, "", "", max_seq_length=self.max_seq_length, dev_examples=self.dev_examples,
               lr_grid=self.lr_grid, epochs=self.epochs, min_steps=self.min_steps,
               regression_bias=self.regression_bias)
        if self.report is not None and self.report.exists() and not self.report.is_dir():
            raise BertkitError(f"--report {self.report}: a file, not a folder")

    @property
    def approaches(self) -> tuple[str, ...]:
        return parse_approaches(self.approach)

    @property
    def folder(self) -> Path:
        return self.work or DEFAULT_WORK / f"{NAME}-{self.task}"


def parse_approaches(text: str) -> tuple[str, ...]:
    """--approach "finetune,frozen" as names, each known and once."""
    names = tuple(a.strip() for a in text.split(",") if a.strip())
    if not names or len(set(names)) != len(names) or any(a not in APPROACHES for a in names):
        raise BertkitError(f"--approach {text!r}: one or more of {', '.join(APPROACHES)}")
    return names


def run_learning_curve(req: LearningCurveRequest) -> int:
    """Run what is not recorded yet (or print the status, or write the report)."""
    work = req.folder
    runs_log = RunLog(work / "runs.jsonl")
    if req.status or req.report is not None:
        return report_study(req, work, runs_log)
    files, _ = pipeline.task_files(req.task, req.data_dir())
    # absolute paths: the same files given as ../shared/data or as /abs/shared/data are one recipe
    train_file, dev_file = (str(Path(files[k]).resolve()) for k in ("train_file", "dev_file"))
    recipe = Recipe(req.task, train_file, dev_file, max_seq_length=req.max_seq_length,
                    dev_examples=req.dev_examples, lr_grid=req.lr_grid, epochs=req.epochs,
                    min_steps=req.min_steps, regression_bias=req.regression_bias)
    train = plan.read_examples(req.task, recipe.train_file)
    dev = plan.read_examples(req.task, recipe.dev_file, recipe.dev_examples)
    if "frozen-apart" in req.approaches and train[0].text_b is None:
        raise BertkitError(f"--approach frozen-apart embeds a pair's two texts apart; {req.task} "
                           "has one text per example (use frozen)")
    sizes = plan.resolve_sizes(plan.parse_sizes(req.sizes), len(train), recipe.train_file)
    claim_recipe(work, recipe)
    torch.set_num_threads(req.threads)
    variants = plan.model_variants(req.models, work)
    runs = plan.planned_runs(variants, req.approaches, sizes, req.seeds, recipe)
    measure = Measure(recipe, {v.name: v for v in variants}, train, dev, work)
    run_all(runs, runs_log, measure, work)
    print(report_markdown(runs_log.read(), get_task(req.task).main_metric))
    return 0


# recipe settings added after studies were made, at the value those studies had
ADDED_LATER = {"regression_bias": "zero"}


def claim_recipe(work: Path, recipe: Recipe) -> None:
    """WORK/study.json: written by the study's first command; a later one with another recipe is
    refused (a regression head's start only where the task is a regression)."""
    path = work / "study.json"
    settings = recipe.settings()
    if path.is_file():
        stored = {**ADDED_LATER, **read_json_object(path).get("recipe", {})}
        moot = set() if get_task(recipe.task).regression else {"regression_bias"}
        changed = sorted(k for k in {*settings, *stored} - moot if stored.get(k) != settings.get(k))
        if changed:
            raise BertkitError(f"{path}: the runs here were made with other settings "
                               f"({', '.join(changed)}); other settings need a --work of their own")
        return
    work.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"study": NAME, "recipe": settings})


@dataclass
class Measure:
    """Runs one `Run`: the frozen features (vectors cached per variant) or a fine-tuning run."""

    recipe: Recipe
    variants: dict[str, Variant]
    train: list[Any]
    dev: list[Any]
    work: Path
    caches: dict[str, tuple[frozen.FeatureCache, frozen.FeatureCache]] = field(default_factory=dict)

    def __call__(self, run: Run, lr: float | None) -> dict[str, Any]:
        variant = self.variants[run.variant]
        if run.approach in plan.FROZEN_APPROACHES:
            return frozen.frozen_run(self.recipe.task, *self.features(variant, run.approach),
                                     subset_indices(len(self.train), run.size, run.seed), run.seed)
        train_file = (Path(self.recipe.train_file) if run.size == len(self.train) else
                      plan.subset_file(self.recipe, self.train, run.size, run.seed, self.work / "subsets"))
        return finetune_run(self.recipe, variant.path, train_file, run, lr, self.work / "runs" / run.key)

    def features(self, variant: Variant, approach: str
                 ) -> tuple[frozen.FeatureCache, frozen.FeatureCache]:
        apart = approach == "frozen-apart"
        key = f"{variant.name}-T{self.recipe.max_seq_length}" + ("-apart" if apart else "")
        if key not in self.caches:
            encoder = frozen.frozen_encoder(variant.path, self.recipe.max_seq_length)
            folder = self.work / "features" / key
            self.caches[key] = (frozen.FeatureCache(encoder, self.train, folder / "train.npz", apart),
                                frozen.FeatureCache(encoder, self.dev, folder / "dev.npz", apart))
        return self.caches[key]


def wait_for_another_worker() -> None:
    """The pause before a worker looks again at runs other workers hold."""
    time.sleep(30.0)


def run_all(runs: list[Run], runs_log: RunLog, measure: Measure, work: Path) -> None:
    """Passes over `runs` until each is recorded: a pass runs every run no other worker holds
    (a fine-tuning run once its rate is chosen); a run held elsewhere is looked at again in the
    next pass, and taken over should its holder end without recording it."""
    records = {r["run"]: r for r in runs_log.read()}
    progress = Progress(len(runs), sum(r.key in records for r in runs))
    for waited in itertools.count():
        waiting = []
        for run in runs:
            if run.key in records:
                continue
            lr = run.lr
            if run.approach == "finetune" and not run.selection:
                lr = choose_lr(measure.recipe, records, run.variant, run.size)
                if lr is None:  # (its rate's runs are held by another worker)
                    waiting.append(run.key)
                    continue
            with contextlib.ExitStack() as held:
                if try_hold(held, hold(work / "claims" / run.key, f"run {run.key}")) is not None:
                    waiting.append(run.key)
                    continue
                records = {r["run"]: r for r in runs_log.read()}  # (another worker's since)
                if run.key in records:
                    continue
                progress.step(run.key)
                result = measure(run, lr)
                variant = measure.variants[run.variant]
                records[run.key] = runs_log.append({
                    "run": run.key, "task": measure.recipe.task, "model": variant.model,
                    "pretrained": variant.pretrained, **dataclasses.asdict(run), **result})
                log.info("%s: %.1f%s", run.key, result["score"],
                         " (collapsed)" if result.get("collapsed") else "")
        if not waiting:
            return
        if waited % 20 == 0:
            log.info("waiting for runs other workers hold: %s", ", ".join(waiting[:5]))
        wait_for_another_worker()
        records = {r["run"]: r for r in runs_log.read()}


def running(work: Path) -> list[str]:
    claims = work / "claims"
    held = sorted(c for c in claims.glob("*") if busy(c)) if claims.is_dir() else []
    return [f"running now: {c.name} ({holder(c)})" for c in held]


def report_study(req: LearningCurveRequest, work: Path, runs_log: RunLog) -> int:
    """--status (the tables of what is recorded) and --report DIR (tables, PNG, records)."""
    records = [r for r in runs_log.read() if r.get("task") == req.task]
    metric = get_task(req.task).main_metric
    for line in running(work):
        print(line)
    print(report_markdown(records, metric) if records else f"{work}: nothing recorded yet")
    if req.report is None:
        return 0
    if not records:
        raise BertkitError(f"{work}: nothing recorded, so no report written; is --work the "
                           "study's folder?")
    settings = read_json_object(work / "study.json").get("recipe", {})
    header = header_line(req.task, records, settings)
    page, png = write_report(req.report, req.task, metric, records, settings, header)
    print(f"wrote {page}" + (f" and {png}" if png else ""))
    return 0


def header_line(task: str, records: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """What was measured, how, where and when."""
    dates = sorted(r["date"] for r in records if "date" in r)
    grid = ", ".join(f"{lr:g}" for lr in settings.get("lr_grid", ()))
    dev = settings.get("dev_examples") or "all"
    seconds = sum(r.get("seconds", 0) for r in records)
    head = ("" if not get_task(task).regression else
            " The regression head starts at the training labels' mean." if
            settings.get("regression_bias") == "mean" else
            " The regression head starts at 0 (Hugging Face's init).")
    apart = (" Frozen, texts apart: each text of a pair embedded alone, the model reading "
             "[u, v, |u-v|, u*v, cosine]." if any(r.get("approach") == "frozen-apart"
                                                    for r in records) else "")
    return (f"**{task}**, dev: {dev} examples, max length {settings.get('max_seq_length')}. Frozen: "
            f"mean-pooled fp32 vectors, standardized, into logistic regression (classification) or "
            f"ridge regression, its regularization chosen by cross-validation on the subset.{apart} "
            f"Fine-tuned: batch {settings.get('batch_size')}, {settings.get('epochs'):g} epochs or "
            f"at least {settings.get('min_steps')} steps, the rate chosen per model and label count "
            f"from {{{grid}}} on seed {settings.get('selection_seed')} (not reported).{head} Subsets: the "
            f"first N of a seeded shuffle of the training set, the same for every model at a seed. "
            f"Measured on {machine_name(records[0])}, {dates[0] if dates else '?'} to "
            f"{dates[-1] if dates else '?'}, {seconds / 3600:.1f} hours of runs in all.")
