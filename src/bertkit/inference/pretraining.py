"""What a pre-trained model's own heads say: fill-mask (the MLM head) and next-sentence
prediction (the NSP head), for `bertkit fill-mask` / `bertkit nsp` and the demo. A checkpoint
without the trained head is refused (a fresh head answers at random)."""

from __future__ import annotations

import os

import torch

from bertkit.checkpoint import check_model_dir, check_vocab, require_head
from bertkit.errors import BertkitError
from bertkit.heads import BertForMaskedLM, BertForPreTraining
from bertkit.tokenization import BertTokenizer


def load_pretraining_model(model_dir: str | os.PathLike, *heads: str
                           ) -> tuple[BertForPreTraining | BertForMaskedLM, BertTokenizer]:
    """A pre-trained model with its MLM / NSP heads (each of `heads` must be trained) and its
    tokenizer, checked to belong together. MLM alone loads as `BertForMaskedLM` (no pooler)."""
    check_model_dir(model_dir)
    for head in heads:
        require_head(model_dir, head)
    tokenizer = BertTokenizer.from_pretrained(model_dir)
    cls = BertForPreTraining if "nsp" in heads else BertForMaskedLM
    model = cls.from_pretrained(model_dir)
    check_vocab(model.config, tokenizer, model_dir)
    return model, tokenizer


def fill_mask(model: BertForPreTraining | BertForMaskedLM, tokenizer: BertTokenizer, text: str, k: int = 5
              ) -> list[tuple[int, list[tuple[str, float]]]]:
    """For each [MASK] of `text`: its token position and the top-k (token, probability)."""
    if k < 1:
        raise BertkitError(f"--top-k must be >= 1, got {k}")
    enc = tokenizer.encode(text, max_length=model.config.max_position_embeddings)
    where = [i for i, t in enumerate(enc.input_ids) if t == tokenizer.mask_token_id]
    if not where:
        raise BertkitError(f'no [MASK] in the text: {text!r} (write "[MASK]" where a word '
                           "should be predicted)")
    with torch.inference_mode():
        out = model(torch.tensor([enc.input_ids]), torch.tensor([enc.token_type_ids]))
    logits = getattr(out, "mlm_logits", None)
    logits = (out.logits if logits is None else logits)[0]  # (T, V)
    out = []
    for i in where:
        top = logits[i].float().softmax(-1).topk(min(k, logits.shape[-1]))
        out.append((i, [(tokenizer.convert_ids_to_tokens([t])[0], float(p))
                        for p, t in zip(top.values.tolist(), top.indices.tolist())]))
    return out


def is_next_probability(model: BertForPreTraining, tokenizer: BertTokenizer, a: str, b: str
                        ) -> float:
    """P(IsNext) of the pair (A, B) from the NSP head (label 0 = IsNext, as in the paper)."""
    if not a.strip() or not b.strip():
        raise BertkitError("nsp: both sentences must be non-empty")
    enc = tokenizer.encode(a, pair=b, max_length=model.config.max_position_embeddings)
    with torch.inference_mode():
        out = model(torch.tensor([enc.input_ids]), torch.tensor([enc.token_type_ids]))
    return float(out.nsp_logits[0].float().softmax(-1)[0])
