"""Sliding windows over a sequence longer than the model takes, as google-research/bert's
`run_squad.py` cuts documents: windows of `window` tokens every `stride` tokens, and each token
read from the window where it has the most context (`_check_is_max_context`). SQuAD
featurization and the Encoder's long-text features both follow this one rule."""

from __future__ import annotations

from typing import Any


def window_starts(n_tokens: int, window: int, stride: int) -> list[int]:
    """Starts of the windows covering n_tokens (a stride longer than the window is cut to it)."""
    starts, start = [], 0
    while True:
        starts.append(start)
        if start + window >= n_tokens:
            return starts
        start += min(window, stride)


def context_score(offset: Any, length: int) -> Any:
    """How much context a token at `offset` of a window of `length` tokens has: min(left,
    right) + 0.01 x length (ties go to the longer window). Works on ints and on tensors."""
    right = length - 1 - offset
    return (offset + right - abs(offset - right)) / 2 + 0.01 * length
