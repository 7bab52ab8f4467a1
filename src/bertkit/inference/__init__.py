"""Inference: `Encoder` (embeddings and per-layer features for many texts, fast) and export.
Both run `model.py`'s forward pass; nothing here re-implements a layer."""

from bertkit.inference.encoder import (
    COMBINES,
    INFERENCE_PRECISIONS,
    POOLINGS,
    Encoder,
    InferenceStats,
    TokenFeatures,
)

__all__ = ["COMBINES", "INFERENCE_PRECISIONS", "POOLINGS", "Encoder", "InferenceStats", "TokenFeatures"]
