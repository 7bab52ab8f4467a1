"""What every learning curve over label counts shares (`learning_curve`, the demo's small
one): the labelled subsets (`subset_indices`) and the numbers. Per cell (variant x approach x
label count) the median and interquartile range over seeds (fine-tuning on few labels is
seed-sensitive: the median, not the best, says what a user should expect) and the mean with its
standard error; the gain of each model over its random twin (Welch's standard error: the seeds
of the two are independent runs); and the two crossovers a user asks about (`crossovers`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.io import atomic_write_text
from bertkit.metrics import mean_std
from bertkit.studies.report import markdown_table, pyplot, save_figure
from bertkit.tasks.glue import TextExample


def subset_indices(n_train: int, size: int, seed: int) -> np.ndarray:
    """The first `size` of the training set's shuffle by `seed` (one per seed, whatever the
    model and approach, so every variant sees the same labelled examples)."""
    order = np.random.default_rng(seed).permutation(n_train)
    return order[:size]


def write_subset(train_file: Path, examples: Sequence[TextExample], indices: Sequence[int],
                 path: Path) -> Path:
    """The examples at `indices` as a training file of the task's own line-per-example format
    (the lines above the first example, its header row where it has one, then each chosen
    example's line as it is in `train_file`), written atomically."""
    lines = train_file.read_text(encoding="utf-8").splitlines()
    first = int(examples[0].where.rpartition(":")[2])
    numbers = [int(examples[i].where.rpartition(":")[2]) for i in indices]
    atomic_write_text(path, "\n".join([*lines[:first - 1], *(lines[n - 1] for n in numbers)]) + "\n")
    return path


@dataclass(frozen=True)
class Cell:
    """The reported seeds of one variant and approach at one label count."""

    variant: str
    approach: str
    size: int
    scores: tuple[float, ...]
    collapsed: int = 0  # seeds whose every dev prediction was one answer

    @property
    def median(self) -> float:
        return float(np.median(self.scores))

    @property
    def iqr(self) -> tuple[float, float]:
        """The 25th and 75th percentiles (linear interpolation between seeds)."""
        q1, q3 = np.percentile(self.scores, [25, 75])
        return float(q1), float(q3)

    @property
    def mean(self) -> float:
        return mean_std(self.scores)[0]

    @property
    def se(self) -> float:
        """Standard error of the mean (0 for one seed)."""
        return mean_std(self.scores)[1] / math.sqrt(len(self.scores))


def collect_cells(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, int], Cell]:
    """The cells of the reported runs among `records` (a selection run is not reported), by
    (variant, approach, size); each seed counted once (its first record)."""
    seen: dict[tuple[str, str, int], dict[int, Mapping[str, Any]]] = {}
    for r in records:
        if r.get("selection"):
            continue
        seen.setdefault((r["variant"], r["approach"], int(r["size"])), {}).setdefault(int(r["seed"]), r)
    return {key: Cell(*key, tuple(float(r["score"]) for _, r in sorted(by_seed.items())),
                      sum(bool(r.get("collapsed")) for r in by_seed.values()))
            for key, by_seed in seen.items()}


def gain(pre: Cell, rnd: Cell) -> tuple[float, float]:
    """Mean gain of the pre-trained model over its twin and the gain's standard error."""
    return pre.mean - rnd.mean, math.sqrt(pre.se ** 2 + rnd.se ** 2)


def sustained_from(holds: Mapping[int, bool]) -> int | None:
    """The smallest label count from which `holds` is true at every larger measured count
    (None: false at the largest)."""
    first = None
    for size in sorted(holds, reverse=True):
        if not holds[size]:
            break
        first = size
    return first


@dataclass(frozen=True)
class Crossovers:
    """What one model's curve says: from which label count fine-tuning stays ahead of frozen
    features (`finetune_ahead`), and from which the gain over random init stays inside 2
    standard errors, per approach (`gain_inside`); None where it never does up to the
    largest measured count; `sizes` are the counts measured for each."""

    model: str
    finetune_ahead: int | None
    ahead_sizes: tuple[int, ...]
    gain_inside: dict[str, int | None]
    gain_sizes: dict[str, tuple[int, ...]]


FROZEN = ("frozen", "frozen-apart")  # the frozen approaches; fine-tuning is "finetune"
APPROACH_WORDS = {"finetune": "fine-tuned", "frozen": "frozen features",
                  "frozen-apart": "frozen features, texts apart"}


def crossovers(cells: Mapping[tuple[str, str, int], Cell], model: str, twin: str) -> Crossovers:
    """Fine-tuning is set against the better frozen approach at each count (where a pair task
    measured both)."""
    sizes = sorted({s for (_, _, s) in cells})
    ahead = {}
    for s in sizes:
        frozen = [cells[(model, a, s)].median for a in FROZEN if (model, a, s) in cells]
        if (model, "finetune", s) in cells and frozen:
            ahead[s] = cells[(model, "finetune", s)].median > max(frozen)
    inside, measured = {}, {}
    for approach in APPROACH_WORDS:
        within = {}
        for s in sizes:
            pre, rnd = cells.get((model, approach, s)), cells.get((twin, approach, s))
            if pre and rnd and len(pre.scores) >= 2 and len(rnd.scores) >= 2:
                g, se = gain(pre, rnd)
                within[s] = abs(g) <= 2 * se
        if within:
            inside[approach], measured[approach] = sustained_from(within), tuple(sorted(within))
    return Crossovers(model, sustained_from(ahead) if ahead else None, tuple(sorted(ahead)),
                      inside, measured)


def crossover_lines(found: Crossovers) -> list[str]:
    """The crossovers in words, one line each."""
    lines = []
    sizes = found.ahead_sizes
    if sizes:
        at = found.finetune_ahead
        lines.append(
            f"{found.model}: fine-tuning's median stays below frozen features' up to {sizes[-1]:,} labels "
            "(the largest measured): no crossover yet" if at is None else
            f"{found.model}: fine-tuning's median is above frozen features' at every measured count "
            f"({sizes[0]:,}-{sizes[-1]:,} labels)" if at == sizes[0] else
            f"{found.model}: fine-tuning overtakes frozen features at {at:,} labels (its median "
            f"above theirs from there to {sizes[-1]:,})")
    for approach, at in found.gain_inside.items():
        measured = found.gain_sizes[approach]
        what = APPROACH_WORDS[approach]
        lines.append(
            f"{found.model} ({what}): the gain over random init stays outside 2 standard errors up to "
            f"{measured[-1]:,} labels (the largest measured)" if at is None else
            f"{found.model} ({what}): the gain over random init is inside 2 standard errors at every "
            f"measured count ({measured[0]:,}-{measured[-1]:,} labels)" if at == measured[0] else
            f"{found.model} ({what}): the gain over random init falls inside 2 standard errors at "
            f"{at:,} labels (and stays inside to {measured[-1]:,})")
    return lines


Cells = Mapping[tuple[str, str, int], Cell]
RowName = Callable[[str, str], tuple[str, ...]]


def median_text(cell: Cell) -> str:
    """"84.2 [83.1, 85.0]": the median and the 25th and 75th percentiles."""
    q1, q3 = cell.iqr
    return f"{cell.median:.1f} [{q1:.1f}, {q3:.1f}]"


def mean_text(cell: Cell) -> str:
    """"84.0 ± 0.6, n=5 (1 collapsed)"."""
    flag = f" ({cell.collapsed} collapsed)" if cell.collapsed else ""
    return f"{cell.mean:.1f} ± {cell.se:.1f}, n={len(cell.scores)}{flag}"


def cells_table(cells: Cells, rows: Sequence[tuple[str, str]], name: RowName,
                text: Callable[[Cell], str]) -> str:
    """A Markdown table: one row per (variant, approach) of `rows`, named by `name` (the first
    columns), one column per label count, each cell `text(cell)`."""
    sizes = sorted({s for (_, _, s) in cells})
    table = [[*name(v, a), *(text(cells[(v, a, s)]) if (v, a, s) in cells else "—" for s in sizes)]
             for v, a in rows]
    header = ["model", "approach"][:len(name(*rows[0]))] if rows else ["model"]
    return markdown_table([*header, *(f"{s:,}" for s in sizes)], table)


def plot_cells(cells: Cells, lines: Sequence[tuple[str, str, int, bool]],
               label: Callable[[str, str], str], png: Path, title: str) -> Path | None:
    """Median score against labels (log scale), the interquartile range as bars: one line per
    (variant, approach, colour, pre-trained) of `lines`, fine-tuned with filled circles, frozen
    with hollow squares (hollow diamonds: texts apart), a random twin dashed in its model's
    colour."""
    plt = pyplot()
    if plt is None or not cells:
        return None
    fig, ax = plt.subplots(figsize=(7, 5.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for variant, approach, colour, pretrained in lines:
        points = sorted((s, c) for (v, a, s), c in cells.items() if (v, a) == (variant, approach))
        if not points:
            continue
        medians = [c.median for _, c in points]
        err = [[m - c.iqr[0] for m, (_, c) in zip(medians, points)],
               [c.iqr[1] - m for m, (_, c) in zip(medians, points)]]
        ax.errorbar([s for s, _ in points], medians, yerr=err, capsize=3,
                    color=colours[colour % len(colours)], ls="-" if pretrained else "--",
                    marker={"finetune": "o", "frozen": "s"}.get(approach, "D"),
                    mfc=None if approach == "finetune" else "white", label=label(variant, approach))
    sizes = sorted({s for (_, _, s) in cells})
    ax.set(xscale="log", xlabel="labelled training examples", ylabel="dev score (median, IQR)",
           title=title)
    ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
    ax.minorticks_off()
    # below the axes: inside, it covers the middle of the curves
    handles = ax.get_legend_handles_labels()[0]
    fig.legend(fontsize=7, loc="lower center", ncol=2)
    fig.tight_layout(rect=(0, 0.03 + 0.035 * math.ceil(len(handles) / 2), 1, 1))
    return save_figure(fig, plt, png)
