"""`/predict`: a fine-tuned model's answers with their scores.

The task does the work it does for `bertkit predict` (records -> examples -> features -> forward
-> decode, `Task.output_record`); here each record also gets what a person wants to *see*: the
probability of every label, the entity spans with their character offsets, the answer's span in
the passage, the probability of every ending.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bertkit.metrics import entity_spans
from bertkit.serve.models import ServedModel
from bertkit.serve.safety import TooLarge
from bertkit.tasks import FeatureSettings
from bertkit.tasks.base import run_model


def settings_for(model: ServedModel) -> FeatureSettings:
    length = min(model.task.max_seq_length, model.config.max_position_embeddings)
    return FeatureSettings(max_seq_length=length, doc_stride=min(128, length // 2))


def check_record_sizes(records: Sequence[dict[str, Any]], max_chars: int) -> None:
    """Every text in the records (a string field, or a list of strings) within `max_chars`:
    the same cap as the other endpoints' texts, a 413 naming the input and field."""
    for i, record in enumerate(records):
        for field, value in record.items():
            values = value if isinstance(value, list) else [value]
            longest = max((len(v) for v in values if isinstance(v, str)), default=0)
            if longest > max_chars:
                raise TooLarge(f"input {i}: field {field!r} has {longest} characters; the limit "
                               f"is {max_chars}")


def _text(record: dict[str, Any], *names: str) -> str:
    value = next((record[n] for n in names if isinstance(record.get(n), str)), "")
    return value


def token_counts(model: ServedModel, records: Sequence[dict[str, Any]]) -> tuple[list[int], int]:
    """Tokens of each record as the task feeds them, before truncation, and the length they are
    cut to: the whole sequence for classification, tagging and multiple choice (its longest
    choice), the question for span QA (passages are read in windows, never cut). A malformed
    record counts 0 here; `predict` says what is wrong with it."""
    tok, settings = model.tokenizer, settings_for(model)
    head = type(model.head).__name__
    counts = []
    for record in records:
        if head == "BertForQuestionAnswering":
            counts.append(len(tok.encode(_text(record, "question"), truncation=False).input_ids) - 2)
        elif head == "BertForMultipleChoice":
            endings = record.get("endings") or [record.get(f"ending{k}") for k in range(4)]
            context = _text(record, "context", "sent1")
            start = _text(record, "start", "sent2")
            counts.append(max((len(tok.encode(context, f"{start} {e}".strip(),
                                              truncation=False).input_ids)
                               for e in endings if isinstance(e, str)), default=0))
        elif isinstance(record.get("words"), list):
            words = " ".join(w for w in record["words"] if isinstance(w, str))
            counts.append(len(tok.encode(words, truncation=False).input_ids))
        else:
            pair = record.get("pair") if isinstance(record.get("pair"), str) else None
            counts.append(len(tok.encode(_text(record, "text"), pair, truncation=False).input_ids))
    limit = (settings.max_query_length if head == "BertForQuestionAnswering"
             else settings.max_seq_length)
    return counts, limit


def predict(model: ServedModel, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One output per record (`{"text": ...}`, `{"words": [...]}`, `{"question", "context"}`,
    `{"context", "endings"}` as the task reads them)."""
    model.require("task", "predict")
    task, settings = model.task, settings_for(model)
    examples = [task.example_from_record(str(r.get("id", i)), r, f"input {i}")
                for i, r in enumerate(records)]
    features = task.featurize(examples, model.tokenizer, settings, model.config.label2id,
                              train=False)
    outputs = run_model(model.head, features, task.collate, task.output_keys, batch_size=32,
                        require_finite=True)
    predictions = task.decode(examples, features, outputs, model.config.id2label, settings)
    final = task.final_predictions(predictions, {})
    extra = task.prediction_scores(examples, features, outputs, model.config.id2label)
    results = [{**task.output_record(e, final[e.guid]), **extra.get(e.guid, {})} for e in examples]
    head = type(model.head).__name__
    if head == "BertForTokenClassification":
        for record, result in zip(records, results):
            result["entities"] = entities(result["words"], result["tags"], record.get("text"))
    elif head == "BertForQuestionAnswering":
        for e, result in zip(examples, results):
            add_answer_span(result, e.context, final[e.guid])
    return results


def entities(words: list[str], tags: list[str], text: str | None) -> list[dict[str, Any]]:
    """Entity chunks (conlleval's reading of the tags) with their words and, when the input was
    a text, character offsets into it."""
    starts, pos = [], 0
    for w in words:
        found = text.find(w, pos) if text is not None else -1
        starts.append(found)
        pos = found + len(w) if found >= 0 else pos
    out = []
    for type_, first, last in entity_spans(tags):
        span: dict[str, Any] = {"type": type_, "first_word": first, "last_word": last,
                                "text": " ".join(words[first:last + 1])}
        if starts[first] >= 0 and starts[last] >= 0:
            span["start"], span["end"] = starts[first], starts[last] + len(words[last])
        out.append(span)
    return out


def add_answer_span(result: dict[str, Any], context: str, prediction: dict[str, Any]) -> None:
    """The answer's character span in the passage (its first occurrence; null: no answer)."""
    text = prediction["text"]
    start = context.find(text) if text else -1
    result["span"] = {"start": start, "end": start + len(text)} if start >= 0 else None
