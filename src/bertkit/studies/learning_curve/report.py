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
from bertkit.studies.label_curve import (
    Cell,
    cells_table,
    collect_cells,
    crossover_lines,
    crossovers,
    gain,
    mean_text,
    median_text,
    plot_cells,
)
from bertkit.studies.learning_curve.plan import RANDOM_SUFFIX
from bertkit.studies.report import check_report_target, markdown_table, write_block

APPROACH_NAMES = {"finetune": "fine-tuned", "frozen": "frozen features + linear",
                  "frozen-apart": "frozen, texts apart + linear"}
Cells = Mapping[tuple[str, str, int], Cell]


def models_of(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The given models (not their twins), in the order first recorded."""
    return list(dict.fromkeys(r["model"] for r in records))


def rows_of(cells: Cells, models: Sequence[str]) -> list[tuple[str, str]]:
    """(variant, approach) of every row: each model, then its twin; fine-tuned, then frozen."""
    return [(v, a) for m in models for v in (m, m + RANDOM_SUFFIX) for a in APPROACH_NAMES
            if any(k[:2] == (v, a) for k in cells)]


def pivot(cells: Cells, models: Sequence[str], text) -> str:
    return cells_table(cells, rows_of(cells, models), lambda v, a: (v, APPROACH_NAMES[a]), text)


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
    """Median score against labels (log scale), one line per model x approach (`plot_cells`)."""
    cells, models = collect_cells(records), models_of(records)
    lines = [(v, a, i, v == m) for i, m in enumerate(models) for v, a in rows_of(cells, [m])]
    return plot_cells(cells, lines, lambda v, a: f"{v}, {APPROACH_NAMES[a]}", png, title)


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
