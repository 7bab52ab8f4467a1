"""The curve's report: Markdown tables (per model and approach, one column per label count: the
median and interquartile range over seeds; the mean ± standard error with collapsed seeds
counted; the gain over the random twin), the crossovers in words, and a PNG of score against
labels (log scale), one line per model x approach."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bertkit.io import atomic_write_text
from bertkit.studies.learning_curve.plan import RANDOM_SUFFIX
from bertkit.studies.learning_curve.stats import Cell, collect_cells, crossover_lines, crossovers, gain
from bertkit.studies.report import check_report_target, markdown_table, pyplot, save_figure, write_block

APPROACH_NAMES = {"finetune": "fine-tuned", "frozen": "frozen features + linear"}
Cells = Mapping[tuple[str, str, int], Cell]


def models_of(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The given models (not their twins), in the order first recorded."""
    return list(dict.fromkeys(r["model"] for r in records))


def rows_of(cells: Cells, models: Sequence[str]) -> list[tuple[str, str]]:
    """(variant, approach) of every row: each model, then its twin; fine-tuned, then frozen."""
    return [(v, a) for m in models for v in (m, m + RANDOM_SUFFIX) for a in APPROACH_NAMES
            if any(k[:2] == (v, a) for k in cells)]


def pivot(cells: Cells, models: Sequence[str], text) -> str:
    sizes = sorted({s for (_, _, s) in cells})
    table = [[v, APPROACH_NAMES[a], *(text(cells[(v, a, s)]) if (v, a, s) in cells else "—"
                                      for s in sizes)] for v, a in rows_of(cells, models)]
    return markdown_table(["model", "approach", *(f"{s:,}" for s in sizes)], table)


def median_text(cell: Cell) -> str:
    q1, q3 = cell.iqr
    return f"{cell.median:.1f} [{q1:.1f}, {q3:.1f}]"


def mean_text(cell: Cell) -> str:
    flag = f" ({cell.collapsed} collapsed)" if cell.collapsed else ""
    return f"{cell.mean:.1f} ± {cell.se:.1f}, n={len(cell.scores)}{flag}"


def gain_table(cells: Cells, models: Sequence[str]) -> str:
    sizes = sorted({s for (_, _, s) in cells})
    table = []
    for m in models:
        for a in APPROACH_NAMES:
            said = []
            for s in sizes:
                pre, rnd = cells.get((m, a, s)), cells.get((m + RANDOM_SUFFIX, a, s))
                if pre is None or rnd is None:
                    said.append("—")
                    continue
                g, se = gain(pre, rnd)
                said.append(f"{g:+.1f} ± {se:.1f}" + ("" if abs(g) <= 2 * se else " *"))
            if any(x != "—" for x in said):
                table.append([m, APPROACH_NAMES[a], *said])
    return markdown_table(["model", "approach", *(f"{s:,}" for s in sizes)], table)


def report_markdown(records: Sequence[Mapping[str, Any]], metric: str) -> str:
    """The tables and the crossovers of the recorded runs."""
    cells, models = collect_cells(records), models_of(records)
    if not cells:
        return "(nothing recorded yet)"
    found = [line for m in models for line in crossover_lines(crossovers(cells, m, m + RANDOM_SUFFIX))]
    return "\n".join([
        f"Dev {metric} (0-100) by labelled training examples: median [25th, 75th percentile] "
        "over the reported seeds.", "", pivot(cells, models, median_text), "",
        "Mean ± standard error over seeds (n seeds; a collapsed seed predicted one answer for "
        "every dev example):", "", pivot(cells, models, mean_text), "",
        "Gain over the random-init twin (mean ± standard error, Welch; `*`: outside 2 standard "
        "errors):", "", gain_table(cells, models), "",
        "Crossovers:", "", *(f"- {line}" for line in found)])


def plot_curve(records: Sequence[Mapping[str, Any]], png: Path, title: str) -> Path | None:
    """Median score against labels (log scale), the interquartile range as bars: one line per
    model x approach, a model's twin dashed in the same colour."""
    plt = pyplot()
    cells, models = collect_cells(records), models_of(records)
    if plt is None or not cells:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, m in enumerate(models):
        for v, a in rows_of(cells, [m]):
            line = sorted((s, c) for (vv, aa, s), c in cells.items() if (vv, aa) == (v, a))
            x = [s for s, _ in line]
            y = [c.median for _, c in line]
            err = [[c.median - c.iqr[0] for _, c in line], [c.iqr[1] - c.median for _, c in line]]
            ax.errorbar(x, y, yerr=err, capsize=3, color=colours[i % len(colours)],
                        ls="--" if v != m else "-", marker="o" if a == "finetune" else "s",
                        label=f"{v}, {APPROACH_NAMES[a]}")
    sizes = sorted({s for (_, _, s) in cells})
    ax.set(xscale="log", xlabel="labelled training examples", ylabel="dev score (median, IQR)",
           title=title)
    ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
    ax.minorticks_off()
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, plt, png)


def report_names(task: str) -> tuple[str, str, str]:
    """The files' stem and the page's markers of `task`'s curve."""
    return f"learning-curve-{task}", f"<!-- learning-curve-{task}:begin -->", \
        f"<!-- learning-curve-{task}:end -->"


def write_report(folder: Path, task: str, metric: str, records: Sequence[Mapping[str, Any]],
                 settings: Mapping[str, Any], header: str) -> tuple[Path, Path | None]:
    """`folder/learning-curve.md` (`task`'s block; the page's prose kept) or, without that
    page, `folder/learning-curve-TASK.md`; the PNG and the records beside it."""
    stem, begin, end = report_names(task)
    page, png, kept = folder / "learning-curve.md", folder / f"{stem}.png", folder / f"{stem}.json"
    check_report_target(page, begin, folder / f"{stem}.md", [png, kept])
    folder.mkdir(parents=True, exist_ok=True)
    drawn = plot_curve(records, png, f"{task}: learning curve")
    body = "\n".join([header, "", report_markdown(records, metric),
                      *(["", f"![{task} learning curve]({png.name})"] if drawn else [])])
    # the records behind the tables, beside them: a machine that lost the work folder keeps them
    atomic_write_text(kept, json.dumps({"settings": settings, "records": list(records)},
                                       indent=1, default=str) + "\n")
    return write_block(page, begin, end, body, folder / f"{stem}.md"), drawn
