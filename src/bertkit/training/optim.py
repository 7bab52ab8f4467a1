"""Optimizers and the learning-rate schedule of the BERT paper.

- `param_groups`: weight decay on matrices only; biases and LayerNorm parameters are excluded,
  as in Google's `AdamWeightDecayOptimizer` (`exclude_from_weight_decay=["LayerNorm", "bias"]`).
- `build_optimizer`: PyTorch's AdamW (decoupled decay; the fused kernel where the device has one),
  `AdamWeightDecay` (Google's optimizer: the same without Adam's bias correction) or `Lamb`
  (You et al. 2020, layer-wise trust ratio) for large batches.
- `lr_at`: a pure function of the step, in one of two shapes (`SCHEDULES`): "linear" (HF's:
  warm up to the peak, then decay to 0) or "google" (Google's optimization.py: decay from step 0,
  warmup overriding it). docs/reports/results.md measures both choices.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from torch import nn

from bertkit.errors import BertkitError

log = logging.getLogger(__name__)

OPTIMIZERS = ("adamw", "adamw_google", "lamb")
SCHEDULES = ("linear", "google")


def lr_at(step: int, *, peak_lr: float, warmup_steps: int, max_steps: int,
          schedule: str = "linear", decay_from: tuple[int, float] | None = None) -> float:
    """Learning rate for the update that takes the model from `step` to `step + 1` (0-based).

    Both shapes warm up linearly, `peak * step / warmup` for `step < warmup`. After it, "linear"
    decays from the full peak to 0 at `max_steps` (HF's `get_linear_schedule_with_warmup`);
    "google" is `peak * (1 - step / max_steps)`, the decay Google starts at step 0 and the warmup
    only hides (its `polynomial_decay` + `is_warmup` blend): the rate jumps down to
    `(1 - W/T) * peak` when warmup ends, a mean rate of 0.455 peak instead of 0.5 at W = T/10.

    `decay_from = (S, R)` makes a decay branch (the "cooldown" of Hägele et al. 2024, "Scaling
    Laws and Compute-Optimal Training Beyond Fixed Training Durations"): from step S the rate
    falls linearly from R to 0 at `max_steps`, whatever the shape would have been; a run resumed
    from another run's state at step S with the rate R it had there anneals it fully."""
    if step < 0:
        raise ValueError(f"lr_at: step must be >= 0, got {step}")
    if schedule not in SCHEDULES:
        raise ValueError(f"lr_at: schedule must be one of {SCHEDULES}, got {schedule!r}")
    if decay_from is not None and step >= decay_from[0]:
        start, rate = decay_from
        return rate * max(0.0, (max_steps - step) / max(1, max_steps - start))
    if warmup_steps > 0 and step < warmup_steps:
        return peak_lr * step / warmup_steps
    if schedule == "google":
        return peak_lr * max(0.0, 1.0 - step / max(1, max_steps))
    decay_steps = max(1, max_steps - warmup_steps)
    return peak_lr * max(0.0, (max_steps - step) / decay_steps)


def resolve_warmup(max_steps: int, warmup_steps: int, warmup_ratio: float | None) -> int:
    """`warmup_ratio` (a fraction of `max_steps`) overrides `warmup_steps` when given."""
    if warmup_ratio is not None:
        if not 0.0 <= warmup_ratio <= 1.0:
            raise BertkitError(f"warmup ratio must be in [0, 1], got {warmup_ratio}")
        return int(round(max_steps * warmup_ratio))
    if warmup_steps < 0:
        raise BertkitError(f"warmup steps must be >= 0, got {warmup_steps}")
    return warmup_steps


def no_decay(name: str, param: nn.Parameter) -> bool:
    """Biases and LayerNorm weights (every 1-D tensor) get no weight decay."""
    return param.ndim < 2 or name.endswith("bias")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed matrices and undecayed biases/LayerNorm. Tied parameters (the MLM
    decoder shares the word embeddings) appear once, as `named_parameters` deduplicates them."""
    decay, skip = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (skip if no_decay(name, param) else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": skip, "weight_decay": 0.0},
    ]


class _AdamFamily(torch.optim.Optimizer):
    """The hyper-parameters Lamb and AdamWeightDecay share (Adam's, with decoupled decay)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)


class Lamb(_AdamFamily):
    """LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning", Algorithm 2).

    Adam's bias-corrected direction plus decoupled weight decay, `r = m̂ / (√v̂ + ε) + λ w`, scaled
    per tensor by the trust ratio `‖w‖ / ‖r‖` (1 when either norm is 0). As in TensorFlow
    Addons' LAMB, tensors excluded from weight decay are also excluded from the layer
    adaptation (trust ratio 1), so biases and LayerNorm take plain AdamW steps."""

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch's signature
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                self._update(p, group, beta1, beta2)
        return loss

    def _update(self, p: torch.Tensor, group: dict, beta1: float, beta2: float) -> None:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        t = state["step"].item()
        m, v = state["exp_avg"], state["exp_avg_sq"]
        grad = p.grad.float() if p.dtype != torch.float32 else p.grad
        m.mul_(beta1).add_(grad, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        update = m_hat / (v_hat.sqrt() + group["eps"])
        wd = group["weight_decay"]
        trust = 1.0
        if wd != 0:
            update.add_(p, alpha=wd)
            w_norm, u_norm = p.norm().item(), update.norm().item()
            if w_norm > 0 and u_norm > 0:
                trust = w_norm / u_norm
        p.add_(update.to(p.dtype), alpha=-group["lr"] * trust)


class AdamWeightDecay(_AdamFamily):
    """Google's `AdamWeightDecayOptimizer` (bert/optimization.py): Adam *without* bias correction
    plus decoupled weight decay, `w <- w - lr * (m / (sqrt(v) + eps) + wd * w)`.

    Without the correction the first steps are larger than torch's AdamW: `m / sqrt(v)` is
    `(1 - b1) / sqrt(1 - b2)` = 3.16x the corrected value at step 1, 6.5x at step 10, 1.26x at
    step 1,000 (b1 = 0.9, b2 = 0.999); the warmup is what keeps this harmless."""

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch's signature
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if not self.state[p]:
                    self.state[p]["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    self.state[p]["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            grads = [p.grad for p in params]
            beta1, beta2 = group["betas"]
            torch._foreach_lerp_(m, grads, 1 - beta1)  # m = b1 m + (1 - b1) g
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)  # v = b2 v + (1 - b2) g²
            update = torch._foreach_div(m, torch._foreach_add(torch._foreach_sqrt(v), group["eps"]))
            if group["weight_decay"] != 0:
                torch._foreach_add_(update, params, alpha=group["weight_decay"])
            torch._foreach_add_(params, update, alpha=-group["lr"])
        return loss


def fused_available(device: torch.device) -> bool:
    """PyTorch ships fused AdamW kernels for CUDA and (since 2.4) CPU."""
    return device.type in ("cuda", "cpu", "xpu", "mps")


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float,
                    betas: tuple[float, float], eps: float,
                    device: torch.device) -> torch.optim.Optimizer:
    """AdamW (fused where available), Google's AdamW or LAMB over `param_groups(model, wd)`."""
    groups = param_groups(model, weight_decay)
    if name == "adamw":
        fused = fused_available(device)
        try:
            return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)
        except (RuntimeError, ValueError) as err:
            # Older builds or exotic dtypes: the foreach implementation is the next best.
            log.info("fused AdamW unavailable (%s); using the foreach implementation", err)
            return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
    if name == "adamw_google":
        return AdamWeightDecay(groups, lr=lr, betas=betas, eps=eps)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps)
    raise BertkitError(f"unknown optimizer {name!r}; expected one of {', '.join(OPTIMIZERS)}")
