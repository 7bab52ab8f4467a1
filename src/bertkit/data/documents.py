"""The document every corpus reader yields, and the pieces the readers share.

`bertkit.data.corpus` (text formats, and the dispatch over all formats) and
`bertkit.data.columnar` (Parquet, Arrow) both build documents from these; neither imports the
other's internals, so the two modules form no import circle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)


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


def document_source(path: Path, where: int | str, doc_id: object = None) -> str:
    """How messages name a document: file:line (or file:row N), and its id when known."""
    return f"{path}:{where}" + (f" (id {doc_id})" if doc_id is not None else "")
