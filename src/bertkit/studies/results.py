"""What the demo and the ablations keep while they run: `results.json` (settings, pre-training
budgets and one record per finished fine-tuning cell), the overall progress line, and the step
budget each pre-training run gets, measured once and stored so a resumed study keeps it."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text, read_json_object, updating
from bertkit.studies.report import read_records

log = logging.getLogger(__name__)


class ResultsStore:
    """`results.json`: the settings, the pre-training plan and one record per finished cell,
    rewritten atomically after every change (a kill loses at most the cell in progress), under
    a lock and merged with what another process wrote meanwhile."""

    def __init__(self, path: str | Path, settings: dict[str, Any],
                 added_later: dict[str, Any] | None = None):
        """`added_later`: settings added after stores were begun, with their defaults; one at
        its default is left out of the record, so that a store begun before it still opens."""
        self.path = Path(path)
        settings = {k: v for k, v in settings.items()
                    if not (added_later and k in added_later and v == added_later[k])}
        settings = json.loads(json.dumps(settings, default=str))
        if self.path.is_file():
            data = self._read()
            if data.get("settings") != settings:
                stored = data.get("settings", {})
                # (a key only one side has counts too: the message never names nothing)
                changed = sorted(k for k in {*settings, *stored}
                                 if stored.get(k, "<none>") != settings.get(k, "<none>"))
                raise BertkitError(f"{self.path}: made with other settings ({', '.join(changed)}); "
                                   "other settings need a folder of their own (--output, --work)")
            self.data = data
        else:
            self.data = {"settings": settings, "pretrain": {}, "cells": {}}

    @staticmethod
    def key(variant: str, task: str, seed: int) -> str:
        return f"{variant}/{task}/{seed}"

    def has(self, key: str) -> bool:
        return key in self.data["cells"]

    def put(self, key: str, record: dict[str, Any]) -> None:
        self._update("cells", key, lambda old: record)

    def pretrain_info(self, variant: str) -> dict[str, Any] | None:
        return self.data["pretrain"].get(variant)

    def put_pretrain(self, variant: str, info: dict[str, Any]) -> None:
        self._update("pretrain", variant, lambda old: {**(old or {}), **info})

    def scores(self, variant: str, task: str) -> list[float]:
        prefix = f"{variant}/{task}/"
        return [c["score"] for k, c in sorted(self.data["cells"].items()) if k.startswith(prefix)]

    def _read(self) -> dict[str, Any]:
        """The file, checked to have the store's shape (a damaged one is named, not a traceback)."""
        data = read_json_object(self.path)
        for section in ("settings", "pretrain", "cells"):
            if not isinstance(data.get(section), dict):
                raise BertkitError(f"{self.path}: no {section!r} object: not a study's records, "
                                   "or damaged (the folder's runs are kept; restore the file or "
                                   "use a new folder)")
        return data

    def begin(self) -> None:
        """Write the file now if it is not there yet: its settings then guard what the sitting
        caches before its first record (a vocabulary, shards), so that a sitting killed early
        and begun again with other settings is refused rather than reusing them."""
        with updating(self.path):
            if not self.path.is_file():
                self._write()

    def _update(self, section: str, key: str, change: Callable[[Any], Any]) -> None:
        """Change one entry and rewrite the file, reading it again under its lock first: two
        sittings of a study (pre-training and a decay branch, say) write the same file, and
        each keeps the other's records (this store then holds them too)."""
        with updating(self.path):
            self.reload()
            self.data[section][key] = change(self.data[section].get(key))
            self._write()

    def reload(self) -> None:
        """Take in what other processes have recorded since (another worker's cells). The file
        is only ever replaced whole (`atomic_write_text`), so a read needs no lock."""
        if self.path.is_file():
            self.data = {**self._read(), "settings": self.data["settings"]}

    def _write(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=2, default=str) + "\n")


class Progress:
    """Overall progress over every unit of work, logged as `[k/N] what (elapsed, ETA)`."""

    def __init__(self, total: int, done: int = 0):
        self.total, self.done, self.t0, self.started = total, done, time.perf_counter(), done

    def step(self, what: str) -> None:
        elapsed = time.perf_counter() - self.t0
        rate = elapsed / max(1, self.done - self.started)
        eta = f", ETA {rate * (self.total - self.done) / 60:.1f} min" if self.done > self.started else ""
        log.info("[%d/%d] %s (%.1f min elapsed%s)", self.done + 1, self.total, what, elapsed / 60, eta)
        self.done += 1


def run_cells(store: ResultsStore, cells: Sequence[tuple[str, str, int]],
              run_cell: Callable[[str, str, int], dict[str, Any]],
              progress: Progress | None = None) -> None:
    """Run every cell not yet in the store, recording each as soon as it finishes."""
    for variant, task, seed in cells:
        key = store.key(variant, task, seed)
        if store.has(key):
            continue
        if progress is not None:
            progress.step(f"fine-tune {key}")
        store.put(key, {"variant": variant, "task": task, "seed": seed,
                        **run_cell(variant, task, seed)})


def last_eval(run_dir: Path) -> dict[str, float]:
    """The final held-out metrics of a pre-training run (from its metrics.jsonl)."""
    path = run_dir / "metrics.jsonl"
    records = read_records(path) if path.is_file() else []
    evals = [r for r in records if any(k.startswith("eval_") for k in r)]
    return {k: v for k, v in (evals[-1] if evals else {}).items() if k.startswith("eval_")}



def calibrate(store: ResultsStore, variant: str, seconds: float,
              measure: Callable[[float], float]) -> dict[str, Any]:
    """The variant's pre-training step budget for `seconds` of wall time, measured once by
    `measure(seconds)` (seconds per step; given the budget, so that a probe can stay within
    it: `pipeline.seconds_per_step`) and stored; a resumed study reuses the stored budget."""
    if store.pretrain_info(variant) is None:
        step_s = measure(seconds)
        steps = steps_for_budget(seconds, step_s)
        store.put_pretrain(variant, {"steps": steps, "seconds_per_step": round(step_s, 4),
                                     "budget_seconds": round(seconds, 1)})
        log.info("pre-training %s: %d steps (%.2f s/step measured, %.0f s budget)", variant,
                 steps, step_s, seconds)
    return store.pretrain_info(variant)  # type: ignore[return-value]


def steps_for_budget(seconds: float, step_seconds: float, minimum: int = 2) -> int:
    """Optimizer steps that fit in `seconds`, keeping ~10% for evaluation and saving."""
    return max(minimum, int(0.9 * seconds / max(step_seconds, 1e-6)))


def select_lr(runs: dict[float, dict[str, Any]]) -> float:
    """The rate whose run scored best on dev, never a collapsed run while another exists."""
    usable = {lr: r for lr, r in runs.items() if not r.get("collapsed")} or runs
    return max(usable, key=lambda lr: usable[lr]["score"])
