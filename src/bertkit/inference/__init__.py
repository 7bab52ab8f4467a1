"""Inference: `Encoder` (embeddings and per-layer features for many texts, fast) and export.
Both run `model.py`'s forward pass; nothing here re-implements a layer."""

from bertkit.inference.encoder import (
    COMBINES,
    FROZEN_POOLING,
    INFERENCE_PRECISIONS,
    POOLINGS,
    WINDOW_TEXTS,
    Encoder,
    InferenceStats,
    TextWindow,
    TokenFeatures,
    text_windows,
)

__all__ = ["COMBINES", "FROZEN_POOLING", "INFERENCE_PRECISIONS", "POOLINGS", "WINDOW_TEXTS", "Encoder",
           "InferenceStats", "TextWindow", "TokenFeatures", "text_windows"]
