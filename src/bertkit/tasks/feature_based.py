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
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.checkpoint import from_hf_state_dict, load_into, read_state_dict, save_weights
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import HEAD_CLASSES, HeadOutput, tagging_loss
from bertkit.model import BertModel, Dropout

FEATURES = ("cls", "concat-last-4")
HEAD_KEY = "bertkit_head"
FROZEN = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


class FeatureTagger(nn.Module):
    """Frozen BERT -> concat of the last 4 layers (B, T, 4H) -> 2-layer BiLSTM -> linear (B, T, L).
    `lstm_hidden_size` per direction defaults to H (768 for BERT-base, the paper's size)."""

    def __init__(self, config: BertConfig, lstm_hidden_size: int | None = None):
        super().__init__()
        lstm_hidden_size = lstm_hidden_size or config.hidden_size
        extra = dict(config.extra, **{HEAD_KEY: "FeatureTagger",
                                      "lstm_hidden_size": lstm_hidden_size})
        self.config = config.replace(extra=extra)
        self.bert = BertModel(self.config, add_pooling_layer=False)
        # Models with fewer than 3 layers concatenate all they have (embeddings included).
        self.n_layers = min(4, config.num_hidden_layers + 1)
        self.lstm = nn.LSTM(self.n_layers * config.hidden_size, lstm_hidden_size, num_layers=2,
                            bidirectional=True, batch_first=True, dropout=0.1)
        self.dropout = Dropout(0.1)
        self.classifier = nn.Linear(2 * lstm_hidden_size, config.num_labels)
        for p in self.bert.parameters():
            p.requires_grad = False

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                position_ids=None) -> HeadOutput:
        with torch.no_grad():
            self.bert.eval()  # fixed features: no dropout, whatever mode the loop set
            states = self.bert(input_ids, token_type_ids, attention_mask, position_ids,
                               output_hidden_states=True).hidden_states
        features = torch.cat(states[-self.n_layers:], dim=-1)  # (B, T, 4H)
        B, T = input_ids.shape
        lengths = (attention_mask.sum(-1) if attention_mask is not None
                   else torch.full((B,), T)).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(features, lengths, batch_first=True,
                                                   enforce_sorted=False)
        hidden, _ = self.lstm(packed)
        hidden, _ = nn.utils.rnn.pad_packed_sequence(hidden, batch_first=True,
                                                     total_length=T)  # (B, T, 2 x lstm)
        logits = self.classifier(self.dropout(hidden))  # (B, T, L)
        return HeadOutput(tagging_loss(logits, labels), logits)

    @classmethod
    def from_encoder(cls, model_dir: str | os.PathLike, **config_changes: Any) -> FeatureTagger:
        config = BertConfig.load(model_dir).replace(**config_changes, **FROZEN)
        model = cls(config)
        load_into(model.bert, read_state_dict(model_dir), str(model_dir))
        return model

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike) -> FeatureTagger:
        config = BertConfig.load(model_dir)
        model = cls(config, config.extra.get("lstm_hidden_size"))
        state = from_hf_state_dict(read_state_dict(model_dir))
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            raise BertkitError(f"{model_dir}: weights do not fit FeatureTagger ({err})") from None
        model.eval()
        return model

    def save_pretrained(self, model_dir: str | os.PathLike) -> None:
        Path(model_dir).mkdir(parents=True, exist_ok=True)
        self.config.save(Path(model_dir) / "config.json")
        save_weights(self, model_dir)


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
