"""The fine-tuning approach: the task's recipe (`runs.finetune`: AdamW, batch 32, 10% warmup
then linear decay, the checkpoint's dropout) on the labelled subset, at a rate chosen for each
model and label count from a small grid on a seed that is never reported (`choose_lr`), as the
pre-training curve does. The run's folder (the fine-tuned model) is deleted once it is recorded:
the record is what the curve keeps."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bertkit.runs.finetune import FinetuneConfig, finetune_train_config
from bertkit.studies import pipeline
from bertkit.studies.learning_curve.plan import Recipe, Run
from bertkit.studies.results import select_lr


def finetune_run(recipe: Recipe, model_dir: Path, train_file: Path, run: Run, lr: float,
                 folder: Path) -> dict[str, Any]:
    """One fine-tuning run of `run` at `lr` on the subset in `train_file`, scored on dev."""
    cfg = FinetuneConfig(recipe.task, "", "", train=finetune_train_config(
        lr=lr, batch_size=recipe.batch_size, precision="fp32", progress=False),
        epochs=recipe.epochs_for(run.size), max_seq_length=recipe.max_seq_length,
        max_eval_examples=recipe.dev_examples, train_file=str(train_file),
        dev_file=recipe.dev_file, predict_test=False, regression_bias=recipe.regression_bias)
    record = pipeline.finetune_cell(cfg, model_dir, recipe.task, folder, run.seed)
    shutil.rmtree(folder, ignore_errors=True)
    reason = record.get("collapse_reason")
    return {"score": round(record["score"], 3), "collapsed": bool(record.get("collapsed")),
            **({"collapse_reason": reason} if reason else {}), "lr": lr,
            "epochs": round(cfg.epochs, 3), "steps": record.get("steps"),
            "seconds": record["seconds"]}


def choose_lr(recipe: Recipe, records: dict[str, dict[str, Any]], variant: str,
              size: int) -> float | None:
    """The rate of `variant`'s reported runs at `size`: the grid's one rate, or the one whose
    selection run scored best on dev (never a collapsed one while another exists); None while
    a selection run is not recorded yet."""
    if len(recipe.lr_grid) == 1:
        return recipe.lr_grid[0]
    keys = {lr: Run("finetune", variant, size, recipe.selection_seed, lr, selection=True).key
            for lr in recipe.lr_grid}
    if any(k not in records for k in keys.values()):
        return None
    return select_lr({lr: records[k] for lr, k in keys.items()})
