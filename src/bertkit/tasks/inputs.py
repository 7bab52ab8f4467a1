"""Examples for `bertkit predict` from what a user hands in: the task's own file format, JSONL
records, or plain text (one example per line). Each task turns a record into its example
(`Task.example_from_record`) and a prediction back into a record (`Task.output_record`).

JSONL and plain text are read a line at a time (`iter_input`), so that predicting on a file of
millions of lines needs memory for a window of them only; a task's own format is parsed whole by
its reader (a SQuAD or CoNLL file is one document). `scan_input` reads the file once before any
model work: a bad record, or an id given twice (two answers that could not be told apart), is one
error naming the file and line, and nothing is written."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tables import iter_text_lines
from bertkit.errors import BertkitError
from bertkit.tasks.base import Task, json_object, require_file


def read_input(task: Task, path: Path) -> list[Any]:
    """Examples from a file: JSONL records, the task's own format, else one text per line."""
    return list(iter_input(task, path))


def iter_input(task: Task, path: Path) -> Iterator[Any]:
    """The examples of `read_input`, one at a time."""
    for _, example in _located(task, path):
        yield example


def scan_input(task: Task, path: Path) -> int:
    """Check every example of the file, and that no id is given twice; returns how many there
    are. Ids are compared by 8-byte hashes (memory flat in the file's length), and a repeated
    hash is confirmed on a second reading that names both lines."""
    hashes = array("q")
    for _, example in _located(task, path):
        hashes.append(hash(example.guid))
    if not hashes:
        raise BertkitError(f"{path}: no inputs to predict on")
    values, counts = np.unique(np.frombuffer(hashes, dtype=np.int64), return_counts=True)
    suspects = set(values[counts > 1].tolist())
    if suspects:
        seen: dict[str, str] = {}
        for where, example in _located(task, path):
            if hash(example.guid) not in suspects:
                continue
            if example.guid in seen:
                raise BertkitError(f"{where}: id {example.guid!r} was given before, at "
                                   f"{seen[example.guid]}; ids must be unique")
            seen[example.guid] = where
    return len(hashes)


def _located(task: Task, path: Path) -> Iterator[tuple[str, Any]]:
    """(where, example) for every example of the file, in order."""
    require_file(path, "the input to predict on")
    suffix = path.suffix.lower()
    if suffix in task.native_suffixes and suffix != ".jsonl":
        for example in task.read(path):
            yield str(path), example
        return
    lines = ((f"{path}:{n}", line) for n, line in iter_text_lines(path) if line.strip())
    if suffix == ".jsonl":
        records = ((where, json_object(line, where)) for where, line in lines)
    else:
        records = ((where, {"text": line}) for where, line in lines)
    yield from _examples(task, records)


def from_records(task: Task, records: Iterable[tuple[str, dict[str, Any]]]) -> list[Any]:
    """(where, record) pairs -> the task's examples; a record's `id` names it, else its index."""
    return [example for _, example in _examples(task, records)]


def _examples(task: Task, records: Iterable[tuple[str, dict[str, Any]]]
              ) -> Iterator[tuple[str, Any]]:
    for i, (where, r) in enumerate(records):
        yield where, task.example_from_record(str(r.get("id", i)), r, where)
