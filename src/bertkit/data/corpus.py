"""Corpus readers: files -> a stream of documents (lists of paragraphs or of sentences).

Formats (`--format`):
- ``google``: Google's `create_pretraining_data.py` input, one sentence per line, a blank line
  between documents.
- ``text``: plain prose, one document per file, paragraphs separated by blank lines; hard-wrapped
  lines are joined, and paragraphs are split into sentences later (`sentences.split_sentences`).
- ``wikitext``: like ``text`` but a line `` = Title = `` starts a new article (`` = = Section = = ``
  does not) and every line is a paragraph (WikiText's layout). Heading lines are not kept.
- ``jsonl``: one document per record, in its text field (``--text-field``, default ``text``;
  paragraphs as in ``text``). WikiExtractor's ``--json`` output is this format.
- ``wikiextractor``: WikiExtractor's default output, ``<doc id=.. title=..>`` ... ``</doc>``
  blocks, the first line of each being the title (dropped).
- ``parquet``, ``arrow``: one document per row of a column (`bertkit.data.columnar`); a folder
  written by `datasets`' ``save_to_disk`` is read as its Arrow files.
- ``auto``: sniffed per file from its name and first 64 KiB (`sniff_format`).

Text files may be compressed (``.gz``, ``.zst``). Every reader streams (memory is bounded by one
document, or one record batch), strips a BOM, accepts LF and CRLF, replaces invalid UTF-8
(counting the replaced bytes in `CorpusStats`), refuses binary files, and skips (and counts)
empty documents.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from bertkit.errors import BertkitError

logger = logging.getLogger(__name__)

FORMATS = ("auto", "google", "text", "wikitext", "jsonl", "wikiextractor", "parquet", "arrow")
SNIFF_BYTES = 1 << 16
BOM = b"\xef\xbb\xbf"
_ARTICLE_HEADING = re.compile(r"^ ?= [^=].* = ?$")  # " = Title = ", not " = = Section = = "
_ANY_HEADING = re.compile(r"^ ?(= )+.*( =)+ ?$")
_TERMINAL = tuple('.!?"\'”’)')
_DOC_START = re.compile(r'^<doc (?:[^>]*\s)?id="([^"]*)"[^>]*>\s*$')  # WikiExtractor's <doc ...>


@dataclass(frozen=True)
class Document:
    """One document: `paragraphs` are sentences already when `presplit` (Google's format)."""

    paragraphs: tuple[str, ...]
    presplit: bool
    source: str  # "file:line" of its first line, for messages


@dataclass(frozen=True)
class Fields:
    """Where a record's text is (JSONL, Parquet, Arrow), and optionally its id, which then
    names the document in messages."""

    text: str = "text"
    doc_id: str | None = None


DEFAULT_FIELDS = Fields()


@dataclass
class CorpusStats:
    files: int = 0
    documents: int = 0
    empty_documents: int = 0
    invalid_utf8_bytes: int = 0
    invalid_utf8_lines: int = 0
    formats: dict[str, int] = field(default_factory=dict)


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
    """`path` opened for reading bytes; a ``.gz`` or ``.zst`` file is decompressed on the fly
    (zstd needs the `zstandard` package: the ``corpus`` extra)."""
    path = Path(path)
    if path.is_dir():
        raise BertkitError(f"{path}: is a directory; pass the files in it (e.g. {path}/*.txt)")
    suffix = path.suffix.lower()
    try:
        f = open(path, "rb")
        if suffix == ".gz":
            gz = gzip.GzipFile(fileobj=f)
            gz.peek(1)  # a file that is not gzip fails here, with a clear error below
            return gz
        if suffix == ".zst":
            return _open_zstd(path, f)
        return f
    except (OSError, EOFError) as err:
        raise BertkitError(f"{path}: cannot read ({getattr(err, 'strerror', None) or err})") from err


def _open_zstd(path: Path, raw: BinaryIO) -> BinaryIO:
    try:
        import zstandard
    except ImportError:
        raw.close()
        raise BertkitError(f"{path}: reading .zst needs the zstandard package "
                           "(pip install 'bertkit[corpus]')") from None
    reader = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))
    try:
        reader.peek(1)  # a file that is not zstd fails here
    except zstandard.ZstdError as err:
        reader.close()
        raise BertkitError(f"{path}: cannot read (not zstd data: {err})") from err
    return reader


def read_lines(path: str | Path, stats: CorpusStats) -> Iterator[tuple[int, str]]:
    """(line number, text) pairs without line ends; invalid UTF-8 replaced and counted."""
    path = Path(path)
    with open_bytes(path) as f:
        _check_not_binary(path, f.read(SNIFF_BYTES))
    with open_bytes(path) as f:  # opened again: a compressed stream may not seek back
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
    name = path.name.lower().removesuffix(".gz").removesuffix(".zst")
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".arrow"):
        return "arrow"
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
    if content and _DOC_START.match(content[0]):
        return "wikiextractor"
    if any(_ARTICLE_HEADING.match(ln) for ln in content):
        return "wikitext"
    # Google's files end (almost) every line with a sentence end; hard-wrapped prose does not.
    ending = sum(ln.rstrip().endswith(_TERMINAL) for ln in content)
    return "google" if content and ending >= 0.6 * len(content) else "text"


def split_paragraphs(lines: list[str]) -> list[str]:
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


def make_document(
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


def read_google(path: Path, stats: CorpusStats, fields: Fields = DEFAULT_FIELDS) -> Iterator[Document]:
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


def read_text(path: Path, stats: CorpusStats, fields: Fields = DEFAULT_FIELDS) -> Iterator[Document]:
    """The whole file is one document of blank-line separated paragraphs."""
    lines = [line for _, line in read_lines(path, stats)]
    doc = make_document(split_paragraphs(lines), False, f"{path}:1", stats)
    if doc is not None:
        yield doc


def read_wikitext(path: Path, stats: CorpusStats, fields: Fields = DEFAULT_FIELDS
                  ) -> Iterator[Document]:
    """Articles start at `` = Title = ``; every other line is a paragraph; headings dropped."""
    paragraphs: list[str] = []
    start, seen_heading = 1, False
    for lineno, line in read_lines(path, stats):
        if _ARTICLE_HEADING.match(line):
            if seen_heading or paragraphs:
                doc = make_document(paragraphs, False, f"{path}:{start}", stats)
                if doc is not None:
                    yield doc
            paragraphs, start, seen_heading = [], lineno, True
        elif line.strip() and not _ANY_HEADING.match(line):
            paragraphs.append(line.strip())
    if seen_heading or paragraphs:
        doc = make_document(paragraphs, False, f"{path}:{start}", stats)
        if doc is not None:
            yield doc


def read_jsonl(path: Path, stats: CorpusStats, fields: Fields = DEFAULT_FIELDS) -> Iterator[Document]:
    """One JSON object per line with a string text field; blank lines are allowed."""
    name = fields.text
    for lineno, line in read_lines(path, stats):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise BertkitError(f"{path}:{lineno}: invalid JSON ({err.msg}); expected one object "
                               f"per line with a \"{name}\" field") from err
        if not isinstance(record, dict) or not isinstance(record.get(name), str):
            keys = f" (its keys: {', '.join(sorted(record))[:200]})" if isinstance(record, dict) else ""
            raise BertkitError(f"{path}:{lineno}: expected an object with a string \"{name}\" "
                               f"field{keys}; choose the field with --text-field")
        source = document_source(path, lineno, record.get(fields.doc_id) if fields.doc_id else None)
        doc = make_document(split_paragraphs(record[name].splitlines()), False, source, stats)
        if doc is not None:
            yield doc


def document_source(path: Path, where: int | str, doc_id: object = None) -> str:
    """How messages name a document: file:line (or file:row N), and its id when known."""
    return f"{path}:{where}" + (f" (id {doc_id})" if doc_id is not None else "")


def read_wikiextractor(path: Path, stats: CorpusStats, fields: Fields = DEFAULT_FIELDS
                       ) -> Iterator[Document]:
    """WikiExtractor's `<doc id=".." url=".." title="..">` blocks; the first line of a block is
    the article's title and is dropped, the rest are paragraphs."""
    lines: list[str] | None = None
    start, doc_id = 1, None
    for lineno, line in read_lines(path, stats):
        match = _DOC_START.match(line)
        if match:
            if lines is not None:
                raise BertkitError(f"{path}:{lineno}: <doc> inside the <doc> opened at line "
                                   f"{start}; expected WikiExtractor's output")
            lines, start, doc_id = [], lineno, match.group(1)
        elif line.strip() == "</doc>":
            if lines is None:
                raise BertkitError(f"{path}:{lineno}: </doc> without <doc>")
            doc = make_document(split_paragraphs(lines[1:]), False, document_source(path, start, doc_id),
                            stats)
            if doc is not None:
                yield doc
            lines = None
        elif lines is not None:
            lines.append(line)
        elif line.strip():
            raise BertkitError(f"{path}:{lineno}: text outside <doc> ... </doc>; expected "
                               "WikiExtractor's output (or pass another --format)")
    if lines is not None:
        raise BertkitError(f"{path}:{start}: <doc> never closed (the file is cut short?)")


def readers() -> dict:
    """Format name -> reader(path, stats, fields) (the columnar ones load pyarrow when used)."""
    from bertkit.data import columnar

    return {"google": read_google, "text": read_text, "wikitext": read_wikitext,
            "jsonl": read_jsonl, "wikiextractor": read_wikiextractor,
            "parquet": columnar.read_parquet, "arrow": columnar.read_arrow}


def read_corpus(paths: list[str | Path], fmt: str, stats: CorpusStats,
                fields: Fields = DEFAULT_FIELDS) -> Iterator[Document]:
    """All documents of all files, in order; `fmt` is one of FORMATS ("auto" sniffs each file).
    A `datasets.save_to_disk` folder stands for its Arrow files."""
    if fmt not in FORMATS:
        raise BertkitError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    from bertkit.data.columnar import expand_dataset_folders

    read = readers()
    for path in expand_dataset_folders(map(Path, paths)):
        file_format = sniff_format(path) if fmt == "auto" else fmt
        stats.files += 1
        stats.formats[file_format] = stats.formats.get(file_format, 0) + 1
        before = stats.invalid_utf8_bytes
        yield from read[file_format](path, stats, fields)
        if stats.invalid_utf8_bytes > before:
            logger.warning("%s: %d invalid UTF-8 bytes replaced by U+FFFD", path,
                           stats.invalid_utf8_bytes - before)
