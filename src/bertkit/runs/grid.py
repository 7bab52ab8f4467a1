"""A grid of fine-tuning runs (lr x epochs x seeds) selected on dev, as in the paper (section
4.1: "we selected the best fine-tuning learning rate ... on the Dev set").

Every run goes to `OUTPUT/runs/<name>/`; the (lr, epochs) with the best mean dev metric over
seeds wins, never counting a collapsed run (see `Task.collapse_reason`) as the best seed; that
run's model, tokenizer and predictions are copied to OUTPUT and the summary (mean, median, sample
std over seeds, collapsed runs) is `OUTPUT/metrics.json`. With `resume`, finished runs are kept
and interrupted ones continue from their checkpoint.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.checkpoint import check_model_dir
from bertkit.errors import BertkitError
from bertkit.io import atomic_path, atomic_write_json
from bertkit.metrics import mean_std
from bertkit.runs.finetune import (
    FINETUNE_MARKER,
    FinetuneConfig,
    build_task,
    check_data,
    run_one,
    run_settings,
)
from bertkit.tasks import Task
from bertkit.training.run_folder import RunFolder
from bertkit.training.state import RESUME_AUTO

log = logging.getLogger(__name__)

RELEASE_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json",
                 "tokenizer_config.json", "special_tokens_map.json")


def run_name(lr: float, epochs: float, seed: int) -> str:
    return f"lr{lr:g}-ep{epochs:g}-seed{seed}"


def run_grid(base: FinetuneConfig, lrs: list[float], epochs: list[float],
             seeds: list[int]) -> dict[str, Any]:
    """Fine-tune every (lr, epochs, seed); see the module docstring."""
    out = Path(base.output_dir)
    task = build_task(base)
    check_model_dir(base.model_dir)
    check_data(task, base)
    grid_settings = {**run_settings(base, task.regression),
                     "grid": {"lr": lrs, "epochs": epochs, "seeds": seeds}}
    folder = RunFolder(out, FINETUNE_MARKER, grid_settings, base.train.resume,
                       inputs=[base.model_dir])
    if base.train.resume is True and not folder.check():  # bare --resume must continue something
        raise BertkitError(f"--resume: {out} holds no earlier grid (nothing to resume; start "
                           "without --resume, or pass --resume auto to continue when there is "
                           "one and start when there is none)")
    with folder.claimed():
        return _run_claimed(base, task, lrs, epochs, seeds)


def _run_claimed(base: FinetuneConfig, task: Task, lrs: list[float], epochs: list[float],
                 seeds: list[int]) -> dict[str, Any]:
    """run_grid's runs, selection and release, in its claimed folder."""
    out = Path(base.output_dir)
    # a resumed grid's runs may have finished, stopped midway or not started: each continues
    # or starts ("auto"; a bare --resume would refuse one not started)
    resume = RESUME_AUTO if base.train.resume else False
    records = [run_one(base.with_run(out / "runs" / run_name(lr, ep, seed), ep, lr=lr, seed=seed,
                                     resume=resume))
               for lr in lrs for ep in epochs for seed in seeds]
    metric = task.main_metric
    grid = [summarize(lr, ep, [r for r in records if r["lr"] == lr and r["epochs"] == ep],
                      metric) for lr in lrs for ep in epochs]
    best = max(grid, key=lambda g: -np.inf if np.isnan(g["mean"]) else g["mean"])
    best_run = pick_run([r for r in records if r["lr"] == best["lr"]
                         and r["epochs"] == best["epochs"]], metric)
    name = run_name(best_run["lr"], best_run["epochs"], best_run["seed"])
    copy_release(out / "runs" / name, out)
    summary = {**best_run, "selection_metric": metric, "selected": best, "grid": grid,
               "best_run": name}
    atomic_write_json(out / "metrics.json", summary)
    return summary


def summarize(lr: float, epochs: float, runs: list[dict[str, Any]], metric: str
              ) -> dict[str, Any]:
    """One grid cell: mean, median and sample std over seeds of the dev metric (collapsed runs
    included: they are part of what the setting does), and how many collapsed."""
    values = [float(r.get(metric, float("nan"))) for r in runs]
    mean, std = mean_std(values)
    return {"lr": lr, "epochs": epochs, "n": len(runs), "mean": mean,
            "median": float(np.median(values)), "std": std,
            "collapsed_runs": sum(bool(r.get("collapsed")) for r in runs), "values": values}


def pick_run(runs: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """The best seed by the dev metric, never a collapsed run while another exists."""
    healthy = [r for r in runs if not r.get("collapsed")] or runs
    return max(healthy, key=lambda r: float(r.get(metric, -np.inf)))


def copy_release(src: Path, dst: Path) -> None:
    """The selected run's model, tokenizer and predictions, into the output folder."""
    for path in sorted(src.iterdir()):
        keep = path.name in RELEASE_FILES or path.name.startswith(("predictions", "null_odds"))
        if path.is_file() and (keep or path.suffix == ".tsv"):
            with atomic_path(dst / path.name) as tmp:
                shutil.copyfile(path, tmp)
