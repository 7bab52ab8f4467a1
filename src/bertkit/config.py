"""`BertConfig`: the model's shape, whose JSON *is* Hugging Face's `config.json`.

Same keys and defaults as `transformers.BertConfig`, so a `config.json` written here loads there
and the other way round. Keys we do not model (a real `config.json` carries many: `architectures`,
`torch_dtype`, `transformers_version`, ...) are kept in `extra` and written back on save.
The config is frozen: build a changed copy with `dataclasses.replace` (validation runs again).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text, read_json_object

CONFIG_NAME = "config.json"  # a model folder's config, HF's name
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")

# name: (num_hidden_layers, hidden_size, num_attention_heads); intermediate = 4 x hidden.
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


# The keys a config.json must hold: without them the defaults would build another model.
ARCHITECTURE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size")


def _finite(value: Any) -> bool:
    """A real number (not a bool, not NaN or infinite)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    classifier_dropout: float | None = None
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "type_vocab_size")
        for name in sizes:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise BertkitError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise BertkitError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise BertkitError(
                f"BertConfig.hidden_act {self.hidden_act!r} is unknown; expected one of "
                f"{', '.join(ACTIVATIONS)}"
            )
        if self.position_embedding_type != "absolute":
            raise BertkitError("only position_embedding_type='absolute' (BERT's) is supported")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise BertkitError(f"BertConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        # a non-positive epsilon makes LayerNorm return NaN for some inputs: answers that look
        # like answers
        if not (_finite(self.layer_norm_eps) and self.layer_norm_eps > 0):
            raise BertkitError("BertConfig.layer_norm_eps must be a finite number > 0, got "
                               f"{self.layer_norm_eps!r}")
        if not (_finite(self.initializer_range) and self.initializer_range >= 0):
            raise BertkitError("BertConfig.initializer_range must be a finite number >= 0, got "
                               f"{self.initializer_range!r}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise BertkitError(f"pad_token_id {self.pad_token_id} outside vocab_size {self.vocab_size}")
        if self.id2label is not None:
            object.__setattr__(self, "id2label", {int(k): str(v) for k, v in self.id2label.items()})
            names = list(self.id2label.values())
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:  # two outputs one answer: a prediction could not say which
                raise BertkitError(f"BertConfig.id2label names {', '.join(map(repr, twice))} "
                                   "for more than one id")
            inverse = {v: k for k, v in self.id2label.items()}
            if self.label2id is not None and set(self.label2id) == set(names):
                wrong = sorted(k for k, v in self.label2id.items() if str(v) != str(inverse[k]))
                if wrong:
                    raise BertkitError(f"BertConfig.label2id disagrees with id2label on "
                                       f"{', '.join(map(repr, wrong))}")
            else:
                object.__setattr__(self, "label2id", inverse)

    @property
    def num_labels(self) -> int:
        """Number of labels of a task head: len(id2label), HF's default of 2 when unset."""
        return len(self.id2label) if self.id2label else 2

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> BertConfig:
        """A named model size (tiny, mini, small, medium, base, large); overrides win."""
        if name not in PRESETS:
            raise BertkitError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden, heads = PRESETS[name]
        args = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                    intermediate_size=4 * hidden)
        args.update(overrides)
        return cls(**args)

    def replace(self, **changes: Any) -> BertConfig:
        return dataclasses.replace(self, **changes)

    # --- JSON (HF config.json) ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.setdefault("model_type", "bert")
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name in ("id2label", "label2id") and value is None:
                continue
            if f.name == "id2label":
                value = {str(k): v for k, v in value.items()}
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BertConfig:
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        if extra.get("model_type", "bert") != "bert":
            raise BertkitError(f"config model_type is {extra['model_type']!r}, not 'bert'")
        return cls(**known, extra=extra)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def save(self, path: str | os.PathLike) -> None:
        """Write config.json atomically (a file path, or a directory to hold config.json)."""
        path = Path(path)
        if path.is_dir() or path.suffix != ".json":
            path = path / CONFIG_NAME
        atomic_write_text(path, self.to_json_string())

    @classmethod
    def load(cls, path: str | os.PathLike) -> BertConfig:
        """Read a config.json (a file path, or a model directory that holds one)."""
        path = Path(path)
        if path.is_dir():
            path = path / CONFIG_NAME
        if not path.is_file():
            raise BertkitError(f"{path.parent}: no config.json here (is this a BERT model directory?)")
        data = read_json_object(path)
        absent = [k for k in ARCHITECTURE_KEYS if k not in data]
        if absent:  # HF's defaults would describe another model than the weights beside it
            raise BertkitError(f"{path}: missing {', '.join(absent)}; a BERT config.json names its "
                               "architecture (see a transformers-saved config.json)")
        try:
            return cls.from_dict(data)
        except (TypeError, BertkitError) as err:  # the file named: which of a run's configs
            raise BertkitError(f"{path}: {err}") from None
