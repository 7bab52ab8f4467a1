"""Examples for `bertkit predict` from what a user hands in: the task's own file format, JSONL
records, or plain text (one example per line). Each task turns a record into its example
(`Task.example_from_record`) and a prediction back into a record (`Task.output_record`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.io import read_text_lines
from bertkit.tasks.base import Task, json_object, require_file


def read_input(task: Task, path: Path) -> list[Any]:
    """Examples from a file: JSONL records, the task's own format, else one text per line."""
    require_file(path, "the input to predict on")
    if path.suffix.lower() == ".jsonl":
        records = [(f"{path}:{n}", json_object(line, f"{path}:{n}"))
                   for n, line in read_text_lines(path) if line.strip()]
        return from_records(task, records)
    if path.suffix.lower() in task.native_suffixes:
        return task.read(path)
    return from_records(task, [(f"{path}:{n}", {"text": line})
                               for n, line in read_text_lines(path) if line.strip()])


def from_records(task: Task, records: Sequence[tuple[str, dict[str, Any]]]) -> list[Any]:
    """(where, record) pairs -> the task's examples; a record's `id` names it, else its index."""
    return [task.example_from_record(str(r.get("id", i)), r, where)
            for i, (where, r) in enumerate(records)]
