"""What several subcommands share: where the real data sets are found, the training options."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from bertkit.data.download import DEFAULT_DEST
from bertkit.errors import BertkitError
from bertkit.training import distributed
from bertkit.training.config import TrainConfig
from bertkit.training.hardware import PRECISIONS
from bertkit.training.signals import terminate_as_interrupt
from bertkit.training.state import RESUME_AUTO

DATA_ENV = "BERTKIT_DATA"


def data_root(given: Path | None, fetch: str = "fetch data with `bertkit data download`") -> Path:
    """The data folder: --data, else $BERTKIT_DATA, else ../shared/data from the working
    directory, else ./data where `bertkit data download` puts its data sets (never derived from
    where bertkit is installed). `fetch` says how to get data when there is none."""
    shared, downloaded = Path("..") / "shared" / "data", DEFAULT_DEST
    if given is not None:
        root, how = Path(given), "--data"
    elif os.environ.get(DATA_ENV):
        root, how = Path(os.environ[DATA_ENV]), f"${DATA_ENV}"
    elif shared.is_dir() or not downloaded.is_dir():
        root, how = shared, f"the default ../shared/data; nor is there ./{downloaded}"
    else:
        root, how = downloaded, f"./{downloaded}, where `bertkit data download` writes"
    if not root.is_dir():
        raise BertkitError(f"{root}: no such data folder ({how}); pass --data DIR or set "
                           f"{DATA_ENV}, or {fetch}")
    return root


def add_hardware(p: argparse.ArgumentParser, train: TrainConfig) -> None:
    """--precision, --device and --loader-workers, for the commands that train (pretrain,
    finetune, distill), with the defaults of their `train` recipe."""
    p.add_argument("--precision", default=train.precision, choices=PRECISIONS,
                   help="auto (default): bf16 where this machine computes it fast, else fp32")
    p.add_argument("--device", default=train.device)
    add_loader_workers(p)


def add_loader_workers(p: argparse.ArgumentParser) -> None:
    """--loader-workers, for the commands that train (pretrain, finetune, distill)."""
    p.add_argument("--loader-workers", type=int, default=None, metavar="N",
                   help="DataLoader worker processes that collate batches ahead of the step "
                   "(default: 0 on a CPU, where a worker takes a core from the step; up to 4 "
                   "per GPU)")


def add_resume(p: argparse.ArgumentParser) -> None:
    """--resume [auto], for the commands that train (pretrain, finetune, distill): the bare
    flag must continue, no flag must start fresh, `auto` does whichever the folder calls for, so
    that a launcher that restarts a job (torchrun --max-restarts, a Slurm requeue) repeats one
    line."""
    p.add_argument("--resume", nargs="?", const=True, default=False, choices=[RESUME_AUTO],
                   metavar="auto",
                   help="continue the run in --output from its last checkpoint; `--resume auto`: "
                   "continue when it has one, start when it has none (a restarted job's one "
                   "command line); another run's folder (other settings) is refused either way")


def add_join_timeout(p: argparse.ArgumentParser) -> None:
    """--join-timeout, for the commands that train under torchrun (pretrain, finetune)."""
    p.add_argument("--join-timeout", type=float, default=distributed.JOIN_TIMEOUT,
                   metavar="SECONDS", help="under torchrun: how long the processes may take to "
                   "join the process group before every one ends with an error")


def run_together(work: Callable[[], int]) -> int:
    """Run a training command's `work` in this process (joined by `distributed.setup`), then
    leave the process group. Under torchrun a failure stops every process with one line from
    rank 0 (`distributed.stop_together`), a peer's end (torchrun's SIGTERM) included; alone,
    the error is raised as it came."""
    try:
        with terminate_as_interrupt():
            return work()
    except (BertkitError, RuntimeError, KeyboardInterrupt) as err:
        if distributed.is_distributed():  # stopping now: torchrun's SIGTERM must not cut it short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        line = distributed.stop_together(err)  # one process, or Ctrl-C: raised again for main
        if line is not None:
            print(f"bertkit: error: {line}", file=sys.stderr)
        return 1
    finally:
        distributed.teardown()
