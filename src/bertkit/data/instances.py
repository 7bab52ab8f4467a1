"""Pre-training instances from tokenized documents, after Google's `create_instances_from_document`.

A document is a list of sentences, each an int32 array of WordPiece ids (no special tokens).
Every random choice takes the injected `numpy.random.Generator`, so a chunk's instances are a pure
function of (documents, config, seed).

Objectives:
- ``mlm+nsp`` (the paper): ``[CLS] A [SEP] B [SEP]`` with segment ids ``0 … 0 1 … 1``; B is A's
  true continuation (label 0, IsNext) or, half of the time, a span of a different document
  (label 1, NotNext).
- ``sop`` (ALBERT's sentence-order prediction): B always follows A; half of the pairs are swapped
  (label 1).
- ``mlm`` (the paper's "No NSP" ablation): ``[CLS] S [SEP]``, contiguous whole sentences of one
  document filling the length, one segment, label -1.

Deviations from Google's script (each keeps the stated proportions exact; see docs/reports/benchmarks.md):
the short target length is drawn per instance, not once per document (with a few long documents
such as books, per-document draws would make the 10% a coin toss per book); a chunk of a single
sentence is split inside the sentence instead of always taking a random next (which pushes
Google's NotNext share above 50%); and a random next sentence always comes from another document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertkit.errors import BertkitError

# The instance formats shards are prepared for (`bertkit prepare --objective`). Not the training
# objectives (`training.pretrain.OBJECTIVES`, which adds "ltr" and says which shards each reads).
SHARD_OBJECTIVES = ("mlm+nsp", "mlm", "sop")
IS_NEXT, NOT_NEXT, NO_LABEL = 0, 1, -1

Sentence = np.ndarray  # (n,) int32 token ids
TokenDocument = Sequence[Sentence]


MAX_POSITIONS = 512  # BERT's learned position table (Devlin et al. 2019); every preset has it


@dataclass(frozen=True)
class InstanceConfig:
    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    objective: str = "mlm+nsp"

    def __post_init__(self) -> None:
        if self.objective not in SHARD_OBJECTIVES:
            raise BertkitError(f"unknown objective {self.objective!r}; expected one of "
                               f"{', '.join(SHARD_OBJECTIVES)}")
        if not 5 <= self.max_seq_length <= MAX_POSITIONS:
            raise BertkitError(f"max_seq_length must be between 5 and {MAX_POSITIONS} (BERT's "
                               f"position table), got {self.max_seq_length}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise BertkitError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")

    @property
    def needs_other_documents(self) -> bool:
        return self.objective == "mlm+nsp"


@dataclass(frozen=True, eq=False)
class Instance:
    input_ids: np.ndarray  # (L,) int32, [CLS] A [SEP] B [SEP] or [CLS] S [SEP]
    b_start: int  # index of B's first token; == L when there is no segment B
    label: int  # IS_NEXT / NOT_NEXT (sop: in order / swapped) / NO_LABEL
    short_target: bool  # drawn with the short_seq_prob branch


def _randint(rng: np.random.Generator, low: int, high: int) -> int:
    """Uniform integer in [low, high): `rng.integers` costs ~5 us a call, this ~0.3 us."""
    return low + int(rng.random() * (high - low))


def _join(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate sentences (a single one is returned as is: most A/B segments are one)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def choose_target_length(
    max_num_tokens: int, short_seq_prob: float, rng: np.random.Generator
) -> tuple[int, bool]:
    """Usually fill the sequence (padding is wasted compute anyway); with `short_seq_prob` pick a
    length in [2, max] so that pre-training also sees the short inputs of fine-tuning."""
    if rng.random() < short_seq_prob:
        return _randint(rng, 2, max_num_tokens + 1), True
    return max_num_tokens, False


def split_a_b(chunk: Sequence[Sentence], rng: np.random.Generator) -> tuple[list, list]:
    """Split a chunk at a random sentence boundary into A's and B's sentences.

    A single sentence is cut at a random token instead (B empty only for a one-token sentence)."""
    if len(chunk) >= 2:
        a_end = _randint(rng, 1, len(chunk))  # A gets 1 .. len-1 sentences
        return list(chunk[:a_end]), list(chunk[a_end:])
    only = chunk[0]
    if len(only) < 2:
        return [only], []
    cut = _randint(rng, 1, len(only))
    return [only[:cut]], [only[cut:]]


def sample_random_next(
    documents: Sequence[TokenDocument], doc_index: int, target_length: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """B for NotNext: consecutive sentences of a *different* random document, from a random
    sentence on, until `target_length` tokens (at least one sentence)."""
    if len(documents) < 2:
        raise BertkitError("random next sentences need at least two documents")
    other = _randint(rng, 0, len(documents) - 1)
    other += other >= doc_index  # uniform over the documents other than doc_index
    document = documents[other]
    start = _randint(rng, 0, len(document))
    end, total = start, 0
    while end < len(document) and (end == start or total < target_length):
        total += len(document[end])
        end += 1
    return _join(document[start:end])


def truncate_pair(
    a: np.ndarray, b: np.ndarray, max_num_tokens: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Google's `truncate_seq_pair`: drop one token at a time from the longer segment (B on
    ties), from its front or its back at random. The per-token coin flips are drawn at once as a
    binomial count of front removals, which has the same distribution."""
    la, lb = len(a), len(b)
    excess = la + lb - max_num_tokens
    if excess <= 0:
        return a, b
    # Longest first: cut the longer down to the shorter, then alternate starting with B.
    cut_a = min(excess, max(la - lb, 0))
    cut_b = min(excess - cut_a, max(lb - la, 0))
    rest = excess - cut_a - cut_b
    cut_a, cut_b = cut_a + rest // 2, cut_b + rest - rest // 2
    front_a = int(rng.binomial(cut_a, 0.5)) if cut_a else 0
    front_b = int(rng.binomial(cut_b, 0.5)) if cut_b else 0
    return a[front_a:len(a) - (cut_a - front_a)], b[front_b:len(b) - (cut_b - front_b)]


def assemble(
    a: np.ndarray, b: np.ndarray | None, label: int, short: bool, cls_id: int, sep_id: int
) -> Instance:
    """``[CLS] A [SEP] B [SEP]`` (segments 0 … 0 1 … 1), or ``[CLS] A [SEP]`` without B."""
    la, lb = len(a), 0 if b is None else len(b)
    ids = np.empty(la + 2 + (lb + 1 if b is not None else 0), dtype=np.int32)
    ids[0], ids[1:la + 1], ids[la + 1] = cls_id, a, sep_id
    if b is None:
        return Instance(ids, len(ids), label, short)
    ids[la + 2:-1], ids[-1] = b, sep_id
    return Instance(ids, la + 2, label, short)


def _make_pair(
    chunk: list[Sentence], documents: Sequence[TokenDocument], doc_index: int, target: int,
    objective: str, rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, int, int] | None:
    """(A, B, label, sentences to put back) for one chunk, or None when no pair is possible."""
    a_parts, b_parts = split_a_b(chunk, rng)
    a = _join(a_parts)
    if objective == "sop":
        if not b_parts:
            return None
        b = _join(b_parts)
        # ALBERT's negatives: the same two segments in swapped order.
        return (b, a, NOT_NEXT, 0) if rng.random() < 0.5 else (a, b, IS_NEXT, 0)
    if not b_parts or rng.random() < 0.5:
        b = sample_random_next(documents, doc_index, target - len(a), rng)
        # B's own sentences were not used: give them back to the next instance (Google).
        unused = len(b_parts) if len(chunk) >= 2 else 0
        return a, b, NOT_NEXT, unused
    return a, _join(b_parts), IS_NEXT, 0


def create_pair_instances(
    documents: Sequence[TokenDocument], doc_index: int, config: InstanceConfig,
    cls_id: int, sep_id: int, rng: np.random.Generator,
) -> list[Instance]:
    """NSP or SOP instances of one document: accumulate sentences up to the target length, split
    the chunk into A and B, choose B's label, truncate, assemble."""
    document = documents[doc_index]
    max_num_tokens = config.max_seq_length - 3  # [CLS], [SEP], [SEP]
    target, short = choose_target_length(max_num_tokens, config.short_seq_prob, rng)
    instances: list[Instance] = []
    chunk: list[Sentence] = []
    length, i = 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            pair = _make_pair(chunk, documents, doc_index, target, config.objective, rng)
            if pair is not None:
                a, b, label, unused = pair
                i -= unused
                a, b = truncate_pair(a, b, max_num_tokens, rng)
                instances.append(assemble(a, b, label, short, cls_id, sep_id))
            chunk, length = [], 0
            target, short = choose_target_length(max_num_tokens, config.short_seq_prob, rng)
        i += 1
    return instances


def create_single_instances(
    document: TokenDocument, config: InstanceConfig, cls_id: int, sep_id: int,
    rng: np.random.Generator,
) -> list[Instance]:
    """``mlm``: whole consecutive sentences up to the target length as one segment; a sentence
    longer than the sequence is cut at its end."""
    max_num_tokens = config.max_seq_length - 2  # [CLS], [SEP]
    target, short = choose_target_length(max_num_tokens, config.short_seq_prob, rng)
    instances: list[Instance] = []
    chunk: list[Sentence] = []
    length = 0
    for sentence in document:
        if chunk and length + len(sentence) > target:
            ids = np.concatenate(chunk)[:max_num_tokens]
            instances.append(assemble(ids, None, NO_LABEL, short, cls_id, sep_id))
            chunk, length = [], 0
            target, short = choose_target_length(max_num_tokens, config.short_seq_prob, rng)
        chunk.append(sentence)
        length += len(sentence)
    if chunk:
        ids = np.concatenate(chunk)[:max_num_tokens]
        instances.append(assemble(ids, None, NO_LABEL, short, cls_id, sep_id))
    return instances


def create_instances(
    documents: Sequence[TokenDocument], doc_index: int, config: InstanceConfig,
    cls_id: int, sep_id: int, rng: np.random.Generator,
) -> list[Instance]:
    """The instances of `documents[doc_index]` under `config.objective` (unmasked)."""
    if config.objective == "mlm":
        return create_single_instances(documents[doc_index], config, cls_id, sep_id, rng)
    return create_pair_instances(documents, doc_index, config, cls_id, sep_id, rng)
