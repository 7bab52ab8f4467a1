"""Probing contextual vectors: how one word's vector differs between two contexts, layer by layer.

The seeds' example: "bank" in "I deposited money at the bank" vs "we sat on the bank of the river".
At the embedding layer the two vectors differ only by position; each Transformer layer mixes in
context, so the cosine similarity falls as we go up: the model tells the two senses apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bertkit.errors import BertkitError
from bertkit.model import BertModel
from bertkit.tokenization import BertTokenizer

# Sentences whose [MASK] a pre-trained BERT should fill (the demo's and the curve's probe).
FILL_MASK = ("it was the best of times, it was the worst of [MASK].",
             "he put his hand into his [MASK] and took out a letter.",
             "she opened the [MASK] and went out into the garden.",
             "the old man sat by the [MASK] and warmed his hands.",
             "i have never seen him so [MASK] in all my life.")


@dataclass
class LayerDrift:
    layer: int  # 0 = embeddings
    cosine: float  # similarity of the word's two vectors
    distance: float  # Euclidean distance between them
    control: float | None = None  # cosine against a third sentence with the first one's sense


def word_vectors(model: BertModel, tokenizer: BertTokenizer, text: str, word: str) -> torch.Tensor:
    """Every layer's vector of `word` in `text` (mean of its WordPieces): (L+1, H)."""
    enc = tokenizer.encode(text)
    pieces = tokenizer.tokenize(word)
    tokens = enc.tokens
    for start in range(len(tokens) - len(pieces) + 1):
        if tokens[start:start + len(pieces)] == pieces:
            break
    else:
        raise BertkitError(f"{word!r} does not occur as a word in {text!r}")
    ids = torch.tensor([enc.input_ids])
    with torch.inference_mode():
        out = model(ids, output_hidden_states=True)
    stacked = torch.stack(out.hidden_states)  # (L+1, 1, T, H)
    return stacked[:, 0, start:start + len(pieces)].mean(dim=1)  # (L+1, H)


def layer_drift(model: BertModel, tokenizer: BertTokenizer, word: str, text_a: str,
                text_b: str, same_sense_as_a: str | None = None) -> list[LayerDrift]:
    """Per layer: cosine and distance between `word` in `text_a` and in `text_b`; with
    `same_sense_as_a`, also the cosine to the word in that sentence (a control: context alone,
    without a change of sense, should move the vector less)."""
    a = word_vectors(model, tokenizer, text_a, word)
    b = word_vectors(model, tokenizer, text_b, word)
    cos = F.cosine_similarity(a, b, dim=-1)  # (L+1,)
    dist = (a - b).norm(dim=-1)  # (L+1,)
    control = [None] * len(cos)
    if same_sense_as_a is not None:
        c = word_vectors(model, tokenizer, same_sense_as_a, word)
        control = [float(x) for x in F.cosine_similarity(a, c, dim=-1)]
    return [LayerDrift(i, float(x), float(d), k) for i, (x, d, k) in enumerate(zip(cos, dist, control))]


def drift_table(rows: list[LayerDrift]) -> str:
    lines = ["layer        A-B cos  A-B dist  A-C cos (same sense)",
             "-----------  -------  --------  --------------------"]
    for r in rows:
        name = "embeddings" if r.layer == 0 else f"layer {r.layer}"
        bar = "#" * round((1 - r.cosine) * 40)
        control = f"{r.control:7.3f}" if r.control is not None else "      -"
        lines.append(f"{name:<11}  {r.cosine:7.3f}  {r.distance:8.3f}  {control}               {bar}")
    return "\n".join(lines)
