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


def _fit(model, make_batch, n: int, recipe: Recipe, seed: int) -> None:
    """The loop: one shuffled order per epoch from the seed, AdamW, linear schedule, clip 1.0."""
    per_epoch = math.ceil(n / recipe.batch_size)
    steps = math.ceil(per_epoch * recipe.epochs)
    opt, sched = _optimizer(model, recipe, steps)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        if step % per_epoch == 0:
            order = torch.randperm(n, generator=gen).tolist()
        b = recipe.batch_size
        out = model(**make_batch(order[(step % per_epoch) * b:(step % per_epoch + 1) * b]))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)


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
    dtype = torch.float if task.regression else torch.long

    def make_batch(idx):
        batch = tok.pad({k: [enc[k][i] for i in idx] for k in enc}, return_tensors="pt")
        return {**batch, "labels": torch.tensor([target[i] for i in idx], dtype=dtype)}

    _fit(model, make_batch, len(train), recipe, seed)
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


def _encode_words(tok, examples, max_length: int):
    return tok([list(e.words) for e in examples], is_split_into_words=True, truncation=True,
               max_length=max_length)


def train_token_classifier(model_dir: str, train: list, labels: list[str], recipe: Recipe,
                           seed: int):
    """run_ner's recipe: AutoModelForTokenClassification, each word's tag on its first piece,
    the other pieces -100 (label_all_tokens=False), labels padded with -100."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForTokenClassification.from_pretrained(model_dir, num_labels=len(labels))
    enc = _encode_words(tok, train, recipe.max_seq_length)
    targets = []
    for i, e in enumerate(train):
        previous, row = None, []
        for w in enc.word_ids(i):
            row.append(-100 if w is None or w == previous else labels.index(e.tags[w]))
            previous = w
        targets.append(row)

    def make_batch(idx):
        batch = tok.pad({k: [enc[k][i] for i in idx] for k in enc}, return_tensors="pt")
        T = batch["input_ids"].shape[1]
        rows = [targets[i] + [-100] * (T - len(targets[i])) for i in idx]
        return {**batch, "labels": torch.tensor(rows)}

    _fit(model, make_batch, len(train), recipe, seed)
    return model, tok


def predict_tags(model, tok, examples: list, labels: list[str], recipe: Recipe) -> dict:
    """guid -> one tag per word: the first piece's argmax; words cut by max length get "O"."""
    model.eval()
    predictions = {}
    with torch.no_grad():
        for start in range(0, len(examples), recipe.eval_batch_size):
            part = examples[start:start + recipe.eval_batch_size]
            enc = _encode_words(tok, part, recipe.max_seq_length)
            best = model(**tok.pad(dict(enc), return_tensors="pt")).logits.argmax(-1)  # (B, T)
            for i, e in enumerate(part):
                tags = ["O"] * len(e.words)
                previous = None
                for t, w in enumerate(enc.word_ids(i)):
                    if w is not None and w != previous:
                        tags[w] = labels[int(best[i, t])]
                    previous = w
                predictions[e.guid] = tags
    return predictions
