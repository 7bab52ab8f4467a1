"""The paper's feature-based alternative (Devlin et al., 2019, section 5.3, Table 7): BERT frozen,
its activations fed to a small trained model.

- `--freeze-encoder` (any task): the usual head on a frozen encoder, i.e. a linear classifier on
  fixed features (the advice when labels are scarce). The encoder's dropout is turned off, since
  fixed features should not be noised.
- `--freeze-encoder --features concat-last-4` (NER): the last four hidden layers concatenated,
  (B, T, 4H), into a two-layer BiLSTM and a linear tagger, as in Table 7.
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import FROZEN, HEAD_CLASSES, HEAD_KEY, FeatureTagger

FEATURES = ("cls", "concat-last-4")


def load_feature_model(task: Any, model_dir: str | os.PathLike, changes: dict[str, Any],
                       features: str) -> nn.Module:
    """A frozen-encoder model for `task` (see the module docstring)."""
    if features not in FEATURES:
        raise BertkitError(f"--features must be one of {', '.join(FEATURES)}, got {features!r}")
    if features == "concat-last-4":
        if task.head != "BertForTokenClassification":
            raise BertkitError("--features concat-last-4 (the BiLSTM tagger) is for NER tasks")
        return FeatureTagger.from_encoder(model_dir, **changes)
    model = HEAD_CLASSES[task.head].from_pretrained(model_dir, classifier_dropout=0.1,
                                                    **changes, **FROZEN)
    for p in model.bert.parameters():
        p.requires_grad = False
    return model


def load_finetuned(task: Any, model_dir: str | os.PathLike) -> nn.Module:
    """A fine-tuned model saved by `bertkit finetune`: the task's head, or the BiLSTM tagger."""
    config = BertConfig.load(model_dir)
    if config.extra.get(HEAD_KEY) == "FeatureTagger":
        return FeatureTagger.from_pretrained(model_dir)
    return HEAD_CLASSES[task.head].from_pretrained(model_dir)
