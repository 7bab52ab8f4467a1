"""Streaming word counts for the vocabulary trainer.

The trainer needs only how often each distinct word occurs, so memory is bounded by the number
of distinct words, never by the corpus size (and with ``max_words`` by a fixed cap: rare words
are pruned, as word2vec and fastText do). Files are read in blocks of a few MB (``.gz`` files
and ``.bz2``/``.zst`` files are decompressed on the fly).

Fast and exact: a block is split on whitespace by Python (C speed) and the whitespace-free
*chunks* are counted; only each distinct chunk then goes through BERT's basic tokenizer (the
`tokenizers` BertNormalizer + BertPreTokenizer, Rust; :func:`chunk_words`), and its words get
the chunk's count. The basic tokenizer maps every whitespace character to a space and splits
there, so splitting on whitespace first changes nothing, except for the characters Python
calls whitespace that BERT *deletes* as control characters (``_DELETED``, e.g. U+000B, U+001C,
U+0085): they are deleted first. Files are counted in parallel, one file per task; the counts
are added in file order, so the result is the same for any number of workers.

Input formats: plain text and one-sentence-per-line text (every non-blank line is a text; blank
lines are document breaks, which do not matter for counting), and the record formats: JSONL
(one JSON object per line with a string text field), WikiExtractor's output, Parquet and
Arrow files and `datasets` folders (a text column; the field is ``Fields.text``, ``"text"`` by
default), told apart by `bertkit.data.corpus.sniff_format`; folders stand for their files as in
`bertkit.data.corpus.expand_folders`. Reading is `bertkit.data.corpus`'s: invalid UTF-8 is
replaced by U+FFFD (which the basic tokenizer drops) and reported once per file; a file that
looks binary, or compressed data cut short, is refused.
"""

from __future__ import annotations

import concurrent.futures
import glob
import logging
import math
import multiprocessing
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bertkit.data.corpus import (
    BOM,
    DEFAULT_FIELDS,
    SNIFF_BYTES,
    CorpusStats,
    Fields,
    _check_not_binary,
    _invalid_bytes,
    expand_folders,
    open_bytes,
    read_lines,
    readers,
    sniff_format,
)
from bertkit.errors import BertkitError
from bertkit.tokenization.basic import pretokenize

if TYPE_CHECKING:
    from bertkit.tokenization.wordpiece import BertTokenizer

logger = logging.getLogger(__name__)

# Texts are joined with "\n" into batches of about this many characters. Newline is whitespace
# to the basic tokenizer, so no word can straddle two texts.
_BATCH_CHARS = 1 << 20
_BLOCK_BYTES = 1 << 22  # plain text is read in blocks of this size, cut at a line end
# Python whitespace that BERT's cleaning deletes (control characters), so no word boundary.
_DELETED = dict.fromkeys(map(ord, "\x0b\x0c\x1c\x1d\x1e\x1f\x85"))
_DELETED_RE = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
_FLUSH_CHUNKS = 1 << 19  # distinct chunks held before they are turned into words
_CACHE_LIMIT = 1 << 20  # distinct chunks whose words are remembered (per process)
_chunk_cache: dict[tuple[str, bool], tuple[str, ...]] = {}


def chunk_words(chunk: str, do_lower_case: bool = True) -> tuple[str, ...]:
    """The basic tokenizer's words of one whitespace-free chunk (cached per process)."""
    key = (chunk, do_lower_case)
    words = _chunk_cache.get(key)
    if words is None:
        if len(_chunk_cache) >= _CACHE_LIMIT:
            _chunk_cache.clear()
        words = _chunk_cache[key] = tuple(pretokenize(chunk, do_lower_case))
    return words


class WordCounter:
    """Word counts of a stream of texts, in bounded memory.

    `max_words` caps the distinct words held: past it, words seen fewer than k times are
    dropped, with k raised until at most half the cap is left (the counts of dropped words
    restart from 0 if they come back). None keeps every word.
    """

    def __init__(self, do_lower_case: bool = True, max_words: int | None = None) -> None:
        self.do_lower_case = do_lower_case
        self.max_words = max_words
        self.chunks: Counter[str] = Counter()
        self.words: Counter[str] = Counter()
        self.pruned_below = 0  # the highest k used to prune, 0 when nothing was pruned
        self.flush_at = min(_FLUSH_CHUNKS, max_words or _FLUSH_CHUNKS)

    def add_text(self, text: str) -> None:
        if _DELETED_RE.search(text):
            text = text.translate(_DELETED)
        self.chunks.update(text.split())
        if len(self.chunks) >= self.flush_at:
            self.flush()

    def add_counts(self, words: Mapping[str, int]) -> None:
        """Add the word counts of another counter (e.g. of one file)."""
        self.words.update(words)
        self._prune()

    def flush(self) -> Counter[str]:
        """Turn the chunks seen so far into words; returns the word counts."""
        words, lower = self.words, self.do_lower_case
        for chunk, freq in self.chunks.items():
            for word in chunk_words(chunk, lower):
                words[word] += freq
        self.chunks = Counter()
        self._prune()
        return self.words

    def _prune(self) -> None:
        if self.max_words is None or len(self.words) <= self.max_words:
            return
        while len(self.words) > self.max_words // 2:
            self.pruned_below += 1
            self.words = Counter({w: f for w, f in self.words.items() if f >= self.pruned_below + 1})


@dataclass
class FileCount:
    """Word counts of one file, plus what was replaced while decoding it."""

    path: str
    words: Counter[str]
    stats: CorpusStats


def expand_inputs(patterns: Sequence[str | os.PathLike]) -> list[Path]:
    """Paths named by `patterns` (globs allowed), sorted within each pattern, duplicates dropped;
    a folder stands for its files (`bertkit.data.corpus.expand_folders`).

    A pattern that names nothing is an error: a typo should not silently train on less data.
    """
    paths: list[Path] = []
    seen: set[Path] = set()
    for pattern in patterns:
        text = os.fspath(pattern)
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        if not matches:
            raise BertkitError(f"{text}: no file matches this pattern")
        for path in expand_folders([Path(m) for m in matches]):
            if not path.is_file():
                raise BertkitError(f"{path}: cannot read: no such file")
            if path not in seen:
                seen.add(path)
                paths.append(path)
    if not paths:
        raise BertkitError("no input files given")
    return paths


RECORD_FORMATS = ("jsonl", "wikiextractor", "parquet", "arrow")


def iter_file_texts(path: Path, stats: CorpusStats, fields: Fields = DEFAULT_FIELDS
                    ) -> Iterator[str]:
    """The texts of one file: its non-blank lines, or each record's paragraphs (JSONL's text
    field, WikiExtractor's documents, Parquet/Arrow text columns: `fields`).

    Reading, binary-file refusal and invalid-UTF-8 handling are `bertkit.data.corpus`'s, so a
    file is accepted here exactly when `bertkit prepare` accepts it.
    """
    fmt = sniff_format(path)
    if fmt in RECORD_FORMATS:  # the documents' paragraphs, as `bertkit prepare` reads them
        for document in readers()[fmt](path, stats, fields):
            yield from document.paragraphs
        return
    for _, line in read_lines(path, stats):
        if line and not line.isspace():
            yield line


def _batches(texts: Iterable[str]) -> Iterator[str]:
    """`texts` joined with newlines into batches of about `_BATCH_CHARS` characters."""
    batch: list[str] = []
    size = 0
    for text in texts:
        if not isinstance(text, str):
            raise BertkitError(f"expected texts as str, got {type(text).__name__}")
        batch.append(text)
        size += len(text)
        if size >= _BATCH_CHARS:
            yield "\n".join(batch)
            batch, size = [], 0
    if batch:
        yield "\n".join(batch)


def count_words(
    texts: Iterable[str], do_lower_case: bool = True, max_words: int | None = None
) -> Counter[str]:
    """How often each word of `texts` occurs after BERT's basic tokenization."""
    counter = WordCounter(do_lower_case, max_words)
    for batch in _batches(texts):
        counter.add_text(batch)
    return counter.flush()


def _text_blocks(path: Path, stats: CorpusStats) -> Iterator[str]:
    """A plain-text file as decoded blocks cut at line ends (invalid UTF-8 as `read_lines`)."""
    with open_bytes(path) as f:
        head = f.read(SNIFF_BYTES)
        _check_not_binary(path, head)
        rest = head.removeprefix(BOM)
        while True:
            block = f.read(_BLOCK_BYTES)
            data = rest + block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            rest = data[cut:]
            if cut:
                try:
                    yield data[:cut].decode("utf-8")
                except UnicodeDecodeError:
                    yield "\n".join(_decode_lines(data[:cut], stats))
            if not block:
                return


def _decode_lines(data: bytes, stats: CorpusStats) -> Iterator[str]:
    for raw in data.split(b"\n"):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            stats.invalid_utf8_lines += 1
            stats.invalid_utf8_bytes += _invalid_bytes(raw)
            yield raw.decode("utf-8", errors="replace")


def count_file(
    path: str | os.PathLike, do_lower_case: bool = True, max_words: int | None = None,
    fields: Fields = DEFAULT_FIELDS,
) -> FileCount:
    """Word counts of one file (plain text, or the records of JSONL, WikiExtractor, Parquet or
    Arrow, their text in `fields`; maybe compressed), streaming."""
    path, stats = Path(path), CorpusStats(files=1)
    counter = WordCounter(do_lower_case, max_words)
    if sniff_format(path) in RECORD_FORMATS:
        blocks: Iterable[str] = _batches(iter_file_texts(path, stats, fields))
    else:
        blocks = _text_blocks(path, stats)
    for block in blocks:
        counter.add_text(block)
    return FileCount(str(path), counter.flush(), stats)


def _report(result: FileCount) -> None:
    if result.stats.invalid_utf8_bytes:
        logger.warning(
            "%s: %d invalid UTF-8 byte(s) on %d line(s) replaced by U+FFFD (which BERT's "
            "basic tokenizer drops)", result.path, result.stats.invalid_utf8_bytes,
            result.stats.invalid_utf8_lines,
        )


def count_files(
    paths: Sequence[str | os.PathLike],
    do_lower_case: bool = True,
    workers: int = 1,
    progress: bool = False,
    max_words: int | None = None,
    fields: Fields = DEFAULT_FIELDS,
) -> Counter[str]:
    """Summed word counts of `paths` (record formats: their text in `fields`), one file per task
    on `workers` processes.

    The result is the same for any number of workers: each file is counted alone, and the
    files' counts are added (and pruned, with `max_words`) in the order of `paths`.
    """
    from bertkit.io import progress_bar

    total = WordCounter(do_lower_case, max_words)
    bar = progress_bar(total=len(paths), unit="file", desc="counting words", disable=not progress)
    if workers <= 1 or len(paths) <= 1:
        results: Iterable[FileCount] = (count_file(p, do_lower_case, max_words, fields)
                                        for p in paths)
        for result in results:
            _absorb(total, result, bar)
    else:
        # spawn, not fork: the parent may already hold Rust thread pools (tokenizers, torch),
        # which do not survive a fork.
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = [pool.submit(count_file, p, do_lower_case, max_words, fields)
                       for p in paths]
            for future in futures:  # in file order, whatever order they finish in
                _absorb(total, future.result(), bar)
    bar.close()
    if total.pruned_below:
        logger.info("--max-words %d: pruned words seen fewer than %d times (per pruning pass)",
                    max_words, total.pruned_below + 1)
    return total.words


def _absorb(total: WordCounter, result: FileCount, bar: object) -> None:
    _report(result)
    total.add_counts(result.words)
    bar.update(1)  # type: ignore[attr-defined]


@dataclass
class SegmentationStats:
    """How a vocabulary splits a text: per word occurrence, weighted by frequency."""

    words: int
    distinct_words: int
    tokens: int
    unk_words: int
    most_split: list[tuple[str, list[str], int]]  # (word, pieces, frequency)

    @property
    def tokens_per_word(self) -> float:
        return self.tokens / self.words if self.words else 0.0

    @property
    def unk_rate(self) -> float:
        """Share of word occurrences that become [UNK] (WordPiece maps a word to one [UNK])."""
        return self.unk_words / self.words if self.words else 0.0


def segment_words(tokenizer: BertTokenizer, words: Iterable[str]) -> dict[str, list[str]]:
    """WordPiece pieces of each (already pre-tokenized) word, by `tokenizer` itself.

    Pre-tokenized words are fixed points of the basic tokenizer, so tokenizing one alone gives
    exactly its pieces inside running text.
    """
    return {word: tokenizer.tokenize(word) for word in words}


def segmentation_stats(
    tokenizer: BertTokenizer, counts: Mapping[str, int], top: int = 20
) -> SegmentationStats:
    """Tokens per word, [UNK] rate and the `top` most-split words of `counts` under `tokenizer`."""
    pieces = segment_words(tokenizer, counts)
    unk = tokenizer.convert_ids_to_tokens([tokenizer.unk_token_id])[0]
    ranked = sorted(pieces, key=lambda w: (-len(pieces[w]), -counts[w], w))[:top]
    return SegmentationStats(
        words=sum(counts.values()),
        distinct_words=len(counts),
        tokens=sum(len(pieces[w]) * f for w, f in counts.items()),
        unk_words=sum(f for w, f in counts.items() if pieces[w] == [unk]),
        most_split=[(w, pieces[w], counts[w]) for w in ranked],
    )


@dataclass
class VocabQuality:
    """How well a vocabulary fits held-out text (per word occurrence)."""

    words: int
    tokens_per_word: float
    unk_rate: float
    log_likelihood_per_word: float  # natural log; higher is better


def piece_log_probs(tokenizer: BertTokenizer, train: Mapping[str, int]) -> dict[str, float]:
    """Unigram log-probability of every vocabulary entry: pieces counted on the training words
    segmented by `tokenizer`, add-one smoothed over the vocabulary."""
    counts: Counter[str] = Counter()
    for word, pieces in segment_words(tokenizer, train).items():
        for piece in pieces:
            counts[piece] += train[word]
    total = sum(counts.values()) + len(tokenizer.vocab)
    return {token: math.log((counts[token] + 1) / total) for token in tokenizer.vocab}


def vocab_quality(
    tokenizer: BertTokenizer, train: Mapping[str, int], held_out: Mapping[str, int]
) -> VocabQuality:
    """Tokens per word, [UNK] rate and unigram log-likelihood per word of the `held_out` word
    counts, with piece probabilities from the `train` word counts (:func:`piece_log_probs`).
    The one definition used by `bertkit vocab stats` and benchmarks/bench_vocab.py."""
    log_p = piece_log_probs(tokenizer, train)
    stats = segmentation_stats(tokenizer, held_out, top=0)
    pieces = segment_words(tokenizer, held_out)
    loglik = sum(f * sum(log_p[p] for p in pieces[w]) for w, f in held_out.items())
    words = max(stats.words, 1)
    return VocabQuality(stats.words, stats.tokens_per_word, stats.unk_rate, loglik / words)
