"""The BERT encoder (Devlin et al., 2019), the whole forward pass top to bottom.

Shape legend: B batch, T tokens, H hidden, N heads, D head dim (H = N * D), I intermediate (4H).

    input_ids ─► word + position + segment embeddings ─► LayerNorm ─► dropout
              ─► N x [ self-attention, +residual, LayerNorm, FFN (H→I, GELU, I→H), +residual, LayerNorm ]
              ─► last_hidden_state (B,T,H);  pooler: tanh(dense(h[:, 0]))  ─► pooler_output (B,H)

Post-LayerNorm blocks as in the paper. Attention goes through
`torch.nn.functional.scaled_dot_product_attention` (fused kernels); the explicit softmax path is
used when attention probabilities are asked for, and for training on the CPU, where SDPA's
dropout falls back to the same explicit path with a slower mask (see `dropout`). Q, K and V are
one fused (H → 3H) linear layer: one matmul instead of three; `checkpoint.py` splits it into
HF's query/key/value on save. Packed (unpadded) batches run the dense layers on the real tokens
laid end to end, FlashAttention's varlen form (`bertkit.varlen.VarlenLayout`, `forward_varlen`):
attention through torch's varlen kernel on the layout's `cu_seqlens` where it runs (CUDA, half
precision, no attention dropout: inference and evaluation), else once per length group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.checkpoint import PretrainedMixin
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.switches import device_generic
from bertkit.varlen import GROUP_COST, VarlenLayout

# FlashAttention's varlen kernel (CUDA) in recent torch, imported on first use (`_varlen_attn`):
# importing it imports torch._dynamo, 1.4 s of every command's start-up (docs/reports/benchmarks.md),
# and only CUDA runs it
varlen_attn: Any = ...  # ... = not imported yet; None = this torch has none


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, H)
    pooler_output: torch.Tensor | None  # (B, H); None when the model has no pooler
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + each layer, (B, T, H)
    attentions: tuple[torch.Tensor, ...] | None = None  # one per layer, (B, N, T, T)


def activation(name: str):
    if name == "gelu":
        return F.gelu  # the exact erf form, as the original BERT
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    return F.silu  # "silu" / "swish"; BertConfig validated the name


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`F.dropout` with the same distribution. On the CPU the keep-mask comes from 16-bit slices
    of uniform 64-bit random words, four decisions per draw from the default generator, instead of
    `bernoulli_` (one float draw per element), the cheaper draw (docs/reports/benchmarks.md, "Dropout
    masks on the CPU"). The drop probability is p rounded to a multiple of 2**-16
    (0.1 -> 0.100006) and the kept values are scaled by the inverse of the rounded keep
    probability, so the expectation is exact. The heads' dropout is this one too."""
    if not training or p == 0.0:
        return x
    drop16 = round(p * 65536)  # slices in [-32768, -32768 + drop16) are dropped
    if not cpu_branches(x.device) or _exporting() or not 0 < drop16 < 65536:
        return F.dropout(x, p, True)
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-2**63, None)  # uniform bits
    keep = words.view(torch.int16)[:n] >= drop16 - 32768  # (n,) True with prob 1 - drop16/2**16
    return _KeepScale.apply(x, keep.view(x.shape), 65536 / (65536 - drop16))


class _KeepScale(torch.autograd.Function):
    """x * keep * scale, keeping only the one-byte mask for backward (as native dropout does)."""

    @staticmethod
    def forward(ctx, x, keep, scale):
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None, None


class Dropout(nn.Module):
    """`nn.Dropout` through `dropout` (no weights: state dicts are unchanged)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def attend(q, k, v, mask: torch.Tensor | None, dropout_p: float,
           want_probs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(q k^T / sqrt(D) + mask) v with dropout on the probabilities (dropout_p > 0 only in
    training); q, k, v (B, N, T, D), mask broadcastable to (B, N, T, T), True = may attend.
    Returns the context (B, N, T, D) and the probabilities when asked for."""
    explicit = want_probs or (dropout_p > 0 and cpu_branches(q.device) and not _exporting())
    if not explicit:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-1, -2)  # (B, N, T, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = scores.softmax(dim=-1)  # (B, N, T, T)
    ctx = dropout(probs, dropout_p, dropout_p > 0) @ v  # (B, N, T, D)
    return ctx, probs if want_probs else None


class Embeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, H, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, H)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, H)
        self.norm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

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
        ctx, probs = attend(q, k, v, mask, dropout_p, want_probs)  # (B, N, T, D)
        ctx = ctx.transpose(1, 2).reshape(B, T, H)  # (B, T, N*D)
        return self.out(ctx), probs

    def forward_varlen(self, x: torch.Tensor, layout: VarlenLayout) -> torch.Tensor:
        """The same attention on packed tokens x (S, H): projections on the real tokens only,
        scores group by group on each group's padded layout (no probabilities)."""
        S, H = x.shape
        N = self.num_heads
        D = H // N
        qkv = self.qkv(x)  # (S, 3H)
        dropout_p = self.attn_dropout_p if self.training else 0.0
        if varlen_kernel_runs(qkv, dropout_p):
            q, k, v = qkv.view(S, 3, N, D).unbind(1)  # 3 x (S, N, D)
            cu, t = layout.cu_seqlens, layout.max_seqlen
            return self.out(_varlen_attn()(q, k, v, cu, cu, t, t).reshape(S, H))  # (S, H)
        ctx = []
        for g in layout.groups:
            part = qkv[g.start:g.end]  # (n, 3H) the group's tokens
            if g.index is not None:  # (n, 3H) -> (b*t, 3H), zeros at padding
                part = part.new_zeros(g.batch * g.max_len, 3 * H).index_copy_(0, g.index, part)
            q, k, v = part.view(g.batch, g.max_len, 3, N, D).permute(2, 0, 3, 1, 4).unbind(0)
            c = attend(q, k, v, g.key_mask, dropout_p)[0]  # (b, N, t, D)
            c = c.transpose(1, 2).reshape(g.batch * g.max_len, H)  # (b*t, H)
            ctx.append(c if g.index is None else c.index_select(0, g.index))  # (n, H)
        return self.out(torch.cat(ctx) if len(ctx) > 1 else ctx[0])  # (S, H)


def varlen_kernel_runs(qkv: torch.Tensor, dropout_p: float) -> bool:
    """Whether torch's varlen attention (FlashAttention's kernel: CUDA from Ampere on, fp16/bf16,
    no dropout on the probabilities) takes the packed batch whole, on its `cu_seqlens`;
    elsewhere attention runs group by group through `attend`."""
    return (qkv.is_cuda and dropout_p == 0.0
            and qkv.dtype in (torch.float16, torch.bfloat16) and not _exporting()
            and torch.cuda.get_device_capability(qkv.device) >= (8, 0)
            and _varlen_attn() is not None)


def _varlen_attn() -> Any:
    """torch's `varlen_attn`, or None where this torch has none (the length groups then)."""
    global varlen_attn
    if varlen_attn is ...:
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:  # pragma: no cover - older torch
            varlen_attn = None
    return varlen_attn


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
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x, mask, want_probs: bool = False):
        attn, probs = self.attention(x, mask, want_probs)
        x = self.attention_norm(x + self.dropout(attn))
        x = self.ffn_norm(x + self.dropout(self.ffn(x)))
        return x, probs

    def forward_varlen(self, x: torch.Tensor, layout: VarlenLayout) -> torch.Tensor:
        """The same block on packed tokens (S, H); see `SelfAttention.forward_varlen`."""
        x = self.attention_norm(x + self.dropout(self.attention.forward_varlen(x, layout)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class Pooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # [CLS] (B, H) -> (B, H)


class BertModel(PretrainedMixin, nn.Module):
    """The BERT encoder. `add_pooling_layer=False` matches HF's MLM/tagging/QA models.

    `causal=True` hides every later position from each query (the left-to-right LM of the
    paper's ablation, `pretrain --objective ltr`): chosen when the model is built, not saved in
    the checkpoint (HF's BERT has no such switch; the released encoder is read both ways)."""

    supports_packing: ClassVar[bool] = True  # `forward(..., layout=...)`; see there
    causal: bool

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True, causal: bool = False):
        super().__init__()
        self.config = config
        self.causal = causal
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
        layout: VarlenLayout | None = None,
    ) -> BertOutput:
        """`attention_mask` (B,T): 1 for real tokens, 0 for padding.

        A `layout` (the batch's real tokens, `VarlenLayout.from_mask` of `attention_mask`,
        built on the host by the collate and moved with the batch: `packed_layout`) runs the
        dense layers (embeddings, projections, FFN, LayerNorms) on the real tokens only
        (`forward_varlen`): the same values at real tokens, zeros at padding, and in training
        the same loss and gradients (dropout aside, whose masks are drawn over other shapes).
        A batch without padding (read where that is free) runs padded: the same work. A call
        the packed forward cannot serve (causal, hidden states or probabilities asked for,
        compiled or exported, no mask, another shape) is refused, not run padded."""
        check_inputs(self.config, input_ids, token_type_ids, attention_mask, position_ids)
        B, T = input_ids.shape
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).unsqueeze(0)  # (1, T)
        mask = attention_bool_mask(attention_mask, T, self.causal, input_ids.device)
        if layout is not None:
            self.check_layout(layout, attention_mask, (B, T),
                              output_hidden_states or output_attentions)
        if layout is not None and mask is not None:
            packed_inputs = (layout.unpad(t) for t in  # 3 x (S,)
                             (input_ids, token_type_ids, position_ids.expand(B, T)))
            x = layout.pad(self.forward_varlen(*packed_inputs, layout)[-1])  # (B, T, H)
            pooled = self.pooler(x) if self.pooler is not None else None
            return BertOutput(last_hidden_state=x, pooler_output=pooled)
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

    def check_layout(self, layout: VarlenLayout, attention_mask, shape: tuple[int, int],
                     want_extras: bool) -> None:
        """Refuse a layout this call cannot run on (rather than run it padded unasked)."""
        why = None
        if self.causal:
            why = "the model is causal"
        elif want_extras:
            why = "hidden states or attention probabilities were asked for"
        elif _exporting():
            why = "compiling or exporting (the packed path loops over the layout's groups)"
        elif attention_mask is None:
            why = "no attention_mask came with it"
        elif layout.padded_shape != shape:
            why = f"it is laid out for {layout.padded_shape}, the batch is {shape}"
        if why is not None:
            raise BertkitError(f"the packed forward cannot take this layout: {why}; "
                               "call without layout=")

    def forward_varlen(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                       position_ids: torch.Tensor, layout: VarlenLayout,
                       hidden_index: list[int] | None = None) -> list[torch.Tensor]:
        """The encoder on packed tokens (all (S,): ids, segments, positions within their
        sequence): hidden states (S, H) for each index asked for (0 = embeddings, i = after
        layer i; default the last layer's alone), equal to `forward` at the real tokens."""
        if hidden_index is None:
            hidden_index = [len(self.layers)]
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (S, H)
        states = {0: x}
        for i, layer in enumerate(self.layers[:max(hidden_index, default=0)], start=1):
            x = layer.forward_varlen(x, layout)  # (S, H)
            states[i] = x
        return [states[i] for i in hidden_index]


def packed_layout(attention_mask: torch.Tensor) -> VarlenLayout:
    """The layout of a padded batch's real tokens for `forward(..., layout=)`, on the mask's
    device with that device's attention groups (a training collate builds it on the host with
    the training device's cost instead, so that the device never reads lengths back)."""
    return VarlenLayout.from_mask(attention_mask, attention_group_cost(attention_mask.device))


def attention_group_cost(device: torch.device) -> float:
    """The cost of one more attention call that a packed batch's groups are cut with
    (`VarlenLayout.from_mask`): GROUP_COST on the CPU's branches, infinite (one group)
    elsewhere, until measured there."""
    return GROUP_COST if cpu_branches(device) else math.inf


def cpu_branches(device: torch.device) -> bool:
    """Whether to take the CPU's own branches (the 16-bit dropout masks, explicit attention when
    dropping probabilities, length groups) on `device`: on the CPU, unless the test switch
    `BERTKIT_DEVICE_GENERIC` (`bertkit.switches`) asks for the branches every other device takes
    (`F.dropout`, SDPA with its own dropout, one attention group), so the suite runs them too."""
    return device.type == "cpu" and not device_generic()


def host_readable(t: torch.Tensor) -> bool:
    """Whether reading `t`'s values on the host is free: a CPU tensor on the CPU's branches,
    outside export. On a device (or under `BERTKIT_DEVICE_GENERIC`, which stands for one) a
    read waits for everything queued: the forward pass reads nothing back there."""
    return cpu_branches(t.device) and not _exporting()


def _exporting() -> bool:
    """Compiling or exporting: no value may be read back (a graph break, or a constant baked
    into the exported graph), so the mask is always applied and inputs are not inspected."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def attention_bool_mask(attention_mask, T: int, causal: bool, device) -> torch.Tensor | None:
    """Boolean mask broadcastable to (B, N, T, T), True = may attend; None when nothing is hidden
    (lets SDPA pick its fastest kernel)."""
    mask = None
    # Checking for "no padding" reads a value back: on a device (and in export) keep the mask.
    if attention_mask is not None and (not host_readable(attention_mask)
                                       or not bool(attention_mask.all())):
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): keys that are real
    if causal:
        tri = torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (T, T): key <= query
        mask = tri if mask is None else mask & tri  # (B, 1, T, T)
    return mask


def check_inputs(config: BertConfig, input_ids, token_type_ids, attention_mask, position_ids):
    """Bad ids make embedding lookups fail deep inside (or silently on some devices): say so here.
    Shapes always; values only where reading them is free (`host_readable`): on a GPU it would
    stall every step, and there the ids come from the tokenizer or from shards checked against
    the vocabulary. Skipped inside torch.compile and export, where values cannot be read back."""
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
    if host_readable(input_ids):
        check_range("input_ids", input_ids, config.vocab_size)
    for name, t in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if t is not None and t.shape != input_ids.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} != input_ids shape {(B, T)}")
    if token_type_ids is not None and host_readable(token_type_ids):
        check_range("token_type_ids", token_type_ids, config.type_vocab_size)
    if position_ids is not None:
        if position_ids.dim() != 2 or position_ids.shape[-1] != T:
            raise ValueError(f"position_ids shape {tuple(position_ids.shape)} does not fit {(B, T)}")
        if host_readable(position_ids):
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
