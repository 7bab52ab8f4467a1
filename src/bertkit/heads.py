"""Task heads on top of `BertModel`; each computes its loss when labels are given.

`layout=` (the batch's `VarlenLayout`, `bertkit.model.packed_layout`, built by the collate) runs the
encoder's dense layers on the real tokens only (`BertModel.forward_varlen`): the loss and its
gradients are the padded forward's, because no loss reads a padding position. Heads that can
say so (`supports_packing`); QA's start/end softmax spans the padding too, so it refuses one.

Shape legend: B batch, T tokens, H hidden, V vocabulary, P masked positions per sequence,
K choices, L labels.

Heads are thin on purpose: task logic (SQuAD windows, label alignment, decoding) lives in `tasks/`.
`FeatureTagger` is the paper's feature-based tagger (a BiLSTM on a frozen encoder's last four
layers, section 5.3); `tasks/feature_based.py` chooses when to build it.
Every head class loads and saves in Hugging Face's layout (`from_pretrained` / `save_pretrained`,
see `checkpoint.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.checkpoint import (
    PretrainedMixin,
    from_hf_state_dict,
    load_into,
    read_state_dict,
    save_weights,
)
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.model import BertModel, Dropout, activation, init_weights
from bertkit.varlen import VarlenLayout


@dataclass
class PreTrainingOutput:
    loss: torch.Tensor | None
    mlm_logits: torch.Tensor  # (B, P, V) at masked positions, else (B, T, V)
    nsp_logits: torch.Tensor | None  # (B, 2): 0 = IsNext, 1 = NotNext; None without the head
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None


@dataclass
class HeadOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None  # one per layer, (B, N, T, T)


@dataclass
class SpanOutput:
    loss: torch.Tensor | None
    start_logits: torch.Tensor  # (B, T)
    end_logits: torch.Tensor  # (B, T)


class MLMHead(nn.Module):
    """transform (dense + act + LayerNorm), then the decoder tied to the word embeddings + bias."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.word_embeddings = word_embeddings  # shared module: the decoder weight is tied
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.act(self.dense(hidden)))  # (..., H)
        return tied_decoder(h, self.word_embeddings.weight, self.bias)  # (..., V)


def tied_decoder(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """`F.linear(h, weight, bias)`, h (..., H) -> (..., V), for a weight shared with the word
    embeddings; when training eagerly, through `_TiedDecoderFunction` (same values, bit for bit,
    less memory traffic). Compiled or traced, `F.linear`: a Python autograd function would be
    an opaque node in a TorchScript trace."""
    if (not torch.is_grad_enabled() or not weight.requires_grad or torch.compiler.is_compiling()
            or torch.jit.is_tracing()):
        return F.linear(h, weight, bias)
    device = h.device.type
    if torch.is_autocast_enabled(device):  # the casts autocast's linear would make, made here
        dtype = torch.get_autocast_dtype(device)
        h, weight, bias = h.to(dtype), weight.to(dtype), bias.to(dtype)
    return _TiedDecoderFunction.apply(h, weight, bias)


class _TiedDecoderFunction(torch.autograd.Function):
    """The decoder's linear layer with its backward written out, so that the weight's gradient
    is one fresh contiguous (V, H) tensor. Autograd then adds the embedding lookup's gradient to
    it in place. Through `F.linear` the weight's gradient arrives as a transposed view, which
    autograd may not reuse: it sums the two (V, H) gradients into a third, newly allocated one
    (fresh pages and a pass over V x H floats every step). The gradients are computed by the
    same matmuls as `F.linear`'s backward. Measured: docs/reports/benchmarks.md, "Measurements behind
    code choices"."""

    @staticmethod
    def forward(ctx, h, weight, bias):
        ctx.save_for_backward(h, weight)
        return F.linear(h, weight, bias)  # (..., V)

    @staticmethod
    def backward(ctx, grad):
        h, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])  # (M, V), M = rows of h
        grad_h = (g @ weight).view(h.shape) if ctx.needs_input_grad[0] else None  # (..., H)
        grad_w = g.t().mm(h.reshape(-1, h.shape[-1]))  # (V, M) @ (M, H) -> (V, H), contiguous
        return grad_h, grad_w, g.sum(0) if ctx.needs_input_grad[2] else None


def gather_positions(hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """hidden (B, T, H), positions (B, P) -> (B, P, H): only the masked tokens reach the
    vocabulary projection, as in Google's `gather_indexes` (the V-wide matmul dominates small BERTs)."""
    index = positions.long().unsqueeze(-1).expand(-1, -1, hidden.size(-1))  # (B, P, H)
    return hidden.gather(1, index)  # (B, P, H)


def mlm_loss(logits, masked_lm_ids, masked_lm_weights=None, labels=None) -> torch.Tensor:
    """Google's weighted mean over masked positions, or HF's mean over labels != -100."""
    V = logits.size(-1)
    if labels is not None:
        return F.cross_entropy(logits.reshape(-1, V).float(), labels.reshape(-1), ignore_index=-100)
    per_token = F.cross_entropy(logits.reshape(-1, V).float(), masked_lm_ids.reshape(-1).long(),
                                reduction="none")  # (B*P,)
    if masked_lm_weights is None:
        return per_token.mean()
    w = masked_lm_weights.reshape(-1).to(per_token.dtype)
    return (per_token * w).sum() / (w.sum() + 1e-5)


class BertForPreTraining(PretrainedMixin, nn.Module):
    """MLM + NSP, the paper's pre-training objective; loss = MLM CE + NSP CE.

    Takes Google's feature names. With `masked_lm_positions` the vocabulary logits are computed
    only there; without them at every position (HF's `prediction_logits`)."""

    supports_packing: ClassVar[bool] = True  # no loss reads a padding position

    def __init__(self, config: BertConfig, causal: bool = False):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, causal=causal)  # causal: see BertModel
        self.mlm = MLMHead(config, self.bert.embeddings.word_embeddings)
        self.nsp = nn.Linear(config.hidden_size, 2)
        init_head(self, (self.mlm.dense, self.mlm.norm, self.nsp))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        masked_lm_positions: torch.Tensor | None = None,
        masked_lm_ids: torch.Tensor | None = None,
        masked_lm_weights: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        layout: VarlenLayout | None = None,
    ) -> PreTrainingOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, position_ids, layout=layout)
        hidden = out.last_hidden_state  # (B, T, H)
        if masked_lm_positions is not None:
            hidden = gather_positions(hidden, masked_lm_positions)  # (B, P, H)
        mlm_logits = self.mlm(hidden)  # (B, P or T, V)
        nsp_logits = self.nsp(out.pooler_output)  # (B, 2)
        m_loss = n_loss = None
        if masked_lm_ids is not None or labels is not None:
            m_loss = mlm_loss(mlm_logits, masked_lm_ids, masked_lm_weights, labels)
        if next_sentence_label is not None:
            n_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.reshape(-1).long())
        losses = [x for x in (m_loss, n_loss) if x is not None]
        loss = sum(losses) if losses else None
        return PreTrainingOutput(loss, mlm_logits, nsp_logits, m_loss, n_loss)


class BertForMaskedLM(PretrainedMixin, nn.Module):
    """MLM only (no pooler, as HF's). `labels` (B,T) with -100 on unscored tokens, or Google's
    sparse `masked_lm_positions` / `masked_lm_ids` / `masked_lm_weights`."""

    supports_packing: ClassVar[bool] = True  # no loss reads a padding position

    def __init__(self, config: BertConfig, causal: bool = False):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False, causal=causal)  # see BertModel
        self.mlm = MLMHead(config, self.bert.embeddings.word_embeddings)
        init_head(self, (self.mlm.dense, self.mlm.norm))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                masked_lm_positions=None, masked_lm_ids=None, masked_lm_weights=None,
                position_ids=None, layout: VarlenLayout | None = None) -> HeadOutput:
        hidden = self.bert(input_ids, token_type_ids, attention_mask, position_ids,
                           layout=layout).last_hidden_state  # (B, T, H)
        if masked_lm_positions is not None:
            hidden = gather_positions(hidden, masked_lm_positions)  # (B, P, H)
        logits = self.mlm(hidden)  # (B, P or T, V)
        loss = None
        if labels is not None or masked_lm_ids is not None:
            loss = mlm_loss(logits, masked_lm_ids, masked_lm_weights, labels)
        return HeadOutput(loss, logits)


class BertForSequenceClassification(PretrainedMixin, nn.Module):
    """Pooled [CLS] -> dropout -> linear (L = config.num_labels). L = 1 is regression (MSE),
    e.g. STS-B; otherwise cross-entropy."""

    supports_packing: ClassVar[bool] = True  # no loss reads a padding position

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.dropout = Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        init_head(self, (self.classifier,))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                position_ids=None, layout: VarlenLayout | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False
                ) -> HeadOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, position_ids,
                        output_hidden_states=output_hidden_states,
                        output_attentions=output_attentions, layout=layout)
        logits = self.classifier(self.dropout(out.pooler_output))  # (B, L)
        loss = None
        if labels is not None:
            if self.config.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels.long())
        return HeadOutput(loss, logits, out.hidden_states, out.attentions)


class BertForTokenClassification(PretrainedMixin, nn.Module):
    """Per-token tags (no pooler, as HF's); labels -100 are ignored (e.g. non-first WordPieces)."""

    supports_packing: ClassVar[bool] = True  # no loss reads a padding position

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        init_head(self, (self.classifier,))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                position_ids=None, layout: VarlenLayout | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False
                ) -> HeadOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, position_ids,
                        output_hidden_states=output_hidden_states,
                        output_attentions=output_attentions, layout=layout)
        hidden = out.last_hidden_state  # (B, T, H); zeros at padding if packed
        logits = self.classifier(self.dropout(hidden))  # (B, T, L)
        return HeadOutput(tagging_loss(logits, labels), logits, out.hidden_states,
                          out.attentions)


def tagging_loss(logits: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor | None:
    """Per-token cross-entropy over (B, T, L) logits; labels -100 (padding, non-first
    WordPieces) are ignored."""
    if labels is None:
        return None
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1).long(),
                           ignore_index=-100)


class BertForQuestionAnswering(PretrainedMixin, nn.Module):
    """Span extraction: start/end logits per token; loss = mean of the two cross-entropies.
    Positions outside the window are clamped to T and ignored, as HF does."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        init_head(self, (self.qa_outputs,))

    supports_packing: ClassVar[bool] = False  # the softmax over T reads padding positions

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, start_positions=None,
                end_positions=None, position_ids=None,
                layout: VarlenLayout | None = None) -> SpanOutput:
        if layout is not None:
            raise BertkitError("BertForQuestionAnswering has no packed forward: its start/end "
                               "softmax spans the padding; call without layout=")
        hidden = self.bert(input_ids, token_type_ids, attention_mask, position_ids).last_hidden_state
        logits = self.qa_outputs(hidden)  # (B, T, 2)
        start, end = logits.float().unbind(-1)  # 2 x (B, T)
        loss = None
        if start_positions is not None and end_positions is not None:
            T = start.size(1)
            s = start_positions.reshape(-1).long().clamp(0, T)
            e = end_positions.reshape(-1).long().clamp(0, T)
            loss = (F.cross_entropy(start, s, ignore_index=T)
                    + F.cross_entropy(end, e, ignore_index=T)) / 2
        return SpanOutput(loss, start.contiguous(), end.contiguous())


class BertForMultipleChoice(PretrainedMixin, nn.Module):
    """Input (B, K, T): each choice encoded on its own, one score from its pooled output,
    softmax over the K choices (SWAG)."""

    supports_packing: ClassVar[bool] = True  # no loss reads a padding position

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.dropout = Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, 1)
        init_head(self, (self.classifier,))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                position_ids=None, layout: VarlenLayout | None = None) -> HeadOutput:
        if input_ids.dim() != 3:
            raise ValueError(f"multiple choice input_ids must be (batch, choices, tokens), "
                             f"got {tuple(input_ids.shape)}")
        B, K, T = input_ids.shape

        def flat(t):
            return None if t is None else t.reshape(B * K, -1)  # (B*K, T)

        pooled = self.bert(flat(input_ids), flat(token_type_ids), flat(attention_mask),
                           flat(position_ids), layout=layout).pooler_output  # (B*K, H)
        logits = self.classifier(self.dropout(pooled)).view(B, K)  # (B, K)
        loss = F.cross_entropy(logits.float(), labels.long()) if labels is not None else None
        return HeadOutput(loss, logits)


def classifier_dropout(config: BertConfig) -> float:
    if config.classifier_dropout is not None:
        return config.classifier_dropout
    return config.hidden_dropout_prob


def init_head(model: nn.Module, modules) -> None:
    for m in modules:
        m.apply(lambda x: init_weights(x, model.config.initializer_range))


# config.json key naming a head that is not one of HF's classes (FeatureTagger)
HEAD_KEY = "bertkit_head"
# a frozen encoder's features are fixed: no dropout noise on them
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


HEAD_CLASSES = {
    cls.__name__: cls
    for cls in (BertForPreTraining, BertForMaskedLM, BertForSequenceClassification,
                BertForTokenClassification, BertForQuestionAnswering, BertForMultipleChoice)
}
