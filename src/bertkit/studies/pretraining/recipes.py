"""The recipe table (docs/reports/pretraining.md): at one fixed budget, which of the changes the
literature proposes for small budgets make own pre-training pay sooner, with the checkpoint
layout unchanged (every variant exports a BERT that `transformers` loads).

Each variant is the curve's recipe (`curve.CurveSettings`) with one change, run as a curve of a
single point: its own work folder under the study's (`BUDGET/VARIANT/`), its lr schedule ending
at the budget (a fixed-budget run decays fully, unlike a point read off the long curve), its
export fine-tuned on the SST-2 subset beside its own random-init twin (`curve_finetune.finetune_points`; a
variant that changes the vocabulary or the length has a twin of its own shape). So every piece
is the curve's: resume, sittings, locks, records, fine-tuning.

The budget is a number of steps, fixed before a run starts: the base's is the budget over its
step's CPU seconds (`curve.horizon_steps`' probe); a variant's is the base's scaled by what its
step costs against the base's, both probed back to back in one process so that the machine's
load at the time cancels (a variant that changes only the optimizer's rates costs what the base
does: no probe). Each run then trains its steps to the end of its schedule (`fixed_steps`),
whatever the machine's load does to its CPU seconds meanwhile, and records what they cost. The
table compares the variants by
held-out MLM accuracy (on the variant's own held-out split: a vocabulary change changes what is
predicted, so read those rows by the SST-2 gain) and by the SST-2 gain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.studies.pretraining import curve, curve_finetune, curve_points
from bertkit.studies.report import (
    check_report_target,
    format_gain,
    format_mean_std,
    markdown_table,
    pyplot,
    save_figure,
    write_block,
)
from bertkit.studies.runner import busy, try_hold
from bertkit.tokenization import BertTokenizer

log = logging.getLogger(__name__)

# name -> (the change to the curve's recipe, what it is and where it comes from). Dropout is
# not a variant: the exported config carries it into fine-tuning, so it would change the
# fine-tuning recipe too (the curve pre-trains without it, after Cramming).
VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    "base": ({}, "the curve's recipe: MLM 15%, T = 128, batch 128, lr 1e-3, 2% warmup, "
                 "dropout 0, 8,192 pieces"),
    "mask40": ({"masked_lm_prob": 0.4}, "40% masking (Wettig et al. 2023)"),
    "mlm+nsp": ({"objective": "mlm+nsp"}, "MLM + next-sentence prediction (the paper)"),
    "sop": ({"objective": "sop"}, "MLM + sentence-order prediction (ALBERT)"),
    "seq64": ({"max_seq_length": 64}, "T = 64 (the paper's phase 1 is T = 128 for 90%)"),
    "seq64-128": ({"max_seq_length": 64, "phase2_seq_length": 128},
                  "T = 64 for 90% of the budget, then T = 128 (the paper's two phases; Li et "
                  "al. 2022's sequence length warmup)"),
    "lr2e-3": ({"lr": 2e-3}, "lr 2e-3 (Izsak et al. 2021: high rates for short budgets)"),
    "lr5e-4": ({"lr": 5e-4}, "lr 5e-4"),
    "batch64": ({"batch_size": 64}, "batch 64: twice the steps of half the size"),
    "warmup10": ({"warmup_ratio": 0.1}, "10% warmup"),
    "vocab4k": ({"vocab_size": 4096}, "a 4,096-piece vocabulary (smaller embedding share)"),
    "vocab16k": ({"vocab_size": 16384}, "a 16,384-piece vocabulary"),
}

# variants whose step is the base's step, arithmetic for arithmetic (only the rates differ)
SAME_STEP = frozenset({"lr2e-3", "lr5e-4", "warmup10"})

def report_name(budget_hours: float) -> tuple[str, str, str]:
    """Where `--report` writes a budget's table: its files' stem and its markers in
    pretraining.md (one table a budget, side by side on the page)."""
    label = curve.budget_label(budget_hours)
    return (f"pretrain_recipes_{label}", f"<!-- recipes-{label}:begin -->",
            f"<!-- recipes-{label}:end -->")


def parse_variants(text: str | None) -> tuple[str, ...]:
    """"mask40,sop" -> ("base", "mask40", "sop"): the base always runs, first (every variant is
    read against it); None -> all."""
    names = [n.strip() for n in text.split(",") if n.strip()] if text else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise BertkitError(f"unknown recipe variant(s) {', '.join(unknown)}; choose from "
                           f"{', '.join(VARIANTS)}")
    return tuple(dict.fromkeys(["base", *names]))


def variant_settings(base: curve.CurveSettings, name: str, budget_hours: float
                     ) -> curve.CurveSettings:
    """The curve's recipe with the variant's one change, as a curve of one point at the budget
    (its schedule's horizon)."""
    changes, _ = VARIANTS[name]
    return dataclasses.replace(base, budgets_hours=(budget_hours,), **changes)


def variant_folder(work: Path, budget_hours: float, name: str) -> Path:
    """`work/1h/mask40`: a variant's folder, under its budget's (a study holds any budgets)."""
    return work / curve.budget_label(budget_hours) / name


def variant_horizon(base: curve.CurveSettings, budget_hours: float, name: str, work: Path
                    ) -> dict[str, Any]:
    """A variant's steps: the base's (recorded when the base ran), scaled by the variant's step
    cost over the base's, probed back to back now (not for SAME_STEP variants). A variant with
    a second phase at the base's length spends its share of the budget there, at the base's
    step (`phase2_steps`), and the rest in phase 1 at its own."""
    variant = variant_settings(base, name, budget_hours)
    share = 0.0
    if variant.phase2_seq_length is not None:
        if variant.phase2_seq_length != base.max_seq_length:
            raise BertkitError(f"recipe {name}: phase 2 runs at the base's length "
                               f"({base.max_seq_length}), whose step the base measured; got "
                               f"{variant.phase2_seq_length}")
        share = variant.phase2_share
    base_folder = variant_folder(work, budget_hours, "base")
    horizon = curve.open_store(base_folder, variant_settings(base, "base", budget_hours)
                               ).pretrain_info("horizon")
    if horizon is None:
        raise BertkitError(f"{base_folder}: the base has not run; it runs first")
    base_steps, base_cost = int(horizon["steps"]), float(horizon["cpu_seconds_per_step"])
    if name in SAME_STEP:
        return {"steps": base_steps, "cpu_seconds_per_step": base_cost, "relative_cost": 1.0}
    costs = []
    for n in ("base", name):  # the base again, now: what the load costs both
        settings = variant_settings(base, n, budget_hours)
        folder = variant_folder(work, budget_hours, n)
        vocab = BertTokenizer.from_pretrained(folder / "vocab").vocab_size
        costs.append(curve.probe_cost(settings, folder, variant_folder(work, budget_hours, name)
                                      / f"probe-{n}", curve.architecture(settings, vocab)))
    if not all(math.isfinite(c) and c > 0 for c in costs):
        raise BertkitError(f"recipe {name}: the probes measured {costs[1]} and {costs[0]} CPU-s "
                           "a step (variant, base); run the study again")
    relative = costs[1] / costs[0]
    log.info("recipe %s: a step costs %.2fx the base's (%.2f vs %.2f CPU-s, probed together)",
             name, relative, costs[1], costs[0])
    # (the floor is the base's own: curve.horizon_steps)
    horizon = {"steps": max(100, round((1 - share) * base_steps / relative)),
               "relative_cost": round(relative, 4),
               "cpu_seconds_per_step": round(base_cost * relative, 4)}
    if share:
        horizon["phase2_steps"] = max(1, round(share * base_steps))
    return horizon


def run_recipes(base: curve.CurveSettings, budget_hours: float, names: Sequence[str],
                work: Path, data: Path, ft: curve_finetune.FinetuneSettings,
                hours_left: float = math.inf) -> None:
    """Every variant in turn: pre-train it for the budget's steps, then fine-tune it and its
    twin; stop when this sitting has spent `hours_left` CPU-hours of pre-training (all variants
    together). A killed or stopped study continues where it stopped (each variant is a curve,
    which resumes). A variant's part that another process holds (a second study on the other
    core) is left to it: this one goes on to the next variant."""
    for name in names:
        if hours_left <= 0:
            log.info("this sitting's pre-training hours are used; the next one continues")
            return
        settings = variant_settings(base, name, budget_hours)
        folder = variant_folder(work, budget_hours, name)
        log.info("recipe %s: %s", name, VARIANTS[name][1])
        with contextlib.ExitStack() as held:
            if not _take(held, folder, "pretrain", name):
                continue  # (its fine-tuning waits for the other process's pre-training)
            store = curve.open_store(folder, settings)
            if (name != "base" and store.pretrain_info("horizon") is None
                    and base_measuring(base, budget_hours, work)):
                log.warning("recipe %s: the base's steps are being measured in another "
                            "process; left for a later sitting, on to the next variant", name)
                continue
            curve.prepare_data(settings, folder)
            if name != "base" and store.pretrain_info("horizon") is None:
                store.put_pretrain("horizon", variant_horizon(base, budget_hours, name, work))
            hours_left -= curve_points.pretrain_points(store, settings, folder, hours_left,
                                                       fixed_steps=True) / curve.HOUR
        with contextlib.ExitStack() as held:
            if _take(held, folder, "finetune", name):
                curve_finetune.finetune_points(store, curve_finetune.open_cells(folder, ft),
                                               settings, ft, folder, data)


def base_measuring(base: curve.CurveSettings, budget_hours: float, work: Path) -> bool:
    """Another process holds the base's pre-training and has not recorded its steps yet (its
    vocabulary, shards and probe come first): a variant cannot be sized until it has."""
    folder = variant_folder(work, budget_hours, "base")
    return (busy(curve.sitting_folder(folder, "pretrain")) and curve.open_store(
        folder, variant_settings(base, "base", budget_hours)).pretrain_info("horizon") is None)


def _take(held: contextlib.ExitStack, folder: Path, part: str, name: str) -> bool:
    """Take the variant's `part` sitting into `held`; False (said) when another process has it."""
    busy_elsewhere = try_hold(held, curve.sitting(folder, part))
    if busy_elsewhere is not None:
        log.warning("recipe %s: %s; left to it, on to the next variant", name, busy_elsewhere)
    return busy_elsewhere is None


def recipe_rows(base: curve.CurveSettings, budget_hours: float, names: Sequence[str],
                work: Path, ft: curve_finetune.FinetuneSettings, guesses: bool = False
                ) -> list[dict[str, Any]]:
    """One row per variant with its point recorded (the curve's row, plus the variant, its
    change and its held-out MLM accuracy's difference from the base)."""
    rows = []
    for name in names:
        settings = variant_settings(base, name, budget_hours)
        folder = variant_folder(work, budget_hours, name)
        if not (folder / "study.json").is_file():
            continue
        store = curve.open_store(folder, settings)
        for row in curve_finetune.curve_rows(store, curve_finetune.open_cells(folder, ft),
                                             settings, ft, folder if guesses else None):
            rows.append({**row, "variant": name, "change": VARIANTS[name][1]})
    return rows


def recipes_markdown(rows: Sequence[dict[str, Any]],
                     ft: curve_finetune.FinetuneSettings) -> str:
    base = next((r for r in rows if r["variant"] == "base"), None)
    table = []
    for r in rows:
        acc = "—" if r["mlm_acc"] is None else f"{100 * r['mlm_acc']:.1f}"
        if base is not None and r is not base and None not in (r["mlm_acc"], base["mlm_acc"]):
            acc += f" ({100 * (r['mlm_acc'] - base['mlm_acc']):+.1f})"
        table.append([f"`{r['variant']}`", r["change"], r["step"], f"{r['cpu_hours']:.2f}",
                      f"{r['tokens'] / 1e6:.1f}M",
                      acc, " ".join(f"`{g}`" for g in r.get("fill_mask", [])) or "—",
                      format_mean_std(r["scores"], scale=1.0),
                      format_mean_std(r["random"], scale=1.0),
                      format_gain(r),
                      len(r["scores"])])
    return markdown_table(["variant", "change", "steps", "CPU-h (as run)", "tokens",
                           "held-out MLM acc. (%) (vs base)", "fill-mask, first guesses",
                           f"{ft.task} pre-trained", f"{ft.task} random twin", "gain ± SE",
                           "seeds"], table)


def write_recipes_report(folder: Path, rows: Sequence[dict[str, Any]],
                         ft: curve_finetune.FinetuneSettings, base: curve.CurveSettings,
                         budget_hours: float) -> Path:
    """The budget's table into `folder/pretraining.md` between its markers (`report_name`; or
    `folder/STEM.md`), its plot and the records beside it (`STEM.png`, `STEM.json`)."""
    stem, begin, end = report_name(budget_hours)
    page, fallback = folder / "pretraining.md", folder / f"{stem}.md"
    png, records = folder / f"{stem}.png", folder / f"{stem}.json"
    check_report_target(page, begin, fallback, [records, png])
    atomic_write_text(records, json.dumps(
        {"budget_hours": budget_hours, "base": dataclasses.asdict(base), "rows": list(rows)},
        indent=1, default=str) + "\n")
    plotted = plot_recipes(rows, ft, png, budget_hours)
    picture = (f"\n\n![each variant's SST-2 gain against its held-out MLM accuracy]({png.name})"
               if plotted else "")
    body = (f"At {curve.budget_label(budget_hours)} of CPU each ({base.precision}, "
            f"{base.threads} thread(s)):\n\n{recipes_markdown(rows, ft)}{picture}")
    return write_block(page, begin, end, body, fallback)


def plot_recipes(rows: Sequence[dict[str, Any]], ft: curve_finetune.FinetuneSettings,
                 png: Path, budget_hours: float) -> Path | None:
    """Each variant as a point: held-out MLM accuracy across, the fine-tuning gain (± 2 SE) up,
    named beside it; the base's accuracy and no gain as guides. None without matplotlib."""
    plt = pyplot()
    scored = [r for r in rows if "gain" in r and r["mlm_acc"] is not None]
    if plt is None or not scored:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = [(100 * r["mlm_acc"], r["gain"]) for r in scored]
    for r, (x, y) in zip(scored, points):
        ax.errorbar(x, y, yerr=2 * r["gain_se"], fmt="o", capsize=3,
                    color="tab:red" if r["variant"] == "base" else "tab:blue")
    for group in near_groups(points):  # one label for points drawn on top of each other
        x, y = points[group[0]]
        ax.annotate(", ".join(scored[i]["variant"] for i in group), (x, y),
                    textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="held-out MLM accuracy (%), each on its own held-out split",
           ylabel=f"{ft.task} gain over the random twin (points, ± 2 SE)",
           title=f"recipes at {curve.budget_label(budget_hours)} of CPU")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, plt, png)


def near_groups(points: Sequence[tuple[float, float]], fraction: float = 0.03) -> list[list[int]]:
    """Indices of `points` in groups whose members lie within `fraction` of the points' span of
    each other on both axes, chained (single linkage); each group in the points' order."""
    spans = [max(1e-9, max(c) - min(c)) for c in zip(*points)] if points else []
    group_of = list(range(len(points)))

    def root(i: int) -> int:
        while group_of[i] != i:
            i = group_of[i]
        return i

    for i, a in enumerate(points):
        for j in range(i):
            if all(abs(u - v) <= fraction * span for u, v, span in zip(a, points[j], spans)):
                group_of[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(points)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())
