"""Batching pre-training instances into exactly the tensors `BertForPreTraining` takes.

Shape legend: B batch, T longest sequence in the batch, P most masked positions in the batch.
Sequences are padded to the batch maximum (not to max_seq_length), masked positions with
position 0 / id 0 / weight 0, so that padded predictions add nothing to the weighted MLM loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from bertkit.data.masking import VocabInfo, mask_tokens
from bertkit.errors import BertkitError

Item = Mapping[str, np.ndarray]


def _pad_2d(rows: Sequence[np.ndarray], width: int, fill, dtype) -> np.ndarray:
    out = np.full((len(rows), width), fill, dtype=dtype)  # (B, width)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out


def collate_pretraining(items: Sequence[Item], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Items from `ShardDataset` (statically masked) -> a batch for `BertForPreTraining(**batch)`.

    Returns `input_ids`, `token_type_ids`, `attention_mask` (B, T) int64; `masked_lm_positions`,
    `masked_lm_ids` (B, P) int64 and `masked_lm_weights` (B, P) float32 (1 real, 0 padding);
    `next_sentence_label` (B,) int64 (0 IsNext, 1 NotNext) — left out when the items carry no
    sentence task (label -1, `--objective mlm`), so that the model computes the MLM loss only.
    """
    if not items:
        raise BertkitError("cannot collate an empty batch")
    ids = [np.asarray(it["input_ids"]) for it in items]
    T = max(len(x) for x in ids)
    P = max(len(it["masked_lm_positions"]) for it in items)
    if P == 0:
        raise BertkitError(
            "these instances carry no masked positions (prepared with dynamic masking); "
            "batch them with DynamicMaskingCollate"
        )
    batch = {
        "input_ids": _pad_2d(ids, T, pad_token_id, np.int64),
        "token_type_ids": _pad_2d([it["token_type_ids"] for it in items], T, 0, np.int64),
        "attention_mask": _pad_2d([np.ones(len(x), np.int64) for x in ids], T, 0, np.int64),
        "masked_lm_positions": _pad_2d([it["masked_lm_positions"] for it in items], P, 0, np.int64),
        "masked_lm_ids": _pad_2d([it["masked_lm_ids"] for it in items], P, 0, np.int64),
        "masked_lm_weights": _pad_2d([it["masked_lm_weights"] for it in items], P, 0, np.float32),
    }
    return _finish(batch, items)


def _finish(batch: dict[str, np.ndarray], items: Sequence[Item]) -> dict[str, torch.Tensor]:
    """Add the sentence labels (when the objective has them) and convert to tensors."""
    labels = np.array([int(it["next_sentence_label"]) for it in items], dtype=np.int64)  # (B,)
    if (labels >= 0).all():
        batch["next_sentence_label"] = labels
    elif (labels >= 0).any():
        raise BertkitError("batch mixes instances with and without a next-sentence label")
    return {k: torch.from_numpy(v) for k, v in batch.items()}


class DynamicMaskingCollate:
    """Masks each example afresh (RoBERTa's dynamic masking), then collates like
    `collate_pretraining`. Items need unmasked `input_ids` and `token_type_ids` (any
    pre-existing mask fields are ignored and replaced).

    The masks of an example are a pure function of (seed, its global stream position): the loop
    passes the positions, so an example seen again in a later epoch gets new masks, while the
    masks of a run do not depend on how its batches are split over processes, micro-batches or
    DataLoader workers, and a resumed run (on any number of processes) masks as the
    uninterrupted one did. The object holds no state to save.
    """

    wants_positions = True  # the loop calls `collate(items, positions)`

    def __init__(
        self,
        vocab: VocabInfo,
        seed: int = 0,
        masked_lm_prob: float = 0.15,
        max_predictions: int = 20,
        whole_word_mask: bool = False,
        pad_token_id: int = 0,
    ):
        self.vocab = vocab
        self.seed = int(seed)
        self.masked_lm_prob = masked_lm_prob
        self.max_predictions = max_predictions
        self.whole_word_mask = whole_word_mask
        self.pad_token_id = pad_token_id

    def __call__(self, items: Sequence[Item], positions: Sequence[int]) -> dict[str, torch.Tensor]:
        if not items:
            raise BertkitError("cannot collate an empty batch")
        if len(positions) != len(items):
            raise BertkitError(f"{len(items)} items but {len(positions)} stream positions")
        return collate_pretraining([self.mask(it, p) for it, p in zip(items, positions)],
                                   self.pad_token_id)

    def mask(self, item: Item, position: int) -> dict[str, np.ndarray]:
        """`item` with the masks of stream position `position` (as a statically masked item)."""
        rng = np.random.default_rng((self.seed, int(position)))
        m = mask_tokens(np.asarray(item["input_ids"]), self.vocab, rng, self.masked_lm_prob,
                        self.max_predictions, self.whole_word_mask)
        return {**item, "input_ids": m.input_ids, "masked_lm_positions": m.positions,
                "masked_lm_ids": m.labels,
                "masked_lm_weights": np.ones(len(m.positions), np.float32)}
