"""`bertkit vocab train FILE... --output DIR` and `bertkit vocab stats VOCAB --input FILE...`."""

from __future__ import annotations

import argparse
import logging
from dataclasses import asdict
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.io import claim_output_dir
from bertkit.tokenization import BertTokenizer
from bertkit.tokenization.counting import count_files, expand_inputs, segmentation_stats
from bertkit.tokenization.trainer import (
    CRITERIA,
    DEPRECATED_CRITERIA,
    TrainerConfig,
    save_vocab,
    train_from_files,
)

MARKER = "vocab_train.json"  # written first: marks a folder as a `vocab train` output

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    vocab = sub.add_parser("vocab", help="learn a WordPiece vocabulary, or measure one")
    commands = vocab.add_subparsers(dest="vocab_command", metavar="SUBCOMMAND", required=True)
    _register_train(commands)
    _register_stats(commands)


def _register_train(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "train",
        help="learn a WordPiece vocabulary from text files",
        description="Learn a WordPiece vocabulary by likelihood (Schuster & Nakajima: merge the "
        "pair that most increases the unigram log-likelihood of the corpus), by PMI or by "
        "frequency (BPE). Writes vocab.txt and tokenizer_config.json to --output.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="plain text, one-sentence-per-line or JSONL ('text') files; globs allowed")
    p.add_argument("--output", "-o", type=Path, required=True, metavar="DIR",
                   help="a new or empty folder (or an earlier `vocab train` output, with "
                   "--overwrite); never a model's folder")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the vocabulary of an earlier `vocab train` into --output")
    p.add_argument("--vocab-size", type=int, default=30522,
                   help="final size, special and reserved tokens included (default 30522)")
    p.add_argument("--criterion", choices=(*CRITERIA, *DEPRECATED_CRITERIA),
                   default=TrainerConfig.criterion,
                   help="likelihood: the exact increase of the unigram log-likelihood (the "
                   "best vocabularies measured, docs/benchmarks.md); pmi: the ratio "
                   "count(ab) / (count(a) count(b)), which at small sizes leaves common words "
                   "split (called 'likelihood' before v2); frequency: count(ab), i.e. BPE; "
                   "gain: deprecated name of likelihood")
    p.add_argument("--min-frequency", type=int, default=2,
                   help="never merge a pair seen fewer times than this (default 2)")
    p.add_argument("--limit-alphabet", type=int, default=1000,
                   help="keep this many most frequent characters; rarer ones become [UNK]")
    p.add_argument("--reserved", type=int, default=0,
                   help="[unusedK] slots after the special tokens, for later domain tokens")
    p.add_argument("--cased", action="store_true",
                   help="keep case and accents (default: lower-case, as uncased BERT)")
    p.add_argument("--workers", type=int, default=1, help="processes counting words (per file)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run_train)


def _register_stats(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "stats",
        help="tokens per word, [UNK] rate and most-split words of a text under a vocabulary",
    )
    p.add_argument("vocab", type=Path, metavar="VOCAB",
                   help="a vocab.txt, or a directory holding one (and tokenizer_config.json)")
    p.add_argument("--input", "-i", nargs="+", required=True, metavar="FILE",
                   help="text or JSONL files to measure on; globs allowed")
    p.add_argument("--cased", action="store_true",
                   help="for a bare vocab.txt: do not lower-case (a directory's "
                   "tokenizer_config.json decides otherwise)")
    p.add_argument("--top", type=int, default=20, help="how many most-split words to list")
    p.add_argument("--workers", type=int, default=1, help="processes counting words (per file)")
    p.set_defaults(func=run_stats)


def run_train(args: argparse.Namespace) -> int:
    config = TrainerConfig(
        vocab_size=args.vocab_size,
        criterion=args.criterion,
        min_frequency=args.min_frequency,
        limit_alphabet=args.limit_alphabet,
        reserved=args.reserved,
        do_lower_case=not args.cased,
    )
    if args.workers < 1:
        raise BertkitError(f"--workers must be >= 1, got {args.workers}")
    settings = {"files": [str(f) for f in args.files], **asdict(config)}
    claim_output_dir(args.output, MARKER, settings, overwrite=args.overwrite)
    result = train_from_files(args.files, config, workers=args.workers,
                              progress=not args.no_progress)
    path = save_vocab(result, args.output, config.do_lower_case)
    logger.info("wrote %s: %d tokens (%d learned pieces, alphabet of %d characters); "
                "%d distinct word(s) left to [UNK]", path, len(result.vocab),
                len(result.pieces), len(result.alphabet), result.skipped_words)
    return 0


def _load_tokenizer(vocab: Path, cased: bool) -> BertTokenizer:
    if vocab.is_dir():
        return BertTokenizer.from_pretrained(vocab)
    if not vocab.is_file():
        raise BertkitError(f"{vocab}: cannot read: no such file or directory")
    return BertTokenizer(vocab, do_lower_case=not cased)


def run_stats(args: argparse.Namespace) -> int:
    tokenizer = _load_tokenizer(args.vocab, args.cased)
    counts = count_files(expand_inputs(args.input), tokenizer.do_lower_case,
                         workers=args.workers)
    if not counts:
        raise BertkitError("no words in the input files")
    stats = segmentation_stats(tokenizer, counts, top=args.top)
    print(f"vocabulary       {args.vocab} ({tokenizer.vocab_size} tokens)")
    print(f"words            {stats.words:,} ({stats.distinct_words:,} distinct)")
    print(f"tokens           {stats.tokens:,}")
    print(f"tokens per word  {stats.tokens_per_word:.4f}")
    print(f"[UNK] rate       {stats.unk_rate:.4%} of words")
    print("most-split words (pieces, frequency):")
    for word, pieces, freq in stats.most_split:
        print(f"  {word}  {len(pieces)}  {freq}  {' '.join(pieces)}")
    return 0
