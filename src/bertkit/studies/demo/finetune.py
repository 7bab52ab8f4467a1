"""Step 4 of the demo: each model fine-tuned on the same SST-2 subset and seeds, each at the
learning rate selected on dev from its own grid, and the verdicts.

A fair comparison tunes the baseline too: a random-init model fine-tuned at the pre-trained
model's rate can stay at the majority class, which overstates what pre-training bought. So every
model has an lr grid (`DemoConfig.lr_grid`); with more than one rate, seed 0 runs at every rate
and the rate with the best dev score wins, never a collapsed run (every dev prediction the same
class, `Task.collapse_reason`) while another exists; the other seeds then run at that rate. As in
the paper (section 4.1), the rate is selected on the dev set the scores are reported on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.metrics import mean_std
from bertkit.runs.finetune import FinetuneConfig, finetune_train_config
from bertkit.studies import pipeline
from bertkit.studies.demo.config import NAMES, DemoConfig
from bertkit.studies.report import format_mean_std
from bertkit.studies.results import Progress, ResultsStore, run_cells, select_lr

TASK = "sst2"


def grid_name(variant: str, lr: float) -> str:
    """The results-store name of one lr-selection run (seed 0 of `variant` at `lr`)."""
    return f"{variant}@lr{lr:g}"


def grid_names(args: DemoConfig, variant: str) -> list[str]:
    """The names of `variant`'s lr-selection runs (none when its grid has one rate)."""
    grid = args.lr_grid(variant)
    return [grid_name(variant, lr) for lr in grid] if len(grid) > 1 else []


def grid_runs(store: ResultsStore, args: DemoConfig, variant: str) -> dict[float, dict[str, Any]]:
    """The finished lr-selection runs of `variant` (empty when its grid has one rate)."""
    grid = args.lr_grid(variant)
    if len(grid) == 1:
        return {}
    cells = store.data["cells"]
    return {lr: cells[k] for lr in grid if (k := store.key(grid_name(variant, lr), TASK, 0)) in cells}


def selected_lr(store: ResultsStore, args: DemoConfig, variant: str) -> float | None:
    """The rate `variant`'s seeds run at (None while its grid is unfinished)."""
    grid = args.lr_grid(variant)
    if len(grid) == 1:
        return grid[0]
    runs = grid_runs(store, args, variant)
    return select_lr(runs) if len(runs) == len(grid) else None


def finetune_section(args: DemoConfig, store: ResultsStore, models: dict[str, Path],
                     files: dict[str, Any], work: Path) -> None:
    """Every model: its lr grid (seed 0), then its seeds at the selected rate."""
    plan = FinetuneConfig(TASK, "", "", train=finetune_train_config(
        lr=args.finetune_lr[0], device=args.device, progress=not args.no_progress),
        epochs=args.epochs, max_seq_length=128, max_train_examples=args.train_examples,
        max_eval_examples=args.dev_examples, **files)
    planned = [store.key(name, TASK, 0) for v in models for name in grid_names(args, v)]
    planned += [store.key(v, TASK, s) for v in models
                for s in range(1 if grid_names(args, v) else 0, args.seeds)]
    progress = Progress(len(planned), sum(store.has(k) for k in planned))

    def run_at(variant: str, lr: float, seed: int, folder: str) -> dict[str, Any]:
        recipe = plan.with_run("", epochs=args.epochs_of(variant), lr=lr)
        record = pipeline.finetune_cell(recipe, models[variant], TASK,
                                        work / "finetune" / folder / f"seed-{seed}", seed)
        flag = " (collapsed: every prediction one class)" if record.get("collapsed") else ""
        print(f"  {NAMES[variant]:<40} lr {lr:g} seed {seed}: dev accuracy "
              f"{record['score']:.1f}{flag}", flush=True)
        return record

    def run_variant(variant: str) -> None:
        lr = args.lr_grid(variant)[0]
        by_name = {grid_name(variant, x): x for x in args.lr_grid(variant)}
        if len(by_name) > 1:
            run_cells(store, [(name, TASK, 0) for name in by_name],
                      lambda name, _task, seed: run_at(variant, by_name[name], seed, name), progress)
            lr = selected_lr(store, args, variant)
            seed0 = store.key(variant, TASK, 0)
            if not store.has(seed0):  # seed 0 at the selected rate has run already
                chosen = store.data["cells"][store.key(grid_name(variant, lr), TASK, 0)]
                store.put(seed0, {**chosen, "variant": variant})
        run_cells(store, [(variant, TASK, s) for s in range(args.seeds)],
                  lambda v, _task, seed: run_at(v, lr, seed, v), progress)

    for variant in models:
        run_variant(variant)


def collapsed_count(store: ResultsStore, variant: str) -> int:
    prefix = f"{variant}/{TASK}/"
    return sum(bool(c.get("collapsed")) for k, c in store.data["cells"].items()
               if k.startswith(prefix))


def seed_cells(store: ResultsStore, variant: str) -> dict[int, dict[str, Any]]:
    """The finished runs of `variant` by seed number (keys sort as text: "10" before "2")."""
    prefix = f"{variant}/{TASK}/"
    return {int(k[len(prefix):]): c for k, c in store.data["cells"].items() if k.startswith(prefix)}


def sst2_lines(store: ResultsStore, args: DemoConfig) -> tuple[list[str], list[str]]:
    """The SST-2 comparison as Markdown rows (a collapsed run is starred), and the verdicts
    (ours; then the reference's). A column per seed, with the seeds of an earlier, larger
    --seeds too (the verdicts count them as well)."""
    by_variant = {v: seed_cells(store, v) for v in NAMES}
    seeds = max([args.seeds, *(max(cells) + 1 for cells in by_variant.values() if cells)])
    rows = ["| model | lr | " + " | ".join(f"seed {s}" for s in range(seeds)) + " | mean ± std |",
            "|---|---|" + "---|" * (seeds + 1)]
    for v, name in NAMES.items():
        cells = by_variant[v]
        if cells:
            lr = selected_lr(store, args, v)  # None: its grid is unfinished
            rows.append(f"| {name} | {'—' if lr is None else f'{lr:g}'} | " + " | ".join(
                f"{cells[s]['score']:.1f}" + ("*" if cells[s].get("collapsed") else "")
                if s in cells else "—" for s in range(seeds)) +
                f" | {format_mean_std([c['score'] for c in cells.values()], scale=1.0)} |")
    verdicts = [verdict(store, "pretrained", "random", "our pre-training (this run)")]
    if store.scores("minilm", TASK):
        verdicts.append(verdict(store, "minilm", "minilm-random", "MiniLM's pre-training"))
    return rows, verdicts


def verdict(store: ResultsStore, pre_name: str, rnd_name: str, what: str) -> str:
    """One sentence: does the pre-trained model beat its random-init twin by more than the
    seed std? A collapsed random-init run makes any gain an overstatement, and says so."""
    (pre, pre_std), (rnd, rnd_std) = (mean_std(store.scores(v, TASK)) for v in (pre_name, rnd_name))
    gap, spread = pre - rnd, max(pre_std, rnd_std)
    if gap > spread:
        text = (f"With {what}: {pre:.1f} vs {rnd:.1f} dev accuracy, +{gap:.1f} points, more "
                f"than the seed std ({spread:.1f}): pre-training helps.")
    else:
        text = (f"With {what}: {pre:.1f} vs {rnd:.1f} ({gap:+.1f} points; seed std "
                f"{spread:.1f}): pre-training did NOT help by more than the seed std (see "
                "docs/reports/ablations.md).")
    collapsed = collapsed_count(store, rnd_name)
    if collapsed:
        text += (f" Caution: {collapsed} of {len(store.scores(rnd_name, TASK))} random-init runs "
                 "collapsed to one class even at the selected lr: the baseline is under-tuned, "
                 "so any gain from pre-training is overstated (widen its lr grid or epochs).")
    return text


def selection_lines(store: ResultsStore, args: DemoConfig) -> list[str]:
    """The lr-selection runs as a Markdown table (empty when no model has a grid)."""
    rows = []
    for v, name in NAMES.items():
        runs = grid_runs(store, args, v)
        chosen = selected_lr(store, args, v) if runs else None
        rows += [f"| {name} | {lr:g} | {r['score']:.1f} | "
                 f"{'yes: ' + r.get('collapse_reason', '') if r.get('collapsed') else 'no'} | "
                 f"{'**selected**' if lr == chosen else ''} |" for lr, r in runs.items()]
    if not rows:
        return []
    notes = [f"Every rate of the grid of {name} collapsed: the best of them is used, and the "
             "verdict says so." for v, name in NAMES.items()
             if (runs := grid_runs(store, args, v)) and all(r.get("collapsed") for r in runs.values())]
    return ["| model | lr | dev accuracy (seed 0) | collapsed | |", "|---|---|---|---|---|", *rows,
            *(["", *notes] if notes else [])]


def recipe_text(args: DemoConfig) -> str:
    """The fine-tuning recipe in words, for the report."""
    def grid(v: str) -> str:
        return "{" + ", ".join(f"{lr:g}" for lr in args.lr_grid(v)) + "}"

    def recipe(v: str) -> str:
        return f"lr {grid(v)}, {args.epochs_of(v):g} epoch(s)"

    text = (f"Recipe: SST-2, the first {args.train_examples} training sentences, dev: "
            f"{args.dev_examples or 'all 872'} sentences, batch 32, max length 128, AdamW, 10% "
            f"warmup then linear decay, seeds 0-{args.seeds - 1}. Our pair: {recipe('pretrained')} "
            f"for the pre-trained model, {recipe('random')} for random init.")
    if not args.no_reference:
        text += (f" The MiniLM pair: {recipe('minilm')} for MiniLM (its usual recipe), "
                 f"{recipe('minilm-random')} for its random-init copy (the defaults are tuned for it "
                 "by a measured sweep: at 1 epoch it stays at the majority class whatever the lr; "
                 "docs/reports/ablations.md, finding 4).")
    return (text + " Where a grid has several rates, seed 0 runs at each and the best dev score "
            "that did not collapse (every prediction one class) selects the rate for all seeds; "
            "`*` marks a collapsed run.")
