"""`bertkit prepare`: corpus files -> masked pre-training instances in shards, streamed.

The main process reads documents and cuts them into chunks (`chunks.chunk_documents`); chunks are
processed in order by 1..N worker processes (sentence splitting and tokenization dominate) with
a bounded number in flight, so memory stays at a few chunks whatever the corpus size. The writer
takes instances in chunk order and cuts fixed-size shards, so the bytes on disk do not depend on
the number of workers. After each shard, `meta.json` records where the next shard starts
(chunk, offset): `--resume` skips the finished shards' chunks without processing them and
re-does the partial shard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data import shards as shard_io
from bertkit.data.chunks import ChunkConfig, ChunkStats, chunk_documents, process_chunk
from bertkit.data.corpus import DEFAULT_FIELDS, CorpusStats, Fields, read_corpus
from bertkit.data.masking import VocabInfo
from bertkit.data.meta import (
    META_NAME,
    AnyMeta,
    Preparation,
    ResumeCursor,
    ShardEntry,
    ShardMeta,
    TokenizerInfo,
    read_as,
    write_meta,
)
from bertkit.data.sentences import splitter_name
from bertkit.data.shards import PackedInstances
from bertkit.errors import BertkitError
from bertkit.io import LOCK_FILE, check_unlocked, held_output_dir, progress_bar

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrepareConfig:
    """Every parameter that shapes the output (all of them are recorded in meta.json)."""

    chunk: ChunkConfig
    format: str = "auto"
    shard_size: int = 100_000  # instances per shard
    chunk_chars: int = 1_000_000  # characters of raw text per chunk (>= 2 documents)
    fields: Fields = DEFAULT_FIELDS  # where a record's text is (JSONL, Parquet, Arrow)

    def __post_init__(self) -> None:
        if self.shard_size < 1 or self.chunk_chars < 1:
            raise BertkitError("shard_size and chunk_chars must be >= 1")
        c = self.chunk
        if c.dupe_factor < 1:
            raise BertkitError(f"dupe_factor must be >= 1, got {c.dupe_factor}")
        if not 0.0 < c.masked_lm_prob < 1.0 or c.max_predictions_per_seq < 1:
            raise BertkitError("masked_lm_prob must be in (0, 1) and max_predictions_per_seq >= 1")
        if c.seed < 0:
            raise BertkitError(f"seed must be >= 0, got {c.seed}")

    def params(self) -> dict[str, Any]:
        c = self.chunk
        return {
            **dataclasses.asdict(c.instance),
            **{k: v for k, v in dataclasses.asdict(c).items() if k != "instance"},
            "format": self.format, "shard_size": self.shard_size, "chunk_chars": self.chunk_chars,
            **({} if self.fields == DEFAULT_FIELDS else {"fields": dataclasses.asdict(self.fields)}),
        }


# Per-process worker state, set once by the pool initializer: shipping the tokenizer with every
# task would pickle the whole vocabulary per chunk.
_WORKER: dict[str, Any] = {}


def _init_worker(tokenizer, vocab: VocabInfo, config: ChunkConfig) -> None:
    _WORKER.update(tokenizer=tokenizer, vocab=vocab, config=config)


def _work(index: int, documents) -> tuple[int, PackedInstances, ChunkStats]:
    w = _WORKER
    return (index, *process_chunk(index, documents, w["tokenizer"], w["vocab"], w["config"]))


def run_chunks(
    chunks: Iterator[tuple[int, list]], tokenizer, vocab: VocabInfo, config: ChunkConfig,
    workers: int,
) -> Iterator[tuple[int, PackedInstances, ChunkStats]]:
    """Process chunks in order; with workers > 1 keep at most 2 * workers chunks in flight."""
    if workers <= 1:
        for index, docs in chunks:
            yield (index, *process_chunk(index, docs, tokenizer, vocab, config))
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ctx.Pool(workers, initializer=_init_worker, initargs=(tokenizer, vocab, config)) as pool:
        pending: deque = deque()
        for index, docs in chunks:
            pending.append(pool.apply_async(_work, (index, docs)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
        pool.close()
        pool.join()


class ShardWriter:
    """Cuts the ordered stream of chunk results into fixed-size shards and records, after each
    shard, the resume cursor: the (chunk, offset) of the first instance not yet written and the
    statistics of the chunks before that one. `meta()` is the folder's meta as written so far."""

    def __init__(self, out: Path, meta: ShardMeta, shard_size: int):
        self.out, self.shard_size = out, shard_size
        self.base = meta
        self.shards = list(meta.shards)
        self.chunk_starts = list(meta.chunk_starts)
        self.cursor = meta.resume
        cursor = meta.resume or ResumeCursor(next_chunk=0, next_offset=0, stats={})
        self.running = ChunkStats(**cursor.stats)
        self.last_chunk = cursor.next_chunk - 1
        self.buffer: deque[tuple[int, int, PackedInstances]] = deque()
        self.buffered = 0
        self.before: dict[int, ChunkStats] = {}

    def meta(self) -> ShardMeta:
        return dataclasses.replace(self.base, shards=tuple(self.shards),
                                   chunk_starts=tuple(self.chunk_starts), resume=self.cursor)

    def add(self, index: int, packed: PackedInstances, stats: ChunkStats, offset: int) -> None:
        # Where each chunk's instances start in the whole data set: a chunk holds every
        # duplicate of its documents, so a held-out split at a chunk start shares no document
        # with training (training.pretrain.split_eval).
        written = sum(s.instances for s in self.shards)
        del self.chunk_starts[index:]
        self.chunk_starts.append(written + self.buffered - offset)
        self.before[index] = dataclasses.replace(self.running)
        self.running.add(stats)
        self.last_chunk = index
        if offset:
            packed = packed.slice(offset, len(packed))
        if len(packed):
            self.buffer.append((index, offset, packed))
            self.buffered += len(packed)
        while self.buffered >= self.shard_size:
            self._flush(self.shard_size)

    def finish(self) -> None:
        if self.buffered:
            self._flush(self.buffered)

    def _take(self, n: int) -> PackedInstances:
        parts = []
        while n:
            index, offset, packed = self.buffer[0]
            take = min(n, len(packed))
            parts.append(packed.slice(0, take))
            if take == len(packed):
                self.buffer.popleft()
            else:
                self.buffer[0] = (index, offset + take, packed.slice(take, len(packed)))
            n -= take
        self.buffered -= sum(len(p) for p in parts)
        return PackedInstances.concat(parts)

    def _flush(self, n: int) -> None:
        shard = self._take(n)
        name = shard_io.shard_name(len(self.shards))
        shard_io.write_shard(self.out / name, shard)
        self.shards.append(ShardEntry(name=name, instances=len(shard), tokens=shard.num_tokens,
                                      predictions=int(shard.masked_lm_positions.shape[0])))
        if self.buffer:
            chunk, offset = self.buffer[0][0], self.buffer[0][1]
        else:
            chunk, offset = self.last_chunk + 1, 0
        stats = self.before.get(chunk, self.running)
        self.before = {k: v for k, v in self.before.items() if k >= chunk}
        self.cursor = ResumeCursor(next_chunk=chunk, next_offset=offset,
                                   stats=dataclasses.asdict(stats))
        write_meta(self.out, self.meta())


def preparation(paths: Sequence[str | os.PathLike], tokenizer,
                config: PrepareConfig) -> Preparation:
    """What `paths`, `tokenizer` and `config` make: recorded in the output's meta.json."""
    return Preparation(
        inputs=tuple(str(p) for p in paths),
        # the splitter shapes the instances: resuming or merging with another is refused
        params={**config.params(), "sentence_splitter": splitter_name()},
        tokenizer=TokenizerInfo.of(tokenizer),
        token_dtype=shard_io.token_dtype(tokenizer.vocab_size).name,
    )


@contextlib.contextmanager
def output_folder(out: Path, fresh: AnyMeta, resume: bool, overwrite: bool) -> Iterator[AnyMeta]:
    """Claim `out` for the block (`open_output` under the folder's lock, `io.lock_output_dir`):
    a second run into the same folder, with or without --overwrite, is refused in one line
    naming the process that writes it, instead of interleaving its shards with this run's.
    The lock is given up when the block ends; a folder this run made and left empty is removed."""
    made = not out.exists()
    open_output(out, fresh, resume, overwrite, look_only=True)  # refused before anything exists
    try:
        with held_output_dir(out):
            # again under the lock: another run may have written the folder since the first look
            yield open_output(out, fresh, resume, overwrite)
    finally:
        if made:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty


def open_output(out: Path, fresh: AnyMeta, resume: bool, overwrite: bool,
                look_only: bool = False) -> AnyMeta:
    """The meta to continue from: the existing one of `out` (--resume) or `fresh`; removes
    partial pieces (a temporary directory, or a piece renamed into place but not yet recorded),
    unless `look_only` (the checks alone). Called under the folder's lock (`output_folder`).

    One rule for a prepared folder (`fresh` a ShardMeta) and a part (a PartMeta): the output is
    a new or empty folder, or one this command wrote (its meta.json, which --resume continues
    when made from the same preparation, or --overwrite replaces). Only the files of our own
    naming are ever removed. The kind names its pieces (`PIECE_PREFIX`), what a resume must
    find unchanged (`RESUME_SAME`) and whether other files may sit beside its meta.json
    (`OTHER_FILES_BESIDE_META`)."""
    kind = type(fresh)
    if out.exists() and not out.is_dir():
        raise BertkitError(f"{out}: exists and is not a folder; choose a new --output folder")
    check_unlocked(out)
    entries = [e for e in out.iterdir() if e.name != LOCK_FILE] if out.is_dir() else []
    ours = [e for e in entries if e.name == META_NAME or e.name.startswith(
        (kind.PIECE_PREFIX, "." + kind.PIECE_PREFIX, f".{META_NAME}."))]
    has_meta = (out / META_NAME).exists()
    if len(ours) != len(entries) and not (has_meta and kind.OTHER_FILES_BESIDE_META):
        raise BertkitError(f"{out}: exists and holds other files; choose an empty --output")
    meta = _meta_to_continue(out, fresh, resume, overwrite) if has_meta else fresh
    if look_only:
        return meta
    keep = meta.piece_names() | {META_NAME} if meta is not fresh else set()
    for entry in ours:
        if entry.name not in keep:
            shard_io.remove_tree(entry) if entry.is_dir() else entry.unlink()
    return meta


def _meta_to_continue(out: Path, fresh: AnyMeta, resume: bool, overwrite: bool) -> AnyMeta:
    """The existing meta.json of `out` (with --resume, when it was made from the same
    preparation) or `fresh` (--overwrite); anything else is refused."""
    old = read_as(type(fresh), out)
    if resume and not all(getattr(old, k) == getattr(fresh, k) for k in fresh.RESUME_SAME):
        raise BertkitError(f"{out}: was prepared from other inputs, parameters or tokenizer; "
                           "use a new --output (or --overwrite)")
    if not resume and not overwrite:
        raise BertkitError(f"{out}: already holds {fresh.WHAT}; pass --resume to finish it or "
                           "--overwrite to replace it")
    return old if resume else fresh


def prepare(
    paths: Sequence[str | os.PathLike],
    tokenizer,
    output_dir: str | os.PathLike,
    config: PrepareConfig,
    *,
    workers: int = 1,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> ShardMeta:
    """Turn corpus files into shards under `output_dir`; returns the final meta.json content.

    The output is byte-identical for any `workers`; `resume` continues a killed run (finished
    shards are kept, their chunks skipped, the partial shard re-done)."""
    out = Path(output_dir)
    if workers < 1:
        raise BertkitError(f"--workers must be at least 1, got {workers}")
    fresh = ShardMeta.fresh(preparation(paths, tokenizer, config))
    with output_folder(out, fresh, resume, overwrite) as meta:
        return _prepare(paths, tokenizer, out, config, meta, workers, progress)


def _prepare(paths: Sequence[str | os.PathLike], tokenizer, out: Path, config: PrepareConfig,
             meta: ShardMeta, workers: int, progress: bool) -> ShardMeta:
    if meta.complete:
        logger.info("%s: already complete (%d instances)", out, meta.num_instances)
        return meta
    start = meta.resume.next_chunk if meta.resume else 0
    skip = meta.resume.next_offset if meta.resume else 0
    corpus_stats = CorpusStats()
    documents = read_corpus(list(paths), config.format, corpus_stats, config.fields)
    chunks = ((i, c) for i, c in enumerate(chunk_documents(documents, config.chunk_chars))
              if i >= start)
    writer = ShardWriter(out, meta, config.shard_size)
    vocab = VocabInfo.from_tokenizer(tokenizer, mask_unk=config.chunk.mask_unk)
    t0 = time.perf_counter()
    with progress_bar(unit=" docs", disable=not progress, mininterval=1.0, desc="prepare") as bar:
        for index, packed, stats in run_chunks(chunks, tokenizer, vocab, config.chunk, workers):
            writer.add(index, packed, stats, skip if index == start else 0)
            bar.update(stats.documents)
            rate = writer.running.corpus_tokens / max(time.perf_counter() - t0, 1e-9)
            bar.set_postfix(instances=writer.running.instances, tok_s=f"{rate:,.0f}")
    writer.finish()
    meta = writer.meta()
    if not meta.shards:
        raise BertkitError(
            f"no instances from {len(paths)} file(s): {corpus_stats.documents} document(s), "
            f"{writer.running.sentences} sentence(s); the corpus is empty or too small"
        )
    return complete(out, meta, corpus_stats, writer.running, time.perf_counter() - t0)


def complete(out: Path, meta: ShardMeta, corpus: CorpusStats, stats: ChunkStats,
             seconds: float) -> ShardMeta:
    meta = dataclasses.replace(
        meta, resume=None, complete=True, num_instances=sum(s.instances for s in meta.shards),
        stats={"corpus": dataclasses.asdict(corpus), "instances": dataclasses.asdict(stats)})
    write_meta(out, meta)
    logger.info("%s: %d instances in %d shard(s) from %d documents, %d tokens (%.1f s)", out,
                meta.num_instances, len(meta.shards), corpus.documents,
                stats.corpus_tokens, seconds)
    if corpus.empty_documents or corpus.invalid_utf8_bytes:
        logger.info("skipped %d empty document(s); replaced %d invalid UTF-8 byte(s)",
                    corpus.empty_documents, corpus.invalid_utf8_bytes)
    return meta
