"""The loop's mutable run state and its save/restore, plus the SIGINT/SIGTERM guard.

Kept apart from `loop.py` so the loop itself stays one screen of visible steps.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.switches import AUTO_PRECISION, forced_auto_precision
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
    config: Any  # TrainConfig
    warmup: int
    precision: str = "fp32"  # the resolved precision ("auto" chosen for this machine)
    step: int = 0
    examples_seen: int = 0  # the data position: global stream index of the next example
    tokens_seen: int = 0
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


def choose_device(cuda_available: bool) -> tuple[str, str]:
    """(device, reason) for `--device auto`: the GPU when there is one."""
    if cuda_available:
        return "cuda", "a CUDA device is available"
    return "cpu", "no CUDA device"


def resolve_device(name: str | torch.device) -> torch.device:
    """"auto" = the current CUDA device when there is one, else the CPU; a device that this
    machine does not have is a clear error, not a failure deep inside."""
    if str(name) == "auto":
        name, reason = choose_device(torch.cuda.is_available())
        log.info("--device auto: %s (%s)", name, reason)
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


# --precision auto. bf16 pays only where the hardware multiplies bf16 fast; emulated bf16
# (AVX2-only CPUs) is several times *slower* than fp32. Measured with benchmarks/bench_precision.py
# (docs/benchmarks.md, "Precision"): bf16 GEMMs ran 1.8x fp32 on an AMD EPYC with AVX512-BF16,
# but 0.6x on an Intel Xeon with AVX512-BF16 and no AMX (oneDNN's Intel bf16 path wants AMX).


@dataclass(frozen=True)
class CpuInfo:
    vendor: str  # "GenuineIntel", "AuthenticAMD", ... ("" when unknown)
    flags: frozenset[str]  # /proc/cpuinfo's flags: "avx2", "avx512_bf16", "amx_bf16", ...


def cpu_info(cpuinfo: str | None = None) -> CpuInfo:
    """The CPU's vendor and feature flags (/proc/cpuinfo, or the text `cpuinfo` when given);
    empty where there is no such file (then `choose_precision` stays with fp32)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags", fields.get("Features", ""))
    return CpuInfo(fields.get("vendor_id", ""), frozenset(flags.split()))


def cpu_bf16_native(cpu: CpuInfo) -> tuple[bool, str]:
    """Whether bf16 matmuls beat fp32 on this CPU, and why (see the measurements above)."""
    if "amx_bf16" in cpu.flags:
        return True, "CPU has AMX (amx_bf16)"
    if "avx512_bf16" in cpu.flags and cpu.vendor == "AuthenticAMD":
        return True, "AMD CPU with AVX512-BF16 (bf16 GEMMs measured 1.8x fp32)"
    if "avx512_bf16" in cpu.flags:
        return False, (f"{cpu.vendor or 'CPU'} with AVX512-BF16 but no AMX (bf16 measured "
                       "0.6-0.7x fp32 on such a Xeon)")
    return False, "CPU has no native bf16 (no amx_bf16 or avx512_bf16: bf16 would be emulated)"


def choose_precision(device: torch.device | str, cpu: CpuInfo | None = None,
                     cuda_bf16: bool = False) -> tuple[str, str]:
    """(precision, reason) for `--precision auto`: a pure function of the device, the CPU and
    whether the CUDA device computes bf16. bf16 where it is native and fast, else fp32."""
    device = torch.device(device)
    if device.type == "cuda":
        if cuda_bf16:
            return "bf16", "CUDA device with native bf16"
        return "fp32", "CUDA device without bf16 (fp16 needs loss scaling: ask for it explicitly)"
    if device.type == "cpu":
        native, reason = cpu_bf16_native(cpu or CpuInfo("", frozenset()))
        return ("bf16" if native else "fp32"), reason
    return "fp32", f"{device.type} device: fp32 is the safe default"


def resolve_precision(requested: str, device: torch.device) -> str:
    """`requested`, or for "auto" the choice of `choose_precision` on this machine (logged)."""
    if requested != "auto":
        return requested
    forced = forced_auto_precision() if device.type == "cpu" else None
    if forced is not None:
        log.info("--precision auto: %s on %s (forced by %s)", forced, device, AUTO_PRECISION)
        return forced
    cpu = cpu_info() if device.type == "cpu" else None
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    precision, reason = choose_precision(device, cpu, cuda_bf16)
    log.info("--precision auto: %s on %s (%s)", precision, device, reason)
    return precision
