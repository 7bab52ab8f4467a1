"""Training batches that carry the layout of their real tokens (`bertkit.varlen`), so that a
head with an unpadded forward (`supports_packing`) skips the work on padding."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from torch import nn

from bertkit.model import attention_group_cost
from bertkit.training.hardware import resolve_device
from bertkit.varlen import VarlenLayout


def packed_collate(collate: Callable[[list[Any]], dict[str, Any]], model: nn.Module, *,
                   packed: bool, compiled: bool, device: str) -> Callable[[list[Any]], dict[str, Any]]:
    """`collate`, its batches with the layout of their real tokens for the head's unpadded
    forward (`BertModel.forward_varlen`) where it has one (`supports_packing`: every head but
    span QA; not compiled, whose graph keeps the padded forward): the loss and the gradients
    are the padded forward's, without the work on padding. The layout is built here, on the
    host, with the training device's attention groups, so that the device never reads the
    lengths back."""
    if packed and not compiled and getattr(type(model), "supports_packing", False):
        return functools.partial(packed_batch, collate, attention_group_cost(resolve_device(device)))
    return collate


def packed_batch(collate, group_cost: float, features) -> dict[str, Any]:
    batch = collate(features)
    mask = batch["attention_mask"]  # (B, T), or (B, K, T) for multiple choice: the head
    # flattens its choices to (B*K, T) rows, the layout's
    return {**batch, "layout": VarlenLayout.from_mask(mask.reshape(-1, mask.shape[-1]),
                                                       group_cost)}


def feature_lengths(features: list[dict[str, Any]]) -> list[int]:
    """Tokens of each feature (its longest row for multiple choice): what padding depends on."""
    def length(ids) -> int:
        if len(ids) and hasattr(ids[0], "__len__"):
            return max(len(row) for row in ids)
        return len(ids)

    return [length(f["input_ids"]) for f in features]
