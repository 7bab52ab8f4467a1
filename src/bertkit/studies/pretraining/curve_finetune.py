"""Fine-tuning the pre-training curve's points, and the curve's report (docs/reports/pretraining.md).

Each point `curve_points.pretrain_points` recorded (and each decay branch, `cooldown`) is
fine-tuned beside the same architecture from random initialization (or, for continued
pre-training, the --init model as it came): on the SST-2 subset, or on a whole task's training set
(`FinetuneSettings.whole`), each model at the best rate of its own grid chosen on a selection
seed that is not reported (`finetune_points`). The records are `cells.json` (the SST-2 subset)
or `cells-TASK.json` (a whole task) in the curve's work folder, their runs under `cells/`
(deleted as they finish).

The report: one row per point with its held-out MLM accuracy, first fill-mask guesses and the
fine-tuned scores against the baseline's (`curve_rows`, the gain with Welch's standard error),
as a Markdown table, a plot, and a block of docs/reports/pretraining.md (`write_report`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.inference.pretraining import fill_mask, load_pretraining_model
from bertkit.io import atomic_write_text, read_json_object
from bertkit.metrics import mean_std
from bertkit.runs.finetune import FinetuneConfig, finetune_train_config
from bertkit.studies import pipeline
from bertkit.studies.pipeline import task_files
from bertkit.studies.pretraining.curve import (
    BRANCH,
    HOUR,
    CurveSettings,
    architecture,
    check_points,
    curve_tag,
    point_labels,
)
from bertkit.studies.probe import FILL_MASK
from bertkit.studies.report import (
    format_gain,
    format_mean_std,
    markdown_table,
    pyplot,
    save_figure,
    write_block,
)
from bertkit.studies.results import ResultsStore, select_lr
from bertkit.studies.runner import busy, hold, holder, machine, try_hold
from bertkit.tasks import get_task
from bertkit.tokenization import BertTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinetuneSettings:
    """How every point and its random-init twin are fine-tuned: the demo's SST-2 subset, each
    model at the best rate of its own grid, chosen on a selection seed that is not reported."""

    task: str = "sst2"
    train_examples: int | None = 2000  # None: the task's whole training set
    epochs: float = 3.0
    lr_grid: tuple[float, ...] = (1e-4, 3e-4, 1e-3)
    seeds: int = 5  # reported seeds 0..seeds-1
    selection_seed: int = 100
    # Fine-tuning dropout for the point and its twin alike (`FinetuneConfig.dropout`); None:
    # the exported config's, which is the pre-training's (0 for the curve, after Cramming)
    dropout: float | None = None

    @classmethod
    def whole(cls, task: str, **changes: Any) -> FinetuneSettings:
        """`task`'s whole training set, otherwise the same recipe: the rows at the budgets that
        matter (SST-2, MRPC, STS-B, CoNLL-2003)."""
        return cls(task=task, train_examples=None, **changes)

    @property
    def name(self) -> str:
        """The settings' records (`cells.json` for the SST-2 subset, `cells-TASK.json` for a
        whole task, `-dropoutP` added for a dropout of P), their claims and their run folders
        are named after this."""
        parts = ([] if self.train_examples is not None else [self.task]) + (
            [] if self.dropout is None else [f"dropout{self.dropout:g}"])
        return "-".join(parts)

    @property
    def label(self) -> str:
        """The recipe in a table: "mrpc", "sst2 (2,000), dropout 0.1"."""
        size = "" if self.train_examples is None else f" ({self.train_examples:,})"
        return self.task + size + ("" if self.dropout is None else f", dropout {self.dropout:g}")


WHOLE_TASKS = ("sst2", "mrpc", "stsb", "conll2003")


RANDOM = "random"  # the variant name of the same architecture, never pre-trained
INIT = "init"  # continued pre-training's baseline: the --init model as it came


def baseline(settings: CurveSettings) -> str:
    """The variant every point is compared with: the random-init twin, or the --init model."""
    return RANDOM if settings.init is None else INIT


def open_cells(work: Path, settings: FinetuneSettings) -> ResultsStore:
    """The fine-tuning records: a store of their own, so that the fine-tuning workers and the
    pre-training sitting each write only their own file."""
    suffix = f"-{settings.name}" if settings.name else ""
    return ResultsStore(work / f"cells{suffix}.json", dataclasses.asdict(settings),
                        added_later={"dropout": None})


def recorded_settings(work: Path) -> list[FinetuneSettings]:
    """The fine-tuning recipes with records of their own in `work` (`cells-NAME.json`: a whole
    task, a dropout), in the order of `WHOLE_TASKS`, the model's own dropout first."""
    found = []
    for path in work.glob("cells-*.json"):
        recorded = read_json_object(path).get("settings")
        try:
            found.append(FinetuneSettings(**{**recorded, "lr_grid": tuple(recorded["lr_grid"])}))
        except (TypeError, KeyError) as err:
            raise BertkitError(f"{path}: not a fine-tuning record's settings ({err}): damaged, "
                               "or not the study's file") from None
    order = {task: i for i, task in enumerate(WHOLE_TASKS)}
    return sorted(found, key=lambda ft: (ft.train_examples is None, order.get(ft.task, 99),
                                         ft.dropout is not None, ft.dropout or 0.0))


def grid_variant(variant: str, lr: float) -> str:
    return f"{variant}@lr{lr:g}"


def selected_lr(cells: ResultsStore, ft: FinetuneSettings, variant: str) -> float | None:
    """The rate whose selection run scored best (a collapsed run only if all collapsed)."""
    runs = {lr: cells.data["cells"].get(cells.key(grid_variant(variant, lr), ft.task,
                                                  ft.selection_seed)) for lr in ft.lr_grid}
    if any(r is None for r in runs.values()):
        return None
    return select_lr(runs)


# the float fields of a fine-tuning record that are not dev metrics: `finetune.train_record`'s
# and `pipeline.finetune_cell`'s
NOT_DEV = frozenset({"lr", "epochs", "final_loss", "train_seconds", "train_cpu_seconds", "score",
                     "seconds"})


def wait_for_another_worker() -> None:
    """The pause before a worker looks again at the cells other workers hold (recorded yet, or
    left by a holder that ended)."""
    time.sleep(30.0)


@dataclass(frozen=True)
class CellRunner:
    """Runs the cells of one fine-tuning recipe (a model at a rate and seed), each claimed while
    it runs so that several workers share them."""

    cells: ResultsStore
    ft: FinetuneSettings
    recipe: FinetuneConfig  # the fine-tuning run, less its rate
    work: Path  # the curve's work folder: the cells' claims and run folders under cells/

    def run(self, variant: str, model_dir: Path, lr: float, seed: int) -> bool:
        """Run the cell unless it is recorded; False when another worker holds it."""
        cells, ft = self.cells, self.ft
        key = cells.key(variant, ft.task, seed)
        if cells.has(key):
            return True
        name = "-".join(filter(None, (ft.name, variant, f"s{seed}")))
        with contextlib.ExitStack() as held:
            claim = hold(self.work / "cells" / "claims" / name, f"cell {key}")
            if try_hold(held, claim) is not None:
                return False
            cells.reload()  # (recorded by another worker since this one looked)
            if cells.has(key):
                return True
            folder = self.work / "cells" / name
            record = pipeline.finetune_cell(self.recipe.with_run("", lr=lr), model_dir, ft.task,
                                            folder, seed)
            shutil.rmtree(folder, ignore_errors=True)
            # every dev metric the run reported, not only the headline (MRPC's accuracy beside
            # its F1): its numbers outside the training part (`finetune.train_record`) and the
            # cell's own
            dev = {k: round(v, 4) for k, v in record.items()
                   if isinstance(v, float) and k not in NOT_DEV}
            cells.put(key, {"lr": lr, "seed": seed, "score": round(record["score"], 3),
                            "collapsed": bool(record.get("collapsed")), "dev": dev,
                            "seconds": record["seconds"], "machine": machine()})
            log.info("%s lr %g seed %d: %s %.1f", variant, lr, seed, ft.task, record["score"])
        return True


def finetune_points(store: ResultsStore, cells: ResultsStore, settings: CurveSettings,
                    ft: FinetuneSettings, work: Path, data: Path,
                    points: Sequence[str] | None = None) -> None:
    """Fine-tune the random-init twin and every recorded point not yet done (of `points`, when
    given): the lr grid on the selection seed, then the reported seeds at the chosen rate.

    Several workers (one a core) may share the cells: each claims a cell while it runs it
    (`runner.hold`, dropped by the kernel when a worker dies), passes over cells another
    holds and returns once every cell is recorded."""

    labels = check_points(settings, points)
    missing = [p for p in points or () if store.pretrain_info(p) is None]
    if missing:
        raise BertkitError(f"--points {','.join(missing)}: not recorded yet (--status lists "
                           "what is; pre-train, or branch with --cooldown, to it first)")
    tokenizer = BertTokenizer.from_pretrained(work / "vocab")
    if settings.init is not None:
        models = {INIT: Path(settings.init)}
    else:
        models = {RANDOM: pipeline.random_init(architecture(settings, tokenizer.vocab_size),
                                               tokenizer, work / "points" / RANDOM,
                                               seed=settings.seed)}
    for label in labels:
        if store.pretrain_info(label) is not None and (points is None or label in points):
            models[label] = work / "points" / label
    files, _ = task_files(ft.task, data)
    recipe = FinetuneConfig(ft.task, "", "", train=finetune_train_config(precision="fp32",
                            progress=False), epochs=ft.epochs, max_seq_length=128,
                            max_train_examples=ft.train_examples, dropout=ft.dropout,
                            # the recorded STS-B cells were fine-tuned from Hugging Face's zero
                            # head: a resumed study keeps that start, never mixing two
                            regression_bias="zero", **files)
    cell = CellRunner(cells, ft, recipe, work).run

    # Passes over every model until all its cells are recorded: a pass runs each cell no other
    # worker holds, a model's seeds once its grid is recorded (the grid decides their rate); a
    # cell held elsewhere is looked at again in the next pass, and taken over should its holder
    # end without recording it.
    for waited in itertools.count():
        pending = []
        for variant, model_dir in models.items():
            if not all([cell(grid_variant(variant, lr), model_dir, lr, ft.selection_seed)
                        for lr in ft.lr_grid]):
                pending.append(variant)
                continue
            lr = selected_lr(cells, ft, variant)
            if not all([cell(variant, model_dir, lr, seed) for seed in range(ft.seeds)]):
                pending.append(variant)
        if not pending:
            return
        # none held now: the cells held during the pass are recorded or free, and the next
        # pass settles them without waiting
        if held := running_cells(work):
            if waited % 20 == 0:  # (every 10 minutes: a holder stopped, not ended, waits forever)
                log.info("waiting for cells of %s that other workers run: %s",
                         ", ".join(pending), "; ".join(held))
            wait_for_another_worker()
        cells.reload()


def running_cells(work: Path) -> list[str]:
    """The cells workers are running now (their claims held), each with its holder: for
    --status."""
    claims = work / "cells" / "claims"
    held = sorted(c for c in claims.glob("*") if busy(c)) if claims.is_dir() else []
    return [f"fine-tuning now: {c.name} ({holder(c)})" for c in held]


def gain(pre: Sequence[float], rnd: Sequence[float]) -> tuple[float, float]:
    """Mean gain of the pre-trained model over random init and its standard error (Welch: the
    two groups' seeds are independent runs)."""
    (m1, s1), (m0, s0) = mean_std(pre), mean_std(rnd)
    return m1 - m0, math.sqrt(s1 ** 2 / len(pre) + s0 ** 2 / len(rnd))


def first_guesses(point: Path) -> list[str]:
    """The point's first fill-mask guess on each of the demo's sentences (`FILL_MASK`): the
    same piece everywhere is the unigram plateau; context-fitting words are the way off it."""
    if not (point / "config.json").is_file():
        return []
    model, tokenizer = load_pretraining_model(point, "mlm")
    return [fill_mask(model, tokenizer, text, k=1)[0][1][0][0] for text in FILL_MASK]


def curve_rows(store: ResultsStore, cells: ResultsStore, settings: CurveSettings,
               ft: FinetuneSettings, work: Path | None = None) -> list[dict[str, Any]]:
    """One row per point: budget, step, tokens, held-out MLM accuracy, the first fill-mask
    guesses (with `work`, from the point's export), fine-tuned scores."""
    rnd = cells.scores(baseline(settings), ft.task)
    rows = []
    for label in point_labels(settings):
        info = store.pretrain_info(label)
        if info is None:
            continue
        pre = cells.scores(label, ft.task)
        row = {"budget": label, "cpu_hours": info["cpu_seconds"] / HOUR, "step": info["step"],
               "tokens": info["tokens_seen"], "mlm_acc": info.get("eval_mlm_acc"),
               "fill_mask": first_guesses(work / "points" / label) if work else [],
               "scores": pre, "random": rnd,
               "baseline": "random init" if settings.init is None else "before (as it came)"}
        if len(pre) >= 2 and len(rnd) >= 2:
            row["gain"], row["gain_se"] = gain(pre, rnd)
        rows.append(row)
    return rows


def report_markdown(rows: Sequence[dict[str, Any]], ft: FinetuneSettings) -> str:
    table = []
    for r in rows:
        acc = "—" if r["mlm_acc"] is None else f"{100 * r['mlm_acc']:.1f}"
        score = format_mean_std(r["scores"], scale=1.0) if r["scores"] else "—"
        rnd = format_mean_std(r["random"], scale=1.0) if r["random"] else "—"
        g = format_gain(r)
        guesses = " ".join(f"`{g}`" for g in r.get("fill_mask", [])) or "—"
        table.append([r["budget"], f"{r['cpu_hours']:.2f}", r["step"], f"{r['tokens'] / 1e6:.1f}M",
                      acc, guesses, score, rnd, g, len(r["scores"])])
    return markdown_table(["budget", "CPU-h", "step", "tokens", "held-out MLM acc. (%)",
                           "fill-mask, first guesses", f"{ft.task} pre-trained",
                           f"{ft.task} {rows[0].get('baseline', 'random init') if rows else ''}",
                           "gain ± SE", "seeds"], table)


def task_rows(store: ResultsStore, settings: CurveSettings, work: Path) -> list[dict[str, Any]]:
    """The rows of every recipe besides the subset's default (`recorded_settings`: the whole
    tasks, a fine-tuning dropout): one per recipe and point with scores, in the curve's row
    format plus the task, the recipe's label and the task's metric."""
    rows = []
    for ft in recorded_settings(work):
        for row in curve_rows(store, open_cells(work, ft), settings, ft):
            if row["scores"]:
                rows.append({**row, "task": ft.label, "metric": get_task(ft.task).main_metric})
    return rows


def task_markdown(rows: Sequence[dict[str, Any]]) -> str:
    table = [[r["budget"], f"{r['tokens'] / 1e6:.1f}M", r["task"], r["metric"],
              format_mean_std(r["scores"], scale=1.0),
              format_mean_std(r["random"], scale=1.0) if r["random"] else "—",
              format_gain(r),
              f"{len(r['scores'])} / {len(r['random'])}"] for r in rows]
    baseline_name = rows[0]["baseline"] if rows else "random init"
    return markdown_table(["budget", "tokens", "task (training examples, dropout)", "dev metric",
                           "pre-trained", baseline_name, "gain ± SE", "seeds"], table)


def plot_curve(rows: Sequence[dict[str, Any]], png: Path) -> Path | None:
    """MLM accuracy and the fine-tuning gain against CPU-hours (log scale), one PNG: the run's
    points as a line, their decay branches (`+cool`) as separate markers."""
    plt = pyplot()
    if plt is None or not rows:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, style in (("the run", "o-"), ("decay branches", "s")):
        group = [r for r in rows if r["budget"].endswith(BRANCH) == (kind != "the run")]
        if not group:
            continue
        left.plot([r["cpu_hours"] for r in group], [100 * (r["mlm_acc"] or 0) for r in group],
                  style, label=kind)
        scored = [r for r in group if "gain" in r]
        if scored:
            right.errorbar([r["cpu_hours"] for r in scored], [r["gain"] for r in scored],
                           yerr=[2 * r["gain_se"] for r in scored], fmt=style, capsize=3,
                           label=kind)
    left.set(xscale="log", xlabel="pre-training CPU-hours", ylabel="held-out MLM accuracy (%)")
    right.axhline(0, color="grey", lw=0.8)
    right.set(xscale="log", xlabel="pre-training CPU-hours",
              ylabel=f"gain over {rows[0].get('baseline', 'random init')} (points, ± 2 SE)")
    hours = sorted({round(r["cpu_hours"], 2) for r in rows})
    for ax in (left, right):  # the budgets as plain numbers, not 3x10^-1 (log ticks overlap)
        ax.set_xticks(hours, [f"{h:.2g}" for h in hours])
        ax.minorticks_off()
    if any(r["budget"].endswith(BRANCH) for r in rows):
        left.legend()
    fig.tight_layout()
    return save_figure(fig, plt, png)


CURVE_BEGIN, CURVE_END = "<!-- curve:begin -->", "<!-- curve:end -->"
CONTINUED_BEGIN, CONTINUED_END = "<!-- continued:begin -->", "<!-- continued:end -->"


def report_name(settings: CurveSettings) -> tuple[str, str, str]:
    """Where `--report` writes: the files' stem and the page's markers (the curve, or
    continued pre-training: one page, two tables)."""
    if settings.init is not None:
        return "continued_pretraining", CONTINUED_BEGIN, CONTINUED_END
    # a curve beside the first: another recipe (a named one, or the user's own settings),
    # another precision
    tag = "-".join(filter(None, (curve_tag(settings),
                                 None if settings.precision == "fp32" else settings.precision)))
    if tag:
        return f"pretrain_curve_{tag}", f"<!-- curve-{tag}:begin -->", f"<!-- curve-{tag}:end -->"
    return "pretrain_curve", CURVE_BEGIN, CURVE_END


def write_report(folder: Path, rows: Sequence[dict[str, Any]], ft: FinetuneSettings,
                 status: Sequence[str],
                 name: tuple[str, str, str] = ("pretrain_curve", CURVE_BEGIN, CURVE_END),
                 tasks: Sequence[dict[str, Any]] = (),
                 settings: CurveSettings | None = None,
                 plan: dict[str, Any] | None = None) -> Path:
    """The table (and the whole-task rows, `task_rows`, if any) and the run's status into
    `folder/pretraining.md` between the markers of `name` (`report_name`; the page's prose
    around them is kept), or into `folder/STEM.md` when there is no such page."""
    stem, begin, end = name
    whole = ["Whole tasks and other fine-tuning recipes, at the points fine-tuned with them "
             "(`--finetune-task`, `--finetune-dropout`):", "",
             task_markdown(tasks), ""] if tasks else []
    body = "\n".join([report_markdown(rows, ft), "", *whole, "Recorded points (`--status`):",
                      "", *(f"- {line}" for line in status)])
    # the records behind the table, beside it: a later sitting on a machine that lost the work
    # folder still has them (and the settings they were made with)
    # (and its plan, `curve.curve_plan`: what `--reproduce` takes to make the same points)
    recipe = {"settings": dataclasses.asdict(settings)} if settings else {}
    recipe.update({"plan": plan} if plan else {})
    atomic_write_text(folder / f"{stem}.json", json.dumps(
        {**recipe, "rows": list(rows), "tasks": list(tasks), "status": list(status)}, indent=1,
        default=str) + "\n")
    return write_block(folder / "pretraining.md", begin, end, body, folder / f"{stem}.md")
