"""`bertkit embed`, `features`, `similarity` and `export`: put a BERT to work on texts.

Input files: `.txt` (one text per line; an empty line is an empty text, so line i -> vector i),
or a table: `.jsonl` (one object per line with a `--text-column` string, or a bare JSON string;
blank lines skipped), `.csv` / `.tsv` (a header row naming the columns), `.parquet`. A bad record
stops the run with its file and line number before any model work is done. The input is read,
encoded and written a window of texts at a time (`bertkit.inference.files`).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.inference import COMBINES, INFERENCE_PRECISIONS, POOLINGS, Encoder
from bertkit.inference.encoder import FROZEN_POOLING
from bertkit.inference.export import export_onnx
from bertkit.inference.files import (
    VECTOR_SUFFIXES,
    TextSource,
    batch_invariant,
    check_output_file,
    file_precision,
    record_windows,
    scan,
    write_features,
    write_vector_table,
)
from bertkit.inference.int8 import is_variant

log = logging.getLogger("bertkit")


POOLING_HELP = ("default: the checkpoint's own (a sentence-transformers folder's 1_Pooling config), "
                f"else {FROZEN_POOLING}: for frozen features of a plain BERT the mean over the tokens is "
                "the stronger sentence vector; [CLS] was trained only for next-sentence prediction")
FILE_PRECISION_HELP = ("default fp32: a text's vector is then the same bits whatever its batch and "
                       "neighbours; auto (bf16 where this machine computes it fast), bf16, fp16 and "
                       "int8 are faster, and the file's sidecar says their vectors are "
                       "batch-dependent; an int8 variant folder (bertkit quantize) runs at int8 "
                       "unless asked otherwise")


def register(subparsers) -> None:
    embed = subparsers.add_parser(
        "embed", help="texts -> one vector each: a feature table (.npy, .csv, .parquet, .jsonl)",
        description="One pooled vector per text, written as a table with the ids first (or a "
                    ".npy matrix), with OUTPUT.json beside it saying how it was made.")
    _model_args(embed, file_output=True)
    _input_args(embed)
    embed.add_argument("--id-column",
                       help="table input: the column of unique ids written first (default: the "
                            "1-based line or row number, column 'id')")
    embed.add_argument("--output", required=True,
                       help="vectors.npy (float32, N x D, row i = text i), features.csv or "
                            ".parquet (id, e0 .. e{D-1}), or .jsonl ({index, embedding})")
    embed.add_argument("--pooling", choices=POOLINGS, help=POOLING_HELP)
    embed.add_argument("--layers", default="-1",
                       help="comma-separated, written --layers=-1,-2: the pooled vector of each, "
                            "concatenated (-1 = last layer, 0 = embeddings; default -1)")
    embed.add_argument("--normalize", action="store_true", help="L2-normalize each vector")
    embed.set_defaults(func=run_embed)

    feats = subparsers.add_parser(
        "features", help="per-token, per-layer vectors (Google's extract_features layout, .jsonl); "
                         "for one row per text (a feature table) use `bertkit embed`",
        description="Per-token vectors of chosen layers, one JSON line per text in the layout of "
                    "Google's extract_features.py. A table with one vector per text, for "
                    "scikit-learn, R or a spreadsheet, is `bertkit embed`.")
    _model_args(feats, file_output=True)
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
    sim.add_argument("--pooling", choices=POOLINGS, help=POOLING_HELP)
    sim.set_defaults(func=run_similarity)

    export = subparsers.add_parser("export", help="export the encoder (ONNX), validated")
    export.add_argument("model", help="model directory (HF layout)")
    export.add_argument("--format", choices=("onnx",), default="onnx")
    export.add_argument("--output", default="model.onnx", help="output file (default model.onnx)")
    export.add_argument("--opset", type=int, default=17)
    export.add_argument("--no-validate", action="store_true",
                        help="skip the onnxruntime comparison with PyTorch")
    export.set_defaults(func=run_export)


def _model_args(parser: argparse.ArgumentParser, file_output: bool = False) -> None:
    parser.add_argument("model", help="model directory (HF layout, or a sentence-transformers dir)")
    parser.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda:1, ...")
    if file_output:
        parser.add_argument("--precision", choices=INFERENCE_PRECISIONS, help=FILE_PRECISION_HELP)
    else:
        parser.add_argument("--precision", choices=INFERENCE_PRECISIONS, default="auto",
                            help="auto (default): bf16 where this machine computes it fast (GPU, "
                                 "AMX, AMD AVX512-BF16), else fp32; int8: dynamic quantization (CPU)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int,
                        help="tokens per input, [CLS]/[SEP] included (default: the model's)")


def _input_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True,
                        help="texts.txt (one per line) or a table: .csv | .tsv | .jsonl | .parquet")
    parser.add_argument("--text-column", "--column", dest="text_column", default="text",
                        help="table input: the column holding the text (default text)")
    parser.add_argument("--pair-column", help="table input: the column holding a second text "
                                              "(segment B)")
    parser.add_argument("--stride", type=int,
                        help="cut long texts into windows starting every STRIDE tokens and merge "
                             "their token vectors (default: truncate at max length)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _encoder(args: argparse.Namespace, file_output: bool = False) -> Encoder:
    precision = args.precision
    if file_output and not is_variant(args.model):  # a variant's own precision is int8
        precision = file_precision(precision)
    return Encoder(args.model, device=args.device, precision=precision,
                   max_length=args.max_length)


def _source(args: argparse.Namespace) -> TextSource:
    return TextSource(Path(args.input), args.text_column, args.pair_column,
                      getattr(args, "id_column", None))


# ---- handlers ---------------------------------------------------------------------------------


def run_embed(args: argparse.Namespace) -> int:
    output = Path(args.output)
    check_output_file(output, VECTOR_SUFFIXES, inputs=[args.model, args.input], sidecar=True)
    if args.id_column and output.suffix.lower() == ".npy":
        raise BertkitError(f"--output {output}: a .npy holds the vectors only (row i = text i); "
                           "write .csv, .parquet or .jsonl to keep --id-column")
    layers = parse_layers(args.layers)
    source = _source(args)
    found = scan(source)
    encoder = _encoder(args, file_output=True)
    encoder.check_layers(layers)
    invariant = batch_invariant(encoder)
    pooling = args.pooling or encoder.default_pooling
    results = encoder.encode_windows(record_windows(source, found.integer_ids), total=found.count,
                                     pooling=pooling, normalize=args.normalize,
                                     batch_size=args.batch_size, stride=args.stride,
                                     progress=not args.no_progress, layers=layers,
                                     batch_invariant=invariant)

    def info() -> dict:
        return {"model": str(Path(args.model).resolve()), "input": str(Path(args.input).resolve()),
                "text_column": args.text_column if source.is_table else None,
                "pair_column": args.pair_column, "id_column": args.id_column,
                "key": source.key_name, "pooling": pooling, "layers": layers,
                "normalize": args.normalize, **encoder.precision_record(),
                "vectors": "batch-invariant" if invariant else "batch-dependent",
                "max_length": encoder.max_length, "stride": args.stride, "texts": found.count,
                "truncated": encoder.last_stats.truncated,
                "dimensions": len(layers) * encoder.config.hidden_size}

    write_vector_table(output, results, found, len(layers) * encoder.config.hidden_size,
                       source.key_name, with_ids=bool(args.id_column), info=info)
    _summary(encoder, args.output)
    return 0


def run_features(args: argparse.Namespace) -> int:
    layers = parse_layers(args.layers)
    check_output_file(args.output, (".jsonl",), inputs=[args.model, args.input])
    source = _source(args)
    found = scan(source)
    encoder = _encoder(args, file_output=True)
    encoder.check_layers(layers)
    results = encoder.features_windows(record_windows(source), total=found.count, layers=layers,
                                       combine=args.combine, batch_size=args.batch_size,
                                       stride=args.stride, progress=not args.no_progress,
                                       batch_invariant=batch_invariant(encoder))
    feats = (feat for _, window_feats in results for feat in window_feats)
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
