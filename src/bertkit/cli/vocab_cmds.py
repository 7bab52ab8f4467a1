"""`bertkit vocab train FILE... -o DIR` and `bertkit vocab stats VOCAB -i FILE... [--held-out FILE]`."""

from __future__ import annotations

import argparse
import logging
from dataclasses import asdict
from pathlib import Path

from bertkit.data.corpus import Fields
from bertkit.errors import BertkitError
from bertkit.io import check_output_outside, claim_output_dir
from bertkit.tokenization import BertTokenizer
from bertkit.vocab.counting import (
    VocabQuality,
    count_files,
    expand_inputs,
    segmentation_stats,
    vocab_quality,
)
from bertkit.vocab.trainer import (
    CRITERIA,
    TrainerConfig,
    save_vocab,
    train_from_files,
)

VOCAB_MARKER = "vocab_train.json"  # written first: marks a folder as a `vocab train` output

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
    )
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="corpus files (text, JSONL, WikiExtractor output, Parquet, Arrow; .gz, "
                   ".bz2 or .zst) or folders of them; globs allowed")
    p.add_argument("--output", "-o", type=Path, required=True, metavar="DIR",
                   help="a new or empty folder (or an earlier `vocab train` output, with "
                   "--overwrite); never a model's folder")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the vocabulary of an earlier `vocab train` into --output")
    p.add_argument("--vocab-size", type=int, default=30522,
                   help="final size, special and reserved tokens included (default 30522)")
    p.add_argument("--criterion", choices=CRITERIA,
                   default=TrainerConfig.criterion,
                   help="likelihood: the exact increase of the unigram log-likelihood (the "
                   "best vocabularies measured, docs/reports/benchmarks.md); pmi: the ratio "
                   "count(ab) / (count(a) count(b)), which at small sizes leaves common words "
                   "split; frequency: count(ab), i.e. BPE")
    p.add_argument("--min-frequency", type=int, default=2,
                   help="never merge a pair seen fewer times than this (default 2)")
    p.add_argument("--limit-alphabet", type=int, default=1000,
                   help="keep this many most frequent characters; rarer ones become [UNK]")
    p.add_argument("--reserved", type=int, default=0,
                   help="[unusedK] slots after the special tokens, for later domain tokens")
    p.add_argument("--cased", action="store_true",
                   help="keep case and accents (default: lower-case, as uncased BERT)")
    p.add_argument("--workers", type=int, default=1, help="processes counting words (per file)")
    p.add_argument("--max-words", type=int, default=None,
                   help="hold at most this many distinct words while counting (bounded memory "
                   "for huge corpora): past it, the rarest words are pruned")
    p.add_argument("--held-out", type=Path, metavar="FILE",
                   help="after training, print tokens/word, [UNK] rate and unigram "
                   "log-likelihood per word of this file (see `vocab stats`)")
    _add_field_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run_train)


def _add_field_options(p: argparse.ArgumentParser) -> None:
    """`bertkit prepare`'s options for where a record's text is, with the same meaning."""
    p.add_argument("--text-field", default="text", metavar="NAME",
                   help="the field (JSONL) or column (Parquet, Arrow, datasets folders) that "
                   "holds each document's text (default text)")
    p.add_argument("--id-field", metavar="NAME",
                   help="a field or column naming each document in messages (e.g. id, title)")


def _register_stats(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "stats",
        help="tokens per word, [UNK] rate and most-split words of a text under a vocabulary",
    )
    p.add_argument("vocab", type=Path, metavar="VOCAB",
                   help="a vocab.txt, or a directory holding one (and tokenizer_config.json)")
    p.add_argument("--input", "-i", nargs="+", required=True, metavar="FILE",
                   help="corpus files or folders to measure on (with --held-out: the "
                   "training text, where piece probabilities are estimated); globs allowed")
    p.add_argument("--held-out", type=Path, metavar="FILE",
                   help="measure on this file instead, with piece probabilities from --input")
    p.add_argument("--cased", action="store_true",
                   help="for a bare vocab.txt: do not lower-case (a directory's "
                   "tokenizer_config.json decides otherwise)")
    p.add_argument("--top", type=int, default=20, help="how many most-split words to list")
    p.add_argument("--workers", type=int, default=1, help="processes counting words (per file)")
    _add_field_options(p)
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
    if args.max_words is not None and args.max_words < 2:
        raise BertkitError(f"--max-words must be >= 2, got {args.max_words}")
    held_out = expand_inputs([args.held_out]) if args.held_out else None  # checked before work
    fields = Fields(args.text_field, args.id_field)
    settings = {"files": [str(f) for f in args.files], **asdict(config),
                "max_words": args.max_words, **asdict(fields)}
    check_output_outside(args.output, args.files)
    claim_output_dir(args.output, VOCAB_MARKER, settings, overwrite=args.overwrite)
    result = train_from_files(args.files, config, workers=args.workers,
                              progress=not args.no_progress, max_words=args.max_words,
                              fields=fields)
    path = save_vocab(result, args.output, config.do_lower_case)
    logger.info("wrote %s: %d tokens (%d learned pieces, alphabet of %d characters); "
                "%d distinct word(s) left to [UNK]", path, len(result.vocab),
                len(result.pieces), len(result.alphabet), result.skipped_words)
    if held_out:
        tokenizer = BertTokenizer.from_pretrained(args.output)
        held = count_files(held_out, tokenizer.do_lower_case, fields=fields)
        _print_quality(vocab_quality(tokenizer, result.word_counts, held), held_out[0])
    return 0


def _print_quality(quality: VocabQuality, path: Path) -> None:
    print(f"held-out         {path}: {quality.words:,} words")
    print(f"tokens per word  {quality.tokens_per_word:.4f}")
    print(f"[UNK] rate       {quality.unk_rate:.4%} of words")
    print(f"unigram log-likelihood per word  {quality.log_likelihood_per_word:.4f} nats")


def _load_tokenizer(vocab: Path, cased: bool) -> BertTokenizer:
    if vocab.is_dir():
        return BertTokenizer.from_pretrained(vocab)
    if not vocab.is_file():
        raise BertkitError(f"{vocab}: cannot read: no such file or directory")
    return BertTokenizer(vocab, do_lower_case=not cased)


def run_stats(args: argparse.Namespace) -> int:
    tokenizer = _load_tokenizer(args.vocab, args.cased)
    held_out = expand_inputs([args.held_out]) if args.held_out else None
    fields = Fields(args.text_field, args.id_field)
    counts = count_files(expand_inputs(args.input), tokenizer.do_lower_case,
                         workers=args.workers, fields=fields)
    if not counts:
        raise BertkitError("no words in the input files")
    if held_out:
        held = count_files(held_out, tokenizer.do_lower_case, fields=fields)
        if not held:
            raise BertkitError(f"{held_out[0]}: no words to measure on")
        print(f"vocabulary       {args.vocab} ({tokenizer.vocab_size} tokens)")
        _print_quality(vocab_quality(tokenizer, counts, held), held_out[0])
        return 0
    stats = segmentation_stats(tokenizer, counts, top=args.top)
    print(f"vocabulary       {args.vocab} ({tokenizer.vocab_size} tokens)")
    print(f"words            {stats.words:,} ({stats.distinct_words:,} distinct)")
    print(f"tokens           {stats.tokens:,}")
    print(f"tokens per word  {stats.tokens_per_word:.4f}")
    print(f"[UNK] rate       {stats.unk_rate:.4%} of words")
    loglik = vocab_quality(tokenizer, counts, counts).log_likelihood_per_word
    print(f"unigram log-likelihood per word  {loglik:.4f} nats (probabilities from the same text)")
    print("most-split words (pieces, frequency):")
    for word, pieces, freq in stats.most_split:
        print(f"  {word}  {len(pieces)}  {freq}  {' '.join(pieces)}")
    return 0
