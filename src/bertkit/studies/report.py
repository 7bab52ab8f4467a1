"""Reports of the demo and the ablations: Markdown tables and PNG plots.

Plots need matplotlib (the optional extra `bertkit[plot]`); without it each plot is skipped with
one notice and the Markdown report is written all the same.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.io import atomic_path, atomic_write_text
from bertkit.metrics import mean_std

log = logging.getLogger(__name__)

_NOTICED: list[bool] = []  # the "no matplotlib" notice is given once per process


def format_mean_std(values: Sequence[float], scale: float = 100.0, digits: int = 1) -> str:
    """"85.2 ± 1.3" (scaled to percent by default); "—" for no values; no ± for one value."""
    if not values:
        return "—"
    mean, std = mean_std([v * scale for v in values])
    return f"{mean:.{digits}f}" if len(values) == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def format_gain(row: Mapping[str, Any]) -> str:
    """A row's gain and its standard error, "+2.3 ± 0.6" (points); "—" for a row without one."""
    return f"{row['gain']:+.1f} ± {row['gain_se']:.1f}" if "gain" in row else "—"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (every cell str()-ed, pipes escaped)."""
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl (an unreadable line is an error naming file and line)."""
    path = Path(path)
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise BertkitError(f"{path}:{n}: not a JSON line ({err.msg})") from err
    return records


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or None (with a notice, once)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if not _NOTICED:
            _NOTICED.append(True)
            log.warning("matplotlib is not installed: plots skipped (pip install 'bertkit[plot]')")
        return None
    return plt


def save_figure(fig, plt, png: Path) -> Path:
    with atomic_path(png) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return png


def plot_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]], panels: Sequence[tuple[str, ...]],
                png: str | os.PathLike, title: str = "") -> Path | None:
    """One panel per key group (e.g. ("loss",), ("mlm_acc", "eval_mlm_acc")), a line per run and
    key, x = step. Returns the PNG path, or None when matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, keys in zip(axes[0], panels):
        for label, records in runs.items():
            for key in keys:
                points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
                if points:
                    xs, ys = zip(*points)
                    name = label if len(keys) == 1 else (f"{label}: {key}" if label else key)
                    ax.plot(xs, ys, label=name, marker="o" if key.startswith("eval") else None)
        ax.set_xlabel("step")
        ax.set_title(" / ".join(keys))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return save_figure(fig, plt, Path(png))


def plot_bars(groups: Mapping[str, Mapping[str, Sequence[float]]], png: str | os.PathLike,
              ylabel: str, title: str = "", scale: float = 100.0) -> Path | None:
    """Grouped bars: groups[group][series] = the values over seeds, drawn as mean ± std.
    Returns the PNG path, or None when matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return None
    series = list(dict.fromkeys(s for g in groups.values() for s in g))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(groups) * max(1, len(series)) / 2), 4))
    for i, name in enumerate(series):
        xs, means, stds = [], [], []
        for g, group in enumerate(groups.values()):
            if group.get(name):
                mean, std = mean_std([v * scale for v in group[name]])
                xs.append(g + (i - (len(series) - 1) / 2) * width)
                means.append(mean)
                stds.append(std)
        ax.bar(xs, means, width, yerr=stds, capsize=3, label=name)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return save_figure(fig, plt, Path(png))


def write_markdown(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    atomic_write_text(path, text.rstrip("\n") + "\n")
    return path


def check_report_target(page: Path, begin: str, fallback: Path,
                        companions: Sequence[Path] = ()) -> Path:
    """Where `write_block` writes, checked before a report writes anything: `page` when it
    holds the markers, else `fallback`, which must be new or a block a report wrote. The files
    written beside it (`companions`: its PNG, its records) are replaced only when the report's
    block is already there: a folder a report wrote, never a user's files of the same names."""
    if page.is_file() and begin in page.read_text(encoding="utf-8", errors="replace"):
        return page
    ours = fallback.is_file() and begin in fallback.read_text(encoding="utf-8", errors="replace")
    if not ours:
        for path in (fallback, *companions):
            if path.exists():
                raise BertkitError(f"{path}: exists and is not a report's (no {begin} block "
                                   f"in {fallback.name}); not replaced: choose another "
                                   "report folder")
    return fallback


def write_block(page: Path, begin: str, end: str, body: str, fallback: Path) -> Path:
    """`body` between the markers `begin` and `end` of `page` (the prose around them kept), or
    into `fallback` when the page has no such markers (a report folder other than docs/)."""
    block = f"{begin}\n\n{body.strip()}\n\n{end}"
    if page.is_file() and begin in (text := page.read_text(encoding="utf-8")):
        head, _, rest = text.partition(begin)
        if end not in rest:
            raise BertkitError(f"{page}: {begin} without {end}")
        return write_markdown(page, head + block + rest.partition(end)[2])
    return write_markdown(fallback, block)


def read_run_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """metrics.jsonl of a training run, phase 2's appended with its steps after phase 1's."""
    run_dir = Path(run_dir)
    first = run_dir / "metrics.jsonl"
    if not first.is_file():
        raise BertkitError(f"{first}: not found (is {run_dir} a training run folder?)")
    records = read_records(first)
    second = run_dir / "phase2" / "metrics.jsonl"
    if second.is_file():
        offset = records[-1]["step"] if records else 0
        records += [{**r, "step": r["step"] + offset} for r in read_records(second)]
    return records


def plot_run(run_dir: str | os.PathLike, png: str | os.PathLike) -> Path:
    """Loss and accuracy curves of a pre-training or fine-tuning run (`bertkit plot`)."""
    records = read_run_metrics(run_dir)
    if pyplot() is None:
        raise BertkitError("plotting needs matplotlib: pip install 'bertkit[plot]'")
    panels = [("loss", "mlm_loss", "nsp_loss", "eval_loss", "eval_mlm_loss"),
              ("mlm_acc", "nsp_acc", "eval_mlm_acc", "eval_nsp_acc")]
    return plot_curves({"": records}, panels, png)
