"""The distillation loss (Hinton et al. 2015) and the module the loop trains with it: the
student, whose `.loss` mixes the teacher's soft targets with the hard labels
(`training.distill` runs it)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.heads import HeadOutput

IGNORE = -100  # hard label of an example only the teacher labels (classification, tagging)


def soft_cross_entropy(student: torch.Tensor, teacher: torch.Tensor,
                       temperature: float) -> torch.Tensor:
    """(..., L) logits -> (...): T² x Σ_c -softmax(teacher/T)_c · log_softmax(student/T)_c.
    Its gradient is the KL divergence's; it differs from it by the teacher's entropy, a constant."""
    targets = F.softmax(teacher.float() / temperature, dim=-1)
    log_probs = F.log_softmax(student.float() / temperature, dim=-1)
    return -(targets * log_probs).sum(-1) * temperature**2


def masked_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ w·v / Σ w, 0 where no weight: a batch of unlabelled texts has no hard loss. No host
    sync (the loop keeps the device running ahead)."""
    weights = weights.to(values.dtype)
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor,
                      scored: torch.Tensor, temperature: float, alpha: float,
                      regression: bool) -> torch.Tensor:
    """alpha x soft + (1 - alpha) x hard, each a mean over the scored rows.

    student, teacher: (R, L) logits of R rows (examples, or tokens for tagging); labels (R,):
    class ids with IGNORE where none, or scores with NaN where none (regression); scored (R,):
    the rows the teacher has an output for (tagging: first word pieces)."""
    if regression:
        soft = (student.float() - teacher.float()).pow(2).squeeze(-1)  # (R,)
        has_label = ~torch.isnan(labels)
        hard = (student.float().squeeze(-1) - torch.nan_to_num(labels.float())).pow(2)
    else:
        soft = soft_cross_entropy(student, teacher, temperature)  # (R,)
        has_label = labels != IGNORE
        hard = F.cross_entropy(student.float(), labels.long().clamp(min=0), reduction="none")
    return alpha * masked_mean(soft, scored) + (1 - alpha) * masked_mean(hard, has_label & scored)


class DistillationObjective(nn.Module):
    """The student with the distillation loss as its `.loss`: what the loop trains. Without
    teacher logits (evaluation) it is the student alone."""

    def __init__(self, student: nn.Module, temperature: float, alpha: float, regression: bool):
        super().__init__()
        self.student = student
        self.temperature, self.alpha, self.regression = temperature, alpha, regression

    def forward(self, teacher_logits: torch.Tensor | None = None,
                teacher_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                **inputs: Any) -> HeadOutput:
        logits = self.student(**inputs).logits  # (B, L), or (B, T, L) for tagging
        if teacher_logits is None:
            return HeadOutput(None, logits)
        L = logits.shape[-1]
        scored = (teacher_mask.reshape(-1) if teacher_mask is not None
                  else torch.ones(logits.shape[0], dtype=torch.bool, device=logits.device))
        loss = distillation_loss(logits.reshape(-1, L), teacher_logits.reshape(-1, L),
                                 labels.reshape(-1), scored, self.temperature, self.alpha,
                                 self.regression)
        return HeadOutput(loss, logits)
