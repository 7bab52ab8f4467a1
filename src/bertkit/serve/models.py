"""The models a server offers: each folder loaded once, with what it can do.

A base encoder (any HF-layout BERT) serves tokenization, embeddings, attention and per-layer
vectors; if its checkpoint holds the trained pre-training heads it also serves fill-mask (MLM)
and next-sentence prediction (NSP). A `bertkit finetune` model serves all of the encoder's views
(through its own encoder) plus `predict` with its task head and labels. Every check is the
library's: `bertkit.checkpoint` for the folder and heads, `bertkit.inference` for loading.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from bertkit.checkpoint import check_model_dir, check_vocab, require_head
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.inference.encoder import Encoder, sentence_transformers_settings
from bertkit.inference.finetuned import load_for, task_of
from bertkit.inference.int8 import Int8Variant, read_variant
from bertkit.inference.pretraining import load_pretraining_model
from bertkit.model import BertModel
from bertkit.tasks import Task
from bertkit.tasks.splits import TASK_KEY
from bertkit.tokenization import BertTokenizer


@dataclass
class ServedModel:
    """One loaded model folder. `bert` is the encoder every view runs (the fine-tuned model's
    own encoder for a task model); `pretraining` holds the MLM (+NSP) model when trained heads
    exist; `head` is the fine-tuned task model."""

    name: str
    path: Path
    config: BertConfig
    tokenizer: BertTokenizer
    bert: BertModel
    heads: list[str]  # "mlm", "nsp", or the fine-tuned head's class name
    pretraining: nn.Module | None = None
    task: Task | None = None
    head: nn.Module | None = None
    encoders: dict[str, Encoder] = field(default_factory=dict)
    variant: Int8Variant | None = None  # an int8 variant folder's record (`bertkit quantize`)

    def encoder(self, precision: str = "fp32") -> Encoder:
        """The `Encoder` at `precision` (bf16/int8 copies are made on first use; an int8
        variant's int8, also its "auto", runs its own recipe)."""
        if precision not in self.encoders:
            fp32 = self.encoders["fp32"]
            self.encoders[precision] = Encoder(self.bert, tokenizer=self.tokenizer,
                                               precision=precision, max_length=fp32.max_length,
                                               pooling=fp32.default_pooling, int8=self.variant)
        return self.encoders[precision]

    def require(self, head: str, what: str) -> None:
        """Refuse a view whose head this model lacks (a clear 4xx, not a random answer)."""
        if head not in self.heads and not (head == "task" and self.task is not None):
            have = ", ".join(self.heads) or "no heads (an encoder only)"
            raise CapabilityError(f"model {self.name!r} cannot do {what}: that needs "
                                  f"{NEEDS[head]}; it has {have}")

    def info(self) -> dict[str, Any]:
        """What `/models` reports: the config, parameters per part, heads, task and labels."""
        labels = None
        if self.task is not None and self.config.id2label:
            labels = [self.config.id2label[i] for i in sorted(self.config.id2label)]
        return {"name": self.name, "kind": "finetuned" if self.task else "encoder",
                "task": self.task.name if self.task else None,
                "head": type(self.head).__name__ if self.head is not None else None,
                "heads": self.heads, "labels": labels,
                # for people: what the labels mean, and whether the task reads a second text
                "label_names": getattr(self.task, "label_names", None),
                "pairs": getattr(self.task, "takes_pairs", True),
                "regression": bool(self.task and self.task.regression),
                "config": {k: v for k, v in self.config.to_dict().items()
                           if not isinstance(v, (dict, list))},
                "max_length": self.encoder().max_length,
                "int8_variant": self.variant.summary() if self.variant else None,
                "parameters": parameter_counts(self)}


NEEDS = {"mlm": "a trained masked-LM head (a `bertkit pretrain` model)",
         "nsp": "a trained next-sentence head (a `bertkit pretrain` model)",
         "task": "a fine-tuned task head (a `bertkit finetune` model)"}


class CapabilityError(BertkitError):
    """The model has no head for what was asked (e.g. fill-mask on an encoder-only model)."""


def load_model(model_dir: str | os.PathLike, name: str) -> ServedModel:
    """Load one folder as a base encoder (with its MLM/NSP heads when trained) or, when its
    config.json names a fine-tuning task, as that task's model."""
    path = check_model_dir(model_dir)
    config = BertConfig.load(path / "config.json")
    if config.extra.get(TASK_KEY) is not None:
        task = task_of(path, None)
        head, tokenizer = load_for(task, path)
        bert = getattr(head, "bert", None)
        if not isinstance(bert, BertModel):
            raise BertkitError(f"{path}: a {type(head).__name__} has no BERT encoder to serve")
        served = ServedModel(name, path, head.config, tokenizer, bert, [type(head).__name__],
                             task=task, head=head.eval())
    else:
        heads = [h for h in ("mlm", "nsp") if has_head(path, h)]
        if heads:
            pretraining, tokenizer = load_pretraining_model(path, *heads)
            served = ServedModel(name, path, pretraining.config, tokenizer, pretraining.bert,
                                 heads, pretraining=pretraining.eval())
        else:
            tokenizer = BertTokenizer.from_pretrained(path)
            bert = BertModel.from_pretrained(path)
            check_vocab(bert.config, tokenizer, path)
            served = ServedModel(name, path, bert.config, tokenizer, bert, [])
    # A sentence-transformers folder also gives the pooling and maximum length to embed with.
    length, pooling = sentence_transformers_settings(path)
    served.encoders["fp32"] = Encoder(served.bert, tokenizer=served.tokenizer, max_length=length,
                                      pooling=pooling, precision="fp32")
    served.variant = read_variant(path)
    return served


def has_head(model_dir: Path, head: str) -> bool:
    try:
        require_head(model_dir, head)
    except BertkitError:
        return False
    return True


def load_models(model_dirs: list[str | os.PathLike]) -> dict[str, ServedModel]:
    """name -> model for each folder; the name is the folder's name (its parent's for a folder
    called "model", as `bertkit pretrain` and packaged checkpoints name it), made unique."""
    if not model_dirs:
        raise BertkitError("serve: give at least one model folder")
    models: dict[str, ServedModel] = {}
    for model_dir in model_dirs:
        path = Path(model_dir).resolve()
        base = (path.parent.name if path.name == "model" else path.name) or "model"
        name, n = base, 2
        while name in models:
            name, n = f"{base}-{n}", n + 1
        models[name] = load_model(model_dir, name)
    return models


def count(module: nn.Module | None, seen: set[int]) -> int:
    """Parameters of `module` not counted yet (the MLM decoder shares the word embeddings)."""
    if module is None:
        return 0
    total = 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def parameter_counts(model: ServedModel) -> dict[str, Any]:
    """Parameters per part: embeddings, one layer (attention / feed-forward / norms), all
    layers, pooler, the heads, and the total."""
    seen: set[int] = set()
    bert = model.bert
    layer = bert.layers[0]
    per_layer = {"attention": sum(p.numel() for p in layer.attention.parameters()),
                 "feed_forward": sum(p.numel() for p in layer.ffn.parameters()),
                 "layer_norms": sum(p.numel() for n in (layer.attention_norm, layer.ffn_norm)
                                    for p in n.parameters())}
    parts = {"embeddings": count(bert.embeddings, seen), "layers": count(bert.layers, seen),
             "pooler": count(bert.pooler, seen)}
    parts["heads"] = count(model.pretraining, seen) + count(model.head, seen)
    return {**parts, "per_layer": per_layer, "total": sum(parts.values())}
