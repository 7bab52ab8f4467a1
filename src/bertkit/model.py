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
HF's query/key/value on save. Packed batches (`forward_unpadded`) run attention once per length
group (`PackedLayout.from_mask`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.checkpoint import PretrainedMixin
from bertkit.config import BertConfig
from bertkit.switches import device_generic


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, H)
    pooler_output: torch.Tensor | None  # (B, H); None when the model has no pooler
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + each layer, (B, T, H)
    attentions: tuple[torch.Tensor, ...] | None = None  # one per layer, (B, N, T, T)


GROUP_COST = 1024.0  # the fixed cost of one more attention call, in (tokens x tokens) units,
# timed on the CPU (256 to 4,096 ran the same); other devices keep one group until measured there


@dataclass
class PackedLayout:
    """Where the S real tokens of B sequences (laid end to end) sit in the padded (B, T) layout:
    the dense parts of a layer run on (S, H), attention alone on (B, N, T, D). With `parts`,
    attention runs once per length group instead: part (start, end, layout) covers the packed
    tokens [start, end), laid out in its own (b, t) with t its longest sequence."""

    batch: int  # B
    max_len: int  # T
    scatter: torch.Tensor | None  # (S,) row of each token in the (B*T) layout; None = no padding
    mask: torch.Tensor | None  # (B, 1, 1, T) True = real key; None when nothing is padded
    parts: tuple[tuple[int, int, PackedLayout], ...] | None = None

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor,
                  group_cost: float | None = None) -> PackedLayout:
        """The layout of the real tokens of a padded batch (attention_mask (B, T), 1 = real;
        any pattern, not only right padding). Sequences are packed longest first and cut into
        the length groups that minimise the attention work (`length_groups`); within a group
        each sequence's tokens are laid out left-aligned (attention has no notion of position:
        a query sees the same keys). `group_cost`: default GROUP_COST on the CPU, one group
        (infinite cost) elsewhere."""
        if group_cost is None:
            group_cost = GROUP_COST if cpu_branches(attention_mask.device) else math.inf
        B, T = attention_mask.shape
        real = attention_mask.bool()  # (B, T)
        lengths = real.sum(1)  # (B,)
        order = lengths.argsort(descending=True, stable=True)  # (B,) longest first
        rows = order[:, None] * T + torch.arange(T, device=real.device)  # (B, T) row in B*T
        scatter = rows[real[order]]  # (S,) sequence by sequence, longest first
        sorted_lengths = lengths[order].tolist()
        parts, start = [], 0
        for a, b in length_groups(sorted_lengths, group_cost):
            count = sum(sorted_lengths[a:b])
            parts.append((start, start + count, cls.left_aligned(sorted_lengths[a:b], real.device)))
            start += count
        return cls(B, T, scatter, real.view(B, 1, 1, T), tuple(parts))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PackedLayout:
        """The same layout with its index tensors on `device` (a layout built on the host from
        the collate's mask: the device then never reads its lengths back)."""
        move = (lambda t: None if t is None else t.to(device, non_blocking=non_blocking))  # noqa: E731
        parts = None if self.parts is None else tuple(
            (a, b, part.to(device, non_blocking)) for a, b, part in self.parts)
        return PackedLayout(self.batch, self.max_len, move(self.scatter), move(self.mask), parts)

    @classmethod
    def left_aligned(cls, lengths: list[int], device) -> PackedLayout:
        """The (b, t) layout of b sequences whose tokens are packed end to end, each
        left-aligned (t = the longest); no scatter and no mask when all are full length."""
        b, t = len(lengths), max(lengths)
        if all(n == t for n in lengths):
            return cls(b, t, None, None)
        n = torch.tensor(lengths, device=device)  # (b,)
        real = torch.arange(t, device=device) < n[:, None]  # (b, t)
        return cls(b, t, real.view(-1).nonzero().squeeze(1), real.view(b, 1, 1, t))


def length_groups(lengths: list[int], group_cost: float) -> list[tuple[int, int]]:
    """Cut lengths sorted longest first into consecutive groups [a, b) that minimise
    sum over groups of (b - a) * t * t + group_cost, t = lengths[a] (dynamic programming)."""
    B = len(lengths)
    if math.isinf(group_cost):
        return [(0, B)]
    best = [0.0] + [math.inf] * B  # best[j]: the cheapest cut of the first j sequences
    cut = [0] * (B + 1)
    for j in range(1, B + 1):
        for a in range(j):
            cost = best[a] + (j - a) * lengths[a] ** 2 + group_cost
            if cost < best[j]:
                best[j], cut[j] = cost, a
    groups, j = [], B
    while j:
        groups.append((cut[j], j))
        j = cut[j]
    return groups[::-1]


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
    `bernoulli_` (one float draw per element): 2.5x less time for the whole dropout. The drop
    probability is p rounded to a multiple of 2**-16 (0.1 -> 0.100006) and the kept values are
    scaled by the inverse of the rounded keep probability, so the expectation is exact."""
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

    def forward_packed(self, x: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
        """The same attention on packed tokens x (S, H): projections on the real tokens only,
        scores on the padded layout (no probabilities), one length group at a time when the
        layout has parts."""
        qkv = self.qkv(x)  # (S, 3H)
        if layout.parts is None:
            ctx = self._attend_packed(qkv, layout)  # (S, H)
        else:
            ctx = torch.cat([self._attend_packed(qkv[a:b], part)  # (S, H)
                             for a, b, part in layout.parts])
        return self.out(ctx)

    def _attend_packed(self, qkv: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
        B, T, H = layout.batch, layout.max_len, qkv.shape[-1] // 3
        N = self.num_heads
        D = H // N
        if layout.scatter is not None:
            qkv = qkv.new_zeros(B * T, 3 * H).index_copy_(0, layout.scatter, qkv)  # (B*T, 3H)
        q, k, v = qkv.view(B, T, 3, N, D).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, N, T, D)
        dropout_p = self.attn_dropout_p if self.training else 0.0
        ctx = attend(q, k, v, layout.mask, dropout_p)[0]  # (B, N, T, D)
        ctx = ctx.transpose(1, 2).reshape(B * T, H)  # (B*T, H)
        if layout.scatter is not None:
            ctx = ctx.index_select(0, layout.scatter)  # (S, H)
        return ctx


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
        packed: bool | PackedLayout = False,
    ) -> BertOutput:
        """`attention_mask` (B,T): 1 for real tokens, 0 for padding. `causal=True` also hides
        every later position (the left-to-right LM of the paper's ablation). `packed=True` runs
        the dense layers on the real tokens only (`forward_unpadded`): the same values at real
        tokens, zeros at padding. A `PackedLayout` for `packed` is that layout, built on the host
        from the batch's mask by the collate (`PackedLayout.from_mask`, then `.to(device)`):
        on a GPU, building it here would read the lengths back from the device."""
        check_inputs(self.config, input_ids, token_type_ids, attention_mask, position_ids)
        B, T = input_ids.shape
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).unsqueeze(0)  # (1, T)
        mask = attention_bool_mask(attention_mask, T, causal, input_ids.device)
        extras = causal or output_hidden_states or output_attentions or _exporting()
        if packed is not False and mask is not None and not extras:
            layout = packed if isinstance(packed, PackedLayout) else None
            return self.forward_unpadded(input_ids, token_type_ids, position_ids, attention_mask,
                                         layout)
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
                         position_ids: torch.Tensor, attention_mask: torch.Tensor,
                         layout: PackedLayout | None = None) -> BertOutput:
        """`forward` of a padded batch with the dense layers (embeddings, projections, FFN,
        LayerNorms) on the S real tokens only; attention alone sees the (B, T) layout. Training
        uses it too: the loss and every gradient equal the padded forward's (dropout aside,
        whose masks are drawn over other shapes). Padding positions come back as zeros."""
        B, T = input_ids.shape
        if layout is None:
            layout = PackedLayout.from_mask(attention_mask)
        elif (layout.batch, layout.max_len) != (B, T):
            raise ValueError(f"packed layout of {(layout.batch, layout.max_len)} for a batch of "
                             f"{(B, T)}")
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
