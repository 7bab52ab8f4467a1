"""Examples for `bertkit predict` from what a user hands in: the task's own file format, JSONL
records, or plain text (one example per line), and the JSONL records that come back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.tasks.base import Task, json_object, require_file
from bertkit.tasks.glue import ClassificationTask, TextExample
from bertkit.tasks.ner import TaggedSentence
from bertkit.tasks.squad import SquadExample, SquadTask
from bertkit.tasks.swag import N_CHOICES, ChoiceExample, SwagTask

NATIVE = {"BertForSequenceClassification": (".tsv", ".csv"), "BertForQuestionAnswering": (".json",),
          "BertForMultipleChoice": (".csv",), "BertForTokenClassification": (".conll",)}


def read_input(task: Task, path: Path) -> list[Any]:
    """Examples from a file: JSONL records, the task's own format, else one text per line."""
    require_file(path, "the input to predict on")
    if path.suffix.lower() == ".jsonl":
        records = []
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    records.append((f"{path}:{number}", json_object(line, f"{path}:{number}")))
        return from_records(task, records)
    if path.suffix.lower() in NATIVE.get(task.head, ()):
        return task.read(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    return from_records(task, [(f"{path}:{n}", {"text": line})
                               for n, line in enumerate(lines, start=1) if line.strip()])


def from_records(task: Task, records: Sequence[tuple[str, dict[str, Any]]]) -> list[Any]:
    return [_example(task, i, where, r) for i, (where, r) in enumerate(records)]


def _field(record: dict[str, Any], names: Sequence[str], where: str) -> Any:
    for name in names:
        if name in record:
            return record[name]
    raise BertkitError(f"{where}: expected a field {' or '.join(repr(n) for n in names)}")


def _example(task: Task, index: int, where: str, r: dict[str, Any]) -> Any:
    guid = str(r.get("id", index))
    if isinstance(task, SquadTask):
        return SquadExample(guid, str(_field(r, ["question"], where)),
                            str(_field(r, ["context"], where)), (), ())
    if isinstance(task, SwagTask):
        endings = r.get("endings") or [r.get(f"ending{k}") for k in range(N_CHOICES)]
        if len(endings) != N_CHOICES or any(e is None for e in endings):
            raise BertkitError(f"{where}: expected 'endings' with {N_CHOICES} strings")
        return ChoiceExample(guid, str(_field(r, ["context", "sent1"], where)),
                             str(r.get("start", r.get("sent2", ""))), tuple(map(str, endings)),
                             None, where)
    if isinstance(task, ClassificationTask):
        cols = getattr(task, "columns", None)
        text_names = ["text", "sentence"] + ([cols.text] if cols else [])
        pair_names = ["pair", "text_b"] + ([cols.pair] if cols and cols.pair else [])
        pair = next((r[n] for n in pair_names if n in r), None)
        return TextExample(guid, str(_field(r, text_names, where)),
                           None if pair is None else str(pair), None, where)
    words = r.get("words")
    if words is None:
        words = str(_field(r, ["text"], where)).split()
    return TaggedSentence(guid, tuple(map(str, words)), None, where)


def output_record(example: Any, prediction: Any) -> dict[str, Any]:
    """One JSONL line of `bertkit predict`: the input's id and text, and the prediction."""
    if isinstance(example, SquadExample):
        return {"id": example.qid, "question": example.question, "answer": prediction["text"],
                "null_odds": prediction["null_odds"]}
    if isinstance(example, ChoiceExample):
        return {"id": example.guid, "choice": prediction,
                "ending": example.endings[prediction]}
    if isinstance(example, TextExample):
        out = {"id": example.guid, "text": example.text_a}
        if example.text_b is not None:
            out["pair"] = example.text_b
        key = "score" if isinstance(prediction, float) else "label"
        return {**out, key: prediction}
    return {"id": example.guid, "words": list(example.words), "tags": prediction}


def example_id(example: Any) -> str:
    return example.qid if isinstance(example, SquadExample) else example.guid
