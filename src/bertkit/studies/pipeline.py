"""The pipeline steps the demo and the ablations share: corpus -> vocabulary -> shards ->
pre-trained (or randomly initialised) model -> one fine-tuning run. Each step is cached on disk:
when its output exists it is reused, so a killed demo or ablation continues where it stopped.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.config import BertConfig
from bertkit.errors import BertkitError

log = logging.getLogger(__name__)


def learn_vocabulary(corpus: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
                     vocab_size: int, criterion: str = "frequency", workers: int = 1,
                     progress: bool = True):
    """WordPiece vocabulary learned from `corpus`, cached in `out_dir`. The default merge
    criterion is "frequency": at 8k pieces the "likelihood" score count(ab) / (count(a) count(b))
    favours rare pairs and leaves words as common as "the" split into characters
    (docs/ablations.md), which starves a small model of whole words."""
    from bertkit.tokenization import BertTokenizer
    from bertkit.tokenization.trainer import TrainerConfig, save_vocab, train_from_files

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
    from bertkit.data.chunks import ChunkConfig
    from bertkit.data.instances import InstanceConfig
    from bertkit.data.prepare import PrepareConfig, prepare

    max_pred = max(1, math.ceil(max_seq_length * 0.15))
    config = PrepareConfig(ChunkConfig(InstanceConfig(max_seq_length), dupe_factor, 0.15, max_pred,
                                       seed=seed))
    meta = prepare(list(corpus), tokenizer, out_dir, config, workers=workers, resume=True,
                   progress=progress)
    log.info("pre-training data: %d instances of up to %d tokens -> %s", meta["num_instances"],
             max_seq_length, out_dir)
    return Path(out_dir)


@dataclass(frozen=True)
class PretrainPlan:
    """One pre-training run: architecture, objective and a step budget."""

    config: BertConfig
    objective: str = "mlm+nsp"
    steps: int = 1000
    batch_size: int = 32
    lr: float = 5e-4
    warmup_ratio: float = 0.1
    precision: str = "fp32"
    seed: int = 0
    eval_points: int = 4  # held-out evaluations during the run, for the curves


def _autocast(precision: str):
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def seconds_per_step(plan: PretrainPlan, shards: str | os.PathLike, tokenizer,
                     min_seconds: float = 5.0, max_probes: int = 20) -> float:
    """Wall time of one optimizer step of `plan` on a real batch of the shards (forward,
    backward, AdamW step) on a throw-away model: the median of timed steps (at least 3, until
    `min_seconds` have passed) after two warm-up steps, which pay for allocations and thread
    start-up and would otherwise make the budget buy too few steps."""
    from bertkit.heads import BertForPreTraining
    from bertkit.training.pretrain import make_collate, open_shards

    dataset = open_shards(shards, tokenizer, plan.config)
    collate = make_collate(dataset, plan.objective, tokenizer, seed=0)
    n = min(plan.batch_size, len(dataset))
    batch = collate([dataset[i] for i in range(n)])
    model = BertForPreTraining(plan.config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-9)
    times: list[float] = []
    while len(times) < max_probes and (len(times) < 5 or sum(times[2:]) < min_seconds):
        start = time.perf_counter()
        with _autocast(plan.precision):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    timed = sorted(times[2:])
    return timed[len(timed) // 2] * plan.batch_size / n


def steps_for_budget(seconds: float, step_seconds: float, minimum: int = 2) -> int:
    """Optimizer steps that fit in `seconds`, keeping ~10% for evaluation and saving."""
    return max(minimum, int(0.9 * seconds / max(step_seconds, 1e-6)))


def _has_checkpoint(run_dir: Path) -> bool:
    return any((run_dir / "checkpoints").glob("step-*"))


def pretrain(plan: PretrainPlan, shards: str | os.PathLike, tokenizer_dir: str | os.PathLike,
             out_dir: str | os.PathLike, progress: bool = True) -> Path:
    """Pre-train per `plan` into `out_dir` (resuming a killed run); returns the export
    `out_dir/model` (HF layout + tokenizer). An existing export is reused."""
    from bertkit.training.loop import TrainConfig
    from bertkit.training.pretrain import PretrainConfig, run_pretraining

    out = Path(out_dir)
    model_dir = out / "model"
    if (model_dir / "config.json").is_file():
        log.info("pre-training (%s): reusing %s", plan.objective, model_dir)
        return model_dir
    out.mkdir(parents=True, exist_ok=True)
    resume = _has_checkpoint(out)
    if not resume:  # a killed run without a checkpoint starts over: drop its partial log
        (out / "metrics.jsonl").unlink(missing_ok=True)
    plan.config.save(out / "model_config.json")
    # Held-out evaluations cost ~5 forward passes each; a short run evaluates only at its end.
    every = max(1, plan.steps // plan.eval_points) if plan.steps >= 200 and plan.eval_points else 0
    train = TrainConfig(output_dir=str(out), max_steps=plan.steps, batch_size=plan.batch_size,
                        lr=plan.lr, warmup_ratio=plan.warmup_ratio, precision=plan.precision,
                        seed=plan.seed, log_every=max(1, min(10, plan.steps // 50)),
                        eval_every=every, save_every=every, keep=1,
                        resume=resume, progress=progress)
    cfg = PretrainConfig(data=str(shards), train=train, config_file=str(out / "model_config.json"),
                         tokenizer=str(tokenizer_dir), objective=plan.objective, eval_batches=5)
    run_pretraining(cfg)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the export is what is kept
    return model_dir


def random_init(config: BertConfig, tokenizer, out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """The same architecture, never trained: the "no pre-training" baseline, saved like an
    export (HF layout + tokenizer) so that fine-tuning treats both alike."""
    from bertkit.heads import BertForPreTraining

    out = Path(out_dir)
    if not (out / "config.json").is_file():
        torch.manual_seed(seed)
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        BertForPreTraining(config).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    return out


@dataclass(frozen=True)
class FinetunePlan:
    """The fine-tuning recipe shared by every cell of a comparison."""

    lr: float = 1e-4
    epochs: float = 3.0
    batch_size: int = 32
    max_seq_length: int | None = 128  # None: the task's default
    max_train_examples: int | None = 2000
    max_eval_examples: int | None = None
    precision: str = "fp32"


def main_score(task: str, metrics: dict[str, Any]) -> float:
    """The task's headline metric on a 0-100 scale (GLUE metrics are fractions, SQuAD's not)."""
    from bertkit.tasks import get_task

    name = get_task(task).main_metric
    if name not in metrics:
        raise BertkitError(f"{task}: the run reported no {name!r} (got {sorted(metrics)})")
    value = float(metrics[name])
    return value if task.startswith("squad") else 100.0 * value


def finetune(model_dir: str | os.PathLike, task: str, data_dir: str | os.PathLike,
             out_dir: str | os.PathLike, seed: int, plan: FinetunePlan,
             files: dict[str, str] | None = None, progress: bool = True) -> dict[str, Any]:
    """One fine-tuning run from scratch (a partial earlier attempt is discarded); returns its
    metrics with `score` (the headline metric, 0-100) and `seconds` added."""
    from bertkit.training.finetune import FinetuneConfig, run_one

    out = Path(out_dir)
    shutil.rmtree(out, ignore_errors=True)
    files = files or {}
    cfg = FinetuneConfig(task=task, model_dir=str(model_dir), data_dir=str(data_dir),
                         output_dir=str(out), lr=plan.lr, epochs=plan.epochs, seed=seed,
                         batch_size=plan.batch_size, max_seq_length=plan.max_seq_length,
                         max_train_examples=plan.max_train_examples,
                         max_eval_examples=plan.max_eval_examples,
                         train_file=files.get("train"), dev_file=files.get("dev"),
                         precision=plan.precision, progress=progress)
    t0 = time.perf_counter()
    metrics = run_one(cfg)
    seconds = time.perf_counter() - t0
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # training states are not needed
    return {**metrics, "score": main_score(task, metrics), "seconds": round(seconds, 1)}
