"""Part (c) of the GPU check (gpu_check/gpu_check.sh): does bertkit's own pre-training pay at
GPU scale? Pre-train a small BERT on the book text for a fixed wall budget, then fine-tune it
and the same architecture from random initialization on the SST-2 subset, each at the best rate
of its own grid (chosen on a selection seed that is not reported), for a few seeds; the verdict
gives both numbers. The recipe is the pre-training budget curve's (`bertkit.studies.pretraining.curve` and
`curve_finetune`: MLM only, dynamic masking, no dropout, lr 1e-3, the demo's SST-2 subset), so
the GPU point can sit on the CPU curve of docs/reports/pretraining.md.

    python gpu_check/pays.py --data ../shared/data --work pays-work --out pays.json \\
        [--dry-run] [--deadline-s 300]

`--out` is rewritten after every stage, so a run stopped by its time cap still leaves what it
measured. `--deadline-s`: no fine-tuning cell starts that would likely end after it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from bertkit.io import atomic_write_text
from bertkit.metrics import mean_std
from bertkit.runs.finetune import FinetuneConfig, finetune_train_config
from bertkit.runs.pretrain import PretrainConfig, pretrain_train_config
from bertkit.studies import pipeline
from bertkit.studies.pipeline import task_files
from bertkit.studies.pretraining.curve import CurveSettings, architecture, prepare_data
from bertkit.studies.pretraining.curve_finetune import FinetuneSettings, gain
from bertkit.studies.results import select_lr
from bertkit.tokenization import BertTokenizer

# Every size of this part, in one place. The GPU figures are ESTIMATES until the pre-training
# budget study (docs/reports/pretraining.md) measures where its curve leaves the unigram plateau and the
# first GPU run measures what 3 minutes buy: `mini` at batch 256 on an H100 is expected to run
# thousands of steps (hundreds of millions of tokens), far past the plateau that a few
# CPU-minutes leave a tiny model on. 3 minutes, not 4: with parts (a), (b) and the data
# preparation the whole check must end inside 9 minutes (the caps in gpu_check.sh).
SIZES = {
    "gpu": {"corpus": "all", "vocab_size": 8192, "model": "mini", "batch_size": 256,
            "pretrain_seconds": 180, "probe_steps": 30, "precision": "bf16",
            "train_examples": 2000, "dev_examples": None, "epochs": 3.0,
            "lr_grid": (1e-4, 3e-4, 1e-3), "seeds": 3},
    "dry-run": {"corpus": ["paine-common_sense.txt"], "vocab_size": 600, "model": "tiny",
                "batch_size": 16, "pretrain_seconds": 4, "probe_steps": 2, "precision": "fp32",
                "train_examples": 64, "dev_examples": 64, "epochs": 1.0, "lr_grid": (1e-3,),
                "seeds": 2},
}
VARIANTS = ("pretrained", "random")


def corpus_files(data: Path, choice: str | list[str]) -> list[str]:
    books = data / "books"
    names = sorted(p.name for p in books.glob("*.txt")) if choice == "all" else choice
    files = [str(books / n) for n in names]
    missing = [f for f in files if not Path(f).is_file()]
    if not files or missing:
        raise FileNotFoundError(f"no book text at {books} ({', '.join(missing) or 'no *.txt'})")
    return files


class Record:
    """The part's JSON, rewritten after every stage (a time cap keeps what was measured)."""

    def __init__(self, path: Path, **fields: Any):
        self.path, self.data = path, {"status": "running", **fields}
        self.write()

    def put(self, **fields: Any) -> None:
        self.data.update(fields)
        self.write()

    def write(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=2, default=str))


def pretrain(sizes: dict, settings: CurveSettings, work: Path, device: str, record: Record) -> Path:
    """Vocabulary and shards (the curve's), then one run whose steps fill the wall budget: the
    step time is measured by the loop itself first (`pipeline.seconds_per_step`), and a CPU-time
    stop at 1.15x the budget (the main process's CPU seconds, about its wall seconds on a GPU,
    where it waits on the device) guards against a probe that read too fast."""
    t0 = time.perf_counter()
    shards = prepare_data(settings, work, workers=os.cpu_count() or 1)
    tokenizer = BertTokenizer.from_pretrained(work / "vocab")
    config = architecture(settings, tokenizer.vocab_size)
    record.put(data_seconds=round(time.perf_counter() - t0, 1))
    train = pretrain_train_config(
        batch_size=settings.batch_size, lr=settings.lr, warmup_ratio=settings.warmup_ratio,
        seed=settings.seed, precision=sizes["precision"], device=device, progress=False,
        stop_at_cpu_seconds=1.15 * sizes["pretrain_seconds"])
    recipe = PretrainConfig(data=str(shards), train=train, objective=settings.objective)
    per_step = pipeline.seconds_per_step(recipe, config, shards, tokenizer, sizes["probe_steps"])
    steps = max(10, int(sizes["pretrain_seconds"] / per_step))
    record.put(pretrain={"seconds_per_step_probe": round(per_step, 4), "planned_steps": steps})
    model_dir = pipeline.pretrain_model(recipe, config, steps, shards, work / "vocab",
                                        work / "run")
    logged = [json.loads(x) for x in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in logged if "train_seconds" in r][-1]
    evals = [r for r in logged if "eval_mlm_acc" in r]
    record.put(pretrain={
        "model": sizes["model"], "batch_size": settings.batch_size, "precision": sizes["precision"],
        "budget_seconds": sizes["pretrain_seconds"], "seconds_per_step_probe": round(per_step, 4),
        "planned_steps": steps, "steps": last.get("step"),
        "train_seconds": last["train_seconds"], "tokens": last["tokens_seen"],
        "tokens_per_s": round(last["tokens_seen"] / max(last["train_seconds"], 1e-9)),
        "eval_mlm_acc": evals[-1]["eval_mlm_acc"] if evals else None,
        "eval_mlm_acc_curve": [(r["step"], round(r["eval_mlm_acc"], 4)) for r in evals]})
    return model_dir


def finetune(sizes: dict, models: dict[str, Path], data: Path, work: Path, device: str,
             record: Record, deadline: float) -> dict[str, Any]:
    """Each model's lr grid on the selection seed, then its seeds at the chosen rate; a cell
    starts only if it should end before the deadline (1.5x the slowest cell so far)."""
    ft = FinetuneSettings(train_examples=sizes["train_examples"], epochs=sizes["epochs"],
                          lr_grid=tuple(sizes["lr_grid"]), seeds=sizes["seeds"])
    files, _ = task_files(ft.task, data)
    recipe = FinetuneConfig(ft.task, "", "", train=finetune_train_config(
        precision=sizes["precision"], device=device, progress=False), epochs=ft.epochs,
        max_seq_length=128, max_train_examples=ft.train_examples,
        max_eval_examples=sizes["dev_examples"], predict_test=False, **files)
    result: dict[str, Any] = {v: {"grid": {}, "scores": []} for v in models}
    slowest = 0.0

    def cell(variant: str, lr: float, seed: int) -> dict[str, Any] | None:
        nonlocal slowest
        if time.monotonic() + 1.5 * slowest > deadline:
            result["stopped_early"] = "the part's deadline was near: fewer cells than planned"
            return None
        t0 = time.monotonic()
        folder = work / "cells" / f"{variant}-lr{lr:g}-seed{seed}"
        out = pipeline.finetune_cell(recipe.with_run("", lr=lr), models[variant], ft.task,
                                     folder, seed)
        shutil.rmtree(folder, ignore_errors=True)
        slowest = max(slowest, time.monotonic() - t0)
        return {"score": round(out["score"], 2), "collapsed": bool(out.get("collapsed"))}

    for variant in models:  # a collapsed run (one class for everything) is never selected
        if len(ft.lr_grid) == 1:  # nothing to choose
            result[variant]["lr"] = ft.lr_grid[0]
            continue
        grid = {lr: c for lr in ft.lr_grid if (c := cell(variant, lr, ft.selection_seed))}
        if not grid:
            break
        lr = select_lr(grid)
        result[variant].update(grid={f"{k:g}": c for k, c in grid.items()}, lr=lr)
        record.put(finetune=result)
    for seed in range(ft.seeds):  # seeds alternate between the models, so a cut keeps both
        for variant in models:
            if "lr" in result[variant] and (c := cell(variant, result[variant]["lr"], seed)):
                result[variant]["scores"].append(c["score"])
                result[variant].setdefault("collapsed_seeds", 0)
                result[variant]["collapsed_seeds"] += c["collapsed"]
        record.put(finetune=result)
    for variant in models:
        scores = result[variant]["scores"]
        if scores:
            result[variant]["mean"], result[variant]["std"] = map(float, mean_std(scores))
    return result


def verdict(result: dict[str, Any]) -> str:
    """Pays when the pre-trained mean beats random init by more than twice the standard error
    of the difference; hurts when the reverse; else no clear difference."""
    pre, rnd = result.get("pretrained", {}), result.get("random", {})
    if not pre.get("scores") or not rnd.get("scores"):
        return "no verdict: a model has no fine-tuned seed"
    diff, se = gain(pre["scores"], rnd["scores"])
    n1, n2 = len(pre["scores"]), len(rnd["scores"])
    both = (f"pre-trained {pre['mean']:.1f} ± {pre['std']:.1f} vs random init "
            f"{rnd['mean']:.1f} ± {rnd['std']:.1f} SST-2 dev accuracy ({n1} and {n2} seeds)")
    collapsed = pre.get("collapsed_seeds", 0) + rnd.get("collapsed_seeds", 0)
    if collapsed:
        both += (f"; collapsed seeds (one class for everything): pre-trained "
                 f"{pre.get('collapsed_seeds', 0)}, random {rnd.get('collapsed_seeds', 0)}")
    if min(n1, n2) < 2:
        return f"difference {diff:+.1f} on one seed, no spread to judge by: {both}"
    word = ("own pre-training PAYS" if diff > 2 * se else
            "own pre-training HURTS" if diff < -2 * se else "no clear difference")
    return f"{word}: {diff:+.1f} points (2 SE = {2 * se:.1f}); {both}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="folder with books/ and glue/SST-2/")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder (emptied first)")
    ap.add_argument("--out", type=Path, required=True, help="this part's JSON")
    ap.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU")
    ap.add_argument("--deadline-s", type=float, default=300.0)
    args = ap.parse_args()
    deadline = time.monotonic() + args.deadline_s
    mode = "dry-run" if args.dry_run else "gpu"
    sizes = SIZES[mode]
    device = "cpu" if args.dry_run else "cuda"
    record = Record(args.out, sizes=sizes, device=device)
    if not args.dry_run and not torch.cuda.is_available():
        record.put(status="skipped", reason="no CUDA device")
        return
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    settings = dataclasses.replace(CurveSettings(corpus=tuple(corpus_files(args.data,
                                                                          sizes["corpus"]))),
                                   vocab_size=sizes["vocab_size"], model=sizes["model"],
                                   batch_size=sizes["batch_size"])
    models = {"pretrained": pretrain(sizes, settings, args.work, device, record)}
    config = architecture(settings, BertTokenizer.from_pretrained(models["pretrained"])
                          .vocab_size)
    models["random"] = pipeline.random_init(config, BertTokenizer.from_pretrained(
        models["pretrained"]), args.work / "random", seed=settings.seed)
    result = finetune(sizes, models, args.data, args.work, device, record, deadline)
    record.put(finetune=result, verdict=verdict(result), status="ok")
    print("verdict:", record.data["verdict"], flush=True)


if __name__ == "__main__":
    main()
