"""The pipeline steps the demo and the ablations share: corpus -> vocabulary -> shards ->
pre-trained (or randomly initialised) model -> one fine-tuning run. Each step is cached on disk:
when its output exists it is reused, so a killed demo or ablation continues where it stopped.
The runs are the library's own: a `PretrainConfig` and a `FinetuneConfig` template (the recipe)
completed here with the folders and the seed of each run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bertkit.config import BertConfig
from bertkit.data.chunks import ChunkConfig, default_max_predictions
from bertkit.data.instances import InstanceConfig
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.errors import BertkitError
from bertkit.heads import BertForPreTraining
from bertkit.runs.finetune import FinetuneConfig, run_one
from bertkit.runs.pretrain import (
    PretrainConfig,
    make_collate,
    new_model,
    open_shards,
    pretraining_metrics,
    run_pretraining,
)
from bertkit.tasks import get_task
from bertkit.tokenization import BertTokenizer
from bertkit.training.loop import train
from bertkit.vocab.trainer import TrainerConfig, save_vocab, train_from_files

log = logging.getLogger(__name__)


def learn_vocabulary(corpus: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
                     vocab_size: int, criterion: str = TrainerConfig.criterion, workers: int = 1,
                     progress: bool = True):
    """WordPiece vocabulary learned from `corpus`, cached in `out_dir`, by the trainer's default
    criterion (the likelihood gain: on a par with BPE at 8k, docs/reports/benchmarks.md; the "pmi"
    score leaves words as common as "the" split, which starves a small model of whole words)."""
    out = Path(out_dir)
    if not (out / "vocab.txt").is_file():
        t0 = time.perf_counter()
        result = train_from_files(list(corpus), TrainerConfig(vocab_size, criterion),
                                  workers=workers, progress=progress)
        save_vocab(result, out, do_lower_case=True)
        log.info("vocabulary: %d tokens (%s criterion) learned in %.0f s -> %s",
                 len(result.vocab), criterion, time.perf_counter() - t0, out)
    else:
        log.info("vocabulary: reusing %s", out)
    return BertTokenizer.from_pretrained(out)


def prepare_shards(corpus: Sequence[str | os.PathLike], tokenizer, out_dir: str | os.PathLike,
                   max_seq_length: int = 128, dupe_factor: int = 1, seed: int = 12345,
                   workers: int = 1, progress: bool = True) -> Path:
    """MLM+NSP instances (Google's recipe, static masks) in shards; an interrupted run resumes."""
    max_pred = default_max_predictions(max_seq_length, 0.15)
    config = PrepareConfig(ChunkConfig(InstanceConfig(max_seq_length), dupe_factor, 0.15, max_pred,
                                       seed=seed))
    meta = prepare(list(corpus), tokenizer, out_dir, config, workers=workers, resume=True,
                   progress=progress)
    log.info("pre-training data: %d instances of up to %d tokens -> %s", meta.num_instances,
             max_seq_length, out_dir)
    return Path(out_dir)


EVAL_POINTS = 4  # held-out evaluations during a pre-training run, for the curves


def pretrain_settings(recipe: PretrainConfig, shards: str | os.PathLike,
                      tokenizer_dir: str | os.PathLike, out: Path, steps: int,
                      resume: bool, eval_points: int = EVAL_POINTS) -> PretrainConfig:
    """The recipe completed for one run: data, architecture file, folder, step budget.
    Held-out evaluations (`eval_points` of them, for the curves) cost ~5 forward passes each;
    a short run evaluates only at its end. A resumable state is saved EVAL_POINTS times."""
    every = max(1, steps // eval_points) if steps >= 200 else 0
    save = max(1, steps // EVAL_POINTS) if steps >= 200 else 0
    train_cfg = dataclasses.replace(
        recipe.train, output_dir=str(out), max_steps=steps, eval_every=every, save_every=save,
        keep=1, log_every=max(1, min(10, steps // 50)), resume=resume)
    return dataclasses.replace(recipe, data=str(shards), train=train_cfg, model=None, init=None,
                               config_file=str(architecture_file(out)),
                               tokenizer=str(tokenizer_dir), eval_batches=5)


def architecture_file(run_dir: Path) -> Path:
    """The config.json a study's run is built from, beside the run folder (which the run owns)."""
    return run_dir.with_name(f"{run_dir.name}.model_config.json")


def seconds_per_step(recipe: PretrainConfig, config: BertConfig, shards: str | os.PathLike,
                     tokenizer, probe_steps: int = 8, budget: float | None = None) -> float:
    """Wall time of one step of the training loop itself (`training.loop.train`: the same
    optimizer, autocast, clipping and accumulation as the real run) on the shards: a run of
    2 + `probe_steps` steps minus a run of 2, after an untimed warm-up run, so that start-up,
    first-call allocations and the final save cancel out.

    `budget`: the seconds the figure will size. When the warm-up run alone (2 steps with
    start-up) takes longer, the budget holds no more than the minimum of 2 steps whatever the
    exact figure, so the warm-up's mean (an over-estimate) is returned without the timed runs,
    which would cost several times the budget."""
    dataset = open_shards(shards, tokenizer, config)
    collate = make_collate(dataset, recipe.objective, tokenizer, seed=0)

    def timed(steps: int, out: Path) -> float:
        torch.manual_seed(0)
        model = new_model(recipe.objective, config)
        cfg = dataclasses.replace(recipe.train, output_dir=str(out), max_steps=steps,
                                  warmup_steps=0, warmup_ratio=None, eval_every=0, save_every=0,
                                  log_every=steps, progress=False, resume=False)
        start = time.perf_counter()
        train(model, dataset, collate, cfg, step_metrics=pretraining_metrics)
        return time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        warm_up = timed(2, Path(tmp) / "warm-up")
        if budget is not None and warm_up >= budget:
            return warm_up / 2
        short = timed(2, Path(tmp) / "short")
        long = timed(2 + probe_steps, Path(tmp) / "long")
    # The difference is the honest figure; on a noisy machine it can come out too small, and
    # then the long run's mean (an over-estimate: fewer steps, never too many) is used.
    per_step = (long - short) / probe_steps
    return per_step if per_step > 0.2 * long / (2 + probe_steps) else long / (2 + probe_steps)


def _has_checkpoint(run_dir: Path) -> bool:
    return any((run_dir / "checkpoints").glob("step-*"))


def pretrain_model(recipe: PretrainConfig, config: BertConfig, steps: int,
                   shards: str | os.PathLike, tokenizer_dir: str | os.PathLike,
                   out_dir: str | os.PathLike, eval_points: int = EVAL_POINTS) -> Path:
    """Pre-train `config` for `steps` per `recipe` into `out_dir` (resuming a killed run);
    returns the export `out_dir/model` (HF layout + tokenizer). An existing export is reused."""
    out = Path(out_dir)
    model_dir = out / "model"
    if (model_dir / "config.json").is_file():
        log.info("pre-training (%s): reusing %s", recipe.objective, model_dir)
        return model_dir
    resume = _has_checkpoint(out)
    if not resume:  # a killed run without a checkpoint starts over
        shutil.rmtree(out, ignore_errors=True)
    cfg = pretrain_settings(recipe, shards, tokenizer_dir, out, steps, resume, eval_points)
    config.save(architecture_file(out))
    run_pretraining(cfg)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the export is what is kept
    return model_dir


def random_init(config: BertConfig, tokenizer, out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """The same architecture, never trained: the "no pre-training" baseline, saved like an
    export (HF layout + tokenizer) so that fine-tuning treats both alike."""
    out = Path(out_dir)
    if not (out / "config.json").is_file():
        # a temporary folder of this process's own: two sittings that start together (the SST-2
        # subset and a whole task) both make the same seeded twin; the first to finish keeps it
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        torch.manual_seed(seed)
        BertForPreTraining(config).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, out)
        except OSError:  # the other sitting's is there, whole
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def main_score(task: str, metrics: dict[str, Any]) -> float:
    """The task's headline metric on a 0-100 scale (GLUE metrics are fractions, SQuAD's not)."""
    name = get_task(task).main_metric
    if name not in metrics:
        raise BertkitError(f"{task}: the run reported no {name!r} (got {sorted(metrics)})")
    value = float(metrics[name])
    return value if task.startswith("squad") else 100.0 * value


def finetune_cell(recipe: FinetuneConfig, model_dir: str | os.PathLike, task: str,
                  out_dir: str | os.PathLike, seed: int) -> dict[str, Any]:
    """One fine-tuning run per `recipe` (which names the data files) from scratch (a partial
    earlier attempt is discarded); returns its metrics with `score` (the headline metric,
    0-100) and `seconds` added."""
    out = Path(out_dir)
    shutil.rmtree(out, ignore_errors=True)
    cfg = dataclasses.replace(recipe.with_run(out, seed=seed, resume=False), task=task,
                              model_dir=str(model_dir), data_dir=str(out))
    t0 = time.perf_counter()
    metrics = run_one(cfg)
    seconds = time.perf_counter() - t0
    return {**metrics, "score": main_score(task, metrics), "seconds": round(seconds, 1)}


SQUAD_HELD_OUT = 0.2  # SQuAD v1.1 without a train file: the last 20% of dev's articles


def task_files(task: str, data_root: str | Path) -> tuple[dict[str, Any], str]:
    """How to find `task`'s data under `data_root` (../shared/data's `glue/SST-2/` or `bertkit
    data download`'s `glue-sst-2/SST-2/`): the FinetuneConfig fields (train/dev files, or
    `split_dev` for SQuAD v1.1 without a train file, by the fine-tuning rule) and a note."""
    root, t = Path(data_root), get_task(task)
    spec = getattr(t, "spec", None)  # a GLUE task's (CoNLL-2003 and others have their own folder)
    folders = ([root / "squad", root / task, root] if task.startswith("squad") else
               [root / "glue", root / f"glue-{spec.folder.lower()}", root] if spec else
               [root / task, root])
    for folder in folders:
        train, dev = t.find_file(folder, "train"), t.find_file(folder, "dev")
        if train.is_file() and dev.is_file():
            return {"train_file": str(train), "dev_file": str(dev)}, ""
        if task == "squad1" and dev.is_file():
            return {"dev_file": str(dev), "split_dev": SQUAD_HELD_OUT}, (
                f"SQuAD v1.1 has no train file in {folder}: its dev set ({dev.name}) was split by "
                f"article, the last {SQUAD_HELD_OUT:.0%} held out for evaluation, the rest used "
                "to train (`bertkit finetune --split-dev`)")
    raise BertkitError(f"{task}: no train/dev files under {root} (looked in "
                       f"{', '.join(str(f) for f in folders)}); fetch them with "
                       f"`bertkit data download` or pass --data DIR")
