"""torchrun / DDP plumbing.

The CLI calls `setup(os.environ)` once: under `torchrun` (WORLD_SIZE > 1) it initializes the
default process group (NCCL on GPU, gloo on CPU; torchrun's rendezvous handles multi-node) and
pins the local GPU. The loop then only asks `rank()` / `world_size()`, which read the process
group, never the environment.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bertkit.errors import BertkitError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int


def setup(environ: Mapping[str, str], backend: str | None = None,
          device: str = "auto") -> DistInfo:
    """Initialize DDP when launched by torchrun; a no-op for a single process. The backend
    follows the device the run trains on (`--device`): NCCL for CUDA, gloo for the CPU, also on
    a machine that has GPUs."""
    world = int(environ.get("WORLD_SIZE", "1"))
    rank = int(environ.get("RANK", "0"))
    local_rank = int(environ.get("LOCAL_RANK", "0"))
    if world <= 1:
        return DistInfo(0, 0, 1)
    if dist.is_initialized():
        return DistInfo(dist.get_rank(), local_rank, dist.get_world_size())
    if backend is None:
        on_gpu = device == "auto" or device.startswith("cuda")
        backend = "nccl" if on_gpu and torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        if torch.cuda.device_count() <= local_rank:
            raise BertkitError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPUs")
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend)
    log.info("DDP: rank %d of %d (%s)", rank, world, backend)
    return DistInfo(rank, local_rank, world)


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over all ranks (in place; the identity for one process)."""
    if is_distributed():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier() -> None:
    if is_distributed():
        dist.barrier()
