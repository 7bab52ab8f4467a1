"""The one training loop, shared by pre-training and fine-tuning.

A task contributes a model (whose forward returns an object with `.loss`), a dataset, a collate
function and optionally an evaluation function; `train` does the rest, visibly:

    claim the run folder (resume / start / refuse, `state.resolve_resume`; its lock)
    → per step: lr = lr_at(step) → for each micro-batch: autocast forward, loss / accumulation,
      backward → unscale, clip → optimizer step, zero-grad; the step's statistics stay on the
      device (no host sync inside a step)
    → at a sync point (a log line, an evaluation, a save, the last step: `config.StepSchedule`;
      or a stop signal): one all-reduce brings the pending steps' statistics to the host; a
      non-finite loss stops the run there (so up to `log_every` steps after it happened, the
      last good checkpoint kept)
    → log / eval / save; stop early when the run's CPU seconds reach `stop_at_cpu_seconds`,
      or at `stop_at_step`.

The run's cost (wall and CPU seconds inside `train`, tokens) is summed over every sitting of a
resumed run, saved with each state and returned in `TrainResult`.

Data order (`training.stream`): one stream of epochs, each a permutation seeded with
(seed, epoch). Step s consumes stream positions [s·B, (s+1)·B) for the global batch B; under DDP
rank r takes its own contiguous slice of that global batch, so the effective batch is the same
for any number of processes, and the data position is one integer (`examples_seen`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text, lock_output_dir, progress_bar, writing
from bertkit.training import distributed as dist_utils
from bertkit.training.config import StepSchedule, TrainConfig  # TrainConfig: also imported from here
from bertkit.training.hardware import resolve_device, resolve_precision
from bertkit.training.optim import build_optimizer, lr_at
from bertkit.training.runtime import (
    Run,
    cost,
    open_tensorboard,
    restore_run,
    run_state,
    tick,
    truncate_metrics,
)
from bertkit.training.signals import StopFlag, signal_guard
from bertkit.training.state import (
    checkpoint_path,
    latest_checkpoint,
    resolve_resume,
    save_training_state,
)
from bertkit.training.stats import Pending, StepStats, Window
from bertkit.training.stream import (
    DataOrder,
    StepPlan,
    batches,
    default_workers,
    stream_seed,
    take,
)

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


@dataclass
class TrainResult:
    step: int
    losses: list[float]  # one per optimizer step taken in this call (all ranks averaged)
    metrics: dict[str, float]  # the last logged training metrics + the final eval_* metrics
    output_dir: Path
    checkpoint: Path | None = None  # the final training state
    tokens_seen: int = 0  # real (unpadded) tokens trained on, over every sitting of the run
    train_seconds: float = 0.0  # wall seconds inside `train`, over every sitting of the run
    cpu_seconds: float = 0.0  # this process's CPU seconds inside `train`, likewise
    final_loss: float | None = None  # the last step's loss, likewise (None: no step yet)


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM arrived; a checkpoint was saved first (a KeyboardInterrupt, so callers and
    the CLI treat it as an interruption, not a crash)."""


def train(model: nn.Module, dataset: torch.utils.data.Dataset,
          collate: Callable[[list[Any]], dict[str, torch.Tensor]], config: TrainConfig,
          evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
          step_metrics: Callable[[dict[str, torch.Tensor], Any], dict[str, float]] | None = None,
          lengths: Any = None) -> TrainResult:
    """Train `model` to `config.max_steps` optimizer steps (or until its CPU-seconds budget,
    `config.stop_at_cpu_seconds`, is spent); see the module docstring.
    `lengths` (one per example): batch examples of similar length together
    (`stream.length_grouped_order`; the order stays a function of (seed, epoch))."""
    schedule = StepSchedule.from_config(config)  # refuses a config whose max_steps is unset
    run = _prepare(model, dataset, config, lengths)
    workers = (default_workers(run.device) if config.loader_workers is None
               else config.loader_workers)
    micro_batches = batches(dataset, collate, run.order, run.plan, run.examples_seen,
                            config.max_steps - run.step, workers,
                            pin_memory=run.device.type == "cuda")
    losses: list[float] = []
    pending, window = Pending(), Window()
    bar = progress_bar(total=config.max_steps, initial=run.step, desc="train", unit="step",
               disable=not (config.progress and run.main), dynamic_ncols=True)
    last_metrics: dict[str, float] = {}
    run.clock = (time.perf_counter(), time.process_time())
    with signal_guard() as stop:
        # (a run resumed at or past its stop step trains none: the end saves it as it is)
        if config.stop_at_step is not None and run.step > config.stop_at_step:
            log.warning("%s: resumed at step %d, past the stop step %d: nothing trained, the "
                        "run stays at step %d", config.output_dir, run.step, config.stop_at_step,
                        run.step)
        while run.step < config.max_steps and not schedule.stop_step(run.step):
            pending.add(_train_step(run, take(micro_batches, run.accum), step_metrics))
            bar.update(1)
            # One process stops at its own signal; several agree on a stop at the next sync
            # point the schedule sets (the flag travels in the sync's all-reduce), at most
            # `log_every` steps later.
            if not schedule.sync(run.step, stop_signalled=run.world == 1 and stop.is_set()):
                continue
            stopping = _sync(run, pending, window, losses, stop)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", lr=f"{window.sums['lr']:.2e}",
                            tok_s=f"{window.tokens_per_s():.0f}", refresh=False)
            record = _maybe_log_and_eval(run, window, evaluate, schedule)
            last_metrics.update(record)
            if stopping:
                path = _save(run, config, last_metrics)
                bar.close()
                raise TrainingInterrupted(f"interrupted at step {run.step}; saved {path}")
            if schedule.save(run.step):
                _save(run, config, last_metrics)
            tick(run)  # the budget reads the CPU seconds up to now
            if schedule.budget_spent(run.cpu_seconds):
                log.info("CPU budget of %.0f s spent at step %d; stopping",
                         config.stop_at_cpu_seconds, run.step)
                break
            if schedule.stop_step(run.step):
                log.info("stopping at step %d, as asked", run.step)
                break
    bar.close()
    return _finish(run, config, schedule, evaluate, losses, last_metrics)


def _finish(run: Run, config: TrainConfig, schedule: StepSchedule,
            evaluate: Callable[[nn.Module], dict[str, float]] | None, losses: list[float],
            last_metrics: dict[str, float]) -> TrainResult:
    """The end of a run: it evaluates and saves, unless the schedule just did at this step."""
    if evaluate is not None and not schedule.eval(run.step):
        last_metrics.update(_log(run, {"step": run.step, **_evaluate(run, evaluate)}))
    path = checkpoint_path(config.output_dir, run.step)
    if not schedule.save(run.step):
        path = _save(run, config, last_metrics)
    if run.tensorboard is not None:
        run.tensorboard.close()
    tick(run)
    return TrainResult(run.step, losses, last_metrics, Path(config.output_dir), path,
                       tokens_seen=run.tokens_seen, train_seconds=run.train_seconds,
                       cpu_seconds=run.cpu_seconds, final_loss=run.last_loss)


def _prepare(model: nn.Module, dataset, config: TrainConfig, lengths: Any = None) -> Run:
    """Device, batch plan, seeds, optimizer, scaler, wrappers, and the resumed state if any."""
    try:
        n = len(dataset)
    except TypeError as err:
        raise BertkitError("the training dataset must have a length (a map-style Dataset)") from err
    if n == 0:
        raise BertkitError("the training dataset is empty")
    world, rank = dist_utils.world_size(), dist_utils.rank()
    if world > 1 and config.stop_at_cpu_seconds is not None:
        # each process counts its own CPU seconds: they would not agree on the step to stop at
        raise BertkitError("a CPU-seconds budget is for one process; under torchrun use "
                           "--max-steps")
    device = resolve_device(config.device)
    micro, accum = batch_plan(config.batch_size, config.micro_batch_size, world)
    resume = _check_output_dir(config, rank == 0)
    _seed_everything(stream_seed(config.seed, f"dropout/{rank}"))
    model.to(device)
    model.train()
    optimizer = build_optimizer(model, config.optimizer, config.lr, config.weight_decay,
                                tuple(config.adam_betas), config.adam_eps, device)
    precision = resolve_precision(config.precision, device)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    forward = model
    if world > 1:
        ids = [device.index] if device.type == "cuda" else None
        forward = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if config.compile:
        forward = torch.compile(forward)
    if lengths is not None and len(lengths) != n:
        raise BertkitError(f"lengths: {len(lengths)} values for {n} examples")
    order = DataOrder(config.seed, n, config.batch_size,
                      None if lengths is None else torch.as_tensor(lengths))
    run = Run(model=model, forward=forward, optimizer=optimizer, scaler=scaler, device=device,
              order=order, plan=StepPlan(config.batch_size, world, rank, micro, accum),
              config=config, warmup=config.resolved_warmup, precision=precision)
    if config.tensorboard and run.main:
        run.tensorboard = open_tensorboard(Path(config.output_dir) / "tensorboard")
    if resume:
        restore_run(run, reseed=_seed_everything)
        if run.main:
            truncate_metrics(Path(config.output_dir) / METRICS_FILE, run.step)
    elif run.main:
        atomic_write_text(Path(config.output_dir) / "train_config.json",
                          json.dumps(asdict(config), indent=2) + "\n")
        atomic_write_text(Path(config.output_dir) / METRICS_FILE, "")
    dist_utils.barrier()
    log.info("training: %d examples, global batch %d = %d process(es) x %d micro x %d "
             "accumulation, %s, %s", n, config.batch_size, world, micro, accum, device,
             precision)
    return run


def batch_plan(batch_size: int, micro_batch_size: int | None, world: int) -> tuple[int, int]:
    """(micro-batch size, accumulation steps) so that world × micro × accum = batch_size."""
    if batch_size % world:
        raise BertkitError(f"batch size {batch_size} is not divisible by {world} processes")
    per_rank = batch_size // world
    micro = micro_batch_size or per_rank
    if micro > per_rank or per_rank % micro:
        raise BertkitError(f"micro-batch size {micro} must divide the per-process batch "
                           f"{per_rank} (= batch size {batch_size} / {world} processes)")
    return micro, per_rank // micro


def _check_output_dir(config: TrainConfig, main: bool) -> bool:
    """Whether the run continues from a checkpoint (`config.resume` resolved once). Rank 0
    holds the folder's lock until its process ends (a second writer is refused)."""
    resume = resolve_resume(config.output_dir, config.resume)
    if main:
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        lock_output_dir(config.output_dir)
    return resume


def _seed_everything(seed: int) -> None:
    """The global streams (dropout, and anything else random inside the model)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Tensors, and objects that move like them (a host-built `VarlenLayout`), onto the device."""
    return {k: v.to(device, non_blocking=True) if callable(getattr(v, "to", None)) else v
            for k, v in batch.items()}


def _count_tokens(batch: dict[str, Any]) -> Any:
    """Real (unpadded) tokens of a batch: a device tensor, summed without a host sync."""
    mask = batch.get("attention_mask")
    if torch.is_tensor(mask):
        return mask.sum()
    ids = batch.get("input_ids")
    return ids.numel() if torch.is_tensor(ids) else 0


def _train_step(run: Run, micro_batches: list[dict[str, Any]], step_metrics) -> StepStats:
    """One optimizer step over this rank's `accum` micro-batches (collated by the loader). Its
    statistics stay on the device (`stats.Pending`): no host sync inside a step."""
    cfg = run.config
    lr = lr_at(run.step, peak_lr=cfg.lr, warmup_steps=run.warmup, max_steps=cfg.max_steps,
               schedule=cfg.schedule, decay_from=cfg.decay_from)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    sums: dict[str, Any] = {"loss": 0.0}
    tokens = 0
    for k, batch in enumerate(micro_batches):
        batch = _to_device(batch, run.device)
        tokens += _count_tokens(batch)
        out = _forward_backward(run, batch, last=k == run.accum - 1)
        sums["loss"] = sums["loss"] + out.loss.detach().float()
        if step_metrics is not None:
            for name, value in step_metrics(batch, out).items():
                value = value.detach().float() if torch.is_tensor(value) else float(value)
                sums[name] = sums.get(name, 0.0) + value
    grad_norm = _clip(run)
    _optimizer_step(run)
    run.step += 1
    run.examples_seen += cfg.batch_size
    return StepStats(sums, grad_norm, tokens, lr)


def _sync(run: Run, pending: Pending, window: Window, losses: list[float],
          stop: StopFlag) -> bool:
    """Bring the pending steps to the host (one all-reduce, one read), stop on a non-finite loss,
    and say whether any process asked to stop."""
    first = run.step - len(pending.steps) + 1
    synced, stopping = pending.sync(run.device, run.accum, run.world, stop.is_set())
    for i, stats in enumerate(synced):
        if not math.isfinite(stats["loss"]):
            last = latest_checkpoint(run.config.output_dir)
            raise BertkitError(f"non-finite loss ({stats['loss']}) at step {first + i}; stopping. "
                               f"Last good checkpoint: {last or 'none'} (try a lower --lr, "
                               "--precision fp32/bf16, or more warmup)")
        losses.append(stats["loss"])
        run.last_loss = stats["loss"]
        run.tokens_seen += stats["tokens"]
        window.add(stats)
    return stopping


def _forward_backward(run: Run, batch: dict[str, Any], last: bool) -> Any:
    """Autocast forward, loss / accumulation, backward; DDP syncs only on the last micro-batch."""
    sync = run.world == 1 or last or not hasattr(run.forward, "no_sync")
    context = run.forward.no_sync() if not sync else contextlib.nullcontext()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(run.precision)
    with context:
        with torch.autocast(run.device.type, dtype=dtype, enabled=dtype is not None):
            out = run.forward(**batch)
        if getattr(out, "loss", None) is None:
            raise BertkitError("the model returned no loss: the batch must carry the labels "
                               f"(got keys {sorted(batch)})")
        loss = out.loss.float() / run.accum
        (run.scaler.scale(loss) if run.scaler is not None else loss).backward()
    return out


def _clip(run: Run) -> torch.Tensor:
    """Unscale (fp16), clip, and return the norm before clipping, as a device tensor."""
    if run.scaler is not None:
        run.scaler.unscale_(run.optimizer)
    max_norm = run.config.max_grad_norm if run.config.max_grad_norm > 0 else float("inf")
    params = [p for p in run.model.parameters() if p.grad is not None]
    return torch.nn.utils.clip_grad_norm_(params, max_norm)


def _optimizer_step(run: Run) -> None:
    if run.scaler is not None:
        run.scaler.step(run.optimizer)
        run.scaler.update()
    else:
        run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)


def _maybe_log_and_eval(run: Run, window: Window, evaluate, schedule: StepSchedule) -> dict:
    """The metrics line and the evaluation the schedule sets at this step ({} when neither)."""
    record: dict[str, Any] = {}
    if schedule.log(run.step):
        record.update(window.flush())
    if evaluate is not None and schedule.eval(run.step):
        record.update(_evaluate(run, evaluate))
    if not record:
        return {}
    return _log(run, {"step": run.step, **record, **cost(run)})


def _log(run: Run, record: dict[str, Any]) -> dict[str, Any]:
    """Append one JSON line to metrics.jsonl (rank 0) and return the record."""
    if run.main:
        path = Path(run.config.output_dir) / METRICS_FILE
        # a line cut by a full disk is dropped on resume (runtime.truncate_metrics)
        with writing(path), open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if not run.config.progress:
            log.info(" ".join(f"{k}={_fmt(v)}" for k, v in record.items()))
        if run.tensorboard is not None:
            for key, value in record.items():
                if key != "step":
                    run.tensorboard.add_scalar(key, value, record["step"])
    return record


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _evaluate(run: Run, evaluate) -> dict[str, float]:
    """Rank 0 evaluates the unwrapped model in eval mode; keys get an `eval_` prefix."""
    if not run.main:
        return {}
    run.model.eval()
    try:
        with torch.no_grad():
            result = evaluate(run.model)
    finally:
        run.model.train()
    return {(k if k.startswith("eval_") else f"eval_{k}"): float(v) for k, v in result.items()}


def _save(run: Run, config: TrainConfig, summary: dict[str, Any]) -> Path:
    spent = cost(run)  # before the state, which carries the same totals
    state = run_state(run)  # collective under DDP: every rank takes part
    path = checkpoint_path(config.output_dir, run.step)
    if run.main:
        summary = {**{k: v for k, v in summary.items() if isinstance(v, (int, float))}, **spent}
        path = save_training_state(config.output_dir, run.step, state, config.keep,
                                   summary=summary)
        log.info("saved training state %s", path)
    dist_utils.barrier()
    return path
