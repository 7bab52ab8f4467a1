"""torchrun / DDP plumbing.

The CLI calls `setup(os.environ)` once: under `torchrun` (WORLD_SIZE > 1) it joins the default
process group (NCCL on GPU, gloo on CPU; torchrun's rendezvous handles multi-node) and pins the
local GPU. The loop then only asks `rank()` / `world_size()`, which read the process group, never
the environment.

Two things torch leaves to the script, done here:
- a bounded join: all processes meet within `join_timeout` seconds or every one of them ends with
  one line (torch would wait 30 minutes, or forever on a restart gone wrong);
- stopping together (`stop_together`): when one process stops with a BertkitError, the others
  are blocked in a collective with it. It leaves its message in the launcher's key-value store
  and ends, which closes its connections: the others fail at once, and rank 0 alone prints the
  one line.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from bertkit.errors import BertkitError

log = logging.getLogger(__name__)

JOIN_TIMEOUT = 120.0  # seconds for every process to join the group (launchers start them at once)
_ERROR_KEY = "bertkit/error"  # the first stopping process's message, "RANK\nMESSAGE"
_ERRORS_KEY = "bertkit/errors"  # how many processes announced one (the first one writes)
_store: dist.Store | None = None  # the store the group was joined through (for stop_together)


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int


def setup(environ: Mapping[str, str], backend: str | None = None,
          device: str = "auto", join_timeout: float = JOIN_TIMEOUT) -> DistInfo:
    """Initialize DDP when launched by torchrun; a no-op for a single process. The backend
    follows the device the run trains on (`--device`): NCCL for CUDA, gloo for the CPU, also on
    a machine that has GPUs. Joining takes at most `join_timeout` seconds (then every process
    exits with status 1, rank 0 printing one line: a process group cannot be left half-made)."""
    world = int(environ.get("WORLD_SIZE", "1"))
    rank = int(environ.get("RANK", "0"))
    local_rank = int(environ.get("LOCAL_RANK", "0"))
    if world <= 1:
        return DistInfo(0, 0, 1)
    if dist.is_initialized():
        return DistInfo(dist.get_rank(), local_rank, dist.get_world_size())
    if join_timeout <= 0:
        raise BertkitError(f"--join-timeout must be > 0 seconds, got {join_timeout}")
    if backend is None:
        on_gpu = device == "auto" or device.startswith("cuda")
        backend = "nccl" if on_gpu and torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        if torch.cuda.device_count() <= local_rank:
            raise BertkitError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPUs")
        torch.cuda.set_device(local_rank)
    _join(environ, backend, rank, world, join_timeout)
    log.info("DDP: rank %d of %d (%s)", rank, world, backend)
    return DistInfo(rank, local_rank, world)


def _join(environ: Mapping[str, str], backend: str, rank: int, world: int,
          timeout: float) -> None:
    """Join the group and meet at a first barrier, or end this process within `timeout`."""
    global _store
    where = f"{environ.get('MASTER_ADDR', '?')}:{environ.get('MASTER_PORT', '?')}"
    advice = (f"rank {rank} of {world}, {backend}, store {where}; relaunch the job. Under "
              "torchrun with several nodes and --max-restarts, launch with "
              "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; on a slow start raise --join-timeout "
              "(docs/reports/scaling.md)")
    done = threading.Event()

    def expire() -> None:
        # init_process_group and a barrier block in C++: only leaving the process ends the wait
        if not done.wait(timeout):
            if rank == 0:
                sys.stderr.write(f"bertkit: error: the {world} processes did not all join "
                                 f"within {timeout:g} s ({advice})\n")
                sys.stderr.flush()
            os._exit(1)

    threading.Thread(target=expire, name="bertkit-join-timeout", daemon=True).start()
    try:
        _store = _make_store(environ, rank, world, timeout)
        dist.init_process_group(backend=backend, store=_store, rank=rank, world_size=world)
        dist.barrier()
    except RuntimeError as err:  # torch's DistError and gloo's connect errors both
        raise BertkitError(f"could not join the process group ({_cause(err)}; {advice})") from err
    finally:
        done.set()


def _make_store(environ: Mapping[str, str], rank: int, world: int, timeout: float) -> dist.Store:
    """The store `init_method="env://"` would make, under a prefix of its own per torchrun
    restart where one launcher restarts all processes. torchrun keeps one store for all restarts
    of a job (TORCHELASTIC_USE_AGENT_STORE): restarted gloo workers then read the addresses the
    killed ones left there and fail ("Connection refused") or hang; a new prefix per restart
    leaves those keys unread. With several nodes the restart counts of the launchers may differ
    (a node whose workers did not fail restarts without counting), so no prefix is derived
    there: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 gives each restart a new store instead."""
    agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    try:
        store: dist.Store = dist.TCPStore(
            environ["MASTER_ADDR"], int(environ["MASTER_PORT"]), world,
            is_master=rank == 0 and not agent_store,
            # longer than the join's own bound, so that a slow join ends in its one line
            timeout=timedelta(seconds=timeout + 60),
            multi_tenant=not agent_store)
    except KeyError as err:
        raise BertkitError(f"WORLD_SIZE={world} but {err} is not set: launch with torchrun "
                           "(or set MASTER_ADDR and MASTER_PORT)") from None
    one_launcher = environ.get("GROUP_WORLD_SIZE", "1") == "1"
    if agent_store and one_launcher:
        restart = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.PrefixStore(f"bertkit/restart-{restart}", store)
    return store


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


def stop_together(err: BaseException, wait: float = 5.0) -> str | None:
    """This process of a run of several stops on `err`: the one line it prints, or None.

    - its own BertkitError: the message is left in the launcher's store and the process ends;
      its connections close with it, so the others, blocked in a collective with it, fail at
      once. Rank 0 prints its own message; another rank prints only when the store is out of
      reach (rank 0 could not learn it);
    - a failed collective (another process stopped, or was killed), or the SIGTERM torchrun
      sends when one of its processes ended (`signals.terminate_as_interrupt`): rank 0 prints
      the message left in the store (waiting up to `wait` seconds for it), or says that another
      process stopped; the other ranks print nothing.

    Anything else (one process; a RuntimeError that is no failed collective, i.e. a bug; an
    interrupt with no message left, i.e. Ctrl-C) is raised again."""
    if not is_distributed():
        raise err
    me = rank()
    if isinstance(err, BertkitError):
        told = _announce(me, str(err))
        return str(err) if me == 0 else (None if told else f"{err} (rank {me})")
    if isinstance(err, KeyboardInterrupt):
        message = _get(_ERROR_KEY, 0.0)
        if message is None:
            raise err
        return _shown(message) if me == 0 else None
    if not (isinstance(err, RuntimeError) and _failed_collective(err)):
        raise err
    if me != 0:
        return None
    message = _get(_ERROR_KEY, wait)
    if message is None:
        return (f"another process of this run stopped ({_cause(err)}); its own output above, "
                "or torchrun's summary, says why")
    return _shown(message)


def _cause(err: BaseException) -> str:
    """The gist of a torch or gloo error: its first sentence, without the C++ source location
    ("[.../pair.cc:553] Connection closed by peer [127.0.0.1]:24290. This is typically ...")."""
    lines = str(err).strip().splitlines()
    text = re.sub(r"^\[[^\]]*\]\s*", "", lines[0]) if lines else type(err).__name__
    return text.split(". ")[0][:160]


def _shown(message: str) -> str:
    first, _, text = message.partition("\n")
    return text if first == "0" else f"{text} (rank {first})"


def _failed_collective(err: RuntimeError) -> bool:
    """A collective or the store failed because a peer went away (gloo raises a plain
    RuntimeError "Connection closed by peer"; NCCL and the store raise DistError)."""
    text = str(err)
    return isinstance(err, dist.DistError) or any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "gloo",
                            "NCCL", "Broken pipe"))


def _announce(me: int, message: str) -> bool:
    """Leave this process's message for rank 0, unless another process left one first.
    False: the store is out of reach."""
    if _store is None:
        return False
    try:
        if _store.add(_ERRORS_KEY, 1) == 1:
            _store.set(_ERROR_KEY, f"{me}\n{message}")
    except RuntimeError:  # the store went with rank 0
        return False
    return True


def _get(key: str, wait: float) -> str | None:
    """The value of `key`, waiting up to `wait` seconds for it; None when it is not there (or
    the store is gone)."""
    if _store is None:
        return None
    try:
        if wait > 0:
            _store.wait([key], timedelta(seconds=wait))
        elif not _store.check([key]):
            return None
        return _store.get(key).decode("utf-8")
    except RuntimeError:
        return None
