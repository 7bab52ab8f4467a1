"""Corpus readers: files -> a stream of documents (lists of paragraphs or of sentences).

Formats (`--format`):
- ``google``: Google's `create_pretraining_data.py` input, one sentence per line, a blank line
  between documents.
- ``text``: plain prose, one document per file, paragraphs separated by blank lines; hard-wrapped
  lines are joined, and paragraphs are split into sentences later (`split_sentences`).
- ``wikitext``: like ``text`` but a line `` = Title = `` starts a new article (`` = = Section = = ``
  does not) and every line is a paragraph (WikiText's layout). Heading lines are not kept.
- ``jsonl``: one document per record, in its ``text`` field (paragraphs as in ``text``).
- ``auto``: sniffed per file from its name and first 64 KiB (`sniff_format`).

Every reader streams line by line (memory is bounded by one document), strips a BOM, accepts
LF and CRLF, replaces invalid UTF-8 (counting the replaced bytes in `CorpusStats`), refuses
binary files, and skips (and counts) empty documents.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import blingfire

from bertkit.errors import BertkitError

logger = logging.getLogger(__name__)

FORMATS = ("auto", "google", "text", "wikitext", "jsonl")
SNIFF_BYTES = 1 << 16
BOM = b"\xef\xbb\xbf"
_ARTICLE_HEADING = re.compile(r"^ ?= [^=].* = ?$")  # " = Title = ", not " = = Section = = "
_ANY_HEADING = re.compile(r"^ ?(= )+.*( =)+ ?$")
_TERMINAL = tuple('.!?"\'”’)')


@dataclass(frozen=True)
class Document:
    """One document: `paragraphs` are sentences already when `presplit` (Google's format)."""

    paragraphs: tuple[str, ...]
    presplit: bool
    source: str  # "file:line" of its first line, for messages


@dataclass
class CorpusStats:
    files: int = 0
    documents: int = 0
    empty_documents: int = 0
    invalid_utf8_bytes: int = 0
    invalid_utf8_lines: int = 0
    formats: dict[str, int] = field(default_factory=dict)


def split_sentences(text: str) -> list[str]:
    """Sentences of one paragraph, by blingfire (chosen over pysbd: see docs/benchmarks.md)."""
    text = " ".join(text.split())
    if not text:
        return []
    return [s for s in blingfire.text_to_sentences(text).split("\n") if s.strip()]


def _invalid_bytes(raw: bytes) -> int:
    """How many bytes of `raw` are not part of valid UTF-8."""
    return len(raw) - len(raw.decode("utf-8", errors="ignore").encode("utf-8"))


def _check_not_binary(path: Path, head: bytes) -> None:
    nul = head.find(b"\x00")
    if nul >= 0:
        raise BertkitError(f"{path}: binary data (NUL byte at offset {nul}); expected UTF-8 text")
    sample = head[:-4] if len(head) == SNIFF_BYTES else head  # may end inside a character
    bad = _invalid_bytes(sample)
    if sample and bad > 0.1 * len(sample):
        raise BertkitError(f"{path}: {bad} invalid UTF-8 bytes in the first {len(sample)}; "
                           "expected UTF-8 text")


def open_bytes(path: str | Path) -> BinaryIO:
    """`path` opened for reading bytes; a ``.gz`` file is decompressed on the fly."""
    path = Path(path)
    if path.is_dir():
        raise BertkitError(f"{path}: is a directory; pass the files in it (e.g. {path}/*.txt)")
    try:
        f = open(path, "rb")
        if path.suffix.lower() != ".gz":
            return f
        gz = gzip.GzipFile(fileobj=f)
        gz.peek(1)  # a file that is not gzip fails here, with a clear error below
        return gz
    except (OSError, EOFError) as err:
        raise BertkitError(f"{path}: cannot read ({getattr(err, 'strerror', None) or err})") from err


def read_lines(path: str | Path, stats: CorpusStats) -> Iterator[tuple[int, str]]:
    """(line number, text) pairs without line ends; invalid UTF-8 replaced and counted."""
    path = Path(path)
    with open_bytes(path) as f:
        _check_not_binary(path, f.read(SNIFF_BYTES))
        f.seek(0)
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(BOM):
                raw = raw[len(BOM):]
            raw = raw.rstrip(b"\r\n")
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError:
                stats.invalid_utf8_lines += 1
                stats.invalid_utf8_bytes += _invalid_bytes(raw)
                yield lineno, raw.decode("utf-8", errors="replace")


def sniff_format(path: str | Path) -> str:
    """Guess a file's format from its name and first 64 KiB."""
    path = Path(path)
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    with open_bytes(path) as f:
        try:
            head = f.read(SNIFF_BYTES)
        except (OSError, EOFError) as err:
            raise BertkitError(f"{path}: cannot read ({err})") from err
    _check_not_binary(path, head)
    lines = head.decode("utf-8", errors="replace").removeprefix("\ufeff").splitlines()
    lines = [ln.rstrip("\r") for ln in lines[:-1] or lines]  # the last may be cut short
    content = [ln for ln in lines if ln.strip()]
    if content and content[0].lstrip().startswith("{"):
        return "jsonl"
    if any(_ARTICLE_HEADING.match(ln) for ln in content):
        return "wikitext"
    # Google's files end (almost) every line with a sentence end; hard-wrapped prose does not.
    ending = sum(ln.rstrip().endswith(_TERMINAL) for ln in content)
    return "google" if content and ending >= 0.6 * len(content) else "text"


def _paragraphs(lines: list[str]) -> list[str]:
    """Blank-line separated blocks, each block's hard-wrapped lines joined by spaces."""
    paragraphs, block = [], []
    for line in lines:
        if line.strip():
            block.append(line.strip())
        elif block:
            paragraphs.append(" ".join(block))
            block = []
    if block:
        paragraphs.append(" ".join(block))
    return paragraphs


def _document(
    paragraphs: list[str], presplit: bool, source: str, stats: CorpusStats
) -> Document | None:
    """A Document, or None (counted as empty) when it has no text."""
    paragraphs = [p for p in paragraphs if p.strip()]
    if not paragraphs:
        stats.empty_documents += 1
        logger.debug("%s: empty document skipped", source)
        return None
    stats.documents += 1
    return Document(tuple(paragraphs), presplit, source)


def read_google(path: Path, stats: CorpusStats) -> Iterator[Document]:
    """One sentence per line, blank lines between documents (runs of blank lines are one break)."""
    sentences: list[str] = []
    start = 1
    for lineno, line in read_lines(path, stats):
        if line.strip():
            if not sentences:
                start = lineno
            sentences.append(line.strip())
        elif sentences:
            yield Document(tuple(sentences), True, f"{path}:{start}")
            stats.documents += 1
            sentences = []
    if sentences:
        stats.documents += 1
        yield Document(tuple(sentences), True, f"{path}:{start}")


def read_text(path: Path, stats: CorpusStats) -> Iterator[Document]:
    """The whole file is one document of blank-line separated paragraphs."""
    lines = [line for _, line in read_lines(path, stats)]
    doc = _document(_paragraphs(lines), False, f"{path}:1", stats)
    if doc is not None:
        yield doc


def read_wikitext(path: Path, stats: CorpusStats) -> Iterator[Document]:
    """Articles start at `` = Title = ``; every other line is a paragraph; headings dropped."""
    paragraphs: list[str] = []
    start, seen_heading = 1, False
    for lineno, line in read_lines(path, stats):
        if _ARTICLE_HEADING.match(line):
            if seen_heading or paragraphs:
                doc = _document(paragraphs, False, f"{path}:{start}", stats)
                if doc is not None:
                    yield doc
            paragraphs, start, seen_heading = [], lineno, True
        elif line.strip() and not _ANY_HEADING.match(line):
            paragraphs.append(line.strip())
    if seen_heading or paragraphs:
        doc = _document(paragraphs, False, f"{path}:{start}", stats)
        if doc is not None:
            yield doc


def read_jsonl(path: Path, stats: CorpusStats) -> Iterator[Document]:
    """One JSON object per line with a string ``text``; blank lines are allowed."""
    for lineno, line in read_lines(path, stats):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise BertkitError(f"{path}:{lineno}: invalid JSON ({err.msg}); expected one object "
                               "per line with a \"text\" field") from err
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise BertkitError(f"{path}:{lineno}: expected an object with a string \"text\" field")
        doc = _document(_paragraphs(record["text"].splitlines()), False, f"{path}:{lineno}", stats)
        if doc is not None:
            yield doc


READERS = {"google": read_google, "text": read_text, "wikitext": read_wikitext, "jsonl": read_jsonl}


def read_corpus(paths: list[str | Path], fmt: str, stats: CorpusStats) -> Iterator[Document]:
    """All documents of all files, in order; `fmt` is one of FORMATS ("auto" sniffs each file)."""
    if fmt not in FORMATS:
        raise BertkitError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    for path in map(Path, paths):
        file_format = sniff_format(path) if fmt == "auto" else fmt
        stats.files += 1
        stats.formats[file_format] = stats.formats.get(file_format, 0) + 1
        before = stats.invalid_utf8_bytes
        yield from READERS[file_format](path, stats)
        if stats.invalid_utf8_bytes > before:
            logger.warning("%s: %d invalid UTF-8 bytes replaced by U+FFFD", path,
                           stats.invalid_utf8_bytes - before)
