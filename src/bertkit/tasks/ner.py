"""CoNLL-2003 named-entity recognition (Tjong Kim Sang & De Meulder, 2003).

Files: one token per line, space-separated columns with the word first and the NER tag last
(`word POS chunk NER`), a blank line between sentences, `-DOCSTART-` blocks dropped. Tags in IOB1
or IOB2 (or IOBES): the model learns the tags as given and the conlleval-style scorer reads
either scheme. As in the paper (section 5.3), each word's label sits on its first WordPiece; the
other pieces get -100 and are ignored by the loss and by decoding. Words cut off by
`max_seq_length` are predicted "O" (and counted in the log).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit import metrics as M
from bertkit.errors import BertkitError
from bertkit.tasks.base import (
    Feature,
    FeatureSettings,
    Task,
    check_label,
    pad_collate,
    record_text,
    require_file,
)

logger = logging.getLogger(__name__)

_TAG = re.compile(r"^(O|[BIES]-\S+)$")
IGNORE = -100


@dataclass(frozen=True)
class TaggedSentence:
    guid: str
    words: tuple[str, ...]
    tags: tuple[str, ...] | None
    where: str = ""


# The entity types a data set defines: a tag of another type is a typo in the file, and learning
# it as one more class would be silently wrong (CoNLL-2003: Tjong Kim Sang & De Meulder, 2003).
ENTITY_TYPES = {"conll2003": ("PER", "LOC", "ORG", "MISC")}


def read_conll(path: Path, types: Sequence[str] | None = None) -> list[TaggedSentence]:
    """Sentences of a CoNLL file; `-DOCSTART-` lines and their blank lines are skipped. With
    `types`, a tag of any other entity type is an error naming its line."""
    require_file(path, "a CoNLL-format file")
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    first = 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            cols = line.split()
            if not cols or cols[0] == "-DOCSTART-":
                if words:
                    sentences.append(_sentence(path, first, words, tags))
                words, tags = [], []
                continue
            if len(cols) < 2:
                raise BertkitError(f"{path}:{number}: expected 'word ... tag' columns separated "
                                   f"by spaces, got {line.strip()!r}")
            if not _TAG.match(cols[-1]):
                raise BertkitError(f"{path}:{number}: {cols[-1]!r} is not an IOB tag "
                                   f"(expected O, B-TYPE or I-TYPE)")
            if types is not None and cols[-1] != "O" and cols[-1][2:] not in types:
                raise BertkitError(f"{path}:{number}: unknown entity type in tag {cols[-1]!r}; "
                                   f"expected one of {', '.join(types)}")
            first = first if words else number
            words.append(cols[0])
            tags.append(cols[-1])
    if words:
        sentences.append(_sentence(path, first, words, tags))
    return sentences


def _sentence(path: Path, line: int, words: list[str], tags: list[str]) -> TaggedSentence:
    return TaggedSentence(f"{path.stem}-{line}", tuple(words), tuple(tags), f"{path}:{line}")


class NerTask(Task):
    head = "BertForTokenClassification"
    native_suffixes = (".conll",)
    main_metric = "f1"

    def __init__(self, name: str = "conll2003"):
        self.name = name
        self.labels = None

    def find_file(self, data_dir: Path, split: str) -> Path:
        name = {"dev": "valid"}.get(split, split)
        for candidate in (f"{name}.txt", f"{split}.txt", f"eng.{split}"):
            if (data_dir / candidate).is_file():
                return data_dir / candidate
        return data_dir / f"{name}.txt"

    def read(self, path: Path) -> list[TaggedSentence]:
        return read_conll(path, ENTITY_TYPES.get(self.name))

    def discover_labels(self, examples: Sequence[TaggedSentence]) -> list[str]:
        found = {t for e in examples for t in (e.tags or ())} - {"O"}
        # Every type seen gets both B- and I- (an IOB1 training file may lack B-LOC, and a small
        # one I-LOC); "O" first, then by type and prefix, so the order is stable across files.
        found |= {f"{p}-{t[2:]}" for t in found if t[0] in "BI" for p in "BI"}
        return ["O"] + sorted(found, key=lambda t: (t[2:], t[0]))

    def featurize(self, examples: Sequence[TaggedSentence], tokenizer: Any,
                  settings: FeatureSettings, label2id, train: bool) -> list[Feature]:
        vocab = sorted({w for e in examples for w in e.words})
        encoded = tokenizer.encode_batch(vocab, add_special_tokens=False, truncation=False)
        pieces = {w: (enc.input_ids or [tokenizer.unk_token_id]) for w, enc in zip(vocab, encoded)}
        budget = settings.max_seq_length - 2
        features, cut = [], 0
        for i, example in enumerate(examples):
            ids, labels, starts = [tokenizer.cls_token_id], [IGNORE], []
            for w, word in enumerate(example.words):
                if len(ids) - 1 + len(pieces[word]) > budget:
                    cut += 1
                    break
                starts.append(len(ids))
                tag = example.tags[w] if example.tags is not None else None
                labels += [IGNORE if tag is None else check_label(tag, label2id, example.where)]
                labels += [IGNORE] * (len(pieces[word]) - 1)
                ids += pieces[word]
            ids.append(tokenizer.sep_token_id)
            labels.append(IGNORE)
            feature: Feature = {"input_ids": ids, "token_type_ids": [0] * len(ids),
                                "attention_mask": [1] * len(ids), "word_starts": starts,
                                "example_index": i}
            if example.tags is not None:
                feature["labels"] = labels
            features.append(feature)
        if cut:
            logger.info("%d sentences longer than %d tokens: their last words are tagged O",
                        cut, settings.max_seq_length)
        return features

    def collate(self, features: Sequence[Feature]) -> dict[str, torch.Tensor]:
        pads = {"input_ids": 0, "token_type_ids": 0, "attention_mask": 0, "labels": IGNORE}
        return pad_collate(features, pads)

    def decode(self, examples, features, outputs, id2label, settings) -> dict[str, Any]:
        predictions = {}
        for feature, logits in zip(features, outputs["logits"]):
            example = examples[feature["example_index"]]
            best = logits.argmax(-1)  # (T,)
            tags = [id2label[int(best[p])] for p in feature["word_starts"]]
            predictions[example.guid] = tags + ["O"] * (len(example.words) - len(tags))
        return predictions

    def example_from_record(self, guid: str, record: dict[str, Any], where: str
                            ) -> TaggedSentence:
        words = record.get("words")
        if words is None:
            words = record_text(record, ["text"], where).split()
        if not isinstance(words, list) or not words or not all(
                isinstance(w, str) and w for w in words):
            raise BertkitError(f"{where}: 'words' must be a non-empty list of strings")
        return TaggedSentence(guid, tuple(words), None, where)

    def output_record(self, example: TaggedSentence, prediction: list[str]) -> dict[str, Any]:
        return {"id": example.guid, "words": list(example.words), "tags": prediction}

    def collapse_reason(self, examples, predictions) -> str | None:
        tags = {t for p in predictions.values() for t in p}
        if len(predictions) > 1 and tags <= {"O"}:
            return "every word is tagged O"
        return None

    def score(self, examples, predictions) -> dict[str, float]:
        labeled = [e for e in examples if e.tags is not None]
        if not labeled:
            return {}
        return M.entity_scores([list(e.tags) for e in labeled],
                               [predictions[e.guid] for e in labeled])
