"""The full-size study behind docs/reports/results.md's first table: whole training sets, the paper's
recipe with its learning rate chosen on dev, bertkit and the `transformers` loop side by side.

The plan, per task:
1. the lr sweep: bertkit, one seed kept for it alone (SWEEP_SEED), each lr of the paper's grid;
   the lr with the best dev score (the task's main metric) is the row's lr, for both systems.
   A separate seed keeps the choice from favouring one of the reported seeds.
2. the row: seeds 0-2 at that lr for bertkit, and for the reference as many as `ref_seeds`
   (3 where a run takes minutes, 1 where it takes hours: the row says so). A task whose 3-seed
   gap fell outside the reference's spread gets more seeds for both systems (`seeds`).

Every finished run is one line of the store (`results.py`'s: docs/records/results_runs.jsonl from
studies/results.py), so a stopped study goes on where it stopped; a run killed midway, bertkit's
or the reference's, also resumes from its last saved state (every epoch, or `save_every` steps;
kept in the study's work folder, studies/.study/ from studies/results.py, until the run is
recorded; SIGTERM or Ctrl-C to the process group makes each run save at the end of its step
first). `run_study` keeps `workers` runs going side by side, one thread each, picking the first
runnable job of the plan whenever one ends; the plan is re-read from the store each time, so it
is never stale.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from bertkit.studies.runner import RunLog, machine_name, run_jobs

LR_GRID = (2e-5, 3e-5, 5e-5)
SWEEP_SEED = 100
SEEDS = 3

# The paper's metrics per task (Table 1 footnotes; Tables 2, 3 and 7): the first one chooses the
# lr. Order = the study's priority: minutes-long rows first, hour-long rows last.
# `published`: dev scores to place a row, for the first metric: BERT-base (the paper's Tables 2
# and 7; GLUE and SQuAD 2.0 dev as MiniLM's README lists them) and Microsoft's MiniLM-L6xH384
# (microsoft/unilm, minilm/README.md), a distilled model of the same shape: all-MiniLM-L6-v2 is
# a MiniLM of this shape trained further for sentence embeddings, not that checkpoint. Different
# training sets for SQuAD (see below): context, not a target.
FULL = {
    # CoLA and RTE: 5 seeds each side, because at 3 their gap fell outside the reference's
    # min-max while inside bertkit's own spread (docs/reports/results.md, "What the numbers say").
    "cola": {"folder": "glue", "metrics": ["mcc"], "seeds": 5, "ref_seeds": 5,
             "published": "58.9 / 47.5"},
    # MRPC: 8 seeds each side, to measure whether bertkit's seed spread (2.1x the reference's
    # std at 3 seeds, and 1.7-2.3x on CoLA, STS-B and RTE) is real: a run takes minutes.
    "mrpc": {"folder": "glue", "metrics": ["f1", "accuracy"], "seeds": 8, "ref_seeds": 8,
             "published": "87.3 / 88.9"},
    "stsb": {"folder": "glue", "metrics": ["spearman", "pearson"], "ref_seeds": 3,
             "published": "85.8 (test) / –"},
    "rte": {"folder": "glue", "metrics": ["accuracy"], "seeds": 5, "ref_seeds": 5,
            "published": "68.6 / 68.8"},
    # CoNLL-2003: a reference run takes half an hour, so 3 fit after all; with 1, its test F1
    # sat 0.01 above bertkit's 3-seed max, a spread one seed cannot show.
    "conll2003": {"folder": "conll2003", "metrics": ["f1", "f1_test"], "ref_seeds": 3,
                  "published": "96.4 (test 92.4) / –"},
    "sst2": {"folder": "glue", "metrics": ["accuracy"], "ref_seeds": 1,
             "published": "93.2 / 91.5"},
    # SQuAD: only dev files here, split by article (the first 80% of the articles train, the
    # rest evaluate), length 384, stride 128, 2 epochs (the paper's SQuAD recipe): about 8k
    # training questions where the published rows had 88k (v1.1) and 130k (v2.0). An epoch is
    # over an hour of one core (docs/reports/results.md), so both systems keep a resumable state every
    # 50 steps (a quarter of an hour apart): a run killed at any time loses little.
    "squad1": {"folder": "squad", "metrics": ["f1", "exact_match"], "ref_seeds": 1,
               "split_dev": 0.2, "length": 384, "epochs": 2.0, "scale": 1, "save_every": 50,
               "published": "88.5 / –"},
    "squad2": {"folder": "squad", "metrics": ["f1", "exact_match"], "ref_seeds": 1,
               "split_dev": 0.2, "length": 384, "epochs": 2.0, "scale": 1, "save_every": 50,
               "published": "76.8 / 75.6"},
}


@dataclass(frozen=True)
class Job:
    task: str
    lr: float
    seed: int
    system: str  # "bertkit" | "transformers"

    @property
    def name(self) -> str:
        return f"{self.task}-lr{self.lr:g}-seed{self.seed}-{self.system}"

    def argv(self) -> list[str]:
        return ["--task", self.task, "--lr", f"{self.lr:g}", "--seed", str(self.seed),
                "--system", self.system]


def row_key(task: str, lr: float) -> str:
    return f"{task}|full|lr={lr:g}|epochs={epochs(task):g}"


def epochs(task: str) -> float:
    return FULL[task].get("epochs", 3.0)


def seeds(task: str) -> int:
    """bertkit's seeds in the task's row (the reference runs `ref_seeds` of them)."""
    return FULL[task].get("seeds", SEEDS)


def full_records(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("size") == "full"]


def done_jobs(records: list[dict]) -> set[Job]:
    return {Job(r["task"], r["lr"], r["seed"], r["system"]) for r in full_records(records)}


def chosen_lr(task: str, records: list[dict]) -> float | None:
    """The grid's lr with the best sweep score on dev; None until the sweep is complete."""
    metric = FULL[task]["metrics"][0]
    sweep = {r["lr"]: r["metrics"][metric] for r in full_records(records)
             if r["task"] == task and r["seed"] == SWEEP_SEED and r["system"] == "bertkit"}
    if set(sweep) != set(LR_GRID):
        return None
    return max(LR_GRID, key=lambda lr: (sweep[lr], -lr))  # ties: the smaller lr


def plan(records: list[dict], tasks: list[str]) -> tuple[list[Job], int]:
    """The jobs that can run now (in priority order), and how many wait on a sweep."""
    done = done_jobs(records)
    ready, waiting = [], 0
    for task in tasks:
        ready += [j for lr in LR_GRID if (j := Job(task, lr, SWEEP_SEED, "bertkit")) not in done]
        lr = chosen_lr(task, records)
        row = [Job(task, lr or 0.0, seed, system) for seed in range(seeds(task))
               for system in ("bertkit", "transformers")
               if system == "bertkit" or seed < FULL[task]["ref_seeds"]]
        if lr is None:
            waiting += len(row)
        else:
            ready += [j for j in row if j not in done]
    return ready, waiting


def job_dir(job: Job, work: Path) -> Path:
    """The run's resumable state in the study's `work` folder until the run is recorded; the
    folder `runner.hold` locks while a process runs the job (its log sits beside it)."""
    return work / job.name


def job_log(job: Job, work: Path) -> Path:
    """The run's log, kept after the run: it says how the run went."""
    return work / f"{job.name}.log"


def run_study(tasks: list[str], workers: int, store: Path, threads: int, work: Path,
              script: Path, poll: float = 5.0) -> list[Job]:
    """Keep `workers` runs going (each a child process of `script`, the study's entry point,
    one thread) until the plan is empty (`runner.run_jobs`); returns the runs that failed."""

    def command(job: Job) -> list[str]:
        return [sys.executable, str(script), *job.argv(), "--threads", str(threads),
                "--side-by-side", str(workers), "--store", str(store), "--work", str(work)]

    return run_jobs(lambda: plan(RunLog(store).read(), tasks), command, workers=workers,
                    folder=lambda job: job_dir(job, work), log_file=lambda job: job_log(job, work),
                    env={"OMP_NUM_THREADS": str(threads)}, poll=poll)


def record(job: Job, metrics: dict, timing: dict, side_by_side: int, threads: int) -> dict:
    """One finished run, as the store keeps it (`RunLog.append` adds the date and machine)."""
    return {"row": row_key(job.task, job.lr), "size": "full", "task": job.task,
            "system": job.system, "seed": job.seed, "lr": job.lr,
            "role": "lr-sweep" if job.seed == SWEEP_SEED else "row",
            "metric": FULL[job.task]["metrics"][0], "metrics": metrics, **timing,
            # the loops' own training seconds, summed over sittings (docs/reports/results.md)
            "timing": "loop", "threads": threads, "side_by_side": side_by_side,
            "cpu": machine_name()}


FULL_BEGIN, FULL_END = "<!-- full-table:begin -->", "<!-- full-table:end -->"


def _stats(values: list[float]) -> tuple[float, float]:
    from bertkit.metrics import mean_std

    return mean_std(values)


def _cell(values: list[float]) -> str:
    if not values:
        return "–"
    mean, std = _stats(values)
    if len(values) == 1:
        return f"{mean:.2f} (1)"  # one seed has no spread to show
    return f"{mean:.2f} ± {std:.2f} ({len(values)})"


def _within(ours: list[float], ref: list[float]) -> str:
    """Whether the gap is within the seed spread: bertkit's mean inside the reference's min-max
    over its seeds; with one reference seed, that seed inside bertkit's min-max."""
    if not ours or not ref:
        return "–"
    if len(ref) >= 2:
        return "yes" if min(ref) <= _stats(ours)[0] <= max(ref) else "**no**"
    return "yes¹" if min(ours) <= ref[0] <= max(ours) else "**no**¹"


def _speed(runs: list[dict]) -> str:
    """Seconds per epoch and training examples per second, from runs timed whole: not resumed,
    or resumed with the seconds of every part (the loops save them with each state; runs
    recorded before that, resumed from a part killed outright, are not); † = not timed alone."""
    timed = [r for r in runs if r.get("train_s") and (r.get("timed_whole") or not r.get("resumed"))]
    if not timed:
        return "–"
    per_epoch = _stats([r["train_s"] / epochs(r["task"]) for r in timed])[0]
    rate = _stats([r["train_examples"] * epochs(r["task"]) / r["train_s"] for r in timed])[0]
    shared = "†" if any(r.get("side_by_side", 1) > 1 for r in timed) else ""
    # a run given two threads (SQuAD's, one at a time, so that each ends within a sitting)
    # is not comparable per wall second with one-thread runs: the cell says so
    threads = sorted({r.get("threads", 1) for r in timed})
    many = f" ({'/'.join(map(str, threads))} threads)" if threads != [1] else ""
    cpu = ""  # the run's own CPU seconds: what other jobs on the machine inflate least
    if all("train_cpu_s" in r for r in timed):  # (memory bandwidth and caches aside)
        cpu = f" (CPU {_stats([r['train_cpu_s'] / epochs(r['task']) for r in timed])[0]:,.0f} s)"
    return f"{per_epoch:,.0f} s{cpu}, {rate:.1f}/s{many}{shared}"


def _sweep(task: str, records: list[dict]) -> str:
    metric, scale = FULL[task]["metrics"][0], FULL[task].get("scale", 100)
    got = {r["lr"]: scale * r["metrics"][metric] for r in records
           if r["task"] == task and r["seed"] == SWEEP_SEED}
    chosen = chosen_lr(task, records)
    return ", ".join(("**" if lr == chosen else "") + f"{lr:g}: " +
                     (f"{got[lr]:.1f}" if lr in got else "…") + ("**" if lr == chosen else "")
                     for lr in LR_GRID)


def full_table(records: list[dict]) -> list[str]:
    """One line per task and metric, every task of the plan (a task not run yet says so)."""
    records = full_records(records)
    lines = ["| task (metric) | train examples | lr sweep (dev, seed 100; **chosen**) | "
             "bertkit (seeds) | transformers (seeds) | Δ | within seed spread | "
             "bertkit s/epoch, ex/s | transformers s/epoch, ex/s | published: BERT-base / "
             "MiniLM-L6 | command |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for task, spec in FULL.items():
        lr = chosen_lr(task, records)
        runs = {s: [r for r in records if r["task"] == task and r["system"] == s
                    and r["seed"] != SWEEP_SEED and lr is not None and r["lr"] == lr]
                for s in ("bertkit", "transformers")}
        sized = [r["train_examples"] for r in records if r["task"] == task]
        scale = spec.get("scale", 100)
        command = f"`python studies/results.py --study --task {task}`"
        # the sweep chooses by the first metric; a second metric's row would show the same
        # numbers as if they were its own (MRPC's accuracy row, F1 values), so it points up
        sweep, first = _sweep(task, records), spec["metrics"][0]
        for metric in spec["metrics"]:
            values = {s: [scale * r["metrics"][metric] for r in runs[s]] for s in runs}
            gap = (f"{_stats(values['bertkit'])[0] - _stats(values['transformers'])[0]:+.2f}"
                   if values["bertkit"] and values["transformers"] else "–")
            lines.append(
                f"| {task} ({metric}) | {f'{sized[0]:,}' if sized else '–'} | "
                f"{sweep if metric == first else f'as above (by {first})'} | "
                f"{_cell(values['bertkit'])} | "
                f"{_cell(values['transformers'])} | {gap} | "
                f"{_within(values['bertkit'], values['transformers'])} | "
                f"{_speed(runs['bertkit'])} | {_speed(runs['transformers'])} | "
                f"{spec['published'] if metric == first else ''} | {command} |")
    return lines
