"""The loop's mutable run state and its save/restore, plus the SIGINT/SIGTERM guard.

Kept apart from `loop.py` so the loop itself stays one screen of visible steps.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.training.state import latest_checkpoint, load_training_state, rng_state, set_rng_state

log = logging.getLogger(__name__)


@dataclass
class Run:
    """Everything the loop mutates while it trains; the config itself is never mutated."""

    model: nn.Module  # the unwrapped module: what is saved and evaluated
    forward: nn.Module  # what is called: the model, its DDP wrapper and/or its compiled form
    optimizer: torch.optim.Optimizer
    scaler: Any  # torch.amp.GradScaler for fp16, else None
    device: torch.device
    n_examples: int
    micro: int
    accum: int
    world: int
    rank: int
    config: Any  # TrainConfig
    warmup: int
    step: int = 0
    examples_seen: int = 0  # the data position: global stream index of the next example
    tokens_seen: int = 0
    tensorboard: Any = None  # a SummaryWriter on rank 0 when asked for and installed
    _perms: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def index_at(self, position: int) -> int:
        """Dataset index at a global stream position: epoch e is a permutation seeded (seed, e)."""
        epoch, offset = divmod(position, self.n_examples)
        if epoch not in self._perms:
            gen = torch.Generator().manual_seed(stream_seed(self.config.seed, f"order/{epoch}"))
            self._perms = {epoch: torch.randperm(self.n_examples, generator=gen)}
        return int(self._perms[epoch][offset])


def _gather_rng(run: Run) -> list[dict[str, Any]]:
    """Every rank's RNG states (dropout differs per rank), gathered for rank 0 to save."""
    mine = rng_state()
    if run.world == 1:
        return [mine]
    gathered: list[Any] = [None] * run.world
    dist.all_gather_object(gathered, mine)
    return gathered


def run_state(run: Run, collate: Any) -> dict[str, Any]:
    """The training state of `run` (every rank must call it: the RNG gather is collective)."""
    state = {
        "step": run.step,
        "examples_seen": run.examples_seen,
        "tokens_seen": run.tokens_seen,
        "world_size": run.world,
        "batch_size": run.config.batch_size,
        "rng": _gather_rng(run),
    }
    if not run.main:
        return state
    state["model"] = run.model.state_dict()
    state["optimizer"] = run.optimizer.state_dict()
    state["scaler"] = run.scaler.state_dict() if run.scaler is not None else None
    if hasattr(collate, "state_dict"):
        state["collate"] = collate.state_dict()
    return state


def restore_run(run: Run, collate: Any) -> None:
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
    rngs = state["rng"]
    if len(rngs) != run.world:
        log.warning("%s: saved by %d process(es), resumed by %d; RNG streams restart from rank "
                    "0's state, so dropout differs from an uninterrupted run", path, len(rngs),
                    run.world)
    set_rng_state(rngs[run.rank] if run.rank < len(rngs) else rngs[0])
    if "collate" in state and hasattr(collate, "load_state_dict"):
        collate.load_state_dict(state["collate"])
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


class StopFlag:
    """Set by the first SIGINT/SIGTERM; the loop saves at the end of the step and stops.
    A second signal interrupts at once."""

    def __init__(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def handler(self, signum: int, frame: Any) -> None:
        if self._set:
            raise KeyboardInterrupt
        self._set = True
        log.warning("received %s: saving a checkpoint at the end of this step",
                    signal.Signals(signum).name)


@contextlib.contextmanager
def signal_guard() -> Iterator[StopFlag]:
    """Install the StopFlag handler for SIGINT and SIGTERM (main thread only), then restore."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {sig: signal.signal(sig, flag.handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def resolve_device(name: str | torch.device) -> torch.device:
    """"auto" = the current CUDA device when there is one, else the CPU; a device that this
    machine does not have is a clear error, not a failure deep inside."""
    if str(name) == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise BertkitError(f"--device {name!r}: not a device name ({err})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise BertkitError(f"--device {name}: CUDA is not available on this machine "
                               "(use --device cpu or auto)")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise BertkitError(f"--device {name}: MPS is not available on this machine")
    return device


def stream_seed(seed: int, stream: str) -> int:
    """The seed of one named random stream of a run ("order/0", "dropout/0", "head", ...):
    derived from the run's seed, independent of every other stream. The loop's data order
    and dropout, and fine-tuning's new head, each draw from their own (Mosbach et al. 2021 and
    Dodge et al. 2020 show how much fine-tuning depends on these; sharing one stream ties the
    first dropout masks to the head's initial weights)."""
    digest = hashlib.sha256(f"{seed}/{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % 2**63
