"""docs/reports/distillation.md's full-size table, from the runs of studies/distill.sh.

    python studies/distill_table.py ../bertkit-studies/distill            # record + print
    python studies/distill_table.py ../bertkit-studies/distill --write-doc

Each finished `bertkit distill` run (its WORK/TASK/STUDENT-seedS/results.json) is recorded once
in docs/records/distill_runs.jsonl (a `RunLog`: the date and machine added), so the table is made
from committed records, not from a work folder that may be gone; then the table is printed (and
with --write-doc put between the markers of docs/reports/distillation.md, beside
docs/reports/distillation.png: score against speed-up).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.metrics import mean_std
from bertkit.studies.checkout import Checkout
from bertkit.studies.report import pyplot, save_figure
from bertkit.studies.runner import RunLog, machine_name

# in the checkout's records and reports
STORE, DOC, PNG = "distill_runs.jsonl", "distillation.md", "distillation.png"
BEGIN, END = "<!-- distill-table:begin -->", "<!-- distill-table:end -->"
TASKS = ("mrpc", "stsb", "conll2003", "sst2")
STUDENTS = ("layers:0,2,4", "layers:0,3", "tiny")


def record(results: dict) -> dict:
    """What the table needs of one run's results.json."""
    speed = results.get("speed") or {}
    # (results written before an option: none)
    hidden = results.get("hidden_weight") or 0.0
    attention = results.get("attention_weight") or 0.0
    student = (results["student"] + (f" +hidden {hidden:g}" if hidden else "")
               + (f" +attention {attention:g}" if attention else ""))
    # (results written before the field: fp32, the study's only precision then)
    precision = results.get("precision") or "fp32"
    return {"key": f"{results['task']}/{student}/{results['seed']}"
                   + (f"/{precision}" if precision != "fp32" else ""),
            "task": results["task"], "student": student, "seed": results["seed"],
            "hidden_weight": hidden, "attention_weight": attention, "precision": precision,
            "metric": results["metric"], "teacher_dev": results["teacher_dev"],
            "student_dev": results["student_dev"], "baseline_dev": results["baseline_dev"],
            "student_layers": results["student_layers"],
            "student_parameters": results["student_parameters"],
            "teacher_parameters": results["teacher_parameters"],
            "lr": results["lr"], "epochs": results["epochs"], "steps": results["steps"],
            "transfer": results["transfer"],
            "cpu_speedup": speed.get("cpu_speedup"), "speedup": speed.get("speedup"),
            "teacher_texts_per_cpu_s": speed.get("teacher_texts_per_cpu_s"),
            "threads": speed.get("threads")}


def collect(work: Path, log: RunLog) -> int:
    """Record every finished run of `work` not yet in the log; returns how many were new."""
    known = {r["key"] for r in log.read()}
    new = 0
    for path in sorted(work.glob("*/*-seed*/results.json")):
        rec = record(json.loads(path.read_text(encoding="utf-8")))
        # when the run ended (its results.json), not when it was collected
        rec["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(path.stat().st_mtime))
        if rec["key"] not in known:
            log.append(rec)
            known.add(rec["key"])
            new += 1
    return new


def groups(records: list[dict]) -> list[tuple[str, list[dict]]]:
    """The records by task and training precision, in the table's order, each with its label:
    the task (fp32, the study's default) or `task in bf16`. A teacher and its students are one
    precision's, so the two precisions of a task are two groups, never one row's seeds."""
    out = []
    for task in TASKS:
        runs = [r for r in records if r["task"] == task]
        precisions = sorted({r.get("precision") or "fp32" for r in runs},
                            key=lambda p: (p != "fp32", p))
        for precision in precisions:
            label = task if precision == "fp32" else f"{task} in {precision}"
            out.append((label, [r for r in runs if (r.get("precision") or "fp32") == precision]))
    return out


def _cell(values: list[float]) -> str:
    if not values:
        return "–"
    mean, std = mean_std(values)
    return f"{mean:.1f} ± {std:.1f} ({len(values)})" if len(values) > 1 else f"{mean:.1f} (1)"


def _name(student: str) -> str:
    """A student as the table shows it: `layers:0,2,4`, `tiny`, or a pre-trained folder by its
    last three path parts (a pre-training curve's point: `pretrain-curve-bf16/points/2h`: the
    fp32 and the bf16 curves both have a `points/2h`)."""
    if student in STUDENTS or not ("/" in student or Path(student).is_absolute()):
        return f"`{student}`"
    return f"pre-trained `{'/'.join(Path(student).parts[-3:])}`"


def _of(values: list[float], teacher: float) -> str:
    """The mean as a fraction of the teacher's score."""
    return f"{mean_std(values)[0] / teacher:.3f}" if values else "–"


def _paired(runs: list[dict]) -> str:
    """With minus without the teacher, seed by seed: mean ± standard error."""
    diffs = [100 * (r["student_dev"] - r["baseline_dev"]) for r in runs
             if r["baseline_dev"] is not None]
    if len(diffs) < 2:
        return f"{diffs[0]:+.1f}" if diffs else "–"
    mean, std = mean_std(diffs)
    return f"{mean:+.1f} ± {std / math.sqrt(len(diffs)):.1f}"


def table(records: list[dict]) -> list[str]:
    lines = ["| task (metric) | student | layers | parameters | with the teacher | of teacher "
             "| without the teacher | of teacher | with − without (± SE) | CPU speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for task, runs in groups(records):
        teacher = 100 * runs[0]["teacher_dev"]  # one teacher a group (seed 0)
        lines.append(f"| {task} ({runs[0]['metric']}) | teacher: MiniLM-L6 fine-tuned | 6 | "
                     f"{runs[0]['teacher_parameters'] / 1e6:.1f}M | **{teacher:.1f}** | 1 | – "
                     f"| – | – | 1 |")
        others = sorted({r["student"] for r in runs} - set(STUDENTS))
        for student in (*STUDENTS, *others):
            mine = sorted((r for r in runs if r["student"] == student), key=lambda r: r["seed"])
            if not mine:
                continue
            with_t = [100 * r["student_dev"] for r in mine]
            without = [100 * r["baseline_dev"] for r in mine if r["baseline_dev"] is not None]
            speed = [r["cpu_speedup"] for r in mine if r["cpu_speedup"]]
            lines.append(
                f"| {task} | {_name(student)} (lr {mine[0]['lr']:g}) | {mine[0]['student_layers']} | "
                f"{mine[0]['student_parameters'] / 1e6:.1f}M | {_cell(with_t)} | {_of(with_t, teacher)} | "
                f"{_cell(without)} | {_of(without, teacher)} | {_paired(mine)} | "
                f"{(sum(speed) / len(speed)) if speed else float('nan'):.2f}x |")
    if records:
        dates = sorted(r["date"] for r in records)
        machines: dict[str, list[str]] = {}  # machine -> its tasks, in the table's order
        for task, runs in groups(records):
            for name in dict.fromkeys(machine_name(r) for r in runs):
                machines.setdefault(name, []).append(task)
        said = ("; ".join(f"{name} ({', '.join(tasks)})" for name, tasks in machines.items())
                if len(machines) > 1 else next(iter(machines)))
        lines += ["", f"Machine{'s' if len(machines) > 1 else ''}: {said}; runs ended "
                      f"{dates[0]} to {dates[-1]}."]
    return lines


def plot(records: list[dict], png: Path) -> Path | None:
    """Score against speed, one panel a task: each student's mean as a fraction of the
    teacher's (± its std over seeds) at its CPU speed-up, with the teacher (filled) and without
    (hollow), the teacher at (1, 1): what a user trades, at a glance."""
    plt = pyplot()
    panels = [(task, runs) for task, runs in groups(records) if runs[0]["teacher_dev"]]
    if plt is None or not panels:
        return None
    # one colour a student across the panels (a task may lack some students)
    students = sorted({r["student"] for r in records}, key=lambda s: (s not in STUDENTS, s))
    colors = {student: f"C{i % 10}" for i, student in enumerate(students)}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (task, runs) in zip(axes[0], panels):
        teacher = runs[0]["teacher_dev"]
        ax.plot([1], [1], "k*", markersize=11, label="teacher")
        for student in students:
            mine = [r for r in runs if r["student"] == student]
            speed = [r["cpu_speedup"] for r in mine if r["cpu_speedup"]]
            if not speed:
                continue
            x = sum(speed) / len(speed)
            color = colors[student]
            for key, fill in (("student_dev", color), ("baseline_dev", "none")):
                values = [r[key] / teacher for r in mine if r[key] is not None]
                if values:
                    mean, std = mean_std(values)
                    ax.errorbar([x], [mean], yerr=[std], fmt="o", color=color, mfc=fill,
                                capsize=3, label=_name(student).replace("`", "")
                                if key == "student_dev" else None)
        ax.set(xscale="log", title=f"{task} ({runs[0]['metric']})", xlabel="CPU speed-up (x)",
               ylabel="of the teacher's score")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title="filled: with the teacher\nhollow: without",
                  title_fontsize=7)
    fig.tight_layout()
    return save_figure(fig, plt, png)


def main(argv: Sequence[str], checkout: Checkout) -> int:
    """studies/distill_table.py: the command line `argv`, the records and report in `checkout`."""
    p = argparse.ArgumentParser(prog="studies/distill_table.py",
                                description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="the folder studies/distill.sh ran in")
    p.add_argument("--store", type=Path, default=checkout.records / STORE)
    p.add_argument("--write-doc", action="store_true", help="into docs/reports/distillation.md")
    args = p.parse_args(argv)
    doc, png = checkout.reports / DOC, checkout.reports / PNG
    log = RunLog(args.store)
    print(f"{collect(args.work, log)} new run(s) recorded in {args.store}")
    lines = table(log.read())
    print("\n".join(lines))
    if args.write_doc:
        text = doc.read_text(encoding="utf-8")
        if BEGIN not in text or END not in text:
            raise BertkitError(f"{doc}: no {BEGIN} ... {END} block to replace")
        head, rest = text.split(BEGIN, 1)
        doc.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END
                       + rest.split(END, 1)[1], encoding="utf-8")
        drawn = plot(log.read(), png)
        print(f"wrote {doc}" + (f" and {drawn}" if drawn else " (no plot: matplotlib is missing)"))
    return 0
