"""Training statistics that stay on the device between sync points.

A step's loss, metrics, gradient norm and token count are 0-dim device tensors. Reading one on
the host (`float(t)`, `.item()`, `.tolist()`) makes the host wait for the device to finish
everything queued: once per step, that leaves a GPU idle while the next batch is launched.
`Pending` keeps them until the loop reaches a sync point (a log line, a save, an evaluation,
the end of the run, a stop), where one all-reduce and one read bring every pending step to
the host together. `Window` then averages the host values between two log lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from bertkit.training import distributed as dist_utils

# The dtype of the sync's one tensor: one every accepted device has (MPS has no float64). The
# losses and metrics are float32 already; a token count is exact up to 2**24 (16.7M real tokens
# in one optimizer step over all ranks: all that a full 32k x 512 global batch holds) and off by
# a relative 6e-8 at most beyond, which only the tokens/s of a log line would show.
SYNC_DTYPE = torch.float32


@dataclass
class StepStats:
    """One optimizer step as this rank saw it, still on the device."""

    sums: dict[str, Any]  # loss and step metrics, each summed over this rank's micro-batches
    grad_norm: torch.Tensor  # the clipped gradients' norm before clipping (the same on every rank)
    tokens: Any  # real tokens in this rank's micro-batches
    lr: float


@dataclass
class Pending:
    """The steps since the last sync point."""

    steps: list[StepStats] = field(default_factory=list)

    def add(self, step: StepStats) -> None:
        self.steps.append(step)

    def sync(self, device: torch.device, accum: int, world: int, stop: bool
             ) -> tuple[list[dict[str, Any]], bool]:
        """Every pending step averaged over micro-batches and ranks, on the host, and whether any
        rank wants to stop: one all-reduce and one device-to-host read for all of them."""
        if not self.steps:
            return [], stop
        names = sorted(self.steps[0].sums)
        rows = [torch.stack([torch.as_tensor(v, dtype=SYNC_DTYPE, device=device)
                             for v in (*(s.sums[k] for k in names), s.grad_norm, s.tokens)])
                for s in self.steps]  # each (K,)
        flag = torch.tensor([float(stop)], dtype=SYNC_DTYPE, device=device)
        flat = dist_utils.all_reduce_sum(torch.cat([torch.stack(rows).flatten(), flag]))
        values = flat.tolist()  # the sync
        width = len(names) + 2
        synced = []
        for i, step in enumerate(self.steps):
            row = values[i * width:(i + 1) * width]
            record: dict[str, Any] = {k: row[j] / (accum * world) for j, k in enumerate(names)}
            record["grad_norm"] = row[-2] / world
            record["tokens"] = int(row[-1])
            record["lr"] = step.lr
            synced.append(record)
        self.steps = []
        return synced, values[-1] > 0


@dataclass
class Window:
    """Running sums of the synced steps between two log lines (host floats)."""

    sums: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.perf_counter)

    def add(self, stats: dict[str, Any]) -> None:
        for k, v in stats.items():
            if k not in ("tokens", "lr"):
                self.sums[k] = self.sums.get(k, 0.0) + float(v)
        self.sums["lr"] = stats["lr"]
        self.steps += 1
        self.tokens += stats["tokens"]

    def tokens_per_s(self) -> float:
        return self.tokens / max(time.perf_counter() - self.started, 1e-9)

    def flush(self) -> dict[str, float]:
        out = {k: (v if k == "lr" else v / max(self.steps, 1)) for k, v in self.sums.items()}
        out["tokens_per_s"] = self.tokens_per_s()
        self.sums, self.steps, self.tokens = {}, 0, 0
        self.started = time.perf_counter()
        return out
