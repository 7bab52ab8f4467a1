"""The loop's mutable run state and its save/restore (every rank's random state, elastic resume).

Kept apart from `loop.py` so the loop itself stays one screen of visible steps; the device and
precision choice is `hardware.py`'s, the SIGINT/SIGTERM guard `signals.py`'s.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.training.config import TrainConfig
from bertkit.training.state import latest_checkpoint, load_training_state, rng_state, set_rng_state
from bertkit.training.stream import DataOrder, StepPlan, stream_seed

log = logging.getLogger(__name__)


@dataclass
class Run:
    """Everything the loop mutates while it trains; the config itself is never mutated."""

    model: nn.Module  # the unwrapped module: what is saved and evaluated
    forward: nn.Module  # what is called: the model, its DDP wrapper and/or its compiled form
    optimizer: torch.optim.Optimizer
    scaler: Any  # torch.amp.GradScaler for fp16, else None
    device: torch.device
    order: DataOrder  # the dataset index at each global stream position
    plan: StepPlan  # how a global batch splits over processes and micro-batches
    config: TrainConfig
    warmup: int
    precision: str = "fp32"  # the resolved precision ("auto" chosen for this machine)
    step: int = 0
    examples_seen: int = 0  # the data position: global stream index of the next example
    tokens_seen: int = 0
    # The run's own cost, summed over every sitting of a resumed run (saved with the state):
    # wall seconds and this process's CPU seconds (all its threads) spent inside `train`.
    # CPU seconds are what a study on a shared machine can compare; wall time is not.
    train_seconds: float = 0.0
    cpu_seconds: float = 0.0
    # the last optimizer step's loss, over every sitting (a run resumed at its last step takes
    # none, and its records still say how it ended)
    last_loss: float | None = None
    clock: tuple[float, float] = (0.0, 0.0)  # (perf_counter, process_time) at the last reading
    tensorboard: Any = None  # a SummaryWriter on rank 0 when asked for and installed

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def rank(self) -> int:
        return self.plan.rank

    @property
    def world(self) -> int:
        return self.plan.world

    @property
    def accum(self) -> int:
        return self.plan.accum


def tick(run: Run) -> None:
    """Add the wall and CPU seconds since the last reading to the run's totals."""
    now = (time.perf_counter(), time.process_time())
    run.train_seconds += now[0] - run.clock[0]
    run.cpu_seconds += now[1] - run.clock[1]
    run.clock = now


def cost(run: Run) -> dict[str, float]:
    """The run's cost up to now (read anew): what each log line and each saved state carry,
    and what `state.saved_cost` reads back."""
    tick(run)
    return {"tokens_seen": run.tokens_seen, "train_seconds": round(run.train_seconds, 3),
            "cpu_seconds": round(run.cpu_seconds, 3)}


def _gather_rng(run: Run) -> list[dict[str, Any]]:
    """Every rank's RNG states (dropout differs per rank), gathered for rank 0 to save."""
    mine = rng_state()
    if run.world == 1:
        return [mine]
    gathered: list[Any] = [None] * run.world
    dist.all_gather_object(gathered, mine)
    return gathered


def run_state(run: Run) -> dict[str, Any]:
    """The training state of `run` (every rank must call it: the RNG gather is collective).
    The data position is one integer and masks are drawn from it: no data-side state."""
    state = {
        "step": run.step,
        "examples_seen": run.examples_seen,
        "tokens_seen": run.tokens_seen,
        "train_seconds": run.train_seconds,
        "cpu_seconds": run.cpu_seconds,
        "last_loss": run.last_loss,
        "world_size": run.world,
        "batch_size": run.config.batch_size,
        "rng": _gather_rng(run),
    }
    if not run.main:
        return state
    state["model"] = run.model.state_dict()
    state["optimizer"] = run.optimizer.state_dict()
    state["scaler"] = run.scaler.state_dict() if run.scaler is not None else None
    return state


def restore_run(run: Run, reseed: Callable[[int], None]) -> None:
    """Load the latest checkpoint of `run.config.output_dir` into the run (every rank reads it)."""
    path = latest_checkpoint(run.config.output_dir)
    if path is None:
        raise BertkitError(f"--resume: no checkpoint under {run.config.output_dir}/checkpoints")
    state = load_training_state(path)
    if state["batch_size"] != run.config.batch_size:
        raise BertkitError(f"{path}: saved with batch size {state['batch_size']}, resumed with "
                           f"{run.config.batch_size}; resume with the same batch size")
    try:
        run.model.load_state_dict(state["model"])
        run.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as err:
        raise BertkitError(f"{path}: does not fit this model/optimizer ({err})") from err
    if run.scaler is not None and state.get("scaler"):
        run.scaler.load_state_dict(state["scaler"])
    run.step, run.examples_seen = state["step"], state["examples_seen"]
    run.tokens_seen = state["tokens_seen"]
    # states saved before the run's cost was recorded have none: counted from here on
    run.train_seconds = float(state.get("train_seconds", 0.0))
    run.cpu_seconds = float(state.get("cpu_seconds", 0.0))
    run.last_loss = state.get("last_loss")  # (None in a state saved before it was kept)
    rngs = state["rng"]
    if len(rngs) == run.world:
        set_rng_state(rngs[run.rank])
    else:
        # The data order and the masks follow the global position and carry over; each rank's
        # dropout stream cannot (there is one per process), so it is re-derived from the seed,
        # the rank and the step: deterministic, but not the uninterrupted run's.
        reseed(stream_seed(run.config.seed, f"dropout/{run.rank}/resumed-at-{run.step}"))
        if run.main:
            log.warning("%s: saved by %d process(es), resumed by %d at the same global batch: "
                        "same examples, same order, same masks; dropout streams re-derived "
                        "from (seed, rank, step)", path, len(rngs), run.world)
    log.info("resumed from %s (step %d)", path, run.step)


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines written after the checkpoint we resume from (a killed run's tail)."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the kill
        if record.get("step", 0) <= step:
            kept.append(line)
    atomic_write_text(path, "".join(f"{line}\n" for line in kept))


def open_tensorboard(directory: Path) -> Any:
    """A TensorBoard SummaryWriter, or None (with a warning) when tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        log.warning("TensorBoard logging asked for, but the tensorboard package is not "
                    "installed (pip install tensorboard); metrics.jsonl only")
        return None
    return SummaryWriter(str(directory))
