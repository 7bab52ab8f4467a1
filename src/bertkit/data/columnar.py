"""Columnar corpora: Parquet files, Arrow files and `datasets.save_to_disk` folders.

One document per row, its text in the column `Fields.text` (paragraphs separated by blank
lines, as in the ``text`` format). Files are read one record batch at a time (Arrow files
memory-mapped), so memory is bounded by a batch, not the file. Needs `pyarrow` (the ``corpus``
extra); `datasets` itself is not needed: its folders are Arrow streams listed in `state.json`.
A damaged file is an error naming it (and, for Parquet, the row group and its rows), never a
traceback from the decoder.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bertkit.data.documents import (
    DEFAULT_FIELDS,
    CorpusStats,
    Document,
    Fields,
    make_document,
    split_paragraphs,
)
from bertkit.data.documents import document_source as source_of
from bertkit.errors import BertkitError

BATCH_ROWS = 1024  # rows per record batch read from Parquet
DATASET_STATE = "state.json"  # in a folder of `Dataset.save_to_disk`: lists its Arrow files
DATASET_DICT = "dataset_dict.json"  # `DatasetDict.save_to_disk`: {"splits": [...]}, a folder each


def pyarrow_module() -> Any:
    """pyarrow with its IPC and Parquet modules, or the one-line error saying how to get it."""
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise BertkitError("reading Parquet or Arrow needs the pyarrow package "
                           "(pip install 'bertkit[corpus]')") from None
    return pyarrow


def dataset_folder_files(folder: Path) -> list[Path] | None:
    """The Arrow files of a folder written by `datasets`' ``Dataset.save_to_disk``, in their
    order (from its `state.json`); None when `folder` is not one. The folder of a
    ``DatasetDict`` (one such folder per split) is refused with a hint naming its splits: which
    split is the corpus is the user's choice, and reading them all would mix in the test split."""
    if (folder / DATASET_DICT).is_file():
        try:
            splits = [str(s) for s in json.loads((folder / DATASET_DICT).read_text())["splits"]]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise BertkitError(f"{folder / DATASET_DICT}: not a `datasets` DatasetDict file "
                               f"({err})") from err
        example = "train" if "train" in splits else (splits or ["SPLIT"])[0]
        raise BertkitError(f"{folder}: a `datasets` DatasetDict folder (splits: "
                           f"{', '.join(splits)}); pass the split to read, e.g. {folder / example}")
    state = folder / DATASET_STATE
    if not state.is_file():
        return None
    try:
        files = [f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise BertkitError(f"{state}: not a `datasets` state file ({err})") from err
    if not files:
        raise BertkitError(f"{folder}: a `datasets` folder with no data files")
    return [folder / name for name in files]


def _one_line(err: BaseException) -> str:
    """Arrow's message on one line (its thrift errors span several, with control bytes)."""
    return " ".join("".join(c if c.isprintable() else " " for c in str(err)).split())


def _column_index(path: Path, schema: Any, name: str) -> int:
    """The index of column `name`, which must hold strings."""
    pa = pyarrow_module()
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
    pa = pyarrow_module()
    parquet = open_parquet(path)
    schema = parquet.schema_arrow
    columns = [fields.text] + ([fields.doc_id] if fields.doc_id else [])
    _column_index(path, schema, fields.text)  # a clear error before reading
    selected = [c for c in columns if c in schema.names]
    batches = parquet_batches(path, parquet, selected)
    yield from _documents(path, batches, pa.schema([schema.field(c) for c in selected]), stats,
                          fields)


def open_parquet(path: Path) -> Any:
    """A `pyarrow.parquet.ParquetFile`, or an error naming the file."""
    pa = pyarrow_module()
    try:
        # pages whose writer stored a CRC (parquet-mr does by default) are checked: snappy has
        # no checksum of its own, so a flipped byte could otherwise be read as other text
        return pa.parquet.ParquetFile(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as err:
        raise BertkitError(f"{path}: not a readable Parquet file ({_one_line(err)})") from err


def parquet_batches(path: Path, parquet: Any, columns: list[str]) -> Iterator[Any]:
    """The record batches of `columns`, a row group at a time, so that a damaged page (the
    footer intact, the data not) is reported with its row group and rows."""
    pa = pyarrow_module()
    first = 1
    for group in range(parquet.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        try:
            yield from parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[group],
                                            columns=columns)
        except (pa.ArrowException, OSError) as err:
            raise BertkitError(f"{path}: damaged Parquet data in row group {group} (rows "
                               f"{first}-{first + rows - 1}): {_one_line(err)}") from err
        first += rows


def read_arrow(path: Path, stats: CorpusStats, fields: Fields = DEFAULT_FIELDS) -> Iterator[Document]:
    """An Arrow IPC file, or stream (what `datasets` writes), memory-mapped."""
    pa = pyarrow_module()
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
    except (pa.ArrowException, OSError) as err:
        raise BertkitError(f"{path}: not a readable Arrow file ({_one_line(err)})") from err
