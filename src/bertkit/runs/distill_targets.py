"""The transfer set and the teacher's outputs on it (`training.distill` runs them): texts only
the teacher labels, read; the teacher run once over the set, its logits cached in the output
folder with a fingerprint of its inputs and weights; each student feature paired with the
teacher's outputs for its own example, and batched beside them."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit.checkpoint import LEGACY_WEIGHTS_NAME, WEIGHTS_NAME
from bertkit.config import CONFIG_NAME
from bertkit.data.corpus import CorpusStats, read_corpus
from bertkit.data.sentences import split_sentences
from bertkit.errors import BertkitError
from bertkit.io import atomic_path
from bertkit.runs.distill_loss import IGNORE
from bertkit.tasks import Task
from bertkit.tasks.base import run_model
from bertkit.tasks.inputs import read_input

log = logging.getLogger(__name__)

CACHE_NAME = "teacher_outputs.safetensors"


def read_unlabelled(task: Task, path: str, fmt: str) -> list[Any]:
    """Examples without labels: the formats `predict` reads ("lines": JSONL records, the task's
    own files, else one text per line), or the sentences of a corpus `prepare` reads."""
    if fmt == "lines":
        examples = read_input(task, Path(path))
    elif getattr(task, "takes_pairs", False):
        raise BertkitError(f"{path}: the task takes sentence pairs and a corpus gives single "
                           "sentences; give JSONL records with \"text\" and \"pair\" "
                           "(--unlabelled-format lines)")
    else:
        examples = corpus_examples(task, path, fmt)
    if not examples:
        raise BertkitError(f"{path}: no texts in the --unlabelled file")
    return [dataclasses.replace(e, guid=f"unlabelled-{i}") for i, e in enumerate(examples)]


def corpus_examples(task: Task, path: str, fmt: str) -> list[Any]:
    """One example per sentence of the corpus's documents (Google's format is split already)."""
    records = []
    for doc in read_corpus([path], fmt, CorpusStats()):
        for paragraph in doc.paragraphs:
            for sentence in [paragraph] if doc.presplit else split_sentences(paragraph):
                if sentence.strip():
                    records.append((doc.source, {"text": sentence}))
    return [task.example_from_record(str(i), record, where)
            for i, (where, record) in enumerate(records)]


def check_pairs(train: list[Any], unlabelled: list[Any], path: str) -> None:
    """Unlabelled texts have the training examples' form: pairs for a sentence-pair task (JSONL
    "text" + "pair"), single texts otherwise."""
    pairs = getattr(train[0], "text_b", None) is not None
    if pairs and any(getattr(e, "text_b", None) is None for e in unlabelled):
        raise BertkitError(f"{path}: the task takes sentence pairs; give JSONL records with "
                           "\"text\" and \"pair\"")
    if not pairs and any(getattr(e, "text_b", None) is not None for e in unlabelled):
        raise BertkitError(f"{path}: the task takes single texts, but records have a \"pair\"")


def no_label(task: Task, feature: dict[str, Any]) -> dict[str, Any]:
    """A transfer feature only the teacher labels: the hard loss skips it (never span QA or
    multiple choice: `distill.check_task_options` refuses --unlabelled for them)."""
    if task.head == "BertForTokenClassification":
        return {**feature, "labels": [IGNORE] * len(feature["input_ids"])}
    return {**feature, "labels": float("nan") if task.regression else IGNORE}


def teacher_targets(task: Task, features: list[dict[str, Any]],
                    outputs: dict[str, list[torch.Tensor]]) -> list[torch.Tensor]:
    """One (n, L) tensor per feature: its logits (n = 1; L classes or choices), for tagging
    those of each word's first piece (n = words the teacher saw), for span QA the start and
    end logits of each of its positions (n = its tokens, L = 2; `run_model` pads them to the
    batch's length)."""
    if task.head == "BertForQuestionAnswering":
        return [torch.stack([start[:len(f["input_ids"])], end[:len(f["input_ids"])]], dim=-1)
                for f, start, end in zip(features, outputs["start_logits"],
                                         outputs["end_logits"])]
    if task.head == "BertForTokenClassification":
        return [row[f["word_starts"]] for f, row in zip(features, outputs["logits"])]
    return [row.reshape(1, -1) for row in outputs["logits"]]


def compute_teacher_outputs(task: Task, teacher: nn.Module, features: list[dict[str, Any]],
                            batch_size: int, precision: str, progress: bool) -> list[torch.Tensor]:
    """The teacher's targets for every transfer feature (bf16 autocast where the run's
    precision resolves to it); stored as fp32."""
    device = next(teacher.parameters()).device
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        outputs = run_model(teacher, features, task.collate, task.output_keys, batch_size,
                            progress)
    return teacher_targets(task, features, outputs)


def fingerprint(teacher_dir: str | Path, *data: list[Any]) -> str:
    """What the cached outputs and the run's records depend on: `data` (the inputs the teacher
    saw, and the student's training and dev features with their labels: a run resumed on a
    changed training or dev file would train or score on other data than it began with, and
    divide scores of two dev sets), the teacher's weights (the file `checkpoint.read_state_dict`
    reads: safetensors, else the legacy pickle) and its config.json (an activation or a norm
    epsilon changes the outputs with the weights unchanged). Examples count without the
    file:line they were read at (`where`): the same data read from another path is the same."""
    digest = hashlib.sha256()
    for part in data:
        for item in part:
            digest.update(json.dumps(item, sort_keys=True, default=_plain).encode())
    folder = Path(teacher_dir)
    weights = next((folder / n for n in (WEIGHTS_NAME, LEGACY_WEIGHTS_NAME)
                    if (folder / n).is_file()), None)
    for path in (weights, folder / CONFIG_NAME):
        if path is None or not path.is_file():
            continue
        digest.update(path.name.encode())
        with open(path, "rb") as fh:
            for block in iter(functools.partial(fh.read, 1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    """An example (a dataclass) as JSON for `fingerprint`, less where it was read."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: v for k, v in dataclasses.asdict(value).items() if k != "where"}
    raise TypeError(f"fingerprint: {type(value).__name__} is not data")


def read_cached_outputs(out: Path, key: str) -> list[torch.Tensor] | None:
    """The teacher's outputs cached in `out` for `key`; None when there is no cache. A cache
    computed for other inputs or another teacher is refused (before the run writes anything),
    so is one that cannot be read."""
    path = out / CACHE_NAME
    if not path.is_file():
        return None
    try:
        state = load_file(str(path))
        stored = bytes(state["fingerprint"].tolist()).decode()
        targets = list(state["logits"].split(state["counts"].tolist()))
    except Exception as err:  # SafetensorError, KeyError, a damaged file
        raise BertkitError(f"{path}: unreadable ({type(err).__name__}: {err}); delete it to "
                           "compute the teacher's outputs again") from None
    if stored != key:
        raise BertkitError(f"{path}: computed for other data or another teacher (the training "
                           "or dev data or the teacher changed since the run began); use a new "
                           "folder")
    return targets


def cached_teacher_outputs(out: Path, key: str, compute) -> list[torch.Tensor]:
    """The teacher's outputs from the run's cache, else `compute()`d once and saved (atomically:
    a kill never leaves a cache that looks whole)."""
    path = out / CACHE_NAME
    cached = read_cached_outputs(out, key)
    if cached is not None:
        log.info("teacher outputs: read from %s", path)
        return cached
    targets = compute()
    state = {"logits": torch.cat(targets).contiguous(),
             "counts": torch.tensor([len(t) for t in targets], dtype=torch.long),
             "fingerprint": torch.tensor(list(key.encode()), dtype=torch.uint8)}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp))
    log.info("teacher outputs: %d examples computed, saved to %s", len(targets), path)
    return targets


def align_teacher(student_ids: list[int], teacher: list[dict[str, Any]],
                  examples: list[Any]) -> list[dict[str, Any]]:
    """The teacher's feature of each student feature's example, in the student's order.

    `student_ids`: the transfer example (its position in `examples`) of each student feature;
    `teacher`: the teacher's features of `examples`, each naming its example by
    `example_index`. The two tokenizations are featurized apart (the student's labelled part
    with train=True), so position alone need not pair them; an example with other than one
    feature on either side would give some student a target computed for another text."""
    by_example: dict[int, list[dict[str, Any]]] = {}
    for feature in teacher:
        by_example.setdefault(feature["example_index"], []).append(feature)
    theirs = {i: len(found) for i, found in by_example.items()}
    ours: dict[int, int] = {}
    for i in student_ids:
        ours[i] = ours.get(i, 0) + 1
    for i, count in ours.items():
        if count != 1 or theirs.get(i, 0) != 1:
            where = getattr(examples[i], "where", "") or f"transfer example {i}"
            raise BertkitError(
                f"{where}: {count} student feature(s) but {theirs.get(i, 0)} teacher "
                f"feature(s) (the transfer set: {len(student_ids)} student, {len(teacher)} "
                "teacher features); distillation pairs one feature per example: use a student "
                "with the teacher's tokenizer (layers:I,J or a preset) or shorter inputs")
    return [by_example[i][0] for i in student_ids]


def with_targets(features: list[dict[str, Any]], targets: list[torch.Tensor]
                 ) -> list[dict[str, Any]]:
    """Each student feature with its teacher outputs; `read_transfer` put the teacher's
    features (and so its outputs) in the student's order, one per feature."""
    if len(features) != len(targets):
        raise BertkitError(f"{len(features)} student training features but {len(targets)} "
                           "teacher outputs: they must pair one to one; run again in a new "
                           "--output folder")
    return [{**f, "teacher": t} for f, t in zip(features, targets)]


def distill_collate(task: Task, features: list[dict[str, Any]]) -> dict[str, Any]:
    """The task's batch plus the teacher's logits: (B, L); for tagging (B, T, L) at each
    word's first piece, for span QA (B, T, 2) at each real position, with `teacher_mask`
    (B, T) marking them."""
    batch = task.collate(features)
    if task.head not in ("BertForTokenClassification", "BertForQuestionAnswering"):
        batch["teacher_logits"] = torch.cat([f["teacher"] for f in features])  # (B, L)
        return batch
    B, T = batch["input_ids"].shape
    L = features[0]["teacher"].shape[-1]
    logits = torch.zeros(B, T, L)  # (B, T, L)
    mask = torch.zeros(B, T, dtype=torch.bool)  # (B, T)
    for i, f in enumerate(features):
        if task.head == "BertForQuestionAnswering":
            starts = list(range(len(f["teacher"])))  # every position of the feature
        else:
            starts = f["word_starts"][:len(f["teacher"])]  # a student may keep fewer words
        logits[i, starts] = f["teacher"][:len(starts)]
        mask[i, starts] = True
    batch["teacher_logits"], batch["teacher_mask"] = logits, mask
    return batch
