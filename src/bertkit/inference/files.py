"""The files `bertkit embed` / `features` read and write: texts (and pairs) from .txt, .jsonl,
.csv or .tsv with errors naming file and line; vectors as .npy or .jsonl; per-token features in
Google's `extract_features.py` layout. Every write is atomic."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from bertkit.errors import BertkitError
from bertkit.inference.encoder import TokenFeatures
from bertkit.io import atomic_path, check_new_file, read_text_lines


def read_texts(path: Path, column: str = "text", pair_column: str | None = None
               ) -> tuple[list[str], list[str] | None]:
    """Texts (and pair texts) of a .txt/.jsonl/.csv/.tsv file; BertkitError names the line."""
    if not path.is_file():
        raise BertkitError(f"{path}: no such file")
    lines = [line for _, line in read_text_lines(path)]
    suffix = path.suffix.lower()
    if suffix == ".txt":
        if pair_column:
            raise BertkitError(f"{path}: --pair-column needs a .jsonl or .csv input")
        rows = [(line, None) for line in lines]  # a blank line too: row i is line i
    elif suffix == ".jsonl":
        rows = _jsonl_rows(path, lines, column, pair_column)
    elif suffix in (".csv", ".tsv"):
        rows = _csv_rows(path, lines, column, pair_column, "\t" if suffix == ".tsv" else ",")
    else:
        raise BertkitError(f"{path}: unknown input type {suffix!r} (expected .txt, .jsonl, .csv, "
                           ".tsv)")
    if not rows:
        raise BertkitError(f"{path}: no texts in it")
    texts = [text for text, _ in rows]
    return texts, ([pair for _, pair in rows] if pair_column else None)


def _field(path: Path, number: int, record: object, name: str) -> str:
    if not isinstance(record, dict) or name not in record:
        raise BertkitError(f"{path}, line {number}: expected an object with a {name!r} field")
    value = record[name]
    if not isinstance(value, str):
        raise BertkitError(f"{path}, line {number}: field {name!r} must be a string, "
                           f"got {type(value).__name__}")
    return value


def _jsonl_rows(path: Path, lines: list[str], column: str, pair_column: str | None
                ) -> list[tuple[str, str | None]]:
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise BertkitError(f"{path}, line {number}: invalid JSON ({err.msg})") from None
        if isinstance(record, str) and pair_column is None:
            rows.append((record, None))
            continue
        pair = _field(path, number, record, pair_column) if pair_column else None
        rows.append((_field(path, number, record, column), pair))
    return rows


def _csv_rows(path: Path, lines: list[str], column: str, pair_column: str | None,
              delimiter: str) -> list[tuple[str, str | None]]:
    reader = csv.reader(lines, delimiter=delimiter)
    header = next(reader, None)
    if header is None:
        raise BertkitError(f"{path}: empty file (expected a header row)")
    wanted = [column] + ([pair_column] if pair_column else [])
    for name in wanted:
        if name not in header:
            raise BertkitError(f"{path}, line 1: no column {name!r} in the header "
                               f"({', '.join(header)}); choose one with --column")
    index = [header.index(name) for name in wanted]
    rows = []
    for record in reader:
        if not record:
            continue
        if len(record) != len(header):
            raise BertkitError(f"{path}, line {reader.line_num}: {len(record)} fields, the header "
                               f"has {len(header)}")
        rows.append((record[index[0]], record[index[1]] if pair_column else None))
    return rows


def check_output_file(path: str | Path, suffixes: tuple[str, ...], inputs: list) -> None:
    """Before any work: the output is a new file of a kind the command writes (never an input,
    a folder or a file the user already has)."""
    if Path(path).suffix.lower() not in suffixes:
        raise BertkitError(f"--output {path}: must end in {' or '.join(suffixes)}")
    check_new_file(path, inputs=[i for i in inputs if i is not None])


def write_vectors(path: Path, vectors: np.ndarray) -> None:
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".jsonl"):
        raise BertkitError(f"{path}: output must be .npy or .jsonl")
    with atomic_path(path) as tmp, tmp.open("wb") as f:
        if suffix == ".npy":
            np.save(f, vectors)
            return
        for i, row in enumerate(vectors):
            record = {"index": i, "embedding": [round(float(v), 6) for v in row]}
            f.write((json.dumps(record) + "\n").encode("utf-8"))


def write_features(path: Path, feats: list[TokenFeatures], layers: list[int], combine: str
                   ) -> None:
    """Google's `extract_features.py` layout: one line per text, {"linex_index", "features":
    [{"token", "offsets", "layers": [{"index", "values"}]}]}; concat/sum give "values" per token."""
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


def _rounded(values: np.ndarray) -> list[float]:
    return [round(float(v), 6) for v in values]
