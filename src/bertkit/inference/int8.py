"""int8 inference that keeps its quality: a recipe applied to a `BertModel` with torch's dynamic
quantization, and the record of an int8 model folder (its recipe and its measured drift).

Dynamic quantization (`torch.ao.quantization.quantize_dynamic`) stores each Linear layer's
weights as int8, one scale per output channel, and quantizes its input per batch with one scale
for the whole (S, I) matrix, in 7 bits (fbgemm's `reduce_range`, which keeps AVX2's 16-bit
pair sums from saturating). One scale for the whole input is where BERT loses: a few channels of
its residual stream, and of the GELU output the second feed-forward projection reads, run tens
of times larger than the rest, so the rest are left with a handful of levels. The recipe answers
with the two known fixes, both plain torch modules around torch's quantized Linear (no int8
kernel of our own):

- smoothing (SmoothQuant, Xiao et al. 2023): the input's channel j is divided by s_j and the
  weight's column j multiplied by s_j, which leaves the product unchanged and moves the outliers'
  range into the per-channel weight scales; s_j = max|x_j|^alpha / max|W_j|^(1 - alpha), with
  max|x_j| measured on calibration texts. BERT is post-LN, so the division cannot be folded into
  the preceding LayerNorm (its output is also the residual): it stays one multiply per token;
- mixed precision: the Linear layers named in `keep_fp32` stay fp32.

A variant folder is a model folder (the fp32 weights, the tokenizer, sentence-transformers
settings) plus `int8.json`, the recipe and the drift measured on held-out texts when it was made,
and `int8_smoothing.safetensors` with the scales. Loading one without its drift record is an
error: a reduced precision is never used without saying what it costs.
"""

from __future__ import annotations

import copy
import logging
import os
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit.errors import BertkitError
from bertkit.io import atomic_path, atomic_write_json, read_json_object
from bertkit.training.hardware import CpuInfo

log = logging.getLogger("bertkit")

RECORD_NAME = "int8.json"
SCALES_NAME = "int8_smoothing.safetensors"
RECORD_FORMAT = "bertkit-int8"
RECORD_VERSION = 1
# the Linear kinds of a BERT layer, by the end of their module name in `model.py`
LINEAR_KINDS = {"qkv": "attention.qkv", "attention_output": "attention.out",
                "intermediate": "ffn.up", "ffn_output": "ffn.down"}
# kept fp32 when there are no calibration texts to smooth with
UNCALIBRATED_FP32 = ("ffn_output",)


@dataclass(frozen=True)
class Drift:
    """How far a variant's vectors are from the fp32 model's, on texts it was not calibrated
    on: cosine of each text's (mean-pooled) vector to its fp32 vector."""

    min_cosine: float
    mean_cosine: float
    texts: int
    source: str  # the file the held-out texts came from
    date: str  # ISO date of the measurement
    cpu: str  # the CPU's model name and int8 class (`int8_class`)
    torch: str

    def summary(self) -> str:
        return (f"cosine to fp32 min {self.min_cosine:.4f} / mean {self.mean_cosine:.4f} on "
                f"{self.texts} held-out texts of {self.source} ({self.date}, {self.cpu})")


@dataclass(frozen=True)
class Int8Recipe:
    """Which Linear layers of a `BertModel` stay fp32, and the smoothing scales (one per input
    channel, by module name) of those that are smoothed before quantization."""

    keep_fp32: tuple[str, ...] = ()
    alpha: float | None = None  # the SmoothQuant exponent the scales were made with
    scales: dict[str, torch.Tensor] = field(default_factory=dict)

    def describe(self) -> str:
        parts = ["dynamic int8 (weights per channel, inputs per batch)"]
        if self.scales:
            parts.append(f"{len(self.scales)} layers smoothed (alpha {self.alpha:g})")
        if self.keep_fp32:
            parts.append(f"{len(self.keep_fp32)} kept fp32 ({', '.join(self.keep_fp32)})")
        return ", ".join(parts)


@dataclass(frozen=True)
class Int8Variant:
    """A variant folder's record: its recipe and the drift it was measured at."""

    path: Path
    recipe: Int8Recipe
    drift: Drift
    calibration: dict[str, Any]  # where the calibration texts came from, how many

    def summary(self) -> str:
        return f"{self.path}: int8 variant, {self.recipe.describe()}; {self.drift.summary()}"


# ---- the recipe applied ---------------------------------------------------------------------


class SmoothedLinear(nn.Module):
    """y = linear(x / s), where the linear's weight columns were multiplied by s: the same
    product as the fp32 layer, with the input's outlier channels shrunk before quantization."""

    def __init__(self, linear: nn.Linear, scale: torch.Tensor):
        super().__init__()
        self.linear = copy.deepcopy(linear)
        with torch.no_grad():
            self.linear.weight.mul_(scale[None, :])  # (O, I) column j times s_j
        self.register_buffer("inverse", 1.0 / scale)  # (I,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.inverse)  # (S, I) channel j divided by s_j


def linear_names(model: nn.Module, kinds: tuple[str, ...] = tuple(LINEAR_KINDS)) -> list[str]:
    """The module names of the encoder layers' Linear layers of the given kinds, in order (the
    pooler is never run by `Encoder`, and is left as it is)."""
    ends = tuple(LINEAR_KINDS[k] for k in kinds)
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.startswith("layers.") and name.endswith(ends)]


def default_recipe(model: nn.Module) -> Int8Recipe:
    """The recipe that needs no calibration texts: the kinds in `UNCALIBRATED_FP32` kept fp32."""
    return Int8Recipe(keep_fp32=tuple(linear_names(model, UNCALIBRATED_FP32)))


def quantize_model(model: nn.Module, recipe: Int8Recipe) -> nn.Module:
    """A copy of `model` (eval, CPU) with every encoder Linear layer quantized to dynamic int8
    except those the recipe keeps fp32, the smoothed ones wrapped in `SmoothedLinear` first."""
    names = linear_names(model)
    unknown = sorted((set(recipe.keep_fp32) | set(recipe.scales)) - set(names))
    if unknown:
        raise BertkitError(f"int8 recipe names layers this model lacks: {', '.join(unknown[:5])}")
    model = copy.deepcopy(model).cpu().eval()
    quantized = []
    for name in names:
        if name in recipe.keep_fp32:
            continue
        if name in recipe.scales:
            parent, child = _parent(model, name)
            setattr(parent, child, SmoothedLinear(getattr(parent, child), recipe.scales[name]))
            name = f"{name}.linear"
        quantized.append(name)
    qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    with warnings.catch_warnings():
        # torch.ao's eager quantization is deprecated in favour of torchao, which is not a
        # dependency; the notice would only puzzle users of this option
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {n: qconfig for n in quantized},
                                                      dtype=torch.qint8)


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, child = name.rpartition(".")
    return model.get_submodule(path), child


def smoothing_scales(model: nn.Module, input_max: dict[str, torch.Tensor], alpha: float
                     ) -> dict[str, torch.Tensor]:
    """SmoothQuant's s_j = max|x_j|^alpha / max|W_j|^(1 - alpha) for each layer in `input_max`
    (per input channel), clamped away from zero for channels that never fire."""
    scales = {}
    for name, x_max in input_max.items():
        weight = model.get_submodule(name).weight.detach()  # (O, I)
        w_max = weight.abs().amax(dim=0).clamp(min=1e-5)  # (I,)
        s = x_max.clamp(min=1e-5).pow(alpha) / w_max.pow(1 - alpha)
        scales[name] = s.clamp(min=1e-5).float()
    return scales


class InputRanges:
    """Forward hooks that keep max|x_j| of each named Linear's input over all the batches run
    while active (`with InputRanges(model, names) as ranges: ...`)."""

    def __init__(self, model: nn.Module, names: list[str]):
        self.model, self.names = model, names
        self.max: dict[str, torch.Tensor] = {}
        self._hooks: list[Any] = []

    def __enter__(self) -> InputRanges:
        for name in self.names:
            module = self.model.get_submodule(name)
            self._hooks.append(module.register_forward_hook(self._keeper(name)))
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _keeper(self, name: str):
        def keep(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            x = inputs[0].detach().float()
            x_max = x.reshape(-1, x.shape[-1]).abs().amax(dim=0)  # (I,)
            old = self.max.get(name)
            self.max[name] = x_max if old is None else torch.maximum(old, x_max)
        return keep


def int8_class(cpu: CpuInfo) -> str:
    """The CPU's int8 class: what its int8 matrix products run on."""
    if "amx_int8" in cpu.flags:
        return "AMX (amx_int8)"
    if "avx512_vnni" in cpu.flags:
        return "AVX512-VNNI"
    if "avx_vnni" in cpu.flags:
        return "AVX-VNNI"
    if "avx512f" in cpu.flags:
        return "AVX512, no VNNI"
    if "avx2" in cpu.flags:
        return "AVX2, no VNNI"
    return "no AVX2"


# ---- the variant's record -------------------------------------------------------------------


def write_variant(folder: str | os.PathLike, recipe: Int8Recipe, drift: Drift,
                  calibration: dict[str, Any]) -> Int8Variant:
    """Write the recipe's scales and then `int8.json` (last: a folder without it is a plain
    fp32 model folder, never a variant without its record)."""
    folder = Path(folder)
    if recipe.scales:
        with atomic_path(folder / SCALES_NAME) as tmp:
            save_file({k: v.contiguous() for k, v in recipe.scales.items()}, str(tmp))
    record = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "method": "dynamic",
              "keep_fp32": list(recipe.keep_fp32), "alpha": recipe.alpha,
              "smoothed": sorted(recipe.scales), "scales_file": SCALES_NAME if recipe.scales else None,
              "calibration": calibration, "drift": asdict(drift), "recipe": recipe.describe()}
    atomic_write_json(folder / RECORD_NAME, record)
    return Int8Variant(folder, recipe, drift, calibration)


def is_variant(model_dir: str | os.PathLike) -> bool:
    """Whether a model folder is an int8 variant (holds an int8 record)."""
    return (Path(model_dir) / RECORD_NAME).is_file()


def read_variant(model_dir: str | os.PathLike) -> Int8Variant | None:
    """The int8 record of a model folder, None for a plain model folder. A record that is
    damaged, of another format, or without its drift is refused in one line."""
    folder = Path(model_dir)
    path = folder / RECORD_NAME
    if not path.is_file():
        return None
    record = read_json_object(path)
    if record.get("format") != RECORD_FORMAT or record.get("version") != RECORD_VERSION:
        raise BertkitError(f"{path}: not a bertkit int8 record (format {record.get('format')!r}, "
                           f"version {record.get('version')!r}; expected {RECORD_FORMAT!r} "
                           f"{RECORD_VERSION})")
    drift = record.get("drift")
    if not isinstance(drift, dict) or not {"min_cosine", "mean_cosine", "texts"} <= set(drift):
        raise BertkitError(f"{path}: an int8 variant without its drift record (min/mean cosine to "
                           "fp32 on held-out texts); make it again with `bertkit quantize`")
    try:
        drift_record = Drift(**drift)
        scales = _read_scales(folder, record)
        recipe = Int8Recipe(tuple(record.get("keep_fp32") or ()), record.get("alpha"), scales)
    except TypeError as err:
        raise BertkitError(f"{path}: damaged int8 record ({err})") from None
    return Int8Variant(folder, recipe, drift_record, dict(record.get("calibration") or {}))


def _read_scales(folder: Path, record: dict[str, Any]) -> dict[str, torch.Tensor]:
    smoothed = record.get("smoothed") or []
    if not smoothed:
        return {}
    path = folder / str(record.get("scales_file") or SCALES_NAME)
    try:
        scales = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise BertkitError(f"{path}: the int8 smoothing scales are missing or unreadable ({err})"
                           ) from None
    missing = sorted(set(smoothed) - set(scales))
    if missing:
        raise BertkitError(f"{path}: no smoothing scales for {', '.join(missing[:5])}")
    return {name: scales[name].float() for name in smoothed}
