"""Batching pre-training instances into exactly the tensors `BertForPreTraining` takes.

Shape legend: B batch, T longest sequence in the batch, P most masked positions in the batch.
Sequences are padded to the batch maximum (not to max_seq_length), masked positions with
position 0 / id 0 / weight 0, so that padded predictions add nothing to the weighted MLM loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from bertkit.data.masking import VocabInfo, mask_batch
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
    """Masks each batch afresh (RoBERTa's dynamic masking), then collates like
    `collate_pretraining`. Items need unmasked `input_ids` and `token_type_ids` (any
    pre-existing mask fields are ignored and replaced).

    The generator is owned by this object and advances batch after batch, so every epoch sees
    new masks while a run from the same seed is reproducible. With DataLoader workers each worker
    holds a copy of the generator: re-seed it per worker (`reseed`) to avoid repeated masks.
    """

    def __init__(
        self,
        vocab: VocabInfo,
        rng: np.random.Generator | int = 0,
        masked_lm_prob: float = 0.15,
        max_predictions: int = 20,
        whole_word_mask: bool = False,
        pad_token_id: int = 0,
    ):
        self.vocab = vocab
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.masked_lm_prob = masked_lm_prob
        self.max_predictions = max_predictions
        self.whole_word_mask = whole_word_mask
        self.pad_token_id = pad_token_id

    def __call__(self, items: Sequence[Item]) -> dict[str, torch.Tensor]:
        if not items:
            raise BertkitError("cannot collate an empty batch")
        ids = [np.asarray(it["input_ids"]) for it in items]
        lengths = np.array([len(x) for x in ids])  # (B,)
        T = int(lengths.max())
        m = mask_batch(_pad_2d(ids, T, self.pad_token_id, np.int64), lengths, self.vocab,
                       self.rng, self.masked_lm_prob, self.max_predictions, self.whole_word_mask)
        P = m.positions.shape[1]
        batch = {
            "input_ids": m.input_ids,
            "token_type_ids": _pad_2d([it["token_type_ids"] for it in items], T, 0, np.int64),
            "attention_mask": (np.arange(T) < lengths[:, None]).astype(np.int64),  # (B, T)
            "masked_lm_positions": m.positions.astype(np.int64),
            "masked_lm_ids": m.labels.astype(np.int64),
            "masked_lm_weights": (np.arange(P) < m.counts[:, None]).astype(np.float32),  # (B, P)
        }
        return _finish(batch, items)


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
