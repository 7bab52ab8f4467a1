"""The files `bertkit embed` / `features` read and write, a window of texts at a time.

Inputs: `.txt` (one text per line; an empty line is an empty text, so line i -> row i) or a
table (`.csv`, `.tsv`, `.jsonl`, `.parquet`, read by `bertkit.data.tables`) with a text column, an
optional pair column and an optional id column. A table is checked whole before any model work
(`scan`): a missing column, an empty text or a duplicated id is one error naming the file and
line, and nothing is written. Each record's key is its id, or its 1-based line (.txt) or row.

Outputs, by suffix, written to a temporary name and renamed at the end (a killed run leaves no
file that looks whole): `.npy` (float32, N x D, row i = record i), `.csv` and `.parquet` (the key
column first, then `e0 .. e{D-1}`), `.jsonl` (`{"index", "embedding"}` per record, the id first
when an id column is given); beside each, `OUTPUT.json` says how the vectors were made (for
Parquet also the schema metadata, key `bertkit`). Per-token features are Google's
`extract_features.py` JSONL layout.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from bertkit.data.columnar import open_parquet, pyarrow_module
from bertkit.data.tables import Row, iter_table, iter_text_lines, table_header, table_kind
from bertkit.errors import BertkitError
from bertkit.inference.encoder import WINDOW_TEXTS, Encoder, TextWindow, TokenFeatures
from bertkit.io import atomic_path, atomic_write_text, check_new_file

INPUT_SUFFIXES = (".txt", ".csv", ".tsv", ".jsonl", ".parquet")
VECTOR_SUFFIXES = (".npy", ".csv", ".parquet", ".jsonl")
DEFAULT_KEY = "id"  # the key column's name when no id column is given
METADATA_KEY = "bertkit"  # the Parquet schema metadata key holding the sidecar's JSON
# A file's vectors must not depend on the batch a text fell into: fp32 unless asked otherwise.
FILE_PRECISION = "fp32"


@dataclass(frozen=True)
class TextSource:
    """Where the texts are: a file and, for a table, its columns."""

    path: Path
    text_column: str = "text"
    pair_column: str | None = None
    id_column: str | None = None

    @property
    def is_table(self) -> bool:
        return self.path.suffix.lower() != ".txt"

    @property
    def key_name(self) -> str:
        return self.id_column or DEFAULT_KEY


@dataclass(frozen=True)
class Record:
    key: Any  # the id, or the 1-based line (.txt) or row number
    text: str
    pair: str | None


@dataclass(frozen=True)
class SourceScan:
    """What `scan` learned of a valid input: how many records, and whether every id is an
    integer (written as one) or not (all written as strings)."""

    count: int
    integer_ids: bool


def file_precision(requested: str | None) -> str:
    """The precision of vectors written to a file: the one asked for, else fp32."""
    return requested or FILE_PRECISION


def batch_invariant(encoder: Encoder) -> bool:
    """Whether `encoder` gives a text the same bits whatever its batch (`Encoder`'s
    batch-invariant mode): shown for fp32 on the CPU; reduced precisions and GPU kernels pick
    their summation order by the batch's shape."""
    return encoder.precision == "fp32" and encoder.device.type == "cpu"


# ---- reading ------------------------------------------------------------------------------------


def _check_source(source: TextSource) -> None:
    path = source.path
    if not path.is_file():
        raise BertkitError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in INPUT_SUFFIXES and suffix != ".json":
        raise BertkitError(f"{path}: unknown input type {suffix!r} (expected "
                           f"{', '.join(INPUT_SUFFIXES)})")
    if not source.is_table and (source.pair_column or source.id_column):
        raise BertkitError(f"{path}: --pair-column and --id-column need a table input "
                           "(.csv, .tsv, .jsonl, .parquet)")


def _columns(source: TextSource) -> list[str]:
    return [c for c in (source.text_column, source.pair_column, source.id_column) if c]


def _check_header(source: TextSource) -> None:
    """A CSV/TSV header or Parquet schema names every column asked for, and Parquet's text
    columns hold strings."""
    header = table_header(source.path)
    if header is None:
        return
    for flag, name in (("--text-column", source.text_column), ("--pair-column", source.pair_column),
                       ("--id-column", source.id_column)):
        if name and name not in header:
            raise BertkitError(f"{source.path}: no column {name!r} (its columns: "
                               f"{', '.join(header)[:300]}); choose one with {flag}")
    if table_kind(source.path) == "parquet":
        pa = pyarrow_module()
        schema = open_parquet(source.path).schema_arrow
        for name in (source.text_column, source.pair_column):
            kind = schema.field(name).type if name else None
            if kind is not None and not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
                raise BertkitError(f"{source.path}: column {name!r} holds {kind}, not text")


def _text(row: Row, name: str) -> str:
    if name not in row.fields:
        raise BertkitError(f"{row.where}: no field {name!r} (its fields: "
                           f"{', '.join(map(str, row.fields))[:300]})")
    value = row.fields[name]
    if value is not None and not isinstance(value, str):
        raise BertkitError(f"{row.where}: field {name!r} must be a string, got "
                           f"{type(value).__name__}")
    if value is None or not value.strip():
        raise BertkitError(f"{row.where}: empty text in column {name!r}")
    return value


def _id(row: Row, name: str) -> int | str:
    if name not in row.fields:
        raise BertkitError(f"{row.where}: no field {name!r} (its fields: "
                           f"{', '.join(map(str, row.fields))[:300]})")
    value = row.fields[name]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BertkitError(f"{row.where}: id {value!r} in column {name!r} must be a string or an "
                           "integer")
    if isinstance(value, str) and not value.strip():
        raise BertkitError(f"{row.where}: empty id in column {name!r}")
    return value


def _rows(source: TextSource) -> Iterator[tuple[Row, Record]]:
    """(row, record) of a table, each record checked."""
    rows = iter_table(source.path, _columns(source), bare_field=source.text_column)
    for number, row in enumerate(rows, start=1):
        text = _text(row, source.text_column)
        pair = _text(row, source.pair_column) if source.pair_column else None
        key = _id(row, source.id_column) if source.id_column else number
        yield row, Record(key, text, pair)


def iter_records(source: TextSource) -> Iterator[Record]:
    """The records of a .txt file or a table, in order (a table's ids as given: see `scan`)."""
    _check_source(source)
    if not source.is_table:
        for number, line in iter_text_lines(source.path):
            yield Record(number, line, None)
        return
    _check_header(source)
    for _, record in _rows(source):
        yield record


def scan(source: TextSource) -> SourceScan:
    """Read the whole input once, checking every record, before any model work; duplicated
    ids are found from 8-byte hashes (flat memory), then named with their two lines."""
    _check_source(source)
    if not source.is_table:
        count = sum(1 for _ in iter_text_lines(source.path))
        if count == 0:
            raise BertkitError(f"{source.path}: no texts in it")
        return SourceScan(count, True)
    _check_header(source)
    count, integer_ids = 0, True
    hashes = array("q")
    for _, record in _rows(source):
        count += 1
        integer_ids = integer_ids and isinstance(record.key, int)
        if source.id_column:
            hashes.append(hash(record.key))
    if count == 0:
        raise BertkitError(f"{source.path}: no texts in it")
    if source.id_column:
        _refuse_duplicates(source, np.frombuffer(hashes, dtype=np.int64))
    return SourceScan(count, integer_ids)


def _refuse_duplicates(source: TextSource, hashes: np.ndarray) -> None:
    values, counts = np.unique(hashes, return_counts=True)
    suspects = set(values[counts > 1].tolist())
    if not suspects:
        return
    seen: dict[Any, str] = {}
    for row, record in _rows(source):
        if hash(record.key) not in suspects:
            continue
        if record.key in seen:
            raise BertkitError(f"{source.path}: id {record.key!r} appears twice in column "
                               f"{source.id_column!r} ({seen[record.key]} and {row.place}); ids "
                               "must be unique")
        seen[record.key] = row.place


def record_windows(source: TextSource, integer_ids: bool = True,
                   size: int = WINDOW_TEXTS) -> Iterator[TextWindow]:
    """The records in windows of `size`, their keys carried along (as strings unless every id
    is an integer)."""
    texts: list[str] = []
    pairs: list[str] = []
    keys: list[Any] = []

    def window() -> TextWindow:
        return TextWindow(texts, pairs if source.pair_column else None, keys)

    for record in iter_records(source):
        texts.append(record.text)
        pairs.append(record.pair or "")
        keys.append(record.key if integer_ids else str(record.key))
        if len(texts) == size:
            yield window()
            texts, pairs, keys = [], [], []
    if texts:
        yield window()


def read_texts(path: Path, column: str = "text", pair_column: str | None = None
               ) -> tuple[list[str], list[str] | None]:
    """All texts (and pair texts) of an input, checked as `scan` checks them."""
    source = TextSource(path, column, pair_column)
    scan(source)
    records = list(iter_records(source))
    pairs = [r.pair or "" for r in records] if pair_column else None
    return [r.text for r in records], pairs


# ---- writing vectors ----------------------------------------------------------------------------


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def check_output_file(path: str | Path, suffixes: tuple[str, ...], inputs: list,
                      sidecar: bool = False) -> None:
    """Before any work: the output (and its sidecar) is a new file of a kind the command writes
    (never an input, a folder or a file the user already has)."""
    if Path(path).suffix.lower() not in suffixes:
        raise BertkitError(f"--output {path}: must end in {' or '.join(suffixes)}")
    given = [i for i in inputs if i is not None]
    check_new_file(path, inputs=given)
    if sidecar:
        check_new_file(sidecar_path(Path(path)), inputs=given)


class _VectorFile:
    """One output format: rows appended a window at a time to an open temporary file."""

    def __init__(self, f: IO[bytes], scan: SourceScan, dim: int, key_name: str, with_ids: bool):
        self.f, self.scan, self.dim = f, scan, dim
        self.key_name, self.with_ids = key_name, with_ids
        self.rows = 0

    def write(self, keys: Iterable[Any], vectors: np.ndarray) -> None:
        raise NotImplementedError

    def close(self, info: dict[str, Any]) -> None:
        """After the last window: `info` is the sidecar (for formats that embed it)."""


class _Npy(_VectorFile):
    """The header of `np.save` (the row count is known from the scan), then the rows."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")), "fortran_order": False,
                  "shape": (self.scan.count, self.dim)}
        np.lib.format.write_array_header_1_0(self.f, header)

    def write(self, keys: Iterable[Any], vectors: np.ndarray) -> None:
        self.f.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())


class _Jsonl(_VectorFile):
    def write(self, keys: Iterable[Any], vectors: np.ndarray) -> None:
        for key, row in zip(keys, vectors):
            record: dict[str, Any] = {self.key_name: key} if self.with_ids else {}
            record.update(index=self.rows, embedding=[round(float(v), 6) for v in row])
            self.f.write((json.dumps(record) + "\n").encode("utf-8"))
            self.rows += 1


class _Csv(_VectorFile):
    """Floats with 9 significant digits: read back as float32, each is the same bits."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.fmt = ",".join(["%.9g"] * self.dim)
        self.f.write((",".join([_csv_field(self.key_name), *feature_names(self.dim)]) + "\n")
                     .encode("utf-8"))

    def write(self, keys: Iterable[Any], vectors: np.ndarray) -> None:
        lines = [f"{_csv_field(str(key))},{self.fmt % tuple(row)}\n"
                 for key, row in zip(keys, vectors.tolist())]
        self.f.write("".join(lines).encode("utf-8"))


class _Parquet(_VectorFile):
    """One float32 column per dimension (a table R, pandas or a spreadsheet reads as is)."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        pa = self.pa = pyarrow_module()
        key_type = pa.int64() if self.scan.integer_ids else pa.string()
        fields = [pa.field(self.key_name, key_type)]
        fields += [pa.field(name, pa.float32()) for name in feature_names(self.dim)]
        self.schema = pa.schema(fields)
        self.writer = pa.parquet.ParquetWriter(self.f, self.schema)

    def write(self, keys: Iterable[Any], vectors: np.ndarray) -> None:
        pa = self.pa
        columns = [pa.array(list(keys), type=self.schema.field(0).type)]
        columns += [pa.array(vectors[:, j]) for j in range(self.dim)]
        self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))

    def close(self, info: dict[str, Any]) -> None:
        """The sidecar into the file's key-value metadata and into its Arrow schema's, which
        readers (pandas, R's arrow) show: the schema was stored when the writer opened, before
        the counts were known, so its "ARROW:schema" entry (base64 of the IPC schema, Arrow's
        convention) is replaced by the final one."""
        text = json.dumps(info)
        final = self.schema.with_metadata({METADATA_KEY: text})
        stored = base64.b64encode(final.serialize().to_pybytes()).decode("ascii")
        self.writer.add_key_value_metadata({"ARROW:schema": stored, METADATA_KEY: text})
        self.writer.close()


FORMATS: dict[str, type[_VectorFile]] = {".npy": _Npy, ".jsonl": _Jsonl, ".csv": _Csv,
                                         ".parquet": _Parquet}


def feature_names(dim: int) -> list[str]:
    """The vector columns of a CSV or Parquet table: e0 .. e{dim-1}."""
    return [f"e{j}" for j in range(dim)]


def _csv_field(value: str) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow([value])
    return buffer.getvalue()


def write_vector_table(path: Path, results: Iterable[tuple[TextWindow, np.ndarray]],
                       scan: SourceScan, dim: int, key_name: str, with_ids: bool,
                       info: Any) -> dict[str, Any]:
    """Write the vectors of `results` (window by window) to `path` in its suffix's format, then
    the sidecar; `info()` gives the sidecar's content once every window is done. Returns it."""
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise BertkitError(f"{path}: output must be {', '.join(FORMATS)}")
    if suffix == ".parquet":
        pyarrow_module()  # a missing pyarrow is said before the first window, not after
    with atomic_path(path) as tmp, tmp.open("wb") as f:
        out = FORMATS[suffix](f, scan, dim, key_name, with_ids)
        rows = 0
        for window, vectors in results:
            keys = window.keys if window.keys is not None else range(rows + 1, rows + len(vectors) + 1)
            out.write(keys, vectors)
            rows += len(vectors)
        if rows != scan.count:  # the input changed while it was read
            raise BertkitError(f"{path}: {rows} vectors for {scan.count} texts read before; the "
                               "input changed during the run")
        meta = info()
        out.close(meta)
    atomic_write_text(sidecar_path(path), json.dumps(meta, indent=2) + "\n")
    return meta


def write_vectors(path: Path, vectors: np.ndarray) -> None:
    """All of `vectors` to a .npy or .jsonl file, row i = key i + 1 (no ids, no sidecar)."""
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".jsonl"):
        raise BertkitError(f"{path}: output must be .npy or .jsonl")
    with atomic_path(path) as tmp, tmp.open("wb") as f:
        out = FORMATS[suffix](f, SourceScan(len(vectors), True), vectors.shape[1], DEFAULT_KEY, False)
        out.write(range(1, len(vectors) + 1), vectors)


# ---- writing per-token features ---------------------------------------------------------------


def write_features(path: Path, feats: Iterable[TokenFeatures], layers: list[int], combine: str
                   ) -> int:
    """Google's `extract_features.py` layout: one line per text, {"linex_index", "features":
    [{"token", "offsets", "layers": [{"index", "values"}]}]}; concat/sum give "values" per token.
    Written as `feats` arrive; returns how many texts."""
    count = 0
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as f:
        for i, feat in enumerate(feats):
            tokens = []
            for t, (token, offsets) in enumerate(zip(feat.tokens, feat.offsets)):
                entry: dict = {"token": token, "offsets": list(offsets)}
                vec = feat.vectors[t]
                if combine == "none":
                    entry["layers"] = [{"index": layer, "values": _rounded(vec[j])}
                                       for j, layer in enumerate(layers)]
                else:
                    entry["values"] = _rounded(vec)
                tokens.append(entry)
            f.write(json.dumps({"linex_index": i, "features": tokens}) + "\n")
            count += 1
    return count


def _rounded(values: np.ndarray) -> list[float]:
    return [round(float(v), 6) for v in values]

