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
- ``parquet``, ``arrow``: one document per row of a column (`bertkit.data.columnar`).
- ``auto``: sniffed per file from its name and first 64 KiB (`sniff_format`).

A folder stands for files (`expand_folders`): a folder written by `datasets`'
``Dataset.save_to_disk`` for its Arrow files; a ``DatasetDict`` folder is refused with the
split to pass (``folder/train``); any other folder for every file in it and its subfolders, in
sorted order, names starting with ``.`` or ``_`` skipped (WikiExtractor's ``out/AA/wiki_00``
layout; hidden files and Spark's ``_SUCCESS`` markers).

Text files may be compressed (``.gz``, ``.bz2``, ``.zst``); compressed data that is cut short or
damaged is an error naming the file, never a shorter corpus. Every reader streams (memory is
bounded by one document, or one record batch), strips a BOM, accepts LF and CRLF, replaces
invalid UTF-8 (counting the replaced bytes in `CorpusStats`), refuses binary files, and skips
(and counts) empty documents; a corpus without any document is an error naming its files.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import logging
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from bertkit.data import columnar
from bertkit.data.documents import (
    DEFAULT_FIELDS,
    CorpusStats,
    Document,
    Fields,
    document_source,
    make_document,
    split_paragraphs,
)
from bertkit.errors import BertkitError

logger = logging.getLogger(__name__)

FORMATS = ("auto", "google", "text", "wikitext", "jsonl", "wikiextractor", "parquet", "arrow")
SNIFF_BYTES = 1 << 16
BOM = b"\xef\xbb\xbf"
_ARTICLE_HEADING = re.compile(r"^ ?= [^=].* = ?$")  # " = Title = ", not " = = Section = = "
_ANY_HEADING = re.compile(r"^ ?(= )+.*( =)+ ?$")
_TERMINAL = tuple('.!?"\'”’)')
_DOC_START = re.compile(r'^<doc (?:[^>]*\s)?id="([^"]*)"[^>]*>\s*$')  # WikiExtractor's <doc ...>


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


COMPRESSED = (".gz", ".bz2", ".zst")
_READ_BYTES = 1 << 17  # compressed bytes read at a time


def open_bytes(path: str | Path) -> BinaryIO:
    """`path` opened for reading bytes; a ``.gz``, ``.bz2`` or ``.zst`` file is decompressed on
    the fly (zstd needs the `zstandard` package: the ``corpus`` extra). Compressed data that is
    damaged or cut short raises `BertkitError` naming the file when the reading reaches it."""
    path = Path(path)
    if path.is_dir():
        raise BertkitError(f"{path}: is a directory, not a file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".gz":
            return _checked(path, gzip.open(path, "rb"), (EOFError, OSError, zlib.error))
        if suffix == ".bz2":
            return _checked(path, bz2.open(path, "rb"), (EOFError, OSError))
        if suffix == ".zst":
            zstandard = _zstandard(path)
            return _checked(path, _ZstdFrames(open(path, "rb"), zstandard),
                            (EOFError, OSError, zstandard.ZstdError))
        return open(path, "rb")
    except OSError as err:
        raise BertkitError(f"{path}: cannot read ({err.strerror or err})") from err


def _zstandard(path: Path) -> Any:
    try:
        import zstandard
    except ImportError:
        raise BertkitError(f"{path}: reading .zst needs the zstandard package "
                           "(pip install 'bertkit[corpus]')") from None
    return zstandard


class _Decompressed(io.RawIOBase):
    """A decompressing reader whose failures are one `BertkitError` naming the file: gzip and
    bz2 raise EOFError from deep inside the codec when the data is cut short, and a damaged
    stream raises the codec's own error, neither of which names the file."""

    def __init__(self, path: Path, source: Any, errors: tuple[type[BaseException], ...]) -> None:
        self._path, self._source, self._errors = path, source, errors

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self._source.read(len(buffer))
        except self._errors as err:
            raise BertkitError(_damage_message(self._path, err)) from err
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._source.close()
        super().close()


def _checked(path: Path, source: Any, errors: tuple[type[BaseException], ...]) -> BinaryIO:
    return io.BufferedReader(_Decompressed(path, source, errors), buffer_size=_READ_BYTES)


def _damage_message(path: Path, err: BaseException) -> str:
    kind = path.suffix.lower().lstrip(".")
    if isinstance(err, EOFError):
        return (f"{path}: cannot read: the {kind} data is cut short (it ends before its "
                "end-of-stream marker); was its download or copy interrupted?")
    return f"{path}: cannot read: damaged or not {kind} data ({err})"


class _ZstdFrames:
    """zstd data decompressed frame after frame (pzstd, and `cat a.zst b.zst`, write several),
    which fails when the data ends inside a frame. `zstandard`'s `stream_reader` instead returns
    what it decoded and stops: a cut file read as a shorter whole one (issue 51: 70% of a file
    gave half its tokens, and exit 0)."""

    def __init__(self, raw: BinaryIO, zstandard: Any) -> None:
        self._raw = raw
        self._new_frame = zstandard.ZstdDecompressor().decompressobj
        self._frame: Any = None  # the decompressor of the frame under way; None between frames
        self._out, self._pos = b"", 0  # decompressed bytes not yet returned, from _pos

    def read(self, size: int) -> bytes:
        while self._pos == len(self._out):
            data = self._raw.read(_READ_BYTES)
            if not data:
                if self._frame is not None:
                    raise EOFError("the data ends inside a zstd frame")
                return b""
            self._out, self._pos = self._decompress(data), 0
        out = self._out[self._pos: self._pos + size]
        self._pos += len(out)
        return out

    def _decompress(self, data: bytes) -> bytes:
        pieces = []
        while data:
            if self._frame is None:
                self._frame = self._new_frame()
            pieces.append(self._frame.decompress(data))
            if not self._frame.eof:  # all of `data` belongs to this frame
                break
            data, self._frame = self._frame.unused_data, None  # the next frame starts there
        return b"".join(pieces)

    def close(self) -> None:
        self._raw.close()


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
    name = path.name.lower()
    for suffix in COMPRESSED:
        name = name.removesuffix(suffix)
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
    return {"google": read_google, "text": read_text, "wikitext": read_wikitext,
            "jsonl": read_jsonl, "wikiextractor": read_wikiextractor,
            "parquet": columnar.read_parquet, "arrow": columnar.read_arrow}


def expand_folders(paths: Iterable[Path]) -> Iterator[Path]:
    """Each path, with a folder replaced by the files it stands for: a `datasets`
    ``save_to_disk`` folder by its Arrow files (a ``DatasetDict`` folder is refused with the
    split to pass), any other folder by every file in it and its subfolders, depth first in
    sorted order, skipping names that start with ``.`` or ``_`` (hidden files, and the
    ``_SUCCESS`` / ``_metadata`` files Spark and Hadoop leave, as `pyarrow.dataset` does)."""
    for path in paths:
        if not path.is_dir():
            yield path
            continue
        files = list(_folder_files(path))
        if not files:
            raise BertkitError(f"{path}: an empty folder (no files in it or its subfolders, "
                               "names starting with . or _ skipped)")
        yield from files


def _folder_files(folder: Path) -> Iterator[Path]:
    dataset = columnar.dataset_folder_files(folder)
    if dataset is not None:
        yield from dataset
        return
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith((".", "_")):
            continue
        if entry.is_dir():
            yield from _folder_files(entry)
        else:
            yield entry


def read_corpus(paths: list[str | Path], fmt: str, stats: CorpusStats,
                fields: Fields = DEFAULT_FIELDS) -> Iterator[Document]:
    """All documents of all files, in order; `fmt` is one of FORMATS ("auto" sniffs each file).
    A folder stands for its files (`expand_folders`). A corpus without a single document is an
    error naming its files; files without documents beside others are named in a warning."""
    if fmt not in FORMATS:
        raise BertkitError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    read = readers()
    documents_before = stats.documents
    files, empty = 0, []
    for path in expand_folders(map(Path, paths)):
        file_format = sniff_format(path) if fmt == "auto" else fmt
        files += 1
        stats.files += 1
        stats.formats[file_format] = stats.formats.get(file_format, 0) + 1
        before, documents = stats.invalid_utf8_bytes, stats.documents
        yield from read[file_format](path, stats, fields)
        if stats.invalid_utf8_bytes > before:
            logger.warning("%s: %d invalid UTF-8 bytes replaced by U+FFFD", path,
                           stats.invalid_utf8_bytes - before)
        if stats.documents == documents:
            empty.append(path)
    if empty and stats.documents == documents_before:
        what = "the file is empty or holds" if files == 1 else "the files are empty or hold"
        raise BertkitError(f"{_named(empty)}: no documents ({what} only empty texts)")
    if empty:
        logger.warning("%d of %d files gave no documents (empty?): %s", len(empty), files,
                       _named(empty))


def _named(paths: list[Path]) -> str:
    """The first three of `paths`, and how many more."""
    more = len(paths) - 3
    return ", ".join(map(str, paths[:3])) + (f" and {more} more" if more > 0 else "")
