"""What several subcommands share: where the real data sets are found."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bertkit.errors import BertkitError

DATA_ENV = "BERTKIT_DATA"


def data_root(given: Path | None) -> Path:
    """The data folder: --data, else $BERTKIT_DATA, else ../shared/data from the working
    directory (never derived from where bertkit is installed)."""
    if given is not None:
        root, how = Path(given), "--data"
    elif os.environ.get(DATA_ENV):
        root, how = Path(os.environ[DATA_ENV]), f"${DATA_ENV}"
    else:
        root, how = Path("..") / "shared" / "data", "the default ../shared/data"
    if not root.is_dir():
        raise BertkitError(f"{root}: no such data folder ({how}); pass --data DIR or set "
                           f"{DATA_ENV}, or fetch data with `bertkit data download`")
    return root


def add_loader_workers(p: argparse.ArgumentParser) -> None:
    """--loader-workers, for the commands that train (pretrain, finetune)."""
    p.add_argument("--loader-workers", type=int, default=None, metavar="N",
                   help="DataLoader worker processes that collate batches ahead of the step "
                   "(default: 0 on a CPU, where a worker takes a core from the step; up to 4 "
                   "per GPU)")
