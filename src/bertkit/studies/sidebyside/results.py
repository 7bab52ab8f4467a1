"""docs/reports/results.md's tables: bertkit vs a plain `transformers` fine-tuning loop, task by task.

Both systems start from the same checkpoint (all-MiniLM-L6-v2), train on the same examples
(bertkit's task code reads them: the same sets, the same dev split), with the paper's recipe
(batch 32, 3 epochs (SQuAD 2), 10% warmup then linear decay, weight decay 0.01 on matrices,
clipping 1.0, max length 128 (SQuAD 384), fp32), over the same seeds; bertkit's `Task.score`
scores both.

Full size (the default; the plan and its lr sweep are in `full`): whole training sets,
lr chosen on dev from the paper's grid, one thread per run, `--workers` runs side by side.

    python studies/results.py --study                        # the whole plan, 2 side by side
    python studies/results.py --study --task mrpc            # one task's plan
    python studies/results.py --task mrpc --lr 3e-5 --seed 0 --system bertkit   # one run

Quick (`--quick`): the reduced rows, training subsets and one lr, both systems interleaved seed
by seed in one process (the wall-time ratio is bertkit / transformers, whole runs). The smoke
version: each row takes minutes, and at these sizes neither system learns much.

    python studies/results.py --quick --task mrpc --seeds 3
    python studies/results.py --quick --task rte --seeds 3 --optimizer adamw_google

    python studies/results.py --status                        # runs recorded, started, steps
    python studies/results.py --report                        # the tables from the store
    python studies/results.py --report --write-doc            # ... into docs/reports/results.md

Finished runs are kept in docs/records/results_runs.jsonl (one line per system and seed; the
schema: docs/records/README.md); a run already there is not run again, so a stopped study goes
on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from bertkit.errors import BertkitError
from bertkit.metrics import mean_std
from bertkit.runs.finetune import (
    FinetuneConfig,
    build_task,
    finetune_train_config,
    prepare_data,
    run_one,
)
from bertkit.studies.checkout import Checkout
from bertkit.studies.runner import Busy, RunLog, busy, hold
from bertkit.studies.sidebyside.full import (
    FULL,
    FULL_BEGIN,
    FULL_END,
    Job,
    done_jobs,
    full_table,
    job_dir,
    plan,
    run_study,
)
from bertkit.studies.sidebyside.full import epochs as full_epochs
from bertkit.studies.sidebyside.full import record as full_record
from bertkit.studies.sidebyside.reference import (
    Checkpointing,
    Recipe,
    minilm_path,
    predict_answers,
    predict_sequences,
    predict_tags,
    train_question_answering,
    train_sequence_classifier,
    train_token_classifier,
)
from bertkit.tasks import get_task
from bertkit.tokenization import BertTokenizer
from bertkit.training.state import list_checkpoints

STORE, DOC = "results_runs.jsonl", "results.md"  # in the checkout's records and reports
BEGIN, END = "<!-- results-table:begin -->", "<!-- results-table:end -->"

# One lr per task from the paper's {2e-5, 3e-5, 5e-5}, picked once before any run (not tuned):
# 5e-5, the grid's largest, because MiniLM-L6 is small and the training subsets are short.
# train: examples used (first N of the file; None = all); split_dev: fraction of the dev file
# held out for evaluation when the task has no training file here (QNLI).
# The subsets keep a row (3 seeds x 2 systems) within ~30 minutes on 2 shared CPU cores.
TASKS = {
    "wnli": {"folder": "glue", "lr": 5e-5, "train": None},
    "rte": {"folder": "glue", "lr": 5e-5, "train": 500},
    "mrpc": {"folder": "glue", "lr": 5e-5, "train": 500},
    "stsb": {"folder": "glue", "lr": 5e-5, "train": 500},
    "cola": {"folder": "glue", "lr": 5e-5, "train": 1000},
    "sst2": {"folder": "glue", "lr": 5e-5, "train": 1000},
    "qnli": {"folder": "glue", "lr": 5e-5, "train": 500, "split_dev": 0.2, "dev": 500},
    # CoNLL-2003: entity F1 on dev and test. The feature-based row (the paper's Table 7: the
    # last four layers concatenated, a two-layer BiLSTM on the frozen encoder) is bertkit only;
    # it trains just the head, from scratch, so its lr is Adam's usual 1e-3, not the grid's.
    "conll2003": {"folder": "conll2003", "lr": 5e-5, "train": 2000, "metrics": ["f1", "f1_test"]},
    "conll2003-features": {"folder": "conll2003", "task": "conll2003", "lr": 1e-3, "train": 2000,
                           "metrics": ["f1", "f1_test"], "freeze": True,
                           "systems": ["bertkit"]},
    # SQuAD: only dev files here, split by article (`split_dev` 0.2: the first 80% of the
    # articles train, the last 20% evaluate), the same split for both systems; length 384,
    # stride 128. v2.0's null threshold is tuned on the eval part for both (Task.score).
    "squad1": {"folder": "squad", "lr": 5e-5, "train": 1000, "split_dev": 0.2, "dev": 500,
               "length": 384, "scale": 1},
    "squad2": {"folder": "squad", "lr": 5e-5, "train": 1000, "split_dev": 0.2, "dev": 500,
               "length": 384, "scale": 1},
}


def finetune_config(task: str, spec: dict, seed: int, out: str, args,
                    resume: bool | str = False, progress: bool = False) -> FinetuneConfig:
    train = finetune_train_config(out, lr=args.lr, seed=seed, progress=progress, precision="fp32",
                                  optimizer=args.optimizer, schedule=args.schedule, resume=resume,
                                  save_every=spec.get("save_every", 0))
    freeze = spec.get("freeze", False)
    return FinetuneConfig(task=spec.get("task", task), model_dir=args.model_dir,
                          data_dir=str(args.data / spec["folder"]), train=train, epochs=args.epochs,
                          max_seq_length=spec.get("length", 128),
                          max_train_examples=args.train_examples,
                          max_eval_examples=args.dev_examples, split_dev=spec.get("split_dev"),
                          predict_test="f1_test" in spec.get("metrics", ()),
                          freeze_encoder=freeze, features="concat-last-4" if freeze else "cls",
                          regression_bias="zero")  # the reference loop's (Hugging Face's) init


def metric_names(task: str) -> list[str]:
    return TASKS[task].get("metrics") or [get_task(TASKS[task].get("task", task)).main_metric]


def run_bertkit(task: str, spec: dict, seed: int, args, out: Path | None = None) -> dict:
    """One run of run_one. With `out`, the caller's run folder, a killed run resumes from its
    last saved state; without, a temporary one. Its training seconds are the loop's own (wall
    and CPU), summed over every sitting and saved with each state (`TrainResult`, in
    metrics.json), so a resumed run's are its whole run's."""
    keep = out is not None
    out = out or Path(tempfile.mkdtemp(prefix="results-")) / "run"
    try:
        t0 = time.perf_counter()
        # a study's run logs to a file: the bar there (every 30 s) shows how far it is
        # an earlier part may have stopped before its first state: "auto" starts it again
        metrics = run_one(finetune_config(task, spec, seed, str(out), args,
                                          resume="auto" if keep and out.exists() else False,
                                          progress=keep))
        wall = time.perf_counter() - t0
    finally:
        if not keep:
            shutil.rmtree(out.parent, ignore_errors=True)
    scores = {k: v for k, v in metrics.items() if isinstance(v, float)
              and k not in ("lr", "train_seconds", "train_cpu_seconds")}
    return {"metrics": scores, "train_examples": metrics["train_examples"], "wall_s": wall,
            "train_s": metrics.get("train_seconds"), "train_cpu_s": metrics.get("train_cpu_seconds")}


def run_transformers(task: str, spec: dict, seed: int, args, state: Path | None = None) -> dict:
    """The same examples as bertkit (its `prepare_data`), trained by the reference loop. With
    `state`, the loop keeps its state in that file (every epoch, or `save_every` steps), so
    that a killed run resumes; the loop's training seconds are summed over the sittings in its
    state, as bertkit's."""
    t_start = time.perf_counter()
    checkpoint = None
    if state is not None:
        state.parent.mkdir(parents=True, exist_ok=True)
        checkpoint = Checkpointing(state, spec.get("save_every", 0))
    cfg = finetune_config(task, spec, seed, "", args)
    t = build_task(cfg)
    data = prepare_data(t, cfg, BertTokenizer.from_pretrained(args.model_dir), cfg.settings(t))
    recipe = Recipe(lr=args.lr, epochs=args.epochs, max_seq_length=cfg.settings(t).max_seq_length)
    if t.name.startswith("squad"):
        model, tok, cost = train_question_answering(args.model_dir, data.train.examples, recipe,
                                                    seed, checkpoint=checkpoint)
    elif t.name == "conll2003":
        model, tok, cost = train_token_classifier(args.model_dir, data.train.examples,
                                                  data.labels, recipe, seed, checkpoint)
    else:
        model, tok, cost = train_sequence_classifier(args.model_dir, t, data.train.examples,
                                                     data.labels, recipe, seed, checkpoint)
    if t.name.startswith("squad"):
        dev = data.dev_splits[0].examples
        scores = t.score(dev, predict_answers(model, tok, dev, recipe))
    elif t.name == "conll2003":
        scores = {}
        for split in data.dev_splits:  # dev, then test: suffixed as bertkit's evaluate_splits
            suffix = "" if split.name == "dev" else f"_{split.name}"
            got = t.score(split.examples, predict_tags(model, tok, split.examples, data.labels,
                                                       recipe))
            scores.update({f"{k}{suffix}": v for k, v in got.items()})
    else:
        dev = data.dev_splits[0].examples
        scores = t.score(dev, predict_sequences(model, tok, t, dev, data.labels, recipe))
    scores = {k: float(v) for k, v in scores.items()
              if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {"metrics": scores, "train_examples": len(data.train.examples),
            **(cost or {"train_s": None, "train_cpu_s": None}),
            "wall_s": time.perf_counter() - t_start}


def row_key(task: str, args) -> str:
    return (f"{task}|train={args.train_examples}|dev={args.dev_examples}|lr={args.lr:g}|"
            f"epochs={args.epochs:g}|{args.optimizer}|{args.schedule}")


def quick_records(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("size", "quick") == "quick"]


def run_row(task: str, args) -> None:
    done = {(r["row"], r["system"], r["seed"]) for r in RunLog(args.store).read()}
    key = row_key(task, args)
    runners = {"bertkit": run_bertkit, "transformers": run_transformers}
    ran = 0
    for seed in range(args.seeds):
        for system, runner in runners.items():
            wanted = set(args.systems.split(",")) & set(TASKS[task].get("systems", runners))
            if (key, system, seed) in done or system not in wanted:
                continue
            if args.limit is not None and ran >= args.limit:
                return
            ran += 1
            t0 = time.perf_counter()
            metrics = runner(task, TASKS[task], seed, args)["metrics"]
            record = RunLog(args.store).append(
                {"row": key, "task": task, "system": system, "seed": seed,
                 "metric": metric_names(task)[0], "wall_s": time.perf_counter() - t0,
                 "metrics": metrics})
            print(f"{key} {system} seed {seed}: {metrics.get(record['metric'])} "
                  f"({record['wall_s']:.0f} s)", flush=True)


def command(row: str, seeds: int = 3) -> str:
    """The command that makes the row (seeds 0..N-1; rows keep at least the recipe's 3)."""
    task, train, dev, lr, epochs, optimizer, schedule = row.split("|")
    cmd = f"python studies/results.py --quick --task {task} --seeds {max(seeds, 3)}"
    defaults = TASKS[task]
    if train != f"train={defaults['train']}":
        cmd += f" --train-examples {train.split('=')[1]}"
    if dev != f"dev={defaults.get('dev')}":
        cmd += f" --dev-examples {dev.split('=')[1]}"
    if lr != f"lr={defaults['lr']:g}":
        cmd += f" --lr {lr.split('=')[1]}"
    if epochs != "epochs=3":
        cmd += f" --{epochs.replace('=', ' ')}"
    if optimizer != "adamw":
        cmd += f" --optimizer {optimizer}"
    if schedule != "linear":
        cmd += f" --schedule {schedule}"
    return f"`{cmd}`"


def _summary(runs: list[dict], metric: str, scale: float) -> str:
    scores = [scale * r["metrics"][metric] for r in runs if metric in r["metrics"]]
    if not scores:
        return "–"
    mean, std = mean_std(scores)
    return f"{mean:.2f} ± {std:.2f}"


def _row_lines(row: str, systems: dict[str, list[dict]]) -> list[str]:
    task, train, dev, lr, _, optimizer, schedule = row.split("|")
    runs = {s: sorted(systems.get(s, []), key=lambda r: r["seed"])
            for s in ("bertkit", "transformers")}
    both = {r["seed"] for r in runs["bertkit"]} & {r["seed"] for r in runs["transformers"]}
    walls = {s: sum(r["wall_s"] for r in runs[s] if r["seed"] in both) for s in runs}
    ratio = f"{walls['bertkit'] / walls['transformers']:.2f}" if both else "–"
    seeds = len(both) if both else max(len(r) for r in runs.values())
    lines = []
    scale = TASKS[task].get("scale", 100)  # SQuAD's EM/F1 are percentages already
    for metric in metric_names(task):
        cells = {s: _summary(runs[s], metric, scale) for s in runs}
        gap = "–"
        if both:
            mean = {s: mean_std([scale * r["metrics"][metric] for r in runs[s]
                                 if r["seed"] in both])[0] for s in runs}  # paired seeds
            gap = f"{mean['bertkit'] - mean['transformers']:+.2f}"
        sizes = " / ".join(part.split("=")[1].replace("None", "all") for part in (train, dev))
        lines.append(f"| {task} ({metric}) | {sizes} | "
                     f"{lr.split('=')[1]} | {optimizer}, {schedule} | {cells['bertkit']} | "
                     f"{cells['transformers']} | {gap} | {seeds} | {ratio} | {command(row, seeds)} |")
    return lines


def table(records: list[dict]) -> list[str]:
    """Scores x100 (accuracy, F1, and correlations alike: 0.005 of a correlation = 0.5 here)."""
    rows: dict[str, dict[str, list[dict]]] = {}
    for r in records:
        rows.setdefault(r["row"], {}).setdefault(r["system"], []).append(r)
    lines = ["| task (metric) | train / eval examples | lr | bertkit (opt, schedule) | "
             "bertkit | transformers | Δ (paired seeds) | seeds | wall ratio | command |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row, systems in rows.items():
        lines += _row_lines(row, systems)
    return lines


def write_doc(doc: Path, blocks: dict[tuple[str, str], list[str]]) -> None:
    text = doc.read_text(encoding="utf-8")
    for (begin, end), lines in blocks.items():
        if begin not in text or end not in text:
            raise BertkitError(f"{doc}: no {begin} ... {end} block to fill")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + "\n" + "\n".join(lines) + "\n" + end + tail
    doc.write_text(text, encoding="utf-8")


def run_full_job(job: Job, args) -> None:
    """One run of the full-size study, appended to the store (nothing if it is there or another
    process runs it now)."""
    try:
        with hold(job_dir(job, args.work), job.name):
            if job in done_jobs(RunLog(args.store).read()):
                print(f"{job.name}: in the store already")
            else:
                _run_and_record(job, args)
    except Busy as err:  # another process runs it now (only the claim raises Busy)
        print(err)


def _run_and_record(job: Job, args) -> None:
    spec = FULL[job.task]
    args.lr, args.epochs = job.lr, full_epochs(job.task)
    args.train_examples = args.dev_examples = None  # whole sets
    args.optimizer, args.schedule = "adamw", "linear"
    resumed = _state_step(job, args.work) > 0  # trained on from a state an earlier sitting saved
    if job.system == "bertkit":
        got = run_bertkit(job.task, spec, job.seed, args, out=job_dir(job, args.work) / "run")
    else:
        got = run_transformers(job.task, spec, job.seed, args,
                               state=job_dir(job, args.work) / "reference.pt")
    timing = {k: got[k] for k in ("train_s", "train_cpu_s", "wall_s", "train_examples")
              if got.get(k) is not None}
    # a state saved before the loops summed their seconds leaves the run's time unknown
    timing.update(timed_whole="train_s" in timing, resumed=resumed)
    RunLog(args.store).append(full_record(job, got["metrics"], timing, args.side_by_side,
                                          args.threads))
    shutil.rmtree(job_dir(job, args.work), ignore_errors=True)  # recorded: nothing left to resume
    print(f"{job.name}: {got['metrics'].get(spec['metrics'][0])} ({got['wall_s']:.0f} s)",
          flush=True)


def _state_step(job: Job, work: Path) -> int:
    """The step of the job's last saved state (0: none; a run trained to its end and not yet
    recorded: its last step, its checkpoints already gone)."""
    if job.system == "bertkit":
        finished = job_dir(job, work) / "run" / "metrics.json"
        if finished.is_file():
            return json.loads(finished.read_text())["steps"]
        saved = list_checkpoints(job_dir(job, work) / "run")
        return saved[-1][0] if saved else 0
    return Checkpointing(job_dir(job, work) / "reference.pt").step()


def job_progress(job: Job, work: Path) -> tuple[int, int | None]:
    """The step of the job's last saved state (where it resumes after a kill; a clean stop saves
    first) and the run's steps (None until the run has saved a state or, bertkit, started)."""
    if job.system == "transformers":
        return Checkpointing(job_dir(job, work) / "reference.pt").progress()
    config = job_dir(job, work) / "run" / "train_config.json"
    total = json.loads(config.read_text())["max_steps"] if config.is_file() else None
    return _state_step(job, work), total


def study_status(tasks: list[str], store: Path, work: Path) -> list[str]:
    """Where the study stands: runs recorded, and each run that can run now that has started
    (running now, or stopped with its state kept)."""
    records = RunLog(store).read()
    ready, waiting = plan(records, tasks)
    running = {j for j in ready if busy(job_dir(j, work))}
    started = [j for j in ready if j in running or job_dir(j, work).exists()]
    lines = [f"{len(done_jobs(records))} runs recorded; {len(ready)} can run now "
             f"({len(started)} started); {waiting} wait on a sweep"]
    for job in started:
        saved, total = job_progress(job, work)
        trained = max(saved, _logged_step(job, work))  # a kill now trains the steps past `saved` again
        where = (f"step {trained} of {total or '?'}, " if trained else "") + (
            f"state saved at step {saved}" if saved else "no state saved yet")
        lines.append(f"  {job.name}: {'running' if job in running else 'stopped'}, {where}")
    return lines


def _logged_step(job: Job, work: Path) -> int:
    """bertkit's last logged step (its metrics.jsonl, every few steps; 0: none or the reference,
    whose log shows a progress bar instead)."""
    log = job_dir(job, work) / "run" / "metrics.jsonl"
    if job.system != "bertkit" or not log.is_file():
        return 0
    for line in reversed(log.read_text().splitlines()):
        try:
            return json.loads(line)["step"]
        except json.JSONDecodeError:  # a line cut by a kill (the resume truncates it)
            continue
    return 0


def main(argv: Sequence[str], checkout: Checkout) -> int:
    """studies/results.py: the command line `argv`, the files in `checkout`; the exit status."""
    p = argparse.ArgumentParser(prog="studies/results.py", description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=sorted(set(TASKS) | set(FULL)))
    p.add_argument("--quick", action="store_true",
                   help="the reduced rows (training subsets, one lr): the fast smoke version")
    p.add_argument("--study", action="store_true",
                   help="run the whole full-size plan (or --task's), --workers side by side")
    p.add_argument("--workers", type=int, default=2, help="--study: runs side by side")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--seeds", type=int, default=3, help="--quick: seeds 0..N-1")
    p.add_argument("--seed", type=int, default=None, help="full size: this one run")
    p.add_argument("--system", choices=["bertkit", "transformers"], default=None,
                   help="full size, with --seed: this one run")
    p.add_argument("--side-by-side", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--lr", type=float, default=None, help="default: the task's (TASKS)")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--train-examples", type=int, default=None, help="default: the task's subset")
    p.add_argument("--dev-examples", type=int, default=None, help="default: the task's")
    p.add_argument("--optimizer", default="adamw", help="bertkit's side: adamw | adamw_google")
    p.add_argument("--schedule", default="linear", help="bertkit's side: linear | google")
    p.add_argument("--systems", default="bertkit,transformers")
    p.add_argument("--limit", type=int, default=None,
                   help="run at most N of the missing runs, then stop (a shared machine's "
                   "scheduler can then put other jobs between them)")
    p.add_argument("--store", type=Path, default=checkout.records / STORE)
    p.add_argument("--work", type=Path, default=checkout.work,
                   help="runs' resumable states until recorded (default: %(default)s)")
    p.add_argument("--data", type=Path, default=checkout.data,
                   help="the data folder: glue/, conll2003/, squad/ (default: %(default)s)")
    p.add_argument("--report", action="store_true", help="print the tables of the store")
    p.add_argument("--status", action="store_true",
                   help="where the full-size study stands (or --task's): runs recorded, runs "
                   "started and the step each one's saved state is at")
    p.add_argument("--write-doc", action="store_true", help="with --report: into docs/reports/results.md")
    args = p.parse_args(argv)
    if args.report:
        records = RunLog(args.store).read()
        full, quick = full_table(records), table(quick_records(records))
        print("\n".join(full + [""] + quick))
        if args.write_doc:
            write_doc(checkout.reports / DOC, {(FULL_BEGIN, FULL_END): full, (BEGIN, END): quick})
        return 0
    if args.task and args.task not in FULL and not args.quick:
        p.error(f"--task {args.task}: no full-size row (only --quick): {', '.join(FULL)}")
    if args.status:
        print("\n".join(study_status([args.task] if args.task else list(FULL), args.store,
                                      args.work)))
        return 0
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.ERROR)
    args.model_dir = minilm_path()
    if not args.quick:
        tasks = [args.task] if args.task else list(FULL)
        if args.seed is not None:
            if not (args.task and args.system and args.lr):
                p.error("--seed needs --task, --system and --lr (one run of the study)")
            try:
                run_full_job(Job(args.task, args.lr, args.seed, args.system), args)
            except KeyboardInterrupt as stop:  # as bertkit's CLI: SIGTERM's and Ctrl-C's kin
                said = f": {stop}" if str(stop) else ""  # the loops name the state they saved
                print(f"stopped{said}; the same command (or --study) resumes it from its last "
                      "saved state", flush=True)
                return 130
        elif args.study:
            if run_study(tasks, args.workers, args.store, args.threads, args.work,
                         checkout.script("results.py")):
                return 1  # a run failed: the study is not complete
        else:
            p.error("full size: --study (the plan, side by side) or --task T --lr X --seed S "
                    "--system Z (one run); --quick for the reduced rows")
        return 0
    if args.task is None:
        p.error("--quick needs --task (or --report)")
    if args.task not in TASKS:
        p.error(f"--task {args.task}: no quick row")
    spec = TASKS[args.task]
    args.lr = args.lr if args.lr is not None else spec["lr"]
    args.train_examples = args.train_examples if args.train_examples is not None else spec["train"]
    args.dev_examples = args.dev_examples if args.dev_examples is not None else spec.get("dev")
    run_row(args.task, args)
    print("\n".join(table([r for r in quick_records(RunLog(args.store).read())
                           if r["task"] == args.task])))
    return 0
