"""The curve's numbers: per cell (variant x approach x label count) the median and interquartile
range over seeds (fine-tuning on few labels is seed-sensitive: the median, not the best, says
what a user should expect) and the mean with its standard error; the gain of each model over
its random twin (Welch's standard error: the seeds of the two are independent runs); and the
two crossovers a user asks about (`crossovers`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.metrics import mean_std


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


def crossovers(cells: Mapping[tuple[str, str, int], Cell], model: str, twin: str) -> Crossovers:
    sizes = sorted({s for (_, _, s) in cells})
    ahead = {s: cells[(model, "finetune", s)].median > cells[(model, "frozen", s)].median
             for s in sizes if (model, "finetune", s) in cells and (model, "frozen", s) in cells}
    inside, measured = {}, {}
    for approach in ("finetune", "frozen"):
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
        what = "fine-tuned" if approach == "finetune" else "frozen features"
        lines.append(
            f"{found.model} ({what}): the gain over random init stays outside 2 standard errors up to "
            f"{measured[-1]:,} labels (the largest measured)" if at is None else
            f"{found.model} ({what}): the gain over random init is inside 2 standard errors at every "
            f"measured count ({measured[0]:,}-{measured[-1]:,} labels)" if at == measured[0] else
            f"{found.model} ({what}): the gain over random init falls inside 2 standard errors at "
            f"{at:,} labels (and stays inside to {measured[-1]:,})")
    return lines
