"""The example stream: which example the loop trains on at each global position, and the
DataLoader that feeds it. The one home of the data order.

A run reads one endless stream of examples: epoch e is a permutation of the dataset drawn from
the run's "order/<e>" random stream (`epoch_order`), length-grouped when lengths are given, and
the epochs are laid end to end. Step s consumes stream positions [s·B, (s+1)·B) for the global
batch B; under DDP rank r takes its own contiguous slice of that global batch, cut into its
micro-batches. Everything is a function of (seed, global position) and never of the number of
processes, so a run resumes on another world size at the same global batch and trains on the
same examples in the same order; the data position is one integer (`examples_seen`).

Batches are collated by a `torch.utils.data.DataLoader` whose sampler starts at the run's data
position: with `workers` > 0, worker processes collate ahead of the step (pinned memory for a
GPU), with 0 the main process collates just in time. A collate with `wants_positions = True` is
called as `collate(items, positions)` (dynamic masking draws from the positions); any other as
`collate(items)`.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from bertkit.errors import BertkitError


def stream_seed(seed: int, stream: str) -> int:
    """The seed of one named random stream of a run ("order/0", "dropout/0", "head", ...):
    derived from the run's seed, independent of every other stream. The loop's data order
    and dropout, and fine-tuning's new head, each draw from their own (Mosbach et al. 2021 and
    Dodge et al. 2020 show how much fine-tuning depends on these; sharing one stream ties the
    first dropout masks to the head's initial weights)."""
    digest = hashlib.sha256(f"{seed}/{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % 2**63


def epoch_order(seed: int, epoch: int, n: int, lengths: torch.Tensor | None = None,
                batch_size: int = 1) -> torch.Tensor:
    """Epoch `epoch`'s order of the n examples: a permutation from the run's "order/<epoch>"
    stream, length-grouped by batches (from the same stream) when `lengths` is set."""
    gen = torch.Generator().manual_seed(stream_seed(seed, f"order/{epoch}"))
    perm = torch.randperm(n, generator=gen)
    if lengths is not None:  # the epoch's first step may have begun in the last one
        first = (-epoch * n) % batch_size
        perm = length_grouped_order(perm, lengths, batch_size, gen, first)
    return perm


def length_grouped_order(order: torch.Tensor, lengths: torch.Tensor, batch_size: int,
                         generator: torch.Generator, offset: int = 0,
                         group_batches: int = 50) -> torch.Tensor:
    """Reorder a random permutation `order` of the examples so that each batch holds examples
    of similar length (less padding), while the order stays random: cut `order` into groups of
    `group_batches` batches, sort each group by length (longest first), cut the result into
    batches and shuffle those batches with `generator`.

    `offset`: the first `offset` positions complete a batch begun before `order` (an epoch that
    does not start on a batch boundary); they and the last partial batch keep their places."""
    lengths = torch.as_tensor(lengths)
    group = batch_size * group_batches
    parts = [order[i:i + group] for i in range(0, len(order), group)]
    ordered = torch.cat([p[torch.argsort(lengths[p], descending=True, stable=True)] for p in parts])
    head = min(offset, len(ordered))
    n_full = (len(ordered) - head) // batch_size
    body = ordered[head:head + n_full * batch_size].view(n_full, batch_size)  # (batches, B)
    body = body[torch.randperm(n_full, generator=generator)].reshape(-1)
    return torch.cat([ordered[:head], body, ordered[head + n_full * batch_size:]])


# Above this many examples an epoch's order is a `KeyedPermutation` (O(1) memory) instead of a
# `randperm` held whole (8 bytes an example, in every process and DataLoader worker: 2.4 GB each
# at the 300M instances of BERT's data with dupe factor 10). Every fine-tuning set and every
# corpus below it keeps the exact randperm order its stored results were made with.
KEYED_ABOVE = 1 << 24


class KeyedPermutation:
    """A random permutation of range(n) computed element by element in O(1) memory: a 4-round
    Feistel network keyed from (seed, stream) on the smallest even-bit domain >= n, values
    outside range(n) walked through the network again (cycle walking: fewer than 4 rounds
    trips on average, the domain being < 4n)."""

    def __init__(self, n: int, seed: int, stream: str):
        self.n = n
        bits = max(2, (n - 1).bit_length())
        self.half = (bits + 1) // 2
        self.mask = (1 << self.half) - 1
        digest = hashlib.sha256(f"{seed}/{stream}/feistel".encode()).digest()
        self.keys = [int.from_bytes(digest[i:i + 8], "little") for i in range(0, 32, 8)]

    def _round(self, right: int, key: int) -> int:
        x = (right * 0x9E3779B97F4A7C15 + key) & 0xFFFFFFFFFFFFFFFF  # splitmix64's mixing
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return (x ^ (x >> 31)) & self.mask

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise IndexError(i)
        x = i
        while True:
            left, right = x >> self.half, x & self.mask
            for key in self.keys:
                left, right = right, left ^ self._round(right, key)
            x = (left << self.half) | right
            if x < self.n:
                return x


@dataclass
class DataOrder:
    """The dataset index at every global stream position (see the module docstring)."""

    seed: int
    n_examples: int
    batch_size: int  # the global batch (length groups are cut in global batches)
    lengths: torch.Tensor | None = None  # (n_examples,): set = length-grouped batches
    _perms: dict[int, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.lengths is not None and self.n_examples > KEYED_ABOVE:
            raise BertkitError(f"length-grouped batches need the whole epoch's order in memory; "
                               f"{self.n_examples:,} examples is over {KEYED_ABOVE:,}")

    def index_at(self, position: int) -> int:
        epoch, offset = divmod(position, self.n_examples)
        if epoch not in self._perms:  # one epoch cached: positions are read in order
            self._perms = {epoch: self.epoch(epoch)}
        return int(self._perms[epoch][offset])

    def epoch(self, epoch: int) -> Any:
        """Epoch `epoch`'s order: indexable by offset."""
        if self.n_examples > KEYED_ABOVE:
            return KeyedPermutation(self.n_examples, self.seed, f"order/{epoch}")
        return epoch_order(self.seed, epoch, self.n_examples, self.lengths, self.batch_size)


@dataclass(frozen=True)
class StepPlan:
    """How a global batch is split: `world` processes x `accum` micro-batches of `micro`."""

    batch_size: int
    world: int
    rank: int
    micro: int
    accum: int

    def micro_batches(self, examples_seen: int) -> list[range]:
        """This rank's micro-batches (stream positions) of the step that starts at
        `examples_seen`."""
        start = examples_seen + self.rank * self.micro * self.accum
        return [range(start + k * self.micro, start + (k + 1) * self.micro)
                for k in range(self.accum)]


class _MicroBatchSampler(Sampler[list[int]]):
    """This rank's micro-batches of stream positions, step after step, from `examples_seen`."""

    def __init__(self, plan: StepPlan, examples_seen: int, steps: int):
        self.plan, self.examples_seen, self.steps = plan, examples_seen, steps

    def __iter__(self) -> Iterator[list[int]]:
        for s in range(self.steps):
            for positions in self.plan.micro_batches(self.examples_seen + s * self.plan.batch_size):
                yield list(positions)

    def __len__(self) -> int:
        return self.steps * self.plan.accum


class _Positioned(Dataset):
    """Stream position -> (position, the example there)."""

    def __init__(self, dataset: Any, order: DataOrder):
        self.dataset, self.order = dataset, order

    def __getitem__(self, position: int) -> tuple[int, Any]:
        return position, self.dataset[self.order.index_at(position)]

    def __len__(self) -> int:  # the stream is endless; DataLoader asks only with a batch_sampler
        return self.order.n_examples


class _Collate:
    """[(position, item)] -> collate(items[, positions]); a class, so that workers can pickle it."""

    def __init__(self, collate: Callable[..., Any]):
        self.collate = collate
        self.positional = getattr(collate, "wants_positions", False)

    def __call__(self, pairs: list[tuple[int, Any]]) -> Any:
        positions = [p for p, _ in pairs]
        items = [item for _, item in pairs]
        return self.collate(items, positions) if self.positional else self.collate(items)


def default_workers(device: torch.device) -> int:
    """DataLoader worker processes when none are asked for: none on the CPU, where a worker
    takes a core from the step's own threads (docs/reports/benchmarks.md, "Data loading"), and up to 4
    per process on a GPU, where collating in the main process leaves the device idle."""
    if device.type == "cpu":
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    per_process = (cpus or 1) // max(1, torch.cuda.device_count() if device.type == "cuda" else 1)
    return max(0, min(4, per_process - 1))


def batches(dataset: Any, collate: Callable[..., Any], order: DataOrder, plan: StepPlan,
            examples_seen: int, steps: int, workers: int, pin_memory: bool) -> Iterator[Any]:
    """The collated micro-batches of the next `steps` steps of this rank, in order: `accum`
    per step. Resumes anywhere: the first is the one at `examples_seen`."""
    loader = DataLoader(_Positioned(dataset, order), batch_sampler=_MicroBatchSampler(
        plan, examples_seen, steps), collate_fn=_Collate(collate), num_workers=workers,
        pin_memory=pin_memory, prefetch_factor=2 if workers else None,
        # its own generator: the DataLoader draws a base seed for its workers when iterated,
        # which from the global generator would shift the dropout stream at every resume
        generator=torch.Generator().manual_seed(order.seed))
    return iter(loader)


def take(iterator: Iterator[Any], n: int) -> list[Any]:
    """The next `n` items of `iterator` (a step's micro-batches)."""
    return list(itertools.islice(iterator, n))
