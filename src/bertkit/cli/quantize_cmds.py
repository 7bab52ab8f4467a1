"""`bertkit quantize MODEL --output DIR --calibration FILE`: an int8 variant of a model folder,
calibrated on your texts, with its drift from fp32 measured on held-out ones."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertkit.inference.int8 import LINEAR_KINDS
from bertkit.inference.quantize import QuantizeConfig, quantize


def _kinds(spec: str) -> tuple[str, ...]:
    return tuple(k.strip() for k in spec.split(",") if k.strip())


def register(subparsers: argparse._SubParsersAction) -> None:
    kinds = ", ".join(LINEAR_KINDS)
    p = subparsers.add_parser(
        "quantize", help="an int8 variant of a model folder, with its measured drift",
        description="Write an int8 variant of a model folder: a copy of the folder plus int8.json, "
        "the recipe (dynamic int8 with SmoothQuant scales calibrated on your texts, the most "
        "sensitive layers kept fp32) and its drift: the min/mean cosine of int8 vectors to fp32 "
        "ones on held-out texts of the same file. embed, similarity and serve load the folder "
        "at int8 (--precision fp32 still gives fp32) and log the drift.")
    p.add_argument("model", type=Path, help="the fp32 model folder (HF layout)")
    p.add_argument("--output", type=Path, required=True, metavar="DIR",
                   help="a new or empty folder for the variant")
    p.add_argument("--calibration", type=Path, required=True, metavar="FILE",
                   help="texts like those you will embed (.txt one a line, or .csv/.tsv/.jsonl/"
                   ".parquet with --column); shuffled and split into calibration and held-out texts")
    p.add_argument("--column", default="text", help="the text column of a table")
    p.add_argument("--calibration-texts", type=int, default=256,
                   help="texts the input ranges are measured on (at most half the file)")
    p.add_argument("--held-out-texts", type=int, default=1000,
                   help="texts the drift is measured on (the ones after the calibration texts)")
    p.add_argument("--alpha", type=float, default=0.75, help="SmoothQuant's migration strength")
    p.add_argument("--smooth", type=_kinds, default=tuple(LINEAR_KINDS),
                   help=f"comma-separated layer kinds to smooth ({kinds}; default all) or "
                   "layer names (layers.0.ffn.up)")
    p.add_argument("--keep-fp32", type=_kinds, default=("ffn_output",),
                   help=f"comma-separated layer kinds left in fp32 ({kinds}; '' for none; "
                   "default ffn_output) or layer names (layers.0.ffn.down)")
    p.add_argument("--max-length", type=int, help="tokens per text (default: the model's)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0, help="the shuffle before the split")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier variant in DIR")
    p.set_defaults(func=run_quantize)


def run_quantize(args: argparse.Namespace) -> int:
    cfg = QuantizeConfig(model=args.model, output=args.output, calibration=args.calibration,
                         column=args.column, calibration_texts=args.calibration_texts,
                         held_out_texts=args.held_out_texts, alpha=args.alpha, smooth=args.smooth,
                         keep_fp32=args.keep_fp32, max_length=args.max_length,
                         batch_size=args.batch_size, seed=args.seed, overwrite=args.overwrite)
    variant = quantize(cfg)
    print(variant.summary())
    return 0
