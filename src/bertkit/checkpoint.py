"""Checkpoints in Hugging Face's layout: `config.json` + `model.safetensors` (+ tokenizer files).

One table, `NAME_TABLE`, maps our parameter names to HF's `bert.*` / `cls.*` names, both ways.
Our encoder fuses query/key/value into one `qkv` linear layer; the table entry for it names the
three HF tensors it is concatenated from (rows: query, key, value).

Loading never executes pickles: safetensors first, `pytorch_model.bin` only through
`torch.load(weights_only=True)`. Writes are atomic.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.io import atomic_path

log = logging.getLogger("bertkit")

WEIGHTS_NAME = "model.safetensors"
LEGACY_WEIGHTS_NAME = "pytorch_model.bin"

# (ours, HF). {p}: optional "bert." prefix of head models; {i}: layer index; {s}: weight|bias.
# Names not matched here are the same on both sides (word/position/segment embeddings, pooler,
# classifier, qa_outputs).
NAME_TABLE: list[tuple[str, str | tuple[str, ...]]] = [
    ("{p}embeddings.norm.{s}", "{p}embeddings.LayerNorm.{s}"),
    ("{p}layers.{i}.attention.qkv.{s}", (
        "{p}encoder.layer.{i}.attention.self.query.{s}",
        "{p}encoder.layer.{i}.attention.self.key.{s}",
        "{p}encoder.layer.{i}.attention.self.value.{s}",
    )),
    ("{p}layers.{i}.attention.out.{s}", "{p}encoder.layer.{i}.attention.output.dense.{s}"),
    ("{p}layers.{i}.attention_norm.{s}", "{p}encoder.layer.{i}.attention.output.LayerNorm.{s}"),
    ("{p}layers.{i}.ffn.up.{s}", "{p}encoder.layer.{i}.intermediate.dense.{s}"),
    ("{p}layers.{i}.ffn.down.{s}", "{p}encoder.layer.{i}.output.dense.{s}"),
    ("{p}layers.{i}.ffn_norm.{s}", "{p}encoder.layer.{i}.output.LayerNorm.{s}"),
    ("mlm.dense.{s}", "cls.predictions.transform.dense.{s}"),
    ("mlm.norm.{s}", "cls.predictions.transform.LayerNorm.{s}"),
    ("mlm.bias", "cls.predictions.bias"),
    ("nsp.{s}", "cls.seq_relationship.{s}"),
]

# HF keys that carry no information of their own: tied copies and buffers.
IGNORED_HF_KEYS = re.compile(
    r"(^|\.)position_ids$|^cls\.predictions\.decoder\.(weight|bias)$"
)
# Our state_dict keys that are tied views of another parameter.
TIED_KEYS = re.compile(r"^mlm\.word_embeddings\.weight$")
# Parameters that belong to a task/pre-training head (or the pooler), which a checkpoint of another
# kind may lack or carry in surplus: those get a notice, not an error.
HEAD_KEYS = re.compile(r"^(mlm\.|nsp\.|classifier\.|qa_outputs\.|(bert\.)?pooler\.)")


def _template_regex(template: str) -> re.Pattern:
    pattern = re.escape(template)
    pattern = pattern.replace(r"\{p\}", r"(?P<p>(?:bert\.)?)")
    pattern = pattern.replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{s\}", r"(?P<s>weight|bias)")
    return re.compile(f"^{pattern}$")


_OURS = [(_template_regex(ours), hf) for ours, hf in NAME_TABLE]
_HF = [
    (_template_regex(hf_name), ours, part)
    for ours, hf in NAME_TABLE
    for part, hf_name in enumerate(hf if isinstance(hf, tuple) else (hf,))
]


def to_hf_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict (tied copies dropped) -> HF names; qkv split into query/key/value."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if TIED_KEYS.match(name):
            continue
        for regex, hf in _OURS:
            m = regex.match(name)
            if m:
                if isinstance(hf, tuple):
                    for part, chunk in zip(hf, tensor.chunk(len(hf), dim=0)):
                        out[part.format(**m.groupdict())] = chunk
                else:
                    out[hf.format(**m.groupdict())] = tensor
                break
        else:
            out[name] = tensor
    return out


def from_hf_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """HF names -> ours; query/key/value concatenated into qkv. Tied copies and buffers dropped."""
    out: dict[str, torch.Tensor] = {}
    parts: dict[str, dict[int, torch.Tensor]] = {}
    for name, tensor in state.items():
        if IGNORED_HF_KEYS.search(name):
            continue
        for regex, ours, part in _HF:
            m = regex.match(name)
            if m:
                target = ours.format(**m.groupdict())
                if "qkv" in ours:
                    parts.setdefault(target, {})[part] = tensor
                else:
                    out[target] = tensor
                break
        else:
            out[name] = tensor
    for target, pieces in parts.items():
        if sorted(pieces) != [0, 1, 2]:
            raise BertkitError(f"checkpoint has only part of query/key/value for {target}")
        out[target] = torch.cat([pieces[0], pieces[1], pieces[2]], dim=0)
    return out


def read_state_dict(model_dir: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read weights from a model directory: model.safetensors, else pytorch_model.bin (no pickles run)."""
    model_dir = Path(model_dir)
    st = model_dir / WEIGHTS_NAME
    if st.is_file():
        try:
            return load_file(str(st))
        except Exception as err:  # SafetensorError, OSError: truncated or not safetensors
            raise BertkitError(f"{st}: unreadable weights, truncated or not a safetensors file "
                               f"({err}); re-export or re-download the model") from None
    legacy = model_dir / LEGACY_WEIGHTS_NAME
    if legacy.is_file():
        try:
            return torch.load(legacy, map_location="cpu", weights_only=True)
        except Exception as err:  # an unsafe or corrupt pickle: refuse, never execute
            raise BertkitError(f"{legacy}: cannot be read safely ({err})") from None
    raise BertkitError(f"{model_dir}: no {WEIGHTS_NAME} or {LEGACY_WEIGHTS_NAME} found")


def align_prefix(state: dict[str, torch.Tensor], model_keys: set[str]) -> dict[str, torch.Tensor]:
    """Encoder-only checkpoints have no "bert." prefix, head models do: make the checkpoint match."""
    wants_prefix = any(k.startswith("bert.") for k in model_keys)
    has_prefix = any(k.startswith("bert.") for k in state)
    if wants_prefix and not has_prefix:
        return {k if HEAD_KEYS.match(k) and "pooler" not in k else f"bert.{k}": v
                for k, v in state.items()}
    if has_prefix and not wants_prefix:
        return {k.removeprefix("bert."): v for k, v in state.items()}
    return state


def load_into(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Load HF-named weights into `model`; heads absent from the checkpoint stay freshly
    initialized (one notice), anything else missing, unexpected or mis-shaped is an error."""
    own = {k: v for k, v in model.state_dict().items() if not TIED_KEYS.match(k)}
    state = align_prefix(from_hf_state_dict(state), set(own))
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
              for k in sorted(set(own) & set(state)) if state[k].shape != own[k].shape]
    bad_missing = [k for k in missing if not HEAD_KEYS.match(k)]
    bad_unexpected = [k for k in unexpected if not HEAD_KEYS.match(k)]
    if bad_missing or bad_unexpected or shapes:
        lines = [f"{what}: {sep.join(keys[:3])}{f' ... ({len(keys)} in all)' if len(keys) > 3 else ''}"
                 for what, keys, sep in (("missing", bad_missing, ", "),
                                         ("unexpected", bad_unexpected, ", "),
                                         ("mis-shaped", shapes, "; ")) if keys]
        raise BertkitError(f"{source}: weights do not fit {type(model).__name__} built from its "
                           f"config.json (does config.json belong to these weights?): "
                           + " | ".join(lines))
    if missing:
        log.info("%s: newly initialized (not in %s): %s", type(model).__name__, source,
                 ", ".join(missing))
    if unexpected:
        log.info("%s: ignored weights of another head in %s: %s", type(model).__name__, source,
                 ", ".join(unexpected))
    kept = {k: v.to(own[k].dtype) for k, v in state.items() if k in own}
    model.load_state_dict(kept, strict=False)


def save_weights(model: torch.nn.Module, model_dir: str | os.PathLike) -> None:
    state = to_hf_state_dict(model.state_dict())
    state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    needed = sum(v.numel() * v.element_size() for v in state.values())
    with atomic_path(Path(model_dir) / WEIGHTS_NAME, needed=needed) as tmp:
        save_file(state, str(tmp), metadata={"format": "pt"})


def refuse_google_folder(path: Path) -> None:
    """A folder of Google's TensorFlow release (bert_config.json or a *.index checkpoint, no
    config.json) loads only once converted: one line saying how."""
    if not (path / "config.json").is_file() and ((path / "bert_config.json").is_file()
                                                   or any(path.glob("*.index"))):
        raise BertkitError(f"{path}: a TensorFlow checkpoint of Google's BERT, not a model "
                           f"folder in HF layout; convert it first: bertkit convert google "
                           f"{path} --output DIR")


def check_model_dir(model_dir: str | os.PathLike) -> Path:
    """A model directory in HF layout: a folder with config.json and the weights."""
    path = Path(model_dir)
    if not path.is_dir():
        raise BertkitError(f"{path}: not a model directory (expected a folder with config.json "
                           f"and {WEIGHTS_NAME})")
    refuse_google_folder(path)
    if not (path / "config.json").is_file():
        raise BertkitError(f"{path}: no config.json (not a model directory in HF layout)")
    if not ((path / WEIGHTS_NAME).is_file() or (path / LEGACY_WEIGHTS_NAME).is_file()):
        raise BertkitError(f"{path}: no {WEIGHTS_NAME} (not a model directory in HF layout)")
    return path


def weight_names(model_dir: str | os.PathLike) -> set[str]:
    """The HF names of the weights a checkpoint holds (safetensors: read without loading them)."""
    path = Path(model_dir) / WEIGHTS_NAME
    return _safetensors_keys(path) if path.is_file() else set(read_state_dict(model_dir))


def _safetensors_keys(path: Path) -> set[str]:
    try:
        with safe_open(str(path), framework="pt") as f:
            return set(f.keys())
    except Exception as err:
        raise BertkitError(f"{path}: unreadable weights, truncated or not a safetensors file "
                           f"({err})") from None


def require_head(model_dir: str | os.PathLike, head: str) -> None:
    """Refuse a checkpoint without the trained `head` ("mlm" or "nsp") a command needs: a fresh
    head would answer at random."""
    prefix = {"mlm": "cls.predictions.", "nsp": "cls.seq_relationship."}[head]
    if not any(k.startswith(prefix) for k in weight_names(model_dir)):
        what = {"mlm": "masked-LM head", "nsp": "next-sentence head"}[head]
        raise BertkitError(f"{model_dir}: has no trained {what} (an encoder-only or fine-tuned "
                           f"checkpoint); its answers would be random. Use a model from "
                           "`bertkit pretrain` (OUTPUT/model)")


def check_vocab(config: BertConfig, tokenizer: Any, model_dir: str | os.PathLike) -> None:
    """The tokenizer (a `BertTokenizer`) and the model must agree on the vocabulary: its size,
    and where [PAD] is (a vocab.txt whose lines moved shifts every id: answers, not errors)."""
    vocab_size = tokenizer.vocab_size
    if vocab_size != config.vocab_size:
        raise BertkitError(f"{model_dir}: vocab.txt has {vocab_size} tokens but the model's "
                           f"vocab_size is {config.vocab_size}: the tokenizer does not belong "
                           "to this model")
    pad = tokenizer.vocab.get("[PAD]")
    if pad is not None and pad != config.pad_token_id:
        raise BertkitError(f"{model_dir}: vocab.txt has [PAD] at id {pad} but config.json's "
                           f"pad_token_id is {config.pad_token_id}: the vocabulary's order is "
                           "not the model's (every id would be shifted)")


class PretrainedMixin:
    """`from_pretrained` / `save_pretrained` in HF's layout for `BertModel` and every head class."""

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, config: BertConfig | None = None,
                        **config_changes):
        """Build the model from `model_dir/config.json` (or `config`), with `config_changes`
        applied (e.g. `id2label=...` for a classifier), and load its weights."""
        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise BertkitError(f"{model_dir}: not a directory (expected a model directory with "
                               f"config.json and {WEIGHTS_NAME})")
        if config is None:
            refuse_google_folder(model_dir)
        config = config or BertConfig.load(model_dir)
        if config_changes:
            config = config.replace(**config_changes)
        model = cls(config)
        load_into(model, read_state_dict(model_dir), str(model_dir))
        model.eval()
        return model

    def save_pretrained(self, model_dir: str | os.PathLike) -> None:
        model_dir = Path(model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        extra = dict(self.config.extra, architectures=[type(self).__name__])
        self.config.replace(extra=extra).save(model_dir / "config.json")
        save_weights(self, model_dir)
