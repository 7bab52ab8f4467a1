"""Tables of texts, read a row at a time: CSV, TSV, JSONL and Parquet.

The one rule for the user's own tabular files, used by fine-tuning on custom data and by
`bertkit embed`: CSV is RFC 4180 (quoted fields may hold commas, quotes and newlines); TSV is
split on tabs with no quoting (a quote is an ordinary character, as in GLUE's files); JSONL
holds one JSON object per line; Parquet is read a record batch at a time, only the columns
asked for. Rows that are blank are skipped. Memory is bounded by one row (one record batch for
Parquet), never the file. A bad row is an error naming the file and its line (row, for
Parquet).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.columnar import open_parquet, parquet_batches
from bertkit.errors import BertkitError

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class Row:
    """One record: the file, its line (its row, for Parquet) and its fields."""

    path: Path
    number: int
    fields: dict[str, Any]
    unit: str = "line"  # "row" in Parquet

    @property
    def where(self) -> str:
        """The prefix of an error about this row: "file:line" or "file, row N"."""
        return f"{self.path}:{self.number}" if self.unit == "line" else f"{self.path}, row {self.number}"

    @property
    def place(self) -> str:
        return f"{self.unit} {self.number}"


def iter_text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file, split on newlines only, read a line at a time;
    bytes that are not UTF-8 are an error naming the file and line (as `io.read_text_lines`)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise BertkitError(f"{path}, line {number}: not valid UTF-8 (byte "
                                   f"0x{raw[err.start]:02x}); save the file as UTF-8") from None
            yield number, line.rstrip("\n").rstrip("\r")


def table_kind(path: Path) -> str:
    """csv, tsv, jsonl or parquet, from the file's suffix (.json is read as JSONL)."""
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise BertkitError(f"{path}: unknown format {suffix!r}; expected {', '.join(TABLE_SUFFIXES)}")
    return "jsonl" if suffix == ".json" else suffix[1:]


def table_header(path: Path) -> list[str] | None:
    """The column names of a CSV/TSV header row or a Parquet schema; None for JSONL, whose
    records each name their own fields (and for an empty file)."""
    kind = table_kind(path)
    if kind == "parquet":
        return list(open_parquet(path).schema_arrow.names)
    if kind == "jsonl":
        return None
    for _, fields in _delimited(path, kind):
        return fields
    return None


def iter_table(path: Path, columns: Sequence[str] | None = None, bare_field: str | None = None
               ) -> Iterator[Row]:
    """The rows of a CSV, TSV, JSONL or Parquet file, in order. `columns` limits what Parquet
    reads (the other formats read whole lines anyway); a column missing from the Parquet
    schema is the caller's error to name, so it is simply not read. With `bare_field`, a JSONL
    line holding a bare JSON string is the record {bare_field: that string}."""
    if not path.is_file():
        raise BertkitError(f"{path}: no such file")
    kind = table_kind(path)
    if kind == "parquet":
        yield from _parquet_rows(path, columns)
    elif kind == "jsonl":
        yield from _jsonl_rows(path, bare_field)
    else:
        yield from _delimited_rows(path, kind)


def _jsonl_rows(path: Path, bare_field: str | None) -> Iterator[Row]:
    for number, line in iter_text_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"  # as Row.where
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise BertkitError(f"{where}: invalid JSON ({err.msg})") from None
        if isinstance(record, str) and bare_field is not None:
            record = {bare_field: record}
        if not isinstance(record, dict):
            raise BertkitError(f"{where}: expected a JSON object, got {type(record).__name__}")
        yield Row(path, number, record)


def _delimited(path: Path, kind: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of the non-blank rows of a CSV or TSV file, header included."""
    if kind == "tsv":
        for number, line in iter_text_lines(path):
            if line.strip():
                yield number, line.split("\t")
        return
    # the lines keep their newlines: a quoted field may span lines, and csv counts them
    lines = (line + "\n" for _, line in iter_text_lines(path))
    reader = csv.reader(lines)
    for fields in reader:
        if any(x.strip() for x in fields):
            yield reader.line_num, fields


def _delimited_rows(path: Path, kind: str) -> Iterator[Row]:
    rows = _delimited(path, kind)
    header = next(rows, (0, None))[1]
    if header is None:
        return
    separator = "comma" if kind == "csv" else "tab"
    for number, fields in rows:
        if len(fields) != len(header):
            raise BertkitError(f"{path}:{number}: expected {len(header)} {separator}-separated fields "
                               f"({', '.join(header)}), found {len(fields)}; a {separator} "
                               "inside a text shifts the columns")
        yield Row(path, number, dict(zip(header, fields)))


def _parquet_rows(path: Path, columns: Sequence[str] | None) -> Iterator[Row]:
    parquet = open_parquet(path)
    names = parquet.schema_arrow.names
    selected = [c for c in (columns or names) if c in names]
    number = 0
    for batch in parquet_batches(path, parquet, selected):
        values = {name: batch.column(name).to_pylist() for name in selected}
        for i in range(batch.num_rows):
            number += 1
            yield Row(path, number, {name: values[name][i] for name in selected}, "row")

