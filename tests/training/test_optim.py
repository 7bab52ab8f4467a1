"""Optimizers and schedule against hand-computed updates on toy problems."""

from __future__ import annotations

import copy as copy_module
import math

import pytest
import torch
from torch import nn

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import BertForPreTraining
from bertkit.training.config import TrainConfig
from bertkit.training.optim import (
    SCHEDULES,
    Lamb,
    build_optimizer,
    lr_at,
    param_groups,
    resolve_warmup,
)


class Toy(nn.Module):
    """One 2x2 weight (decayed) and one bias (not decayed)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))
        self.bias = nn.Parameter(torch.tensor([0.25, -1.0]))


GRADS = [
    (torch.tensor([[0.1, -0.2], [0.3, 0.0]]), torch.tensor([1.0, -0.5])),
    (torch.tensor([[-0.4, 0.5], [0.2, 0.1]]), torch.tensor([0.2, 0.3])),
]


def adam_direction(m, v, g, t, b1, b2, eps):
    """Bias-corrected Adam direction for one scalar, by hand."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
    return m, v, m_hat / (math.sqrt(v_hat) + eps)


def hand_adamw(w, grads, lr, wd, b1=0.9, b2=0.999, eps=1e-6):
    """Decoupled decay (Loshchilov & Hutter): w <- w - lr*wd*w - lr*adam_direction."""
    w = list(w)
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    for t, g in enumerate(grads, start=1):
        for i in range(len(w)):
            m[i], v[i], d = adam_direction(m[i], v[i], g[i], t, b1, b2, eps)
            w[i] = w[i] - lr * wd * w[i] - lr * d
    return w


def hand_lamb(w, grads, lr, wd, adapt, b1=0.9, b2=0.999, eps=1e-6):
    """You et al. 2020: r = adam_direction + wd*w; w <- w - lr * (|w|/|r|) * r."""
    w = list(w)
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    for t, g in enumerate(grads, start=1):
        r = []
        for i in range(len(w)):
            m[i], v[i], d = adam_direction(m[i], v[i], g[i], t, b1, b2, eps)
            r.append(d + wd * w[i])
        trust = 1.0
        if adapt:
            w_norm = math.sqrt(sum(x * x for x in w))
            r_norm = math.sqrt(sum(x * x for x in r))
            trust = w_norm / r_norm
        w = [w[i] - lr * trust * r[i] for i in range(len(w))]
    return w


def run_toy(name: str, lr: float, wd: float) -> Toy:
    model = Toy()
    opt = build_optimizer(model, name, lr, wd, (0.9, 0.999), 1e-6, torch.device("cpu"))
    for gw, gb in GRADS:
        model.weight.grad, model.bias.grad = gw.clone(), gb.clone()
        opt.step()
        opt.zero_grad()
    return model


def test_adamw_matches_hand_computed_update_with_decoupled_decay_and_exclusions():
    lr, wd = 0.1, 0.2
    model = run_toy("adamw", lr, wd)
    w0, b0 = Toy().weight.flatten().tolist(), Toy().bias.tolist()
    want_w = hand_adamw(w0, [g.flatten().tolist() for g, _ in GRADS], lr, wd)
    want_b = hand_adamw(b0, [b.tolist() for _, b in GRADS], lr, 0.0)  # bias: no decay
    assert model.weight.flatten().tolist() == pytest.approx(want_w, rel=1e-5, abs=1e-6)
    assert model.bias.tolist() == pytest.approx(want_b, rel=1e-5, abs=1e-6)
    # The decay really happened on the weight: without it the result differs.
    no_decay = hand_adamw(w0, [g.flatten().tolist() for g, _ in GRADS], lr, 0.0)
    assert model.weight.flatten().tolist() != pytest.approx(no_decay, rel=1e-5, abs=1e-6)


def test_lamb_matches_hand_computed_update_with_trust_ratio():
    lr, wd = 0.05, 0.01
    model = run_toy("lamb", lr, wd)
    assert isinstance(build_optimizer(Toy(), "lamb", lr, wd, (0.9, 0.999), 1e-6,
                                      torch.device("cpu")), Lamb)
    w0, b0 = Toy().weight.flatten().tolist(), Toy().bias.tolist()
    want_w = hand_lamb(w0, [g.flatten().tolist() for g, _ in GRADS], lr, wd, adapt=True)
    want_b = hand_lamb(b0, [b.tolist() for _, b in GRADS], lr, 0.0, adapt=False)
    assert model.weight.flatten().tolist() == pytest.approx(want_w, rel=1e-5, abs=1e-6)
    assert model.bias.tolist() == pytest.approx(want_b, rel=1e-5, abs=1e-6)


def test_param_groups_exclude_bias_and_layernorm_and_count_tied_weights_once():
    config = BertConfig.preset("tiny", vocab_size=50, max_position_embeddings=16)
    model = BertForPreTraining(config)
    decay, skip = param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    decay_names = {names[id(p)] for p in decay["params"]}
    skip_names = {names[id(p)] for p in skip["params"]}
    assert decay["weight_decay"] == 0.01 and skip["weight_decay"] == 0.0
    assert all(n.endswith("bias") or "norm" in n for n in skip_names)
    assert not any(n.endswith("bias") or "norm" in n for n in decay_names)
    assert "bert.embeddings.word_embeddings.weight" in decay_names
    assert "bert.layers.0.attention_norm.weight" in skip_names
    unique = {id(p) for p in model.parameters()}
    assert len(decay["params"]) + len(skip["params"]) == len(unique)


def test_zero_gradient_step_only_decays_matrices():
    config = BertConfig.preset("tiny", vocab_size=50, max_position_embeddings=16)
    model = BertForPreTraining(config)
    with torch.no_grad():
        model.mlm.bias.fill_(0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = build_optimizer(model, "adamw", 0.1, 0.01, (0.9, 0.999), 1e-6, torch.device("cpu"))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    after = dict(model.named_parameters())
    torch.testing.assert_close(after["mlm.bias"], before["mlm.bias"])
    torch.testing.assert_close(after["bert.layers.0.ffn.up.weight"],
                               before["bert.layers.0.ffn.up.weight"] * (1 - 0.1 * 0.01))


def test_lr_at_warmup_then_linear_decay_to_zero():
    kw = {"peak_lr": 1e-4, "warmup_steps": 10, "max_steps": 110}
    assert lr_at(0, **kw) == 0.0
    assert lr_at(5, **kw) == pytest.approx(5e-5)
    assert lr_at(10, **kw) == pytest.approx(1e-4)
    assert lr_at(60, **kw) == pytest.approx(5e-5)
    assert lr_at(110, **kw) == 0.0
    assert lr_at(500, **kw) == 0.0
    assert lr_at(0, peak_lr=1e-3, warmup_steps=0, max_steps=4) == pytest.approx(1e-3)
    assert lr_at(3, peak_lr=1e-3, warmup_steps=0, max_steps=4) == pytest.approx(2.5e-4)
    with pytest.raises(ValueError):
        lr_at(-1, **kw)


def test_a_decay_branch_falls_from_its_rate_to_zero_whatever_the_shape():
    kw = {"peak_lr": 1e-3, "warmup_steps": 10, "max_steps": 150, "decay_from": (100, 4e-4)}
    for schedule in SCHEDULES:
        assert lr_at(99, schedule=schedule, **kw) == lr_at(
            99, peak_lr=1e-3, warmup_steps=10, max_steps=150, schedule=schedule)  # before S
        assert lr_at(100, schedule=schedule, **kw) == pytest.approx(4e-4)
        assert lr_at(125, schedule=schedule, **kw) == pytest.approx(2e-4)
        assert lr_at(150, schedule=schedule, **kw) == 0.0
    with pytest.raises(BertkitError, match="decay_from"):
        TrainConfig("out", max_steps=100, decay_from=(100, 1e-3))
    with pytest.raises(BertkitError, match="decay_from"):
        TrainConfig("out", max_steps=200, decay_from=(100, float("nan")))


def test_warmup_ratio_overrides_steps_and_is_validated():
    assert resolve_warmup(1000, 7, 0.1) == 100
    assert resolve_warmup(1000, 7, None) == 7
    with pytest.raises(BertkitError, match="warmup ratio"):
        resolve_warmup(1000, 0, 1.5)
    with pytest.raises(BertkitError, match="unknown optimizer"):
        build_optimizer(Toy(), "sgd", 0.1, 0.0, (0.9, 0.999), 1e-6, torch.device("cpu"))


def hand_google_adamw(w, grads, lr, wd, b1=0.9, b2=0.999, eps=1e-6):
    """Google's AdamWeightDecayOptimizer, by hand: no bias correction,
    w <- w - lr * (m / (sqrt(v) + eps) + wd * w)."""
    w = list(w)
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    for g in grads:
        for i in range(len(w)):
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
            w[i] = w[i] - lr * (m[i] / (math.sqrt(v[i]) + eps) + wd * w[i])
    return w


def test_google_adamw_matches_hand_computed_update_without_bias_correction():
    lr, wd = 0.1, 0.2
    model = run_toy("adamw_google", lr, wd)
    w0, b0 = Toy().weight.flatten().tolist(), Toy().bias.tolist()
    want_w = hand_google_adamw(w0, [g.flatten().tolist() for g, _ in GRADS], lr, wd)
    want_b = hand_google_adamw(b0, [b.tolist() for _, b in GRADS], lr, 0.0)  # bias: no decay
    assert model.weight.flatten().tolist() == pytest.approx(want_w, rel=1e-5, abs=1e-6)
    assert model.bias.tolist() == pytest.approx(want_b, rel=1e-5, abs=1e-6)


def test_google_adamw_first_step_is_3_16_times_torch_adamw():
    """At step 1 the uncorrected direction is (1 - b1) / sqrt(1 - b2) = 3.162x the corrected."""
    moves = {}
    for name in ("adamw", "adamw_google"):
        model = Toy()
        opt = build_optimizer(model, name, 1e-3, 0.0, (0.9, 0.999), 1e-12, torch.device("cpu"))
        model.weight.grad, model.bias.grad = GRADS[0][0].clone(), GRADS[0][1].clone()
        opt.step()
        moves[name] = Toy().bias - model.bias.detach()
    ratio = moves["adamw_google"] / moves["adamw"]
    want = torch.full_like(ratio, 0.1 / math.sqrt(0.001))
    torch.testing.assert_close(ratio, want, rtol=1e-4, atol=0)


def test_google_adamw_state_resumes_exactly():
    model = Toy()
    opt = build_optimizer(model, "adamw_google", 0.1, 0.2, (0.9, 0.999), 1e-6, torch.device("cpu"))
    model.weight.grad, model.bias.grad = GRADS[0][0].clone(), GRADS[0][1].clone()
    opt.step()
    copy = Toy()
    copy.load_state_dict(model.state_dict())
    opt2 = build_optimizer(copy, "adamw_google", 0.1, 0.2, (0.9, 0.999), 1e-6, torch.device("cpu"))
    opt2.load_state_dict(copy_module.deepcopy(opt.state_dict()))  # as saved and loaded
    for m, o in ((model, opt), (copy, opt2)):
        m.weight.grad, m.bias.grad = GRADS[1][0].clone(), GRADS[1][1].clone()
        o.step()
    torch.testing.assert_close(copy.weight, model.weight, rtol=0, atol=0)


def test_google_schedule_decays_from_step_0_and_warmup_overrides_it():
    kw = {"peak_lr": 1e-4, "warmup_steps": 10, "max_steps": 100, "schedule": "google"}
    assert lr_at(0, **kw) == 0.0
    assert lr_at(5, **kw) == pytest.approx(5e-5)  # warmup: the same as "linear"
    assert lr_at(10, **kw) == pytest.approx(0.9e-4)  # (1 - W/T) * peak, not the peak
    assert lr_at(55, **kw) == pytest.approx(0.45e-4)
    assert lr_at(100, **kw) == 0.0
    assert lr_at(10, **{**kw, "schedule": "linear"}) == pytest.approx(1e-4)
    mean = {s: sum(lr_at(t, **{**kw, "schedule": s}) for t in range(100)) / 100 / 1e-4
            for s in ("linear", "google")}
    assert mean["linear"] == pytest.approx(0.5, abs=0.01)
    assert mean["google"] == pytest.approx(0.455, abs=0.01)
    with pytest.raises(ValueError, match="schedule"):
        lr_at(1, **{**kw, "schedule": "cosine"})
