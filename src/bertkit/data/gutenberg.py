"""Project Gutenberg books as plain text: the boilerplate stripped, and the demo's table of books.

The stripping rule is the one ../shared/data/books was made with (its SOURCE.md), so a book
fetched again is byte-identical to the shared copy and its SHA-256 can be checked:

1. decode (UTF-8, or Latin-1 where the table says so), drop a BOM, turn CRLF/CR into LF;
2. keep the lines strictly between the `*** START OF THE/THIS PROJECT GUTENBERG EBOOK ... ***`
   line (and its second line when the marker wraps) and the `*** END OF ...` line;
3. drop the first paragraph when it is a volunteer credit (`Produced by ...`, `Transcribed from
   ... by David Price`) and the last when it is the `End of (the) Project Gutenberg EBook` line;
4. strip trailing spaces and the blank lines at either end; end with one newline.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from bertkit.errors import BertkitError

_START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG EBOOK", re.IGNORECASE)
_END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG EBOOK", re.IGNORECASE)
_END_LINE = re.compile(r"^End of (the )?Project Gutenberg", re.IGNORECASE)
RAW_GITHUB = "https://raw.githubusercontent.com"
TABLE = "gutenberg_books.tsv"


@dataclass(frozen=True)
class Book:
    """One book of the table: its file name here, its Project Gutenberg id, the GITenberg
    mirror file it is made from (pinned by commit, checked by size and Git blob id) and the
    SHA-256 of the stripped text."""

    file: str
    pg_id: int
    repo: str  # GITenberg/<Title>_<PG id>
    commit: str
    path: str  # the source file in the repository: <id>-0.txt, <id>.txt or <id>-8.txt
    encoding: str
    source_bytes: int
    source_blob: str  # a prefix of the source's `git hash-object`
    sha256: str

    def url(self, base: str = RAW_GITHUB) -> str:
        return f"{base}/{self.repo}/{self.commit}/{self.path}"


def git_blob_id(data: bytes) -> str:
    """What `git hash-object` prints for a file holding `data`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def strip_boilerplate(raw: bytes, encoding: str = "utf-8", name: str = "book") -> str:
    """The text of a Project Gutenberg file without its header, licence and footer."""
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as err:
        raise BertkitError(f"{name}: not valid {encoding} text ({err})") from err
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    starts = [i for i, line in enumerate(lines) if _START.match(line)]
    ends = [i for i, line in enumerate(lines) if _END.match(line)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise BertkitError(f"{name}: expected one `*** START OF ... PROJECT GUTENBERG EBOOK` line "
                           f"and one `*** END OF` line after it, found {len(starts)} and {len(ends)}")
    first = starts[0] + 1
    if not lines[starts[0]].rstrip().endswith("***"):
        first += 1  # the marker wraps onto a second line
    body = "\n".join(line.rstrip() for line in lines[first:ends[0]]).strip("\n")
    paragraphs = body.split("\n\n")
    if paragraphs and _is_credit(paragraphs[0].strip()):
        paragraphs = paragraphs[1:]
    if paragraphs and _END_LINE.match(paragraphs[-1].strip()):
        paragraphs = paragraphs[:-1]
    return "\n\n".join(paragraphs).strip("\n") + "\n"


def _is_credit(paragraph: str) -> bool:
    return paragraph.startswith("Produced by") or (
        paragraph.startswith("Transcribed from") and "David Price" in paragraph)


def load_books(text: str | None = None) -> tuple[Book, ...]:
    """The table of books (`gutenberg_books.tsv` beside this module, or `text` in its format)."""
    if text is None:
        text = resources.files("bertkit.data").joinpath(TABLE).read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    header, books = rows[0], []
    for row in rows[1:]:
        fields = dict(zip(header, row, strict=True))
        books.append(Book(**{**fields, "pg_id": int(fields["pg_id"]),
                             "source_bytes": int(fields["source_bytes"])}))
    return tuple(books)
