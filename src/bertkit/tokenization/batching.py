"""Fitting, padding and tensorizing encodings for `BertTokenizer`: Google's pair truncation,
right-padding into rows, rows into tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bertkit.errors import BertkitError

if TYPE_CHECKING:
    from bertkit.tokenization.wordpiece import Encoding

# What a pad position holds in each field.
_PAD_VALUES: dict[str, Any] = {
    "token_type_ids": 0,
    "attention_mask": 0,
    "special_tokens_mask": 1,
    "offsets": (0, 0),
    "word_ids": None,
}


def pad_rows(
    encodings: Sequence[Encoding], length: int | None, pad_id: int, return_offsets: bool
) -> dict[str, list[list[Any]]]:
    """One list of rows per output key, each row padded on the right to `length`."""
    keys = ["input_ids", "token_type_ids", "attention_mask"]
    if return_offsets:
        keys += ["offsets", "special_tokens_mask", "word_ids"]
    rows: dict[str, list[list[Any]]] = {}
    for key in keys:
        fill = pad_id if key == "input_ids" else _PAD_VALUES[key]
        rows[key] = [
            getattr(e, key) + [fill] * ((len(e) if length is None else length) - len(e))
            for e in encodings
        ]
    return rows


def to_tensors(rows: dict[str, list[list[Any]]], kind: str) -> dict[str, Any]:
    """(B, T) int64 arrays or tensors; word_ids' None becomes -1."""
    import numpy as np

    if kind not in ("pt", "np"):
        raise BertkitError(f"return_tensors must be None, 'pt' or 'np', got {kind!r}")
    lengths = {len(row) for row in rows["input_ids"]}
    if len(lengths) > 1:
        raise BertkitError("rows have different lengths; use padding=True to make tensors")
    width = lengths.pop() if lengths else 0
    arrays = {}
    for key, value in rows.items():
        if key == "word_ids":
            value = [[-1 if w is None else w for w in row] for row in value]
        shape = (len(value), width, 2) if key == "offsets" else (len(value), width)
        arrays[key] = np.asarray(value, dtype=np.int64).reshape(shape)
    if kind == "np":
        return arrays
    import torch

    return {key: torch.from_numpy(array) for key, array in arrays.items()}


def truncated_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Lengths of A and B after Google's ``_truncate_seq_pair`` fits them into `budget` tokens.

    Google removes one token at a time from the end of the longer sequence, from B on ties.
    In closed form: the longer one shrinks to the other's length, then both shrink in turn,
    B first, so when an odd number is left to remove B loses the extra token.
    """
    excess = len_a + len_b - budget
    if excess <= 0:
        return len_a, len_b
    gap = min(abs(len_a - len_b), excess)
    if len_a > len_b:
        len_a -= gap
    else:
        len_b -= gap
    excess -= gap
    return len_a - excess // 2, len_b - (excess - excess // 2)
