"""`Encoding`: one text or pair in BERT's input layout, built from WordPiece segments.

The layout, as in the paper (Devlin et al., 2019, figure 2)::

    [CLS] my dog is cute [SEP] he likes play ##ing [SEP]
      0    0   0   0   0    0   1    1     1    1     1     <- token_type_ids (segment A / B)

A pair too long for the limit is cut longest-first, as Google's ``_truncate_seq_pair`` does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from bertkit.errors import BertkitError
from bertkit.tokenization.vocab_io import CLS, SEP


@dataclass(frozen=True)
class Encoding:
    """One encoded text or pair, in model-input order (specials included when asked for).

    `offsets` are ``(start, end)`` character offsets into the original text (into the pair's
    text for segment B), ``(0, 0)`` for special tokens; `word_ids` index the words of each
    segment (counting from 0 again in B) and are None for special tokens.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    special_tokens_mask: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]
    tokens: list[str]

    def __len__(self) -> int:
        return len(self.input_ids)


def assemble(first: Any, second: Any, limit: int | None, specials: bool, cls_id: int,
             sep_id: int) -> Encoding:
    """[CLS] A [SEP] (B [SEP]) from two special-token-free `tokenizers` encodings (`second`
    None for a single text), cut to `limit` tokens in all when it is not None."""
    n_special = (2 if second is None else 3) if specials else 0
    n_first = len(first.ids)
    n_second = 0 if second is None else len(second.ids)
    if limit is not None:
        if limit < n_special:
            raise BertkitError(
                f"max_length={limit} leaves no room for the {n_special} special tokens"
            )
        n_first, n_second = truncated_lengths(n_first, n_second, limit - n_special)
    parts = [_special_part(CLS, cls_id, 0)] if specials else []
    for type_id, (segment, n) in enumerate([(first, n_first), (second, n_second)]):
        if segment is None:
            continue
        parts.append(_segment_part(segment, n, type_id))
        if specials:
            parts.append(_special_part(SEP, sep_id, type_id))
    # parts are rows of the 7 Encoding fields; concatenate them field by field
    return Encoding(*(list(itertools.chain.from_iterable(f)) for f in zip(*parts, strict=True)))


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


def _special_part(token: str, token_id: int, type_id: int) -> tuple[list[Any], ...]:
    """A special token as a row of the Encoding fields."""
    return ([token_id], [type_id], [1], [1], [(0, 0)], [None], [token])


def _segment_part(segment: Any, n: int, type_id: int) -> tuple[list[Any], ...]:
    """The first `n` tokens of a `tokenizers` encoding as a row of the Encoding fields."""
    return (
        segment.ids[:n],
        [type_id] * n,
        [1] * n,
        [0] * n,
        segment.offsets[:n],
        segment.word_ids[:n],
        segment.tokens[:n],
    )
