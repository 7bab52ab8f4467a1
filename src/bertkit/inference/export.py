"""Export the encoder to ONNX (dynamic batch and sequence axes), validated with onnxruntime.

The exported graph takes `input_ids`, `attention_mask`, `token_type_ids` (B, T) int64 and gives
`last_hidden_state` (B, T, H) float32; pooling stays with the caller (it is one line of numpy).
It is traced from `OnnxEncoder`, which always applies the padding mask: `BertModel.forward` drops
the mask when a batch has no padding, a branch a trace would freeze into the graph.
onnx/onnxruntime are the optional extra `bertkit[onnx]`.
"""

from __future__ import annotations

import copy
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.io import atomic_path
from bertkit.model import BertModel

log = logging.getLogger("bertkit")

INPUT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
OUTPUT_NAMES = ["last_hidden_state"]
TOLERANCE = 1e-4  # max abs difference to PyTorch at real tokens


class OnnxEncoder(nn.Module):
    """The encoder of `model` with the mask always on; (B, T) ids -> (B, T, H)."""

    def __init__(self, model: BertModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        # BertModel keeps the mask while exporting (model._exporting): no data-dependent branch.
        return self.model(input_ids, token_type_ids, attention_mask).last_hidden_state


@dataclass
class ExportReport:
    path: Path
    max_abs_diff: float | None  # None when not validated
    validated_shapes: list[tuple[int, int]]

    def summary(self) -> str:
        if self.max_abs_diff is None:
            return f"exported {self.path} (not validated: onnxruntime not installed or skipped)"
        shapes = ", ".join(f"{b}x{t}" for b, t in self.validated_shapes)
        return (f"exported {self.path}; onnxruntime vs PyTorch max |diff| "
                f"{self.max_abs_diff:.2e} (<= {TOLERANCE:g}) on batches {shapes}")


# The opsets the TorchScript exporter covers for this graph (scaled_dot_product_attention and
# the int64 attention-mask arithmetic need 14; torch 2.13 exports up to 20).
MIN_OPSET, MAX_OPSET = 14, 20


def export_onnx(model: str | os.PathLike | BertModel, path: str | os.PathLike, opset: int = 17,
                validate: bool = True) -> ExportReport:
    """Write `model` (a directory or a BertModel) to `path` as ONNX; with `validate` and
    onnxruntime installed, compare with PyTorch on padded batches of two shapes and raise
    BertkitError beyond TOLERANCE."""
    if not MIN_OPSET <= opset <= MAX_OPSET:  # outside this, the exporter fails deep inside
        raise BertkitError(f"--opset must be between {MIN_OPSET} and {MAX_OPSET}, got {opset}")
    # a copy: the caller's model keeps its device, dtype and mode
    model = copy.deepcopy(model) if isinstance(model, nn.Module) else BertModel.from_pretrained(model)
    # eval on the wrapper itself: the exporter restores the wrapper's mode on the whole tree
    wrapper = OnnxEncoder(model.float().cpu()).eval()
    path = Path(path)
    example = sample_inputs(model.config.vocab_size, 2, 8, seed=0)
    with atomic_path(path) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on tracing are not the user's
        torch.onnx.export(
            wrapper, tuple(example[name] for name in INPUT_NAMES), str(tmp),
            input_names=INPUT_NAMES, output_names=OUTPUT_NAMES, opset_version=opset,
            dynamic_axes={name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES + OUTPUT_NAMES},
            dynamo=False,
        )
        # validated before the rename: a graph that disagrees never takes the output's name
        report = validate_onnx(wrapper, tmp) if validate else ExportReport(tmp, None, [])
    report.path = path
    return report


def sample_inputs(vocab_size: int, batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    """Random ids with rows of different lengths (the last row full): padding is exercised."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab_size, (batch, length), generator=gen)
    lengths = torch.linspace(2, length, batch).round().long()  # (B,)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()  # (B, T)
    types = (torch.arange(length)[None, :] >= lengths[:, None] // 2).long() * mask  # (B, T)
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": types}


def validate_onnx(wrapper: OnnxEncoder, path: Path) -> ExportReport:
    try:
        import onnxruntime
    except ImportError:
        log.info("onnxruntime is not installed (pip install 'bertkit[onnx]'): not validated")
        return ExportReport(path, None, [])
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    vocab, longest = wrapper.model.config.vocab_size, wrapper.model.config.max_position_embeddings
    worst, shapes = 0.0, []
    for seed, (batch, length) in enumerate([(3, 11), (1, 37)]):  # not the traced 2 x 8
        length = min(length, longest)
        inputs = sample_inputs(vocab, batch, length, seed)
        with torch.inference_mode():
            expected = wrapper(*(inputs[name] for name in INPUT_NAMES)).numpy()
        (got,) = session.run(None, {k: v.numpy() for k, v in inputs.items()})
        real = inputs["attention_mask"].numpy().astype(bool)  # padding rows may differ freely
        worst = max(worst, float(np.abs(got[real] - expected[real]).max()))
        shapes.append((batch, length))
    if worst > TOLERANCE:
        raise BertkitError(f"{path}: onnxruntime output differs from PyTorch by {worst:.2e} "
                           f"(> {TOLERANCE:g})")
    return ExportReport(path, worst, shapes)
