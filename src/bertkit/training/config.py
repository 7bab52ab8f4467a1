"""The loop's settings: `TrainConfig` (one frozen dataclass, validated once) and the step
schedule derived from it (`StepSchedule`: when a step logs, evaluates, saves, syncs, stops).

Apart from `loop.py` so that `runtime.py` (the run state the loop mutates) can name the config's
type without importing the loop that imports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bertkit.errors import BertkitError
from bertkit.training.hardware import PRECISIONS
from bertkit.training.optim import OPTIMIZERS, SCHEDULES, resolve_warmup
from bertkit.training.state import Resume, check_resume


@dataclass(frozen=True)
class TrainConfig:
    output_dir: str
    max_steps: int | None = None  # optimizer steps; None until the run kind sets it (fine-tuning
    # derives it from epochs, and then reads a value here as a cap)
    batch_size: int = 32  # global examples per optimizer step
    micro_batch_size: int | None = None  # per forward per process; None = batch_size // world
    lr: float = 1e-4
    warmup_steps: int = 0
    warmup_ratio: float | None = None  # overrides warmup_steps when set
    weight_decay: float = 0.01
    optimizer: str = "adamw"  # "adamw" | "adamw_google" (no bias correction) | "lamb"
    schedule: str = "linear"  # "linear" (warmup to the peak, then decay) | "google" (optim.lr_at)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0  # <= 0: no clipping (the norm is still logged)
    precision: str = "auto"  # "auto" (bf16 where native, else fp32; hardware.choose_precision)
    # | "fp32" | "bf16" | "fp16"
    seed: int = 0
    log_every: int = 10
    eval_every: int = 0  # 0 = only at the end
    save_every: int = 0  # 0 = only at the end
    keep: int = 2  # checkpoints kept (0 = all)
    device: str = "auto"  # "auto" = cuda if available else cpu
    compile: bool = False
    resume: Resume = False  # True | False | "auto" (state.resolve_resume)
    progress: bool = True
    tensorboard: bool = False  # also write TensorBoard scalars (needs the tensorboard package)
    loader_workers: int | None = None  # DataLoader worker processes; None: stream.default_workers
    # Stop (saving a state, as at the end) at the first sync point after the run's CPU seconds,
    # summed over its sittings, reach this; the lr schedule still runs to max_steps, so a
    # resumed run continues it. For budgets on shared machines, where wall time means little.
    stop_at_cpu_seconds: float | None = None
    # Stop the same way at this optimizer step (the schedule still runs to max_steps): a point
    # taken at a recorded step, as a study reproducing another machine's curve does.
    stop_at_step: int | None = None
    # A decay branch (optim.lr_at): from step S the rate falls linearly from R to 0 at
    # max_steps. Set on a run resumed from another's state at step S to anneal it fully.
    decay_from: tuple[int, float] | None = None

    def __post_init__(self) -> None:
        if self.max_steps is not None and self.max_steps < 1:
            raise BertkitError(f"--max-steps must be >= 1, got {self.max_steps}")
        if self.batch_size < 1:
            raise BertkitError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise BertkitError(f"--micro-batch-size must be >= 1, got {self.micro_batch_size}")
        if self.precision not in PRECISIONS:
            raise BertkitError(f"--precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.optimizer not in OPTIMIZERS:
            raise BertkitError(f"--optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.schedule not in SCHEDULES:
            raise BertkitError(f"--schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise BertkitError(f"--lr must be a finite number > 0, got {self.lr}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise BertkitError(f"--weight-decay must be a finite number >= 0, got {self.weight_decay}")
        if math.isnan(self.max_grad_norm):
            raise BertkitError("--max-grad-norm must be a number (<= 0: no clipping)")
        if self.loader_workers is not None and self.loader_workers < 0:
            raise BertkitError(f"--loader-workers must be >= 0, got {self.loader_workers}")
        if self.log_every < 1:
            raise BertkitError(f"--log-every must be >= 1, got {self.log_every}")
        for name in ("eval_every", "save_every", "keep"):  # 0 has a meaning for each
            if getattr(self, name) < 0:
                raise BertkitError(f"--{name.replace('_', '-')} must be >= 0, "
                                   f"got {getattr(self, name)}")
        if self.stop_at_cpu_seconds is not None and not self.stop_at_cpu_seconds > 0:
            raise BertkitError(f"stop_at_cpu_seconds must be > 0, got {self.stop_at_cpu_seconds}")
        if self.stop_at_step is not None and self.stop_at_step < 1:
            raise BertkitError(f"stop_at_step must be >= 1, got {self.stop_at_step}")
        if self.decay_from is not None:
            start, rate = self.decay_from
            if not (0 <= start < (self.max_steps or math.inf) and math.isfinite(rate) and rate > 0):
                raise BertkitError(f"decay_from must be (step before max_steps, rate > 0), got "
                                   f"{self.decay_from}")
        resolve_warmup(self.max_steps or 0, self.warmup_steps, self.warmup_ratio)
        check_resume(self.resume)

    @property
    def resolved_warmup(self) -> int:
        return resolve_warmup(self.max_steps or 0, self.warmup_steps, self.warmup_ratio)


@dataclass(frozen=True)
class StepSchedule:
    """What happens after optimizer step `step` (counted from 1), in one place: the loop asks
    it at every step, and again after the last one. An `*_every` of 0 means "only at the end"
    (the loop's final evaluation and save cover those)."""

    max_steps: int
    log_every: int
    eval_every: int = 0
    save_every: int = 0
    stop_at_cpu_seconds: float | None = None
    stop_at_step: int | None = None

    @classmethod
    def from_config(cls, config: TrainConfig) -> StepSchedule:
        if config.max_steps is None:
            raise BertkitError("max_steps is not set: the run kind must set it before training")
        return cls(config.max_steps, config.log_every, config.eval_every, config.save_every,
                   config.stop_at_cpu_seconds, config.stop_at_step)

    def last(self, step: int) -> bool:
        return step == self.max_steps

    def log(self, step: int) -> bool:
        """A metrics line: every `log_every` steps and at the last step."""
        return step % self.log_every == 0 or self.last(step)

    def eval(self, step: int) -> bool:
        """A scheduled evaluation (the end's own evaluation is the loop's, when this is False)."""
        return bool(self.eval_every and step % self.eval_every == 0)

    def save(self, step: int) -> bool:
        """A scheduled training state (the end's own save is the loop's, when this is False)."""
        return bool(self.save_every and step % self.save_every == 0)

    def sync(self, step: int, stop_signalled: bool = False) -> bool:
        """Whether the step ends at a sync point (the pending statistics come to the host): a
        log line, an evaluation, a save, the last step, or a stop signal the caller counts."""
        return (self.log(step) or self.eval(step) or self.save(step) or self.stop_step(step)
                or stop_signalled)

    def budget_spent(self, cpu_seconds: float) -> bool:
        """The run's CPU seconds (over all its sittings) reached `stop_at_cpu_seconds`."""
        return self.stop_at_cpu_seconds is not None and cpu_seconds >= self.stop_at_cpu_seconds

    def stop_step(self, step: int) -> bool:
        """The run reached `stop_at_step`."""
        return self.stop_at_step is not None and step >= self.stop_at_step
