"""What each endpoint computes, as plain functions of a loaded model: JSON-ready dicts and lists.

They run on the server's forward thread (see `batching`), never on the event loop. Each reuses the
library: `Encoder` for embeddings and per-layer vectors, `inference.pretraining` for fill-mask and
NSP, the task's own featurize/decode for predictions, `BertModel(output_attentions=True)` for
attention maps.

Shape legend: L layers, N heads, T tokens, H hidden.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bertkit.errors import BertkitError
from bertkit.inference.pretraining import fill_mask, is_next_probability
from bertkit.serve.models import ServedModel


def tokenize(model: ServedModel, text: str, pair: str | None) -> dict[str, Any]:
    """WordPieces with ids, segments, character offsets, word ids and [UNK] flags."""
    tok = model.tokenizer
    enc = tok.encode(text, pair, truncation=False)
    special = tok.special_token_ids
    return {"tokens": enc.tokens, "ids": enc.input_ids, "type_ids": enc.token_type_ids,
            "offsets": [list(o) for o in enc.offsets], "word_ids": enc.word_ids,
            "special": [i in special for i in enc.input_ids],
            "unk": [i == tok.unk_token_id for i in enc.input_ids]}


def count_tokens(model: ServedModel, texts: Sequence[str], pairs: Sequence[str] | None = None
                 ) -> list[int]:
    """Tokens of each text (or pair) with [CLS]/[SEP], untruncated: for the per-text limit."""
    encodings = model.tokenizer.encode_batch(list(texts), list(pairs) if pairs else None,
                                             truncation=False)
    return [len(e.input_ids) for e in encodings]


def embed_batch(model: ServedModel, precision: str, pooling: str | None, normalize: bool):
    """A batch function for the batcher: lists of texts -> one (n, H) array per list, all the
    lists encoded together (one length-bucketed pass of the `Encoder`)."""
    def run(payloads: Sequence[list[str]]) -> list[np.ndarray]:
        texts = [t for texts in payloads for t in texts]
        vectors = model.encoder(precision).encode(texts, pooling=pooling, normalize=normalize,
                                                  batch_size=64)
        sizes = np.cumsum([len(p) for p in payloads])[:-1]
        return np.split(vectors, sizes)
    return run


def similarity_matrix(vectors: np.ndarray) -> list[list[float]]:
    """Cosine similarity of every pair of (already normalized) vectors."""
    return rounded(vectors @ vectors.T, 5)


def fill_masks(model: ServedModel, text: str, k: int) -> dict[str, Any]:
    """Top-k tokens and probabilities at each [MASK] (the model's trained MLM head)."""
    model.require("mlm", "fill-mask")
    enc = model.tokenizer.encode(text, truncation=False)
    masks = fill_mask(model.pretraining, model.tokenizer, text, k)
    return {"tokens": enc.tokens,
            "masks": [{"position": i, "predictions": [{"token": t, "probability": round(p, 6)}
                                                      for t, p in top]} for i, top in masks]}


def next_sentence(model: ServedModel, a: str, b: str) -> dict[str, Any]:
    model.require("nsp", "next-sentence prediction")
    p = is_next_probability(model.pretraining, model.tokenizer, a, b)
    return {"is_next": round(p, 6), "not_next": round(1 - p, 6)}


@torch.inference_mode()
def attention(model: ServedModel, text: str, pair: str | None) -> dict[str, Any]:
    """Attention probabilities of every layer and head, (L, N, T, T), rows = the attending
    token, for one text or a pair (no padding: one sequence)."""
    enc = model.tokenizer.encode(text, pair, truncation=False)
    ids = torch.tensor([enc.input_ids])  # (1, T)
    types = torch.tensor([enc.token_type_ids])  # (1, T)
    out = model.bert(ids, types, output_attentions=True)
    maps = torch.stack(out.attentions)[:, 0]  # (L, N, T, T)
    return {"tokens": enc.tokens, "type_ids": enc.token_type_ids,
            "layers": maps.shape[0], "heads": maps.shape[1],
            "attentions": rounded(maps.float().numpy(), 4)}


def layer_vectors(model: ServedModel, text: str) -> dict[str, Any]:
    """Every token's vector after each layer (0 = embeddings .. L), (L+1, T, H)."""
    L = model.config.num_hidden_layers
    feats = model.encoder().features([text], layers=range(L + 1), combine="none")[0]
    vectors = feats.vectors.transpose(1, 0, 2)  # (T, L+1, H) -> (L+1, T, H)
    return {"tokens": feats.tokens, "layers": L + 1, "vectors": rounded(vectors, 5)}


def word_drift(model: ServedModel, texts: Sequence[str], word: str) -> dict[str, Any]:
    """Layer by layer, the cosine between `word`'s vectors in two texts (mean of its pieces):
    how context pulls one word's meaning apart ("bank" of a river vs. of money)."""
    L = model.config.num_hidden_layers
    feats = model.encoder().features(list(texts), layers=range(L + 1), combine="none")
    means, used = [], []
    for text, f in zip(texts, feats):
        start, end = find_word(text, word)
        rows = [i for i, (s, e) in enumerate(f.offsets) if e > s and s >= start and e <= end]
        if not rows:
            raise BertkitError(f"{word!r} was cut off by the maximum length in {text!r}")
        means.append(f.vectors[rows].mean(axis=0))  # (L+1, H)
        used.append([f.tokens[i] for i in rows])
    a, b = means
    cos = (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1),
                                       1e-12)  # (L+1,)
    return {"word": word, "pieces": used, "layers": list(range(L + 1)),
            "cosine": rounded(cos, 6)}


def find_word(text: str, word: str) -> tuple[int, int]:
    """Character span of the first whole-word, case-insensitive occurrence of `word`."""
    match = re.search(rf"(?<!\w){re.escape(word.strip())}(?!\w)", text, re.IGNORECASE)
    if not word.strip() or match is None:
        raise BertkitError(f"the word {word!r} does not occur in {text!r}")
    return match.span()


def rounded(x: np.ndarray, decimals: int) -> list:
    """Nested lists of floats with `decimals` digits (float64 first: a rounded float32 prints
    as 0.8390100002288818), a smaller response."""
    return np.round(x.astype(np.float64), decimals).tolist()
