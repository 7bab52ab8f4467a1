"""BERT's masked-LM corruption: one pure function, `mask_batch`, for static (prepare time) and
dynamic (batch time) masking; `mask_tokens` is its form for one unpadded sequence.

The paper's recipe (section 3.1, Google's `create_masked_lm_predictions`): choose
`min(max_predictions, max(1, round(n * masked_lm_prob)))` positions among the n non-special
tokens; replace 80% of them by [MASK], 10% by a random token and keep 10% unchanged, so that the
model cannot learn that only [MASK] positions matter. With whole-word masking a word's `##`
pieces are chosen (or skipped) together.

Two deliberate differences from Google's script, both stated in docs/reports/benchmarks.md:
n counts only the non-special tokens (Google counts [CLS]/[SEP] too: 19 of the 125 eligible
tokens at length 128, 15.2%), and the random replacement is never a special token (Google's may
be [CLS], [SEP], [PAD] or [MASK]). [UNK] is an ordinary token here by default, as in Google's
script (maskable, predicted, drawn as a random replacement); `mask_unk=False` makes it special
(never chosen nor drawn), bertkit's behaviour before; docs/reports/results.md measures the choice.

Selection is vectorized over a padded batch: without WWM a uniform sample of k eligible
positions per row, which is the distribution of Google's shuffle-then-take."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from bertkit.errors import BertkitError
from bertkit.tokenization.vocab_io import MASK, SPECIAL_TOKENS, UNK


@dataclass(frozen=True, eq=False)
class VocabInfo:
    """What masking needs to know about a vocabulary (picklable, cheap to ship to workers).

    `is_special[id]` marks tokens that are never selected nor used as random replacements
    ([PAD] [CLS] [SEP] [MASK], and [UNK] unless `mask_unk`);
    `is_continuation[id]` marks `##` word pieces (used by whole-word masking)."""

    mask_token_id: int
    is_special: np.ndarray  # (V,) bool
    is_continuation: np.ndarray  # (V,) bool

    @property
    def vocab_size(self) -> int:
        return int(self.is_special.shape[0])

    @functools.cached_property
    def replacement_ids(self) -> np.ndarray:
        """Ids a "random token" replacement draws from: every non-special token."""
        return np.flatnonzero(~self.is_special)

    @classmethod
    def from_vocab(
        cls,
        vocab: Mapping[str, int],
        mask_token: str = MASK,
        special_tokens: Iterable[str] = SPECIAL_TOKENS,
        mask_unk: bool = True,
    ) -> VocabInfo:
        """Build from a token -> id mapping (e.g. a tokenizer's `vocab`). With `mask_unk` (Google's
        behaviour) [UNK] is an ordinary token even when `special_tokens` names it."""
        if mask_token not in vocab:
            raise BertkitError(f"vocabulary has no mask token {mask_token!r}")
        size = max(vocab.values()) + 1
        is_special = np.zeros(size, dtype=bool)
        is_continuation = np.zeros(size, dtype=bool)
        for token, idx in vocab.items():
            is_continuation[idx] = token.startswith("##")
        for token in special_tokens:
            if token in vocab:
                is_special[vocab[token]] = True
        is_special[vocab[mask_token]] = True
        if mask_unk and UNK in vocab:
            is_special[vocab[UNK]] = False
        return cls(int(vocab[mask_token]), is_special, is_continuation)

    @classmethod
    def from_tokenizer(cls, tokenizer, mask_unk: bool = True) -> VocabInfo:
        """Build from a `bertkit.tokenization.BertTokenizer` (its vocab and special token ids)."""
        info = cls.from_vocab(tokenizer.vocab, mask_unk=mask_unk)
        unk = tokenizer.vocab.get(UNK) if mask_unk else None
        for idx in getattr(tokenizer, "special_token_ids", ()):
            info.is_special[int(idx)] = int(idx) != unk
        return info


@dataclass(frozen=True, eq=False)
class MaskedTokens:
    """The corrupted sequence and, per selected position, the original id (the MLM label)."""

    input_ids: np.ndarray  # (T,) same dtype as the input
    positions: np.ndarray  # (P,) int32, ascending
    labels: np.ndarray  # (P,) int32, the original ids at `positions`


@dataclass(frozen=True, eq=False)
class MaskedBatch:
    """`mask_batch`'s result; rows of `positions`/`labels` are padded with 0 after `counts[b]`."""

    input_ids: np.ndarray  # (B, T) same dtype as the input
    positions: np.ndarray  # (B, P) int32, ascending within counts[b]
    labels: np.ndarray  # (B, P) int32, the original ids at `positions`
    counts: np.ndarray  # (B,) int32


def num_to_predict(num_eligible: int, masked_lm_prob: float, max_predictions: int) -> int:
    """How many positions to mask: 15% of the eligible tokens, at least 1, at most the cap."""
    if num_eligible == 0:
        return 0
    return min(max_predictions, max(1, int(round(num_eligible * masked_lm_prob))))


def _word_units(eligible: np.ndarray, continuation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group eligible positions into words: a `##` piece joins the eligible token before it.

    Returns (starts, lengths) of the words, in position order."""
    positions = np.flatnonzero(eligible)
    joins_previous = continuation[positions].copy()
    # A piece only joins when its left neighbour is an eligible token of the same run.
    joins_previous[1:] &= positions[1:] == positions[:-1] + 1
    if joins_previous.size:
        joins_previous[0] = False
    starts_idx = np.flatnonzero(~joins_previous)
    lengths = np.diff(np.append(starts_idx, positions.size))
    return positions[starts_idx], lengths


def _choose_whole_words(
    starts: np.ndarray, lengths: np.ndarray, k: int, rng: np.random.Generator
) -> np.ndarray:
    """Google's greedy pass over shuffled words: take a word if it still fits under k, else skip."""
    chosen: list[int] = []
    for w in rng.permutation(starts.size):
        if len(chosen) >= k:
            break
        n = int(lengths[w])
        if len(chosen) + n > k:
            continue
        chosen.extend(range(int(starts[w]), int(starts[w]) + n))
    return np.sort(np.asarray(chosen, dtype=np.int32))


def _check_ids(ids: np.ndarray, valid: np.ndarray, vocab: VocabInfo) -> None:
    real = ids[valid]
    if real.size and (real.min() < 0 or real.max() >= vocab.vocab_size):
        raise BertkitError(f"token id out of range for a vocabulary of {vocab.vocab_size}")


def _choose_tokens(eligible: np.ndarray, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per row, k[row] distinct eligible positions, uniformly (Google's shuffle-then-take with
    one-token units), as a (B, max k) array padded with T, ascending within each row."""
    B, T = eligible.shape
    keys = rng.random((B, T))  # (B, T)
    keys[~eligible] = 2.0  # never among the smallest k
    P = int(k.max(initial=0))
    if P == 0:
        return np.zeros((B, 0), dtype=np.int64)
    smallest = np.argpartition(keys, P - 1, axis=1)[:, :P]  # (B, P) the P smallest keys, unordered
    ranked = np.take_along_axis(keys, smallest, axis=1).argsort(axis=1)  # (B, P)
    order = np.take_along_axis(smallest, ranked, axis=1)  # (B, P) smallest keys first
    return np.sort(np.where(np.arange(P) < k[:, None], order, T), axis=1)  # (B, P)


def _choose_words(
    ids: np.ndarray, eligible: np.ndarray, k: np.ndarray, vocab: VocabInfo,
    rng: np.random.Generator,
) -> np.ndarray:
    """Whole-word masking, row by row (the greedy skip rule is sequential); padded with T."""
    B, T = ids.shape
    rows = []
    for b in range(B):
        starts, lengths = _word_units(eligible[b], vocab.is_continuation[ids[b]])
        rows.append(_choose_whole_words(starts, lengths, int(k[b]), rng))
    P = max((r.size for r in rows), default=0)
    out = np.full((B, P), T, dtype=np.int64)  # (B, P)
    for b, r in enumerate(rows):
        out[b, : r.size] = r
    return out


def mask_batch(
    input_ids: np.ndarray,
    lengths: np.ndarray,
    vocab: VocabInfo,
    rng: np.random.Generator,
    masked_lm_prob: float = 0.15,
    max_predictions: int = 20,
    whole_word_mask: bool = False,
) -> MaskedBatch:
    """Corrupt a padded batch for the MLM objective; pure given `rng` (the input is not modified).

    `input_ids` (B, T) holds sequence b in its first `lengths[b]` columns (the rest is ignored).
    Static masking (`bertkit prepare`) and dynamic masking (`DynamicMaskingCollate`) both call
    this one function."""
    ids = np.asarray(input_ids)
    B, T = ids.shape
    valid = np.arange(T) < np.asarray(lengths)[:, None]  # (B, T)
    _check_ids(ids, valid, vocab)
    safe_ids = np.where(valid, ids, 0)  # (B, T) padding may hold anything
    eligible = valid & ~vocab.is_special[safe_ids]  # (B, T)
    n = eligible.sum(axis=1)  # (B,)
    # Python's round() (half to even), as Google's int(round(n * p)); at least 1, at most the cap.
    k = np.where(n > 0, np.minimum(max_predictions, np.maximum(1, np.round(n * masked_lm_prob))), 0)
    if whole_word_mask:
        positions = _choose_words(safe_ids, eligible, k.astype(np.int64), vocab, rng)
    else:
        positions = _choose_tokens(eligible, k.astype(np.int64), rng)
    chosen = positions < T  # (B, P)
    positions = np.where(chosen, positions, 0)
    rows = np.broadcast_to(np.arange(B)[:, None], positions.shape)  # (B, P)
    labels = np.where(chosen, ids[rows, positions], 0)
    out = ids.copy()
    # The paper's 80/10/10: [MASK] for u < 0.8, unchanged for 0.8 <= u < 0.9, random above.
    u = rng.random(positions.shape)  # (B, P)
    pool = vocab.replacement_ids
    random_ids = pool[(rng.random(positions.shape) * pool.size).astype(np.int64)]  # (B, P)
    to_mask, to_random = chosen & (u < 0.8), chosen & (u >= 0.9)
    out[rows[to_mask], positions[to_mask]] = vocab.mask_token_id
    out[rows[to_random], positions[to_random]] = random_ids[to_random]
    return MaskedBatch(out, positions.astype(np.int32), labels.astype(np.int32),
                       chosen.sum(axis=1).astype(np.int32))


def mask_tokens(
    input_ids: np.ndarray,
    vocab: VocabInfo,
    rng: np.random.Generator,
    masked_lm_prob: float = 0.15,
    max_predictions: int = 20,
    whole_word_mask: bool = False,
) -> MaskedTokens:
    """`mask_batch` for one unpadded sequence (T,)."""
    ids = np.asarray(input_ids)
    m = mask_batch(ids[None, :], np.array([ids.shape[0]]), vocab, rng, masked_lm_prob,
                   max_predictions, whole_word_mask)
    count = int(m.counts[0])
    return MaskedTokens(m.input_ids[0], m.positions[0, :count], m.labels[0, :count])
