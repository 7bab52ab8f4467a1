"""Padding encodings into a batch for `BertTokenizer.encode_padded`: the length to pad to,
right-padding into rows, rows into tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from bertkit.errors import BertkitError
from bertkit.tokenization.encoding import Encoding

Padding = bool | Literal["longest", "max_length"]
TensorKind = Literal["pt", "np"] | None

# What a pad position holds in each field.
_PAD_VALUES: dict[str, Any] = {
    "token_type_ids": 0,
    "attention_mask": 0,
    "special_tokens_mask": 1,
    "offsets": (0, 0),
    "word_ids": None,
}


def padding_length(
    encodings: Sequence[Encoding], padding: Padding, max_length: int | None,
    model_max_length: int | None,
) -> int | None:
    """Length to pad every row to (None: no padding): the longest row's for True/"longest",
    `max_length` (else `model_max_length`) for "max_length", which no row may exceed."""
    longest = max((len(e) for e in encodings), default=0)
    if padding is True or padding == "longest":
        return longest
    if padding is False:
        return None
    if padding != "max_length":
        raise BertkitError(
            f"padding must be True, False, 'longest' or 'max_length', got {padding!r}"
        )
    length = max_length if max_length is not None else model_max_length
    if length is None:
        raise BertkitError("padding='max_length' needs max_length (no model_max_length known)")
    if longest > length:
        raise BertkitError(
            f"a sequence has {longest} tokens, more than max_length={length}; "
            "enable truncation or raise max_length"
        )
    return length


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
