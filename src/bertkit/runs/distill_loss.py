"""The distillation loss (Hinton et al. 2015) and the module the loop trains with it: the
student, whose `.loss` mixes the teacher's soft targets with the hard labels and, as options,
the teacher's hidden states (TinyBERT's intermediate-layer transfer) and attention
distributions (MiniLM's); `training.distill` runs it."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.heads import HeadOutput, SpanOutput

IGNORE = -100  # hard label of an example only the teacher labels (classification, tagging)
# a masked class's scaled logit: its probability is 0 in float32 and its log-probability finite
# (a target of 0 times it is 0, where -inf would give nan)
MASKED_LOGIT = torch.finfo(torch.float32).min / 2


def soft_cross_entropy(student: torch.Tensor, teacher: torch.Tensor, temperature: float,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
    """(..., L) logits -> (...): T² x Σ_c -softmax(teacher/T)_c · log_softmax(student/T)_c.
    Its gradient is the KL divergence's; it differs from it by the teacher's entropy, a constant.
    `mask` (..., L): the classes that exist (span QA: a feature's real positions); the others
    get probability 0 on both sides, whatever T is (they are masked after the division)."""
    s, t = student.float() / temperature, teacher.float() / temperature
    if mask is not None:
        s, t = s.masked_fill(~mask, MASKED_LOGIT), t.masked_fill(~mask, MASKED_LOGIT)
    targets = F.softmax(t, dim=-1)
    log_probs = F.log_softmax(s, dim=-1)
    return -(targets * log_probs).sum(-1) * temperature**2


def masked_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ w·v / Σ w, 0 where no weight: a batch of unlabelled texts has no hard loss. No host
    sync (the loop keeps the device running ahead)."""
    weights = weights.to(values.dtype)
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor,
                      scored: torch.Tensor, temperature: float, alpha: float,
                      regression: bool) -> torch.Tensor:
    """alpha x soft + (1 - alpha) x hard: the soft term a mean over the scored rows, the hard
    term over the rows with a gold label.

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
    # the hard term wherever there is a gold label, even where the teacher's tokens ended sooner
    return alpha * masked_mean(soft, scored) + (1 - alpha) * masked_mean(hard, has_label)


def span_distillation_loss(start: torch.Tensor, end: torch.Tensor, teacher: torch.Tensor,
                           mask: torch.Tensor, hard: torch.Tensor | None, temperature: float,
                           alpha: float) -> torch.Tensor:
    """Span QA: alpha x the soft cross-entropy between the teacher's and the student's
    distributions over a feature's positions, for the start and the end (their mean; each a
    mean over the batch's features), plus (1 - alpha) x `hard`, the head's own loss on the gold
    positions (`BertForQuestionAnswering`'s: the mean of its two cross-entropies).

    start, end: (B, T) student logits; teacher: (B, T, 2); mask (B, T): the feature's real
    positions, the only ones either distribution covers here (padding gets a probability of 0
    and, times a target of 0, no loss)."""
    soft = start.new_zeros((), dtype=torch.float32)
    for k, student in enumerate((start, end)):
        soft = soft + soft_cross_entropy(student, teacher[..., k], temperature, mask).mean() / 2
    return alpha * soft + (1 - alpha) * (hard if hard is not None else 0.0)


def hidden_layer_map(student_layers: int, teacher_layers: int,
                     taken: tuple[int, ...] = ()) -> list[int]:
    """For each of the student's hidden states (0 = embeddings, i = after layer i), the
    teacher's it learns from: the layers a `layers:` student was taken from, else TinyBERT's
    uniform map (student layer i <- teacher layer i * N / M, at least layer 1: a student with
    twice the teacher's layers or more would learn its first layer from the embeddings, or, for
    the attention, from the teacher's last layer); embeddings from embeddings."""
    if taken:
        return [0, *(t + 1 for t in taken)]
    return [0, *(max(1, round(i * teacher_layers / student_layers))
                 for i in range(1, student_layers + 1))]


def attention_kl(student: torch.Tensor, teacher: torch.Tensor,
                 attention_mask: torch.Tensor) -> torch.Tensor:
    """MiniLM's self-attention transfer (Wang et al. 2020) for one layer: KL(teacher || student)
    between the two attention distributions of each head and real query position, averaged
    over both. student, teacher: (B, N, T, T) probabilities; attention_mask (B, T). Padded keys
    have probability 0 on both sides and add nothing."""
    t, s = teacher.float(), student.float()
    kl = (torch.xlogy(t, t) - t * s.clamp(min=torch.finfo(torch.float32).tiny).log()).sum(-1)
    real = attention_mask.unsqueeze(1).to(kl.dtype).expand_as(kl)  # (B, N, T): real queries
    return (kl * real).sum() / real.sum().clamp(min=1.0)


class LayerTransfer(nn.Module):
    """The intermediate layers' transfer, each term with its weight (0: off):
    - `hidden_weight`: TinyBERT's hidden-state transfer (Jiao et al. 2020): the mean over the
      mapped layers of the squared error between the student's hidden state, through a learned
      linear map when the widths differ (W_h), and the teacher's, averaged over real tokens and
      the teacher's width;
    - `attention_weight`: MiniLM's attention transfer (`attention_kl`) over the same map's
      encoder layers (student layer i from the teacher layer it maps to; the heads must match).

    The teacher runs here, on the student's batch, under no_grad: per-token states of every
    layer are too large to cache (the logits are cached, `distill_targets`). It is held outside
    the module tree, so that it is neither trained nor saved; the map W_h is both (it resumes
    with the run)."""

    def __init__(self, teacher_encoder: nn.Module, student_width: int, layer_map: list[int],
                 hidden_weight: float = 0.0, attention_weight: float = 0.0):
        super().__init__()
        self._teacher = (teacher_encoder.eval().requires_grad_(False),)  # not a submodule
        teacher_width = teacher_encoder.config.hidden_size
        self.layer_map = layer_map  # (hidden-state numbering: 0 = the embeddings)
        self.hidden_weight, self.attention_weight = hidden_weight, attention_weight
        self.project = (nn.Linear(student_width, teacher_width, bias=False)
                        if hidden_weight and student_width != teacher_width else nn.Identity())

    def forward(self, student_states: tuple[torch.Tensor, ...] | None,
                student_attentions: tuple[torch.Tensor, ...] | None, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None, attention_mask: torch.Tensor
                ) -> torch.Tensor:
        with torch.no_grad():
            teacher = self._teacher[0](input_ids, token_type_ids, attention_mask,
                                       output_hidden_states=bool(self.hidden_weight),
                                       output_attentions=bool(self.attention_weight))
        loss = attention_mask.new_zeros((), dtype=torch.float32)
        if self.hidden_weight:
            real = attention_mask.unsqueeze(-1).float()  # (B, T, 1)
            losses = []
            for student, index in zip(student_states, self.layer_map):
                error = (self.project(student).float() - teacher.hidden_states[index].float()
                         ).pow(2)
                losses.append((error * real).sum() / (real.sum() * error.shape[-1]).clamp(min=1.0))
            loss = loss + self.hidden_weight * torch.stack(losses).mean()
        if self.attention_weight:
            losses = [attention_kl(student, teacher.attentions[index - 1], attention_mask)
                      for student, index in zip(student_attentions, self.layer_map[1:])]
            loss = loss + self.attention_weight * torch.stack(losses).mean()
        return loss


class DistillationObjective(nn.Module):
    """The student with the distillation loss as its `.loss`: what the loop trains (a span QA
    student's via `span_distillation_loss`, the rest via `distillation_loss`). Without
    teacher logits (evaluation) it is the student alone. With `layers` the loss adds the
    intermediate layers' transfer (`LayerTransfer`)."""

    def __init__(self, student: nn.Module, temperature: float, alpha: float, regression: bool,
                 layers: LayerTransfer | None = None):
        super().__init__()
        self.student = student
        self.temperature, self.alpha, self.regression = temperature, alpha, regression
        self.layers = layers

    def forward(self, teacher_logits: torch.Tensor | None = None,
                teacher_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                **inputs: Any) -> HeadOutput:
        transfer = self.layers is not None and teacher_logits is not None
        out = (self.student(**inputs, output_hidden_states=bool(self.layers.hidden_weight),
                            output_attentions=bool(self.layers.attention_weight))
               if transfer else self.student(**inputs))
        if isinstance(out, SpanOutput):  # span QA: the gold positions went to the head
            if teacher_logits is None:
                return out
            loss = span_distillation_loss(out.start_logits, out.end_logits, teacher_logits,
                                          teacher_mask, out.loss, self.temperature, self.alpha)
            return SpanOutput(loss, out.start_logits, out.end_logits)
        logits = out.logits  # (B, L), or (B, T, L) for tagging
        if teacher_logits is None:
            return HeadOutput(None, logits)
        L = logits.shape[-1]
        scored = (teacher_mask.reshape(-1) if teacher_mask is not None
                  else torch.ones(logits.shape[0], dtype=torch.bool, device=logits.device))
        loss = distillation_loss(logits.reshape(-1, L), teacher_logits.reshape(-1, L),
                                 labels.reshape(-1), scored, self.temperature, self.alpha,
                                 self.regression)
        if transfer:
            loss = loss + self.layers(out.hidden_states, out.attentions, inputs["input_ids"],
                                      inputs.get("token_type_ids"), inputs["attention_mask"])
        return HeadOutput(loss, logits)
