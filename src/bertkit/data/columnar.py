"""Columnar corpora: Parquet files, Arrow files and `datasets.save_to_disk` folders.

One document per row, its text in the column `Fields.text` (paragraphs separated by blank
lines, as in the ``text`` format). Files are read one record batch at a time (Arrow files
memory-mapped), so memory is bounded by a batch, not the file. Needs `pyarrow` (the ``corpus``
extra); `datasets` itself is not needed: its folders are Arrow streams listed in `state.json`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bertkit.data.corpus import DEFAULT_FIELDS, CorpusStats, Document, Fields, make_document, split_paragraphs
from bertkit.data.corpus import document_source as source_of
from bertkit.errors import BertkitError

BATCH_ROWS = 1024  # rows per record batch read from Parquet


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise BertkitError("reading Parquet or Arrow needs the pyarrow package "
                           "(pip install 'bertkit[corpus]')") from None
    return pyarrow


def expand_dataset_folders(paths: Iterable[Path]) -> Iterator[Path]:
    """Each path, with a folder written by `datasets.save_to_disk` replaced by its Arrow files
    in their order (from its `state.json`)."""
    for path in paths:
        state = path / "state.json"
        if not (path.is_dir() and state.is_file()):
            yield path
            continue
        try:
            files = [f["filename"] for f in json.loads(state.read_text())["_data_files"]]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise BertkitError(f"{state}: not a `datasets` state file ({err})") from err
        if not files:
            raise BertkitError(f"{path}: a `datasets` folder with no data files")
        yield from (path / name for name in files)


def _column_index(path: Path, schema: Any, name: str) -> int:
    """The index of column `name`, which must hold strings."""
    pa = _pyarrow()
    index = schema.get_field_index(name)
    if index < 0:
        raise BertkitError(f"{path}: no column {name!r} (its columns: "
                           f"{', '.join(schema.names)[:300]}); choose one with --text-field")
    kind = schema.field(index).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise BertkitError(f"{path}: column {name!r} holds {kind}, not text; choose another "
                           "with --text-field")
    return index


def _documents(path: Path, batches: Iterable[Any], schema: Any, stats: CorpusStats,
               fields: Fields) -> Iterator[Document]:
    """One document per row of the record batches."""
    text_index = _column_index(path, schema, fields.text)
    id_index = None
    if fields.doc_id is not None:
        id_index = schema.get_field_index(fields.doc_id)
        if id_index < 0:
            raise BertkitError(f"{path}: no column {fields.doc_id!r} for --id-field")
    row = 0
    for batch in batches:
        texts = batch.column(text_index).to_pylist()
        ids = batch.column(id_index).to_pylist() if id_index is not None else None
        for i, text in enumerate(texts):
            row += 1
            source = source_of(path, f"row {row}", ids[i] if ids is not None else None)
            doc = make_document(split_paragraphs((text or "").splitlines()), False, source, stats)
            if doc is not None:
                yield doc


def read_parquet(path: Path, stats: CorpusStats, fields: Fields = DEFAULT_FIELDS) -> Iterator[Document]:
    pa = _pyarrow()
    try:
        parquet = pa.parquet.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise BertkitError(f"{path}: not a readable Parquet file ({err})") from err
    schema = parquet.schema_arrow
    columns = [fields.text] + ([fields.doc_id] if fields.doc_id else [])
    _column_index(path, schema, fields.text)  # a clear error before reading
    batches = parquet.iter_batches(batch_size=BATCH_ROWS,
                                   columns=[c for c in columns if c in schema.names])
    selected = pa.schema([schema.field(c) for c in columns if c in schema.names])
    yield from _documents(path, batches, selected, stats, fields)


def read_arrow(path: Path, stats: CorpusStats, fields: Fields = DEFAULT_FIELDS) -> Iterator[Document]:
    """An Arrow IPC file, or stream (what `datasets` writes), memory-mapped."""
    pa = _pyarrow()
    try:
        with pa.memory_map(str(path)) as source:
            try:
                reader = pa.ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            except pa.ArrowInvalid:
                source.seek(0)
                reader = pa.ipc.open_stream(source)
                batches = iter(reader)
            yield from _documents(path, batches, reader.schema, stats, fields)
    except (pa.ArrowInvalid, OSError) as err:
        raise BertkitError(f"{path}: not a readable Arrow file ({err})") from err
