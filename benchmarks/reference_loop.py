"""The reference side of the side-by-side benchmarks: a plain `transformers` fine-tuning loop,
written out the way HF's run_glue does it (AutoModelForSequenceClassification, AdamW with decay
on matrices only, eps 1e-6, linear schedule with 10% warmup, clipping 1.0, dynamic padding as
DataCollatorWithPadding does, one shuffled order per epoch from the seed).

It takes the examples bertkit's task code read (so both systems see the same data) and returns
predictions keyed by guid, which bertkit's `Task.score` scores (so the metric is shared too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Recipe:
    """The paper's fine-tuning recipe, one value per field, shared by both systems."""

    lr: float
    epochs: float = 3.0
    batch_size: int = 32
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_seq_length: int = 128
    eval_batch_size: int = 64


def _encode(tok, examples, max_length: int):
    pairs = [e.text_b for e in examples] if examples[0].text_b is not None else None
    return tok([e.text_a for e in examples], pairs, truncation=True, max_length=max_length)


def _optimizer(model, recipe: Recipe, steps: int):
    from transformers.optimization import get_linear_schedule_with_warmup

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and not n.endswith("bias")]
    rest = [p for n, p in model.named_parameters() if p.ndim < 2 or n.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=recipe.lr, eps=1e-6)
    return opt, get_linear_schedule_with_warmup(opt, round(recipe.warmup_ratio * steps), steps)


def train_sequence_classifier(model_dir: str, task, train: list, labels: list[str] | None,
                              recipe: Recipe, seed: int):
    """Fine-tune AutoModelForSequenceClassification (one output for regression)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(seed)  # the new head's initialization
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=1 if task.regression else len(labels))
    enc = _encode(tok, train, recipe.max_seq_length)
    target = [float(e.label) if task.regression else labels.index(str(e.label)) for e in train]
    per_epoch = math.ceil(len(train) / recipe.batch_size)
    steps = math.ceil(per_epoch * recipe.epochs)
    opt, sched = _optimizer(model, recipe, steps)
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.float if task.regression else torch.long
    model.train()
    for step in range(steps):
        if step % per_epoch == 0:
            order = torch.randperm(len(train), generator=gen).tolist()
        b = recipe.batch_size
        idx = order[(step % per_epoch) * b:(step % per_epoch + 1) * b]
        batch = tok.pad({k: [enc[k][i] for i in idx] for k in enc}, return_tensors="pt")
        out = model(**batch, labels=torch.tensor([target[i] for i in idx], dtype=dtype))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return model, tok


def predict_sequences(model, tok, task, dev: list, labels: list[str] | None,
                      recipe: Recipe) -> dict:
    """guid -> predicted label (or score, for regression)."""
    model.eval()
    predictions = {}
    with torch.no_grad():
        for i in range(0, len(dev), recipe.eval_batch_size):
            part = dev[i:i + recipe.eval_batch_size]
            batch = tok.pad(dict(_encode(tok, part, recipe.max_seq_length)), return_tensors="pt")
            logits = model(**batch).logits
            for e, row in zip(part, logits):
                predictions[e.guid] = float(row[0]) if task.regression else labels[int(row.argmax())]
    return predictions
