"""Packed (unpadded) batches: B sequences as their S real tokens laid end to end, in the
varlen form of FlashAttention's `*_varlen_*` kernels and ModernBERT (`cu_seqlens`,
`max_seqlen`), and the groups attention runs in without such a kernel. `model.py` runs the
encoder on them (`BertModel.forward_varlen`); the training collate and the inference encoder
build them on the host.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

GROUP_COST = 1024.0  # the fixed cost of one more attention call, in (tokens x tokens) units,
# timed on the CPU; other devices keep one group until measured there (docs/reports/benchmarks.md)


@dataclass
class AttentionGroup:
    """Sequences of a `VarlenLayout` that run attention together: packed sequences
    [first, last), whose tokens are the packed rows [start, end), laid out in a padded
    (batch, max_len), each sequence left-aligned (attention has no notion of position: a query
    sees the same keys)."""

    first: int
    last: int
    start: int
    end: int
    max_len: int
    index: torch.Tensor | None  # (end - start,) row of each token in (batch * max_len); None = full
    key_mask: torch.Tensor | None  # (batch, 1, 1, max_len) True = real key; None = full

    @property
    def batch(self) -> int:
        return self.last - self.first

    def to(self, device, non_blocking: bool = False) -> AttentionGroup:
        return dataclasses.replace(self, index=_move(self.index, device, non_blocking),
                                   key_mask=_move(self.key_mask, device, non_blocking))


@dataclass
class VarlenLayout:
    """B sequences as their S real tokens laid end to end: the varlen (unpadded) form that
    FlashAttention's `*_varlen_*` kernels and ModernBERT use, `cu_seqlens` and `max_seqlen`.
    The dense parts of a layer run on the packed (S, H); attention runs group by group
    (`groups`), each group padded to its own longest sequence: one group on devices, the
    cheapest cut into length groups on the CPU (`attention_groups`).

    `indices` map the packed tokens to and from the padded (B, T) batch they came from
    (`unpad`, `pad`); sequences are packed in the order `from_mask` chose (longest first)."""

    cu_seqlens: torch.Tensor  # (B + 1,) int32: sequence i is packed rows [cu[i], cu[i + 1])
    max_seqlen: int
    groups: tuple[AttentionGroup, ...]
    indices: torch.Tensor  # (S,) row of each packed token in the padded batch's (B * T)
    padded_shape: tuple[int, int]  # (B, T)

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor, group_cost: float) -> VarlenLayout:
        """The layout of a padded batch's real tokens (attention_mask (B, T), 1 = real; any
        pattern, not only right padding), packed longest first, cut into attention groups by
        `group_cost` (the device's: `model.attention_group_cost`). Reads the lengths: build
        it on the host."""
        B, T = attention_mask.shape
        real = attention_mask.bool()  # (B, T)
        lengths = real.sum(1)  # (B,)
        order = lengths.argsort(descending=True, stable=True)  # (B,) longest first
        rows = order[:, None] * T + torch.arange(T, device=real.device)  # (B, T) row in B*T
        indices = rows[real[order]]  # (S,) sequence by sequence, longest first
        return cls.from_lengths(lengths[order].tolist(), group_cost, indices, (B, T))

    @classmethod
    def from_lengths(cls, lengths: list[int], group_cost: float = math.inf,
                     indices: torch.Tensor | None = None,
                     padded_shape: tuple[int, int] | None = None,
                     device=None) -> VarlenLayout:
        """The layout of sequences already packed end to end with these lengths (in packed
        order; group cuts want them longest first). Without `indices`, the padded batch is
        (B, max length) with each sequence left-aligned."""
        device = indices.device if indices is not None else device
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        groups = tuple(_group(lengths, first, last, cu, device)
                       for first, last in attention_groups(lengths, group_cost))
        if indices is None:
            padded_shape = (len(lengths), max(lengths))
            indices = _left_aligned(lengths, device)[0]
            indices = torch.arange(cu[-1], device=device) if indices is None else indices
        return cls(torch.tensor(cu, dtype=torch.int32, device=device), max(lengths), groups,
                   indices, padded_shape)

    def unpad(self, t: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) padded -> (S, ...) packed."""
        return t.reshape(-1, *t.shape[2:]).index_select(0, self.indices)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(S, ...) packed -> (B, T, ...) padded, zeros at padding."""
        B, T = self.padded_shape
        return x.new_zeros(B * T, *x.shape[1:]).index_copy(0, self.indices, x).view(
            B, T, *x.shape[1:])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> VarlenLayout:
        """The same layout with its tensors on `device` (a layout built on the host from the
        collate's mask: the device then never reads its lengths back)."""
        return dataclasses.replace(
            self, cu_seqlens=_move(self.cu_seqlens, device, non_blocking),
            indices=_move(self.indices, device, non_blocking),
            groups=tuple(g.to(device, non_blocking) for g in self.groups))


def _move(t: torch.Tensor | None, device, non_blocking: bool) -> torch.Tensor | None:
    return None if t is None else t.to(device, non_blocking=non_blocking)


def _left_aligned(lengths: list[int], device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Sequences packed end to end laid out left-aligned in (b, t), t the longest: each
    token's row in (b * t) and the (b, 1, 1, t) key mask; (None, None) when all are full."""
    b, t = len(lengths), max(lengths)
    if all(n == t for n in lengths):
        return None, None
    real = torch.arange(t, device=device) < torch.tensor(lengths, device=device)[:, None]
    return real.view(-1).nonzero().squeeze(1), real.view(b, 1, 1, t)


def _group(lengths: list[int], first: int, last: int, cu: list[int], device) -> AttentionGroup:
    index, key_mask = _left_aligned(lengths[first:last], device)
    return AttentionGroup(first, last, cu[first], cu[last], max(lengths[first:last]), index,
                          key_mask)


def attention_groups(lengths: list[int], group_cost: float) -> list[tuple[int, int]]:
    """Cut lengths sorted longest first into consecutive groups [a, b) that minimise
    sum over groups of (b - a) * t * t + group_cost, t = lengths[a] (dynamic programming)."""
    B = len(lengths)
    if math.isinf(group_cost):
        return [(0, B)]
    best = [0.0] + [math.inf] * B  # best[j]: the cheapest cut of the first j sequences
    cut = [0] * (B + 1)
    for j in range(1, B + 1):
        for a in range(j):
            cost = best[a] + (j - a) * lengths[a] ** 2 + group_cost
            if cost < best[j]:
                best[j], cut[j] = cost, a
    groups, j = [], B
    while j:
        groups.append((cut[j], j))
        j = cut[j]
    return groups[::-1]
