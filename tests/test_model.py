"""BertModel: parity with transformers on the real MiniLM checkpoint, padding invariance,
determinism, the causal mask, initialization and bad input."""

import pytest
import torch
import transformers

from bertkit import model as model_module
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.model import BertModel, EncoderLayer, dropout, packed_layout
from bertkit.varlen import GROUP_COST, VarlenLayout
from tests.helpers import real_sentences

TOL = 2e-5  # max abs difference, fp32, eval (oneDNN picks its GEMM kernels per CPU: 1.08e-5 seen on a Xeon)


@pytest.fixture(scope="module")
def pair(minilm_path):
    ours = BertModel.from_pretrained(minilm_path)
    ref = transformers.BertModel.from_pretrained(minilm_path, attn_implementation="eager").eval()
    return ours, ref


@pytest.fixture(scope="module")
def batch(minilm_path, shared_data):
    tok = transformers.BertTokenizerFast.from_pretrained(minilm_path)
    texts = real_sentences(shared_data, 8)
    enc = tok(texts, padding=True, return_tensors="pt")
    enc2 = tok(texts[:2], texts[2:4], padding=True, return_tensors="pt")  # pairs: segment ids 1
    assert enc["attention_mask"].float().mean() < 0.9, "the batch must really be padded"
    return enc, enc2


def max_diff(a, b):
    return (a - b).abs().max().item()


def test_parity_with_transformers(pair, batch, branches):
    ours, ref = pair
    for enc in batch:
        with torch.no_grad():
            a = ours(**enc, output_hidden_states=True, output_attentions=True)
            b = ref(**enc, output_hidden_states=True, output_attentions=True)
        mask = enc["attention_mask"].bool()
        assert max_diff(a.last_hidden_state[mask], b.last_hidden_state[mask]) < TOL
        assert max_diff(a.last_hidden_state, b.last_hidden_state) < TOL
        assert max_diff(a.pooler_output, b.pooler_output) < TOL
        assert len(a.hidden_states) == len(b.hidden_states) == 7
        for x, y in zip(a.hidden_states, b.hidden_states):
            assert max_diff(x, y) < TOL
        assert len(a.attentions) == len(b.attentions) == 6
        for x, y in zip(a.attentions, b.attentions):
            assert x.shape == y.shape == (enc["input_ids"].shape[0], 12) + enc["input_ids"].shape[1:] * 2
            assert max_diff(x, y) < TOL


def test_sdpa_path_equals_explicit_softmax_path(pair, batch, branches):
    ours, _ = pair
    enc = batch[0]
    with torch.no_grad():
        fast = ours(**enc).last_hidden_state
        slow = ours(**enc, output_attentions=True).last_hidden_state
    assert max_diff(fast, slow) < TOL


def test_padding_invariance(pair, minilm_path, shared_data):
    ours, _ = pair
    tok = transformers.BertTokenizerFast.from_pretrained(minilm_path)
    short, *longer = real_sentences(shared_data, 4)
    alone = tok([short], return_tensors="pt")
    together = tok([short, *longer], padding=True, return_tensors="pt")
    T = alone["input_ids"].shape[1]
    assert together["input_ids"].shape[1] > T
    with torch.no_grad():
        a = ours(**alone)
        b = ours(**together)
    assert max_diff(a.last_hidden_state[0], b.last_hidden_state[0, :T]) < TOL
    assert max_diff(a.pooler_output[0], b.pooler_output[0]) < TOL


def test_eval_is_deterministic_and_train_is_not():
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("tiny", vocab_size=100)).eval()
    ids = torch.randint(0, 100, (2, 16))
    with torch.no_grad():
        assert torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)
        model.train()
        assert not torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)


def test_causal_mask_hides_the_future():
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("tiny", vocab_size=100)).eval()
    ids = torch.randint(0, 100, (1, 12))
    changed = ids.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 100
    with torch.no_grad():
        model.causal = True
        a = model(ids).last_hidden_state
        b = model(changed).last_hidden_state
        model.causal = False
        c = model(changed).last_hidden_state
    assert max_diff(a[:, :8], b[:, :8]) == 0.0
    assert max_diff(a[:, 8:], b[:, 8:]) > 1e-3
    assert max_diff(a[:, :8], c[:, :8]) > 1e-3  # bidirectional does see the change


def test_bert_initialization():
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("mini"))
    w = model.layers[0].ffn.up.weight
    assert abs(w.std().item() - 0.02) < 0.001 and abs(w.mean().item()) < 0.001
    assert abs(model.embeddings.word_embeddings.weight[1:].std().item() - 0.02) < 0.001
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert torch.all(p == 0), name
        if "norm" in name and name.endswith("weight"):
            assert torch.all(p == 1), name


@pytest.mark.parametrize("ids, kwargs, message", [
    (torch.tensor([[1, 2, 100]]), {}, "input_ids out of range"),
    (torch.tensor([[1, -1]]), {}, "input_ids out of range"),
    (torch.tensor([1, 2, 3]), {}, "2-D"),
    (torch.tensor([[1.0, 2.0]]), {}, "integer"),
    (torch.zeros(1, 600, dtype=torch.long), {}, "max_position_embeddings"),
    (torch.tensor([[1, 2]]), {"attention_mask": torch.ones(1, 3)}, "attention_mask shape"),
    (torch.tensor([[1, 2]]), {"token_type_ids": torch.tensor([[0, 2]])}, "token_type_ids out"),
])
def test_bad_input_is_a_clear_value_error(ids, kwargs, message):
    model = BertModel(BertConfig.preset("tiny", vocab_size=100))
    with pytest.raises(ValueError, match=message):
        model(ids, **kwargs)


# ---- dropout: the CPU keep-mask -------------------------------------------------------------

def test_cpu_dropout_drops_p_in_every_slice_and_keeps_the_expectation():
    """Every 16-bit slice of the 64-bit random words must drop with probability p (a signed
    draw that leaves the top bit at 0 drops 0.075 in one slice out of four)."""
    torch.manual_seed(0)
    n, p = 400_000, 0.1
    x = torch.ones(n, requires_grad=True)
    y = dropout(x, p, True)
    p16 = round(p * 65536) / 65536
    kept = y != 0
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p16)))  # one scale, exact
    se = (p16 * (1 - p16) / (n / 4)) ** 0.5
    for j in range(4):  # the four slices of each word
        assert abs((~kept).view(-1, 4)[:, j].float().mean().item() - p16) < 5 * se, j
    assert abs(y.mean().item() - 1.0) < 5 * (p16 / (1 - p16) / n) ** 0.5  # E[y] = x
    (y * torch.arange(n)).sum().backward()  # backward applies the same mask and scale
    assert torch.equal(x.grad, y.detach() * torch.arange(n))


def _dropout_deviation(forward, eval_states, mask, draws: int) -> torch.Tensor:
    """(draws, layers + 1): per draw, the mean squared distance of each layer's train-mode
    output (real tokens) and of the pooled output from the eval-mode ones."""
    rows = []
    with torch.no_grad():
        for _ in range(draws):
            out = forward()
            states = [h[mask] for h in out.hidden_states] if out.hidden_states else []
            states.append(out.pooler_output)
            rows.append(torch.stack([((a - b) ** 2).mean()
                                     for a, b in zip(states, eval_states[-len(states):])]))
    return torch.stack(rows)


def test_dropout_sits_where_transformers_puts_it_and_drops_as_much(pair, minilm_path, branches):
    """Train mode on the real checkpoint: how far each layer's output (and the pooled output)
    moves from eval mode is a fingerprint of where dropout is applied and how much it drops
    (embeddings, attention probabilities, each branch). bertkit's padded and packed forwards
    (CPU keep-masks, explicit attention) match transformers' within 5 standard errors of the
    difference at every layer (40 draws each); leaving out the attention-probability dropout
    moves layers 2-6 by 6 to 17 standard errors."""
    ours, ref = pair
    tok = transformers.BertTokenizerFast.from_pretrained(minilm_path)
    enc = tok(["the cat sat on the mat today", "a man is playing a guitar on stage"],
              ["it was warm", "someone plays music for the crowd tonight"], padding=True,
              return_tensors="pt")
    mask = enc["attention_mask"].bool()
    with torch.no_grad():
        target = ref(**enc, output_hidden_states=True)
    eval_states = [h[mask] for h in target.hidden_states] + [target.pooler_output]
    ours.train(), ref.train()
    try:
        torch.manual_seed(0)
        theirs = _dropout_deviation(lambda: ref(**enc, output_hidden_states=True), eval_states,
                                    mask, 40)
        padded = _dropout_deviation(lambda: ours(**enc, output_hidden_states=True), eval_states,
                                    mask, 40)
        layout = packed_layout(enc["attention_mask"])
        packed = _dropout_deviation(lambda: ours(**enc, layout=layout), eval_states, mask, 40)
    finally:
        ours.eval(), ref.eval()
    for got in (padded, packed):
        layers = got.shape[1]
        ref_part = theirs[:, -layers:]
        se = (ref_part.var(0) / len(ref_part) + got.var(0) / len(got)).sqrt()
        z = (got.mean(0) - ref_part.mean(0)) / se
        assert z.abs().max().item() < 5, z


def test_device_generic_attention_drops_probabilities_inside_sdpa(monkeypatch):
    """The switch puts the CPU on the GPU's attention branch: SDPA is called with the layer's
    dropout probability, and its dropout really drops (train-mode outputs move from eval's, and
    average back to it). Passing dropout_p=0 to SDPA fails here."""
    from bertkit import model as model_module
    from bertkit.switches import DEVICE_GENERIC

    monkeypatch.setenv(DEVICE_GENERIC, "1")
    config = BertConfig.preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.3)
    torch.manual_seed(0)
    layer = EncoderLayer(config)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(k.get("dropout_p")) or sdpa(*a, **k))
    x = torch.randn(4, 16, config.hidden_size)
    with torch.no_grad():
        expected = layer.eval()(x, None)[0]
        draws = torch.stack([layer.train()(x, None)[0] for _ in range(200)])
    assert calls[0] == 0.0 and set(calls[1:]) == {0.3}
    moved = (draws - expected).pow(2).mean().sqrt().item()
    assert moved > 0.05  # SDPA dropped probabilities (0 if it did not)
    spread = (draws - expected).std(0).mean().item() / 200 ** 0.5  # std error of the mean
    # dropout is unbiased before the attention output projection, not after the LayerNorm:
    # the mean comes back close to eval's, far closer than one draw is
    assert (draws.mean(0) - expected).abs().mean().item() < max(10 * spread, moved / 5)


def test_cpu_dropout_is_seeded_and_off_outside_training():
    x = torch.randn(3, 50, 7)
    torch.manual_seed(5)
    a = dropout(x, 0.3, True)
    torch.manual_seed(5)
    assert torch.equal(a, dropout(x, 0.3, True))
    assert not torch.equal(a, dropout(x, 0.3, True))  # the stream moved on
    assert dropout(x, 0.3, False) is x and dropout(x, 0.0, True) is x
    assert abs((a == 0).float().mean().item() - 0.3) < 0.05


# ---- packed attention by length group --------------------------------------------------------

@pytest.mark.parametrize("group_cost", [0.0, GROUP_COST, float("inf")])
def test_grouped_packed_layer_equals_the_padded_layer_with_gradients(group_cost):
    """Any padding pattern (right, left, holes), lengths far apart so that groups form; the
    packed layer's outputs and every parameter and input gradient equal the padded layer's
    (gradients relative to their largest entry: the loss weights make them large)."""
    config = BertConfig.preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    layer = EncoderLayer(config).train()
    B, T, H = 6, 20, config.hidden_size
    mask = torch.zeros(B, T, dtype=torch.long)
    mask[0] = 1  # full length
    mask[1, :3] = 1
    mask[2, -4:] = 1  # left padding
    mask[3, ::3] = 1  # holes
    mask[4, :2] = 1
    mask[5, 5:15] = 1
    layout = VarlenLayout.from_mask(mask, group_cost)
    assert (len(layout.groups) > 1) == (group_cost != float("inf"))
    x = torch.randn(B, T, H, requires_grad=True)
    real = mask.bool()
    padded, _ = layer(x, real[:, None, None, :])
    (padded[real] * torch.arange(H)).sum().backward()
    g_pad = {n: p.grad.clone() for n, p in layer.named_parameters()}
    gx_pad = x.grad.clone()
    layer.zero_grad()
    x.grad = None
    packed = layer.forward_varlen(layout.unpad(x), layout)
    (packed * torch.arange(H)).sum().backward()
    full = layout.pad(packed.detach())
    assert max_diff(full[real], padded[real].detach()) < TOL
    assert max_diff(x.grad, gx_pad) < TOL * gx_pad.abs().max().item()
    for name, p in layer.named_parameters():
        assert max_diff(p.grad, g_pad[name]) < TOL * g_pad[name].abs().max().item(), name


def test_packed_forward_with_dropout_keeps_padding_out(branches):
    """Dropout on, grouped packed forward: padding still zeros, and no real token depends on a
    padding token's input (its gradient there is exactly 0)."""
    config = BertConfig.preset("tiny", vocab_size=100)
    torch.manual_seed(0)
    model = BertModel(config).train()
    mask = torch.zeros(5, 30, dtype=torch.long)
    for i, n in enumerate([30, 2, 3, 17, 4]):
        mask[i, :n] = 1
    ids = torch.randint(5, 100, (5, 30)) * mask
    emb = model.embeddings.word_embeddings
    out = model(ids, attention_mask=mask, layout=packed_layout(mask)).last_hidden_state
    assert out[~mask.bool()].abs().max().item() == 0
    out.sum().backward()
    assert emb.weight.grad[0].abs().max().item() == 0  # [PAD] rows (id 0) never used


def test_a_layout_the_call_cannot_use_is_refused():
    """The packed forward serves plain calls only: a causal model, hidden states or
    probabilities, a missing mask or another batch shape with a layout is an error, where the
    `packed=` flag it replaced ran padded without a word."""
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("tiny", vocab_size=100)).eval()
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    ids = torch.randint(5, 100, (2, 4)) * mask
    layout = packed_layout(mask)
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).last_hidden_state
        packed = model(ids, attention_mask=mask, layout=layout).last_hidden_state
        assert max_diff(plain[mask.bool()], packed[mask.bool()]) < TOL
        for kwargs, why in [({"output_hidden_states": True}, "hidden states"),
                            ({"output_attentions": True}, "probabilities"),
                            ({"attention_mask": None}, "no attention_mask"),
                            ({"layout": packed_layout(mask[:1])}, r"laid out for \(1, 4\)")]:
            with pytest.raises(BertkitError, match=why):
                model(ids, **{"attention_mask": mask, "layout": layout, **kwargs})
        model.causal = True
        with pytest.raises(BertkitError, match="the model is causal"):
            model(ids, attention_mask=mask, layout=layout)


def _reference_varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k):
    """What torch's varlen kernel computes ((S, N, D) in, sequence i = rows [cu[i], cu[i+1])),
    one sequence at a time through SDPA: the CPU stand-in for the CUDA kernel."""
    assert torch.equal(cu_q, cu_k) and cu_q.dtype == torch.int32 and max_q == max_k
    assert max_q == int((cu_q[1:] - cu_q[:-1]).max())
    out = []
    for a, b in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
        q1, k1, v1 = (t[a:b].transpose(0, 1) for t in (q, k, v))  # (N, n, D)
        out.append(torch.nn.functional.scaled_dot_product_attention(q1, k1, v1).transpose(0, 1))
    return torch.cat(out)  # (S, N, D)


def test_the_varlen_kernel_gets_the_layouts_cu_seqlens(monkeypatch):
    """Where torch's varlen kernel runs (CUDA, half precision, no attention dropout),
    attention takes the packed batch whole on the layout's `cu_seqlens` and `max_seqlen`:
    with a CPU stand-in for the kernel, the layer equals the length-group path. On the CPU the
    kernel is never chosen (the real kernel is checked only where a GPU is)."""
    config = BertConfig.preset("tiny", hidden_dropout_prob=0.0)
    torch.manual_seed(0)
    layer = EncoderLayer(config).eval()
    mask = torch.zeros(4, 9, dtype=torch.long)
    for i, n in enumerate([9, 2, 5, 7]):
        mask[i, :n] = 1
    layout = VarlenLayout.from_mask(mask, GROUP_COST)
    x = layout.unpad(torch.randn(4, 9, config.hidden_size))  # (S, H)
    with torch.no_grad():
        grouped = layer.forward_varlen(x, layout)
        calls = []
        monkeypatch.setattr(model_module, "varlen_kernel_runs", lambda qkv, p: p == 0.0)
        monkeypatch.setattr(model_module, "varlen_attn",
                            lambda *a: calls.append(a[3]) or _reference_varlen_attn(*a))
        whole = layer.forward_varlen(x, layout)
    assert len(calls) == 1 and calls[0] is layout.cu_seqlens
    assert max_diff(whole, grouped) < TOL
    monkeypatch.undo()
    cpu = torch.zeros(3, dtype=torch.bfloat16)
    assert not model_module.varlen_kernel_runs(cpu, 0.0)  # the CPU: length groups
