"""The unit of parallel work in `bertkit prepare`: a chunk of consecutive documents.

A chunk holds documents until it reaches `chunk_chars` characters and at least two documents
(random next sentences are drawn inside the chunk, so memory is bounded by a chunk, not the
corpus). Chunk boundaries depend only on the corpus, and chunk k's random generator only on
(seed, k), so the output is identical for any number of workers.

`process_chunk` turns one chunk into packed, masked instances: split sentences, tokenize, build
instances `dupe_factor` times, shuffle them, mask them, pack them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import numpy as np

from bertkit.data.corpus import Document
from bertkit.data.instances import Instance, InstanceConfig, TokenDocument, create_instances
from bertkit.data.masking import VocabInfo, mask_batch
from bertkit.data.sentences import split_sentences
from bertkit.data.shards import PackedInstances, token_dtype
from bertkit.errors import BertkitError


def default_max_predictions(max_seq_length: int, masked_lm_prob: float) -> int:
    """Google's max_predictions_per_seq for a length: masked_lm_prob of it, rounded up (20 for
    128 x 0.15, 77 for 512 x 0.15), the one rule every caller uses."""
    return max(1, math.ceil(round(max_seq_length * masked_lm_prob, 6)))


@dataclass(frozen=True)
class ChunkConfig:
    """Everything a worker needs besides the tokenizer (picklable)."""

    instance: InstanceConfig
    dupe_factor: int = 5
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    whole_word_mask: bool = False
    dynamic_masking: bool = False
    seed: int = 12345
    mask_unk: bool = True  # [UNK] maskable like any token (Google's); False: treated as special


@dataclass
class ChunkStats:
    documents: int = 0  # documents with at least one token
    sentences: int = 0
    corpus_tokens: int = 0
    instances: int = 0
    instance_tokens: int = 0
    short_targets: int = 0
    masked_tokens: int = 0

    def add(self, other: ChunkStats) -> None:
        for key, value in asdict(other).items():
            setattr(self, key, getattr(self, key) + value)


def chunk_documents(documents: Iterable[Document], chunk_chars: int) -> Iterator[list[Document]]:
    """Group documents into chunks of >= chunk_chars characters and >= 2 documents; a trailing
    one-document chunk joins the previous chunk so that every chunk can pair across documents."""
    pending: list[Document] | None = None
    current: list[Document] = []
    size = 0
    for doc in documents:
        current.append(doc)
        size += sum(len(p) for p in doc.paragraphs)
        if size >= chunk_chars and len(current) >= 2:
            if pending is not None:
                yield pending
            pending, current, size = current, [], 0
    if len(current) == 1 and pending is not None:
        pending.extend(current)
    elif current:
        if pending is not None:
            yield pending
        pending = current
    if pending is not None:
        yield pending


def encode_sentences(tokenizer, sentences: list[str]) -> list[np.ndarray]:
    """WordPiece ids of each sentence (no special tokens), as int32 views of one flat array."""
    rows: list[list[int]] = []
    # Batches of 8192 sentences: only the ids of a whole chunk are kept at once.
    for i in range(0, len(sentences), 8192):
        rows.extend(tokenizer.ids_batch(sentences[i:i + 8192]))
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum()))
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [flat[bounds[i]:bounds[i + 1]] for i in range(len(rows))]


def tokenize_documents(documents: list[Document], tokenizer) -> list[list[np.ndarray]]:
    """Sentences -> int32 id arrays, all sentences of the chunk in one batch call; sentences with
    no tokens and documents with no sentences left are dropped."""
    sentences: list[str] = []
    counts: list[int] = []
    for doc in documents:
        before = len(sentences)
        for paragraph in doc.paragraphs:
            if doc.presplit:
                sentences.append(paragraph)
            else:
                sentences.extend(split_sentences(paragraph))
        counts.append(len(sentences) - before)
    ids = encode_sentences(tokenizer, sentences)
    token_docs, start = [], 0
    for n in counts:
        doc = [s for s in ids[start:start + n] if s.size]
        start += n
        if doc:
            token_docs.append(doc)
    return token_docs


def build_instances(
    token_docs: list[TokenDocument], config: ChunkConfig, cls_id: int, sep_id: int,
    rng: np.random.Generator,
) -> list[Instance]:
    """`dupe_factor` passes over the chunk's documents (each pass draws new pairs), shuffled."""
    if config.instance.needs_other_documents and len(token_docs) < 2:
        raise BertkitError(
            f"only {len(token_docs)} non-empty document(s) to draw from; next-sentence pairs need "
            "at least two documents (for a one-document corpus use --objective mlm or sop)"
        )
    instances: list[Instance] = []
    for _ in range(config.dupe_factor):
        for d in range(len(token_docs)):
            instances.extend(create_instances(token_docs, d, config.instance, cls_id, sep_id, rng))
    order = rng.permutation(len(instances))
    return [instances[i] for i in order]


def _mask_block(
    ids: np.ndarray, lengths: np.ndarray, vocab: VocabInfo, config: ChunkConfig,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mask a block of instances given flat; returns flat (ids, positions, labels) and counts."""
    T = int(lengths.max())
    valid = np.arange(T) < lengths[:, None]  # (n, T)
    padded = np.zeros(valid.shape, dtype=np.int32)
    padded[valid] = ids  # row-major fill puts instance b in the first lengths[b] columns of row b
    m = mask_batch(padded, lengths, vocab, rng, config.masked_lm_prob,
                   config.max_predictions_per_seq, config.whole_word_mask)
    chosen = np.arange(m.positions.shape[1]) < m.counts[:, None]  # (n, P)
    return m.input_ids[valid], m.positions[chosen], m.labels[chosen], m.counts


def pack_instances(
    instances: list[Instance], vocab: VocabInfo, config: ChunkConfig, rng: np.random.Generator,
    block: int = 4096,
) -> PackedInstances:
    """Mask the instances (unless masking is dynamic), `block` at a time with one vectorized
    call, and lay them out flat (see shards.py)."""
    dtype = token_dtype(vocab.vocab_size)
    if not instances:
        return PackedInstances.empty(dtype)
    i32 = np.int32
    lengths = np.array([len(inst.input_ids) for inst in instances], dtype=i32)
    ids = np.concatenate([inst.input_ids for inst in instances])
    if config.dynamic_masking:
        parts = [(ids, np.zeros(0, i32), np.zeros(0, i32), np.zeros(len(instances), i32))]
    else:
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        parts = [
            _mask_block(ids[offsets[s]:offsets[min(s + block, len(lengths))]],
                        lengths[s:s + block], vocab, config, rng)
            for s in range(0, len(lengths), block)
        ]
    return PackedInstances(
        input_ids=np.concatenate([p[0] for p in parts]).astype(dtype),
        lengths=lengths,
        b_starts=np.array([inst.b_start for inst in instances], dtype=i32),
        masked_lm_positions=np.concatenate([p[1] for p in parts]).astype(i32),
        masked_lm_ids=np.concatenate([p[2] for p in parts]).astype(dtype),
        masked_lm_counts=np.concatenate([p[3] for p in parts]).astype(i32),
        next_sentence_label=np.array([inst.label for inst in instances], dtype=np.int8),
    )


def process_chunk(
    index: int, documents: list[Document], tokenizer, vocab: VocabInfo, config: ChunkConfig
) -> tuple[PackedInstances, ChunkStats]:
    """One chunk from raw documents to packed instances; pure given (index, documents, config)."""
    rng = np.random.default_rng([config.seed, index])
    token_docs = tokenize_documents(documents, tokenizer)
    instances = build_instances(token_docs, config, tokenizer.cls_token_id,
                                tokenizer.sep_token_id, rng)
    packed = pack_instances(instances, vocab, config, rng)
    stats = ChunkStats(
        documents=len(token_docs),
        sentences=sum(len(d) for d in token_docs),
        corpus_tokens=sum(int(s.size) for d in token_docs for s in d),
        instances=len(packed),
        instance_tokens=packed.num_tokens,
        short_targets=sum(inst.short_target for inst in instances),
        masked_tokens=int(packed.masked_lm_counts.sum()),
    )
    return packed, stats
