"""`bertkit embed`, `features`, `similarity` and `export`: put a BERT to work on texts.

Input files: `.txt` (one text per line; an empty line is an empty text, so line i -> vector i),
`.jsonl` (one object per line with a `--column` string, or a bare JSON string; blank lines
skipped), `.csv` / `.tsv` (a header row naming `--column`). A bad record stops the run with its
file and line number before any model work is done.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.inference import COMBINES, INFERENCE_PRECISIONS, POOLINGS, Encoder
from bertkit.inference.export import export_onnx
from bertkit.inference.files import check_output_file, read_texts, write_features, write_vectors

log = logging.getLogger("bertkit")


def register(subparsers) -> None:
    embed = subparsers.add_parser("embed", help="texts -> one vector each (.npy or .jsonl)")
    _model_args(embed)
    _input_args(embed)
    embed.add_argument("--output", required=True, help="vectors.npy (float32, N x H) or .jsonl")
    embed.add_argument("--pooling", choices=POOLINGS,
                       help="default: the model's own (sentence-transformers config), else cls")
    embed.add_argument("--normalize", action="store_true", help="L2-normalize each vector")
    embed.set_defaults(func=run_embed)

    feats = subparsers.add_parser("features", help="per-token vectors of chosen layers (.jsonl)")
    _model_args(feats)
    _input_args(feats)
    feats.add_argument("--output", required=True, help="features.jsonl")
    feats.add_argument("--layers", default="-1,-2,-3,-4",
                       help="comma-separated, written --layers=-1,-2 (argparse reads a bare -1 as an "
                            "option); -1 = last layer, 0 = embeddings (default -1,-2,-3,-4)")
    feats.add_argument("--combine", choices=COMBINES, default="none",
                       help="none: one entry per layer (Google's extract_features layout); "
                            "concat/sum: one vector per token")
    feats.set_defaults(func=run_features)

    sim = subparsers.add_parser("similarity", help="cosine similarity matrix of a few texts")
    _model_args(sim)
    sim.add_argument("texts", nargs="+", help="two or more texts")
    sim.add_argument("--pooling", choices=POOLINGS)
    sim.set_defaults(func=run_similarity)

    export = subparsers.add_parser("export", help="export the encoder (ONNX), validated")
    export.add_argument("model", help="model directory (HF layout)")
    export.add_argument("--format", choices=("onnx",), default="onnx")
    export.add_argument("--output", default="model.onnx", help="output file (default model.onnx)")
    export.add_argument("--opset", type=int, default=17)
    export.add_argument("--no-validate", action="store_true",
                        help="skip the onnxruntime comparison with PyTorch")
    export.set_defaults(func=run_export)


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="model directory (HF layout, or a sentence-transformers dir)")
    parser.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda:1, ...")
    parser.add_argument("--precision", choices=INFERENCE_PRECISIONS, default="auto",
                        help="auto (default): bf16 where this machine computes it fast (GPU, AMX, "
                             "AMD AVX512-BF16), else fp32; int8: dynamic quantization (CPU)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int,
                        help="tokens per input, [CLS]/[SEP] included (default: the model's)")


def _input_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="texts.txt | .jsonl | .csv | .tsv")
    parser.add_argument("--column", default="text", help="field holding the text (jsonl/csv)")
    parser.add_argument("--pair-column", help="field holding a second text (segment B)")
    parser.add_argument("--stride", type=int,
                        help="cut long texts into windows starting every STRIDE tokens and merge "
                             "their token vectors (default: truncate at max length)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _encoder(args: argparse.Namespace) -> Encoder:
    return Encoder(args.model, device=args.device, precision=args.precision,
                   max_length=args.max_length)


# ---- handlers ---------------------------------------------------------------------------------


def run_embed(args: argparse.Namespace) -> int:
    check_output_file(args.output, (".npy", ".jsonl"), inputs=[args.model, args.input])
    texts, pairs = read_texts(Path(args.input), args.column, args.pair_column)
    encoder = _encoder(args)
    vectors = encoder.encode(texts, pairs, pooling=args.pooling, normalize=args.normalize,
                             batch_size=args.batch_size, stride=args.stride,
                             progress=not args.no_progress)
    write_vectors(Path(args.output), vectors)
    _summary(encoder, args.output)
    return 0


def run_features(args: argparse.Namespace) -> int:
    layers = parse_layers(args.layers)
    check_output_file(args.output, (".jsonl",), inputs=[args.model, args.input])
    texts, pairs = read_texts(Path(args.input), args.column, args.pair_column)
    encoder = _encoder(args)
    feats = encoder.features(texts, pairs, layers=layers, combine=args.combine,
                             batch_size=args.batch_size, stride=args.stride,
                             progress=not args.no_progress)
    write_features(Path(args.output), feats, layers, args.combine)
    _summary(encoder, args.output)
    return 0


def run_similarity(args: argparse.Namespace) -> int:
    if len(args.texts) < 2:
        raise BertkitError("similarity needs at least two texts")
    encoder = _encoder(args)
    vectors = encoder.encode(args.texts, pooling=args.pooling, normalize=True)
    matrix = vectors @ vectors.T  # (n, n) cosines: the rows are unit vectors
    for i, text in enumerate(args.texts):
        print(f"[{i}] {text}")
    print("     " + " ".join(f"{f'[{j}]':>7}" for j in range(len(args.texts))))
    for i, row in enumerate(matrix):
        print(f"{f'[{i}]':<5}" + " ".join(f"{v:7.4f}" for v in row))
    return 0


def run_export(args: argparse.Namespace) -> int:
    check_output_file(args.output, (".onnx",), inputs=[args.model])
    report = export_onnx(args.model, args.output, opset=args.opset,
                         validate=not args.no_validate)
    log.info("%s", report.summary())
    return 0


def _summary(encoder: Encoder, output: str) -> None:
    s = encoder.last_stats
    rate = s.texts / s.seconds if s.seconds > 0 else float("inf")
    note = f", {s.truncated} truncated at {encoder.max_length} tokens" if s.truncated else ""
    windows = f", {s.pieces} windows" if s.pieces != s.texts else ""
    log.info("%d texts (%d tokens%s%s) in %.1f s (%.0f texts/s) -> %s", s.texts, s.tokens,
             windows, note, s.seconds, rate, output)


# ---- reading and writing ----------------------------------------------------------------------


def parse_layers(spec: str) -> list[int]:
    try:
        layers = [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise BertkitError(f"--layers: expected comma-separated integers like -1,-2, got {spec!r}"
                           ) from None
    if not layers:
        raise BertkitError("--layers: no layer given")
    return layers
