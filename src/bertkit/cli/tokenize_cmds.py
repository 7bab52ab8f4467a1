"""`bertkit tokenize MODEL_DIR TEXT [--pair TEXT]`: show how a model's tokenizer splits text."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.tokenization import BertTokenizer, Encoding


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tokenize",
        help="show the WordPiece tokens, ids and segment ids of a text (or pair)",
        description="Tokenize TEXT (and --pair) with MODEL_DIR's vocab.txt and "
        "tokenizer_config.json and print one row per token: position, token, id, segment id "
        "and the span of the original text it came from.",
    )
    p.add_argument("model", type=Path, metavar="MODEL_DIR", help="directory holding vocab.txt")
    p.add_argument("text", help="text to tokenize (segment A)")
    p.add_argument("--pair", help="second text (segment B)")
    p.add_argument(
        "--max-length",
        type=int,
        help="truncate to this many tokens, specials included (default: no truncation)",
    )
    p.set_defaults(func=run_tokenize)


def run_tokenize(args: argparse.Namespace) -> int:
    if not args.model.is_dir():
        raise BertkitError(f"{args.model}: not a directory")
    tokenizer = BertTokenizer.from_pretrained(args.model)
    encoding = tokenizer.encode(
        args.text,
        args.pair,
        max_length=args.max_length,
        truncation=args.max_length is not None,
    )
    print(format_table(encoding, args.text, args.pair))
    return 0


def format_table(encoding: Encoding, text: str, pair: str | None = None) -> str:
    """One aligned row per token; the span column is the original text each token covers."""
    header = ("#", "token", "id", "segment", "span")
    rows = [header]
    for position, token in enumerate(encoding.tokens):
        segment = encoding.token_type_ids[position]
        start, end = encoding.offsets[position]
        source = pair if segment == 1 and pair is not None else text
        span = "" if encoding.special_tokens_mask[position] else source[start:end]
        row = (str(position), token, str(encoding.input_ids[position]), str(segment), span)
        rows.append(row)
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)
