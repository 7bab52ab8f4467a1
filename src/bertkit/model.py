"""The BERT encoder (Devlin et al., 2019), the whole forward pass top to bottom.

Shape legend: B batch, T tokens, H hidden, N heads, D head dim (H = N * D), I intermediate (4H).

    input_ids ─► word + position + segment embeddings ─► LayerNorm ─► dropout
              ─► N x [ self-attention, +residual, LayerNorm, FFN (H→I, GELU, I→H), +residual, LayerNorm ]
              ─► last_hidden_state (B,T,H);  pooler: tanh(dense(h[:, 0]))  ─► pooler_output (B,H)

Post-LayerNorm blocks as in the paper. Attention goes through
`torch.nn.functional.scaled_dot_product_attention` (fused kernels); the explicit softmax path is
used only when attention probabilities are asked for. Q, K and V are one fused (H → 3H) linear
layer: one matmul instead of three; `checkpoint.py` splits it into HF's query/key/value on save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.checkpoint import PretrainedMixin
from bertkit.config import BertConfig


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, H)
    pooler_output: torch.Tensor | None  # (B, H); None when the model has no pooler
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + each layer, (B, T, H)
    attentions: tuple[torch.Tensor, ...] | None = None  # one per layer, (B, N, T, T)


@dataclass
class PackedLayout:
    """Where the S real tokens of B sequences (laid end to end) sit in the padded (B, T) layout:
    the dense parts of a layer run on (S, H), attention alone on (B, N, T, D)."""

    batch: int  # B
    max_len: int  # T
    scatter: torch.Tensor | None  # (S,) row of each token in the (B*T) layout; None = no padding
    mask: torch.Tensor | None  # (B, 1, 1, T) True = real key; None when nothing is padded

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> PackedLayout:
        """The layout of the real tokens of a padded batch (attention_mask (B, T), 1 = real;
        any pattern, not only right padding)."""
        B, T = attention_mask.shape
        real = attention_mask.reshape(-1).bool()  # (B*T,)
        scatter = real.nonzero().squeeze(1)  # (S,)
        return cls(B, T, scatter, real.view(B, 1, 1, T))


def activation(name: str):
    if name == "gelu":
        return F.gelu  # the exact erf form, as the original BERT
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    return F.silu  # "silu" / "swish"; BertConfig validated the name


class Embeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, H, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, H)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, H)
        self.norm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids) -> torch.Tensor:
        x = self.word_embeddings(input_ids)  # (B, T, H)
        x = x + self.token_type_embeddings(token_type_ids)  # (B, T, H)
        x = x + self.position_embeddings(position_ids)  # (B or 1, T, H) broadcast
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.qkv = nn.Linear(H, 3 * H)  # rows: [query; key; value]
        self.out = nn.Linear(H, H)
        self.attn_dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, want_probs: bool):
        B, T, H = x.shape
        N = self.num_heads
        D = H // N
        qkv = self.qkv(x).view(B, T, 3, N, D)  # (B, T, 3, N, D)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, N, T, D)
        dropout_p = self.attn_dropout_p if self.training else 0.0
        probs = None
        if want_probs:
            scores = q @ k.transpose(-1, -2) / math.sqrt(D)  # (B, N, T, T)
            if mask is not None:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            probs = scores.softmax(dim=-1)  # (B, N, T, T)
            ctx = F.dropout(probs, dropout_p, self.training) @ v  # (B, N, T, D)
        else:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        ctx = ctx.transpose(1, 2).reshape(B, T, H)  # (B, T, N*D)
        return self.out(ctx), probs

    def forward_packed(self, x: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
        """The same attention on packed tokens x (S, H): projections on the real tokens only,
        scores on the padded layout (no probabilities)."""
        B, T, H = layout.batch, layout.max_len, x.shape[-1]
        N = self.num_heads
        D = H // N
        qkv = self.qkv(x)  # (S, 3H)
        if layout.scatter is not None:
            qkv = qkv.new_zeros(B * T, 3 * H).index_copy_(0, layout.scatter, qkv)  # (B*T, 3H)
        q, k, v = qkv.view(B, T, 3, N, D).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, N, T, D)
        dropout_p = self.attn_dropout_p if self.training else 0.0
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=layout.mask,
                                             dropout_p=dropout_p)  # (B, N, T, D)
        ctx = ctx.transpose(1, 2).reshape(B * T, H)  # (B*T, H)
        if layout.scatter is not None:
            ctx = ctx.index_select(0, layout.scatter)  # (S, H)
        return self.out(ctx)


class FeedForward(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)  # H -> I
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)  # I -> H
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class EncoderLayer(nn.Module):
    """Post-LN block: x = LN(x + Attn(x)); x = LN(x + FFN(x)), with dropout on each branch."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x, mask, want_probs: bool = False):
        attn, probs = self.attention(x, mask, want_probs)
        x = self.attention_norm(x + self.dropout(attn))
        x = self.ffn_norm(x + self.dropout(self.ffn(x)))
        return x, probs

    def forward_packed(self, x: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
        """The same block on packed tokens (S, H); see `SelfAttention.forward_packed`."""
        x = self.attention_norm(x + self.dropout(self.attention.forward_packed(x, layout)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class Pooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # [CLS] (B, H) -> (B, H)


class BertModel(PretrainedMixin, nn.Module):
    """The BERT encoder. `add_pooling_layer=False` matches HF's MLM/tagging/QA models."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_hidden_layers))
        self.pooler = Pooler(config) if add_pooling_layer else None
        self.apply(lambda m: init_weights(m, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        causal: bool = False,
        packed: bool = False,
    ) -> BertOutput:
        """`attention_mask` (B,T): 1 for real tokens, 0 for padding. `causal=True` also hides
        every later position (the left-to-right LM of the paper's ablation). `packed=True` runs
        the dense layers on the real tokens only (`forward_unpadded`): the same values at real
        tokens, zeros at padding."""
        check_inputs(self.config, input_ids, token_type_ids, attention_mask, position_ids)
        B, T = input_ids.shape
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).unsqueeze(0)  # (1, T)
        mask = attention_bool_mask(attention_mask, T, causal, input_ids.device)
        extras = causal or output_hidden_states or output_attentions or _exporting()
        if packed and mask is not None and not extras:
            return self.forward_unpadded(input_ids, token_type_ids, position_ids, attention_mask)
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (B, T, H)
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for layer in self.layers:
            x, probs = layer(x, mask, output_attentions)
            if hidden_states is not None:
                hidden_states.append(x)
            if attentions is not None:
                attentions.append(probs)
        pooled = self.pooler(x) if self.pooler is not None else None
        return BertOutput(
            last_hidden_state=x,
            pooler_output=pooled,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )


    def forward_unpadded(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                         position_ids: torch.Tensor, attention_mask: torch.Tensor) -> BertOutput:
        """`forward` of a padded batch with the dense layers (embeddings, projections, FFN,
        LayerNorms) on the S real tokens only; attention alone sees the (B, T) layout. Training
        uses it too: the loss and every gradient equal the padded forward's (dropout aside,
        whose masks are drawn over other shapes). Padding positions come back as zeros."""
        B, T = input_ids.shape
        layout = PackedLayout.from_mask(attention_mask)
        positions = position_ids.expand(B, T)  # (B, T)
        ids, types, pos = (t.reshape(-1).index_select(0, layout.scatter)  # 3 x (S,)
                           for t in (input_ids, token_type_ids, positions))
        x = self.forward_packed(ids, types, pos, layout, [len(self.layers)])[0]  # (S, H)
        H = x.shape[-1]
        hidden = x.new_zeros(B * T, H).index_copy(0, layout.scatter, x).view(B, T, H)  # (B, T, H)
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return BertOutput(last_hidden_state=hidden, pooler_output=pooled)

    def forward_packed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                       position_ids: torch.Tensor, layout: PackedLayout,
                       hidden_index: list[int]) -> list[torch.Tensor]:
        """The encoder on packed tokens (all (S,): ids, segments, positions within their
        sequence): hidden states (S, H) for each index asked for (0 = embeddings, i = after
        layer i), equal to `forward` at the real tokens with less work on padding."""
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (S, H)
        states = {0: x}
        for i, layer in enumerate(self.layers[:max(hidden_index, default=0)], start=1):
            x = layer.forward_packed(x, layout)  # (S, H)
            states[i] = x
        return [states[i] for i in hidden_index]


def _exporting() -> bool:
    """Compiling or exporting: no value may be read back (a graph break, or a constant baked
    into the exported graph), so the mask is always applied and inputs are not inspected."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def attention_bool_mask(attention_mask, T: int, causal: bool, device) -> torch.Tensor | None:
    """Boolean mask broadcastable to (B, N, T, T), True = may attend; None when nothing is hidden
    (lets SDPA pick its fastest kernel)."""
    mask = None
    # Checking for "no padding" reads a value back (see _exporting): there, keep the mask.
    if attention_mask is not None and (_exporting() or not bool(attention_mask.all())):
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): keys that are real
    if causal:
        tri = torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (T, T): key <= query
        mask = tri if mask is None else mask & tri  # (B, 1, T, T)
    return mask


def check_inputs(config: BertConfig, input_ids, token_type_ids, attention_mask, position_ids):
    """Bad ids make embedding lookups fail deep inside (or silently on some devices): say so here.
    Skipped inside torch.compile and export, where values cannot be read back."""
    if _exporting():
        return
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids)
        raise ValueError(f"input_ids must be a 2-D tensor (batch, tokens), got {shape}")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must be an integer tensor, got {input_ids.dtype}")
    B, T = input_ids.shape
    if T > config.max_position_embeddings:
        raise ValueError(f"sequence length {T} exceeds max_position_embeddings "
                         f"{config.max_position_embeddings}")
    check_range("input_ids", input_ids, config.vocab_size)
    for name, t in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if t is not None and t.shape != input_ids.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} != input_ids shape {(B, T)}")
    if token_type_ids is not None:
        check_range("token_type_ids", token_type_ids, config.type_vocab_size)
    if position_ids is not None:
        if position_ids.dim() != 2 or position_ids.shape[-1] != T:
            raise ValueError(f"position_ids shape {tuple(position_ids.shape)} does not fit {(B, T)}")
        check_range("position_ids", position_ids, config.max_position_embeddings)


def check_range(name: str, t: torch.Tensor, size: int) -> None:
    if not t.numel():
        return
    low, high = int(t.min()), int(t.max())
    if low < 0 or high >= size:
        raise ValueError(f"{name} out of range: values must be in [0, {size}), got min {low} max {high}")


@torch.no_grad()
def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialization: truncated-free normal(0, 0.02) weights, zero biases, LayerNorm 1/0."""
    if isinstance(module, nn.Linear):
        module.weight.normal_(0.0, std)
        if module.bias is not None:
            module.bias.zero_()
    elif isinstance(module, nn.Embedding):
        module.weight.normal_(0.0, std)
        if module.padding_idx is not None:
            module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        module.weight.fill_(1.0)
        module.bias.zero_()
