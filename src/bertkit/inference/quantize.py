"""`bertkit quantize`: a model folder -> an int8 variant folder, calibrated and measured on the
user's own texts.

The texts are shuffled with a fixed seed and split: the first `calibration_texts` give the
input ranges the smoothing scales come from (`int8.smoothing_scales`), the next
`held_out_texts` (never seen by the calibration) measure the drift: the cosine of each text's
int8 vector to its fp32 vector, pooled as the model pools. The variant folder holds a copy of the
model folder's files and, written last, `int8.json` with the recipe and that drift.
"""

from __future__ import annotations

import datetime
import logging
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertkit.checkpoint import check_model_dir
from bertkit.errors import BertkitError
from bertkit.inference.encoder import Encoder
from bertkit.inference.files import read_texts
from bertkit.inference.int8 import (
    LINEAR_KINDS,
    RECORD_NAME,
    SCALES_NAME,
    Drift,
    InputRanges,
    Int8Recipe,
    Int8Variant,
    int8_class,
    linear_names,
    smoothing_scales,
    write_variant,
)
from bertkit.io import claim_output_dir
from bertkit.training.hardware import cpu_info

log = logging.getLogger("bertkit")

MARKER = "quantize.json"  # the settings of the run that wrote the folder (claim_output_dir)
LAYER_NAME = re.compile(r"layers\.\d+\.(" + "|".join(re.escape(v) for v in LINEAR_KINDS.values()) + ")")
MIN_HELD_OUT = 16  # fewer held-out texts would make the drift figure noise


@dataclass(frozen=True)
class QuantizeConfig:
    model: Path
    output: Path
    calibration: Path  # the user's texts (.txt, one a line, or a table with `column`)
    column: str = "text"
    calibration_texts: int = 256
    held_out_texts: int = 1000
    alpha: float = 0.75  # SmoothQuant's migration strength (0.75 measured best on MiniLM)
    # the layers smoothed and the layers left in fp32: kinds (LINEAR_KINDS, every layer's) or
    # module names (layers.0.ffn.down); the kept ones are never smoothed
    smooth: tuple[str, ...] = tuple(LINEAR_KINDS)
    keep_fp32: tuple[str, ...] = ("ffn_output",)
    max_length: int | None = None
    batch_size: int = 32
    seed: int = 0
    overwrite: bool = False

    def __post_init__(self) -> None:
        for flag, kinds in (("--smooth", self.smooth), ("--keep-fp32", self.keep_fp32)):
            unknown = [k for k in kinds if k not in LINEAR_KINDS and not LAYER_NAME.fullmatch(k)]
            if unknown:
                raise BertkitError(f"{flag}: unknown layer kind {unknown[0]!r} (expected "
                                   f"{', '.join(LINEAR_KINDS)}, or a name like layers.0.ffn.down)")
        if not 0.0 <= self.alpha <= 1.0:
            raise BertkitError(f"--alpha must be in [0, 1], got {self.alpha}")
        if self.calibration_texts < 1:
            raise BertkitError(f"--calibration-texts must be positive, got {self.calibration_texts}")
        if self.held_out_texts < MIN_HELD_OUT:
            raise BertkitError(f"--held-out-texts must be at least {MIN_HELD_OUT}, got "
                               f"{self.held_out_texts}")

    def settings(self) -> dict[str, object]:
        return {"model": str(self.model), "calibration": str(self.calibration),
                "column": self.column, "calibration_texts": self.calibration_texts,
                "held_out_texts": self.held_out_texts, "alpha": self.alpha,
                "smooth": list(self.smooth), "keep_fp32": list(self.keep_fp32),
                "max_length": self.max_length, "seed": self.seed}


def quantize(cfg: QuantizeConfig) -> Int8Variant:
    """Calibrate, measure and write the variant folder; returns its record."""
    model_dir = check_model_dir(cfg.model)
    if (model_dir / RECORD_NAME).is_file():
        raise BertkitError(f"{model_dir}: already an int8 variant; quantize the fp32 model it was "
                           "made from")
    calibration, held_out = split_texts(cfg)
    claim_output_dir(cfg.output, MARKER, cfg.settings(), inputs=[model_dir, cfg.calibration],
                     overwrite=cfg.overwrite)
    fp32 = Encoder(model_dir, precision="fp32", max_length=cfg.max_length)
    recipe = calibrate(fp32, calibration, cfg)
    int8 = Encoder(fp32.model, tokenizer=fp32.tokenizer, precision="int8", int8=recipe,
                   max_length=fp32.max_length, pooling=fp32.default_pooling)
    drift = measure_drift(fp32, int8, held_out, cfg.calibration.name, cfg.batch_size)
    copy_model_files(model_dir, cfg.output)
    info = {"file": cfg.calibration.name, "texts": len(calibration), "seed": cfg.seed,
            "pooling": fp32.default_pooling, "max_length": fp32.max_length}
    return write_variant(cfg.output, recipe, drift, info)


def split_texts(cfg: QuantizeConfig) -> tuple[list[str], list[str]]:
    """The calibration and held-out texts: the file's distinct texts, shuffled by `seed`."""
    texts, _ = read_texts(cfg.calibration, cfg.column)
    distinct = list(dict.fromkeys(t for t in texts if t.strip()))
    random.Random(cfg.seed).shuffle(distinct)
    n_cal = min(cfg.calibration_texts, len(distinct) // 2)
    held_out = distinct[n_cal:n_cal + cfg.held_out_texts]
    if len(held_out) < MIN_HELD_OUT:
        raise BertkitError(f"{cfg.calibration}: {len(distinct)} distinct texts; quantize needs at "
                           f"least {2 * MIN_HELD_OUT} (half for calibration, at least "
                           f"{MIN_HELD_OUT} held out to measure the drift)")
    return distinct[:n_cal], held_out


def calibrate(fp32: Encoder, texts: list[str], cfg: QuantizeConfig) -> Int8Recipe:
    """The recipe: the `keep_fp32` kinds left fp32, the `smooth` kinds smoothed with scales from
    the input ranges the fp32 model shows on `texts`."""
    model = fp32.model
    keep = chosen_layers(model, cfg.keep_fp32)
    smoothed = [n for n in chosen_layers(model, cfg.smooth) if n not in keep]
    if not smoothed:
        return Int8Recipe(keep_fp32=tuple(keep))
    with InputRanges(model, smoothed) as ranges:
        fp32.encode(texts, batch_size=cfg.batch_size)
    scales = smoothing_scales(model, ranges.max, cfg.alpha)
    return Int8Recipe(keep_fp32=tuple(keep), alpha=cfg.alpha, scales=scales)


def chosen_layers(model: torch.nn.Module, spec: tuple[str, ...]) -> list[str]:
    """The Linear layers a `--smooth` / `--keep-fp32` list names (kinds or module names)."""
    names = linear_names(model)
    kinds = tuple(k for k in spec if k in LINEAR_KINDS)
    picked = set(linear_names(model, kinds)) if kinds else set()
    for name in spec:
        if name not in LINEAR_KINDS:
            if name not in names:
                raise BertkitError(f"no layer {name!r} in this {len(model.layers)}-layer model")
            picked.add(name)
    return [n for n in names if n in picked]


def measure_drift(fp32: Encoder, int8: Encoder, texts: list[str], source: str,
                  batch_size: int = 32) -> Drift:
    """Cosine of each text's int8 vector to its fp32 vector (both pooled as the model pools)."""
    a = fp32.encode(texts, normalize=True, batch_size=batch_size)
    b = int8.encode(texts, normalize=True, batch_size=batch_size)
    cosine = cosines(a, b)
    cpu = cpu_info()
    return Drift(min_cosine=round(float(cosine.min()), 6), mean_cosine=round(float(cosine.mean()), 6),
                 texts=len(texts), source=source, date=datetime.date.today().isoformat(),
                 cpu=f"{cpu.model or 'unknown CPU'} ({int8_class(cpu)})", torch=torch.__version__)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (n, H) arrays."""
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return (a * b).sum(axis=1)


def copy_model_files(model_dir: Path, output: Path) -> None:
    """The model folder's top-level files and the sentence-transformers module folders
    (`1_Pooling`, ...), so the variant loads wherever the model does; an earlier variant's
    record is never copied."""
    skip = {RECORD_NAME, SCALES_NAME, MARKER}
    for path in sorted(model_dir.iterdir()):
        if path.is_file() and path.name not in skip:
            shutil.copy2(path, output / path.name)
        elif path.is_dir() and path.name[:1].isdigit() and "_" in path.name:
            shutil.copytree(path, output / path.name, dirs_exist_ok=True)
