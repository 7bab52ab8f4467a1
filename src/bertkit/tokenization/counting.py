"""Streaming word counts for the vocabulary trainer.

The trainer needs only how often each distinct word occurs, so memory is bounded by the number
of distinct words, never by the corpus size: files are read line by line, lines are batched and
pre-tokenized with exactly the basic tokenizer `BertTokenizer` uses (:func:`pretokenize`), and
the words go into a `Counter`. Files can be counted in parallel, one file per task; counts are
summed, and the sum does not depend on the order the files finish in.

Input formats: plain text and one-sentence-per-line text (every non-blank line is a text; blank
lines are document breaks, which do not matter for counting) and JSONL (one JSON object per
line with a string ``"text"`` field), told apart by `bertkit.data.corpus.sniff_format`. Reading
is `bertkit.data.corpus`'s: invalid UTF-8 is replaced by U+FFFD (which the basic tokenizer
drops) and reported once per file; a file that looks binary is refused.
"""

from __future__ import annotations

import concurrent.futures
import glob
import logging
import multiprocessing
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bertkit.data.corpus import CorpusStats, read_jsonl, read_lines, sniff_format
from bertkit.errors import BertkitError
from bertkit.tokenization.basic import pretokenize

if TYPE_CHECKING:
    from bertkit.tokenization.wordpiece import BertTokenizer

logger = logging.getLogger(__name__)

# Texts are joined with "\n" into batches of about this many characters before pre-tokenizing:
# one call into the (Rust) basic tokenizer per batch instead of per line. Newline is whitespace
# to the basic tokenizer, so no word can straddle two texts.
_BATCH_CHARS = 1 << 20


@dataclass
class FileCount:
    """Word counts of one file, plus what was replaced while decoding it."""

    path: str
    words: Counter[str]
    stats: CorpusStats


def expand_inputs(patterns: Sequence[str | os.PathLike]) -> list[Path]:
    """Paths named by `patterns` (globs allowed), sorted within each pattern, duplicates dropped.

    A pattern that names nothing is an error: a typo should not silently train on less data.
    """
    paths: list[Path] = []
    seen: set[Path] = set()
    for pattern in patterns:
        text = os.fspath(pattern)
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        if not matches:
            raise BertkitError(f"{text}: no file matches this pattern")
        for match in matches:
            path = Path(match)
            if path.is_dir():
                raise BertkitError(f"{path}: is a directory; expected a text or JSONL file")
            if not path.is_file():
                raise BertkitError(f"{path}: cannot read: no such file")
            if path not in seen:
                seen.add(path)
                paths.append(path)
    if not paths:
        raise BertkitError("no input files given")
    return paths


def iter_file_texts(path: Path, stats: CorpusStats) -> Iterator[str]:
    """The texts of one file: its non-blank lines, or each JSONL record's paragraphs.

    Reading, binary-file refusal and invalid-UTF-8 handling are `bertkit.data.corpus`'s, so a
    file is accepted here exactly when `bertkit prepare` accepts it.
    """
    if sniff_format(path) == "jsonl":
        for document in read_jsonl(path, stats):
            yield from document.paragraphs
        return
    for _, line in read_lines(path, stats):
        if line and not line.isspace():
            yield line


def count_words(texts: Iterable[str], do_lower_case: bool = True) -> Counter[str]:
    """How often each word of `texts` occurs after BERT's basic tokenization."""
    counts: Counter[str] = Counter()
    batch: list[str] = []
    size = 0
    for text in texts:
        if not isinstance(text, str):
            raise BertkitError(f"expected texts as str, got {type(text).__name__}")
        batch.append(text)
        size += len(text)
        if size >= _BATCH_CHARS:
            counts.update(pretokenize("\n".join(batch), do_lower_case))
            batch, size = [], 0
    if batch:
        counts.update(pretokenize("\n".join(batch), do_lower_case))
    return counts


def count_file(path: str | os.PathLike, do_lower_case: bool = True) -> FileCount:
    """Word counts of one file (plain text or JSONL), streaming."""
    stats = CorpusStats(files=1)
    words = count_words(iter_file_texts(Path(path), stats), do_lower_case)
    return FileCount(str(path), words, stats)


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
) -> Counter[str]:
    """Summed word counts of `paths`, one file per task on `workers` processes.

    The result is the same for any number of workers: counts are added, and addition does not
    care which file finished first.
    """
    from bertkit.io import progress_bar

    total: Counter[str] = Counter()
    bar = progress_bar(total=len(paths), unit="file", desc="counting words", disable=not progress)
    if workers <= 1 or len(paths) <= 1:
        results: Iterable[FileCount] = (count_file(p, do_lower_case) for p in paths)
        for result in results:
            _absorb(total, result, bar)
    else:
        # spawn, not fork: the parent may already hold Rust thread pools (tokenizers, torch),
        # which do not survive a fork.
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = [pool.submit(count_file, p, do_lower_case) for p in paths]
            for future in concurrent.futures.as_completed(futures):
                _absorb(total, future.result(), bar)
    bar.close()
    return total


def _absorb(total: Counter[str], result: FileCount, bar: object) -> None:
    _report(result)
    total.update(result.words)
    bar.set_postfix(words=f"{sum(total.values()):,}", refresh=False)  # type: ignore[attr-defined]
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
