"""Resumable training states: `OUTPUT/checkpoints/step-N/state.pt`, written atomically.

A training state is not a release export (that is `save_pretrained`'s HF layout). It holds the
model and optimizer state dicts, the step, the GradScaler, every RNG state (python, numpy, torch
CPU and CUDA) and the data position, so a resumed run continues as if never stopped.

Atomicity: the state is written into a hidden temporary directory that is renamed to `step-N`
only once complete; a kill mid-write leaves at most a `.step-N.*.tmp` directory that is ignored
and cleaned up by the next save; a full disk is one error naming the file and the space left
(`bertkit.io.writing`), the temporary directory removed. Loading uses
`torch.load(weights_only=True)`: no pickled code.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from bertkit.errors import BertkitError
from bertkit.io import writing

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
STATE_FILE = "state.pt"
_STEP_DIR = re.compile(r"^step-(\d+)$")

# How a run treats the training states already in its folder: False starts and refuses a folder
# that holds some, True continues and refuses one that holds none, "auto" continues when there is
# one and starts otherwise: the one command line a launcher can repeat after a restart
# (torchrun --max-restarts, a Slurm requeue).
RESUME_AUTO = "auto"
Resume = bool | Literal["auto"]


def check_resume(value: Any) -> None:
    """`resume` is True, False or "auto" (a typo such as "Auto" or "yes" is an error)."""
    if not (isinstance(value, bool) or value == RESUME_AUTO):
        raise BertkitError(f"resume must be True, False or {RESUME_AUTO!r}, got {value!r}")


def resolve_resume(output_dir: str | os.PathLike, resume: Resume) -> bool:
    """Whether a run into `output_dir` continues from its latest checkpoint (True) or starts
    (False), decided once from the folder: `resume=True` with no checkpoint and `resume=False`
    with some are refused. Whose checkpoints they are (the same settings) is the run marker's
    rule (`bertkit.io.check_output_dir`), checked before."""
    check_resume(resume)
    found = latest_checkpoint(output_dir) is not None
    if resume == RESUME_AUTO:
        return found
    if resume and not found:
        raise BertkitError(f"--resume: no checkpoint under {Path(output_dir) / CHECKPOINTS} "
                           "(nothing to resume; start without --resume, or pass --resume auto "
                           "to continue when there is one and start when there is none)")
    if not resume and found:
        raise BertkitError(f"{output_dir} already holds training checkpoints; pass --resume to "
                           "continue that run or choose another output directory")
    return resume


def rng_state() -> dict[str, Any]:
    """Every RNG the loop, dropout and data code may draw from, in weights_only-safe types."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss),
                  float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        # this process's GPU only: under torchrun each process owns one, and a state per visible
        # GPU could not be restored on a machine with fewer
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_as_tuple(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        restore_cuda_rng(state["cuda"], torch.cuda.device_count(), torch.cuda.set_rng_state)


def restore_cuda_rng(saved: torch.Tensor | list[torch.Tensor], device_count: int,
                     set_state: Callable[..., None]) -> None:
    """Restore a saved CUDA RNG state into this process's GPU. `saved` is one state, or (states
    written before that) one per GPU visible when saved; a machine with fewer GPUs restores
    those it has, with a warning, never an IndexError."""
    if torch.is_tensor(saved):
        set_state(saved)
        return
    if len(saved) > device_count:
        log.warning("the checkpoint holds CUDA RNG states of %d GPUs, this machine has %d: "
                    "restoring the first %d", len(saved), device_count, device_count)
    for index, one in enumerate(saved[:device_count]):
        set_state(one, index)


def _as_tuple(x: Any) -> Any:
    """random.setstate wants the exact nested tuples getstate gave."""
    return tuple(_as_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x


def checkpoint_path(output_dir: str | os.PathLike, step: int) -> Path:
    """Where the training state of `step` lives (`OUTPUT/checkpoints/step-N`)."""
    return Path(output_dir) / CHECKPOINTS / f"step-{step}"


def list_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints under `output_dir/checkpoints`, oldest first."""
    root = Path(output_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1][1] if found else None


def saved_cost(output_dir: str | os.PathLike) -> dict[str, float]:
    """The run's cost up to its latest training state (`train_seconds`, `cpu_seconds`,
    `tokens_seen` from its summary.json; zeros before any state): what a resumed sitting's
    totals started from."""
    cost = {"train_seconds": 0.0, "cpu_seconds": 0.0, "tokens_seen": 0}
    path = latest_checkpoint(output_dir)
    if path is not None and (path / "summary.json").is_file():
        summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
        cost.update({k: summary[k] for k in cost if k in summary})
    return cost


def save_training_state(output_dir: str | os.PathLike, step: int, state: dict[str, Any],
                        keep: int, summary: dict[str, Any] | None = None) -> Path:
    """Write `state` as checkpoint `step-N` atomically, then delete all but the last `keep`."""
    root = Path(output_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".step-*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)
    final = checkpoint_path(output_dir, step)
    with writing(final / STATE_FILE, needed=tensor_bytes(state)):
        tmp = Path(tempfile.mkdtemp(prefix=f".step-{step}.", suffix=".tmp", dir=root))
        try:
            torch.save(state, tmp / STATE_FILE)
            info = {"step": step, **(summary or {})}
            (tmp / "summary.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    if keep > 0:
        for _, old in list_checkpoints(output_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def tensor_bytes(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of the tensors in a nested state, each storage once (tied weights share one, and
    torch.save writes it once): what its file needs, give or take its index."""
    seen = set() if seen is None else seen
    if torch.is_tensor(obj):
        storage = obj.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in obj)
    return 0


def load_training_state(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint directory (or its state.pt); a damaged file is a BertkitError."""
    path = Path(path)
    file = path / STATE_FILE if path.is_dir() else path
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError) as err:
        raise BertkitError(f"{file}: unreadable training state ({err})") from err
