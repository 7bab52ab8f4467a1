"""One corpus prepared on several machines: `prepare_part` (part I of N) and `merge_parts`.

`bertkit prepare` numbers the corpus's chunks in reading order and processes chunk i as a pure
function of (i, its documents, the seed); the shards are the chunks' instances in chunk order,
cut every `shard_size`. Part I of N reads the whole corpus (reading and chunking are cheap),
but processes only the chunks with i mod N == I (sentence splitting, tokenization and masking,
the expensive part), and writes each chunk's instances as one piece, `chunk-<i>/`, with the
shard layout. `merge_parts` feeds the pieces of all parts, in chunk order, through the same
shard writer as `bertkit prepare`: the merged folder holds exactly the shards one run of the same
inputs and seed writes, byte for byte. A killed part resumes at its first missing piece.

The launcher is the engine: a Slurm job array, torchrun, or a shell loop over hosts each run one
part (`--part I/N` or `--part auto`); the parts meet on a shared file system or are copied
together before `bertkit merge-shards`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bertkit.data import shards as shard_io
from bertkit.data.chunks import ChunkStats, chunk_documents
from bertkit.data.corpus import CorpusStats, read_corpus
from bertkit.data.masking import VocabInfo
from bertkit.data.meta import (
    PREPARATION_FIELDS,
    PartMeta,
    ShardMeta,
    piece_name,
    read_part_meta,
    write_meta,
)
from bertkit.data.prepare import (
    PrepareConfig,
    ShardWriter,
    complete,
    output_folder,
    preparation,
    run_chunks,
)
from bertkit.data.shards import ARRAY_NAMES, PackedInstances
from bertkit.errors import BertkitError
from bertkit.io import progress_bar

logger = logging.getLogger(__name__)

def parse_part(text: str, environ: Mapping[str, str]) -> tuple[int, int]:
    """(I, N) from "I/N", or from the launcher's environment for "auto": a Slurm job array
    (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT), else torchrun's
    RANK of WORLD_SIZE."""
    if text == "auto":
        if "SLURM_ARRAY_TASK_ID" in environ and "SLURM_ARRAY_TASK_COUNT" in environ:
            first = int(environ.get("SLURM_ARRAY_TASK_MIN", "0"))
            index = int(environ["SLURM_ARRAY_TASK_ID"]) - first
            count = int(environ["SLURM_ARRAY_TASK_COUNT"])
        elif "RANK" in environ and "WORLD_SIZE" in environ:
            index, count = int(environ["RANK"]), int(environ["WORLD_SIZE"])
        else:
            raise BertkitError("--part auto: no SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT or "
                               "RANK/WORLD_SIZE in the environment; give --part I/N")
    else:
        index_text, _, count_text = text.partition("/")
        if not (index_text.isdigit() and count_text.isdigit()):
            raise BertkitError(f"--part {text!r}: expected I/N (e.g. 0/4) or auto")
        index, count = int(index_text), int(count_text)
    if count < 1 or not 0 <= index < count:
        raise BertkitError(f"--part: part {index} of {count} does not exist (0 <= I < N)")
    return index, count


def prepare_part(paths: Sequence[str | os.PathLike], tokenizer, part_dir: str | os.PathLike,
                 config: PrepareConfig, *, part: int, parts: int, workers: int = 1,
                 resume: bool = False, overwrite: bool = False,
                 progress: bool = True) -> PartMeta:
    """Prepare part `part` of `parts` of the corpus into `part_dir` (see the module docstring);
    returns the part's meta.json content."""
    out = Path(part_dir)
    if not 0 <= part < parts:
        raise BertkitError(f"part {part} of {parts} does not exist")
    fresh = PartMeta.fresh(preparation(paths, tokenizer, config), part=part, parts=parts)
    with output_folder(out, fresh, resume, overwrite) as meta:
        return _prepare_part(paths, tokenizer, out, config, meta, workers, progress)


def _prepare_part(paths: Sequence[str | os.PathLike], tokenizer, out: Path, config: PrepareConfig,
                  meta: PartMeta, workers: int, progress: bool) -> PartMeta:
    part, parts = meta.part, meta.parts
    if meta.complete:
        logger.info("%s: part %d/%d already complete", out, part, parts)
        return meta
    done = set(meta.chunks)
    corpus_stats = CorpusStats()
    numbered = enumerate(chunk_documents(read_corpus(list(paths), config.format, corpus_stats,
                                                     config.fields),
                                         config.chunk_chars))
    total = [0]

    def mine():
        for index, docs in numbered:
            total[0] = index + 1
            if index % parts == part and index not in done:
                yield index, docs

    vocab = VocabInfo.from_tokenizer(tokenizer, mask_unk=config.chunk.mask_unk)
    with progress_bar(unit=" docs", disable=not progress, mininterval=1.0,
                      desc=f"prepare part {part}/{parts}") as bar:
        for index, packed, stats in run_chunks(mine(), tokenizer, vocab, config.chunk, workers):
            shard_io.write_shard(out / piece_name(index), packed)
            meta = dataclasses.replace(meta, chunks={**meta.chunks,
                                                     index: dataclasses.asdict(stats)})
            write_meta(out, meta)  # after the piece: a piece not in meta.json is redone
            bar.update(stats.documents)
    meta = dataclasses.replace(meta, complete=True, num_chunks=total[0],
                               corpus=dataclasses.asdict(corpus_stats))
    write_meta(out, meta)
    logger.info("%s: part %d/%d complete: %d of %d chunks", out, part, parts,
                len(meta.chunks), total[0])
    return meta


def _read_piece(directory: Path) -> PackedInstances:
    try:
        return PackedInstances(*(np.load(directory / f"{name}.npy", allow_pickle=False)
                                 for name in ARRAY_NAMES))
    except (OSError, ValueError) as err:
        raise BertkitError(f"{directory}: unreadable piece ({err}); re-run its part with "
                           "--resume after deleting it") from err


def check_parts(part_dirs: Sequence[str | os.PathLike]) -> list[tuple[Path, PartMeta]]:
    """The parts' folders and metas, ordered by part, checked to be one complete set of one
    preparation."""
    parts = []
    for d in part_dirs:
        meta = read_part_meta(d)
        if not meta.complete:
            raise BertkitError(f"{d}: part {meta.part}/{meta.parts} did not finish; run it "
                               "again with --resume")
        parts.append((Path(d), meta))
    parts.sort(key=lambda p: p[1].part)
    first_dir, first = parts[0]
    for folder, meta in parts[1:]:
        for key in PREPARATION_FIELDS:
            if getattr(meta, key) != getattr(first, key):
                raise BertkitError(f"{folder}: prepared with other {key} than {first_dir}; "
                                   "the parts are not of one preparation")
    count = first.parts
    found = [meta.part for _, meta in parts]
    if found != list(range(count)) or any(meta.parts != count for _, meta in parts):
        missing = sorted(set(range(count)) - set(found))
        raise BertkitError(f"expected parts 0..{count - 1} once each, got {found}"
                           + (f" (missing {missing})" if missing else ""))
    if len({meta.num_chunks for _, meta in parts}) != 1:
        raise BertkitError("the parts saw different numbers of chunks: were they given the same "
                           "input files in the same order?")
    return parts


def merge_parts(part_dirs: Sequence[str | os.PathLike], output_dir: str | os.PathLike,
                overwrite: bool = False, progress: bool = True) -> ShardMeta:
    """Join the parts into one prepared folder: the shards and meta.json one `bertkit prepare`
    of the same inputs and seed writes. Returns the merged meta.json content."""
    out = Path(output_dir)
    if any(out.resolve() == Path(d).resolve() for d in part_dirs):
        raise BertkitError(f"{out}: is one of the parts; merge into a new folder")
    parts = check_parts(part_dirs)
    with output_folder(out, ShardMeta.fresh(parts[0][1].preparation()), resume=False,
                       overwrite=overwrite) as meta:
        return _merge(parts, out, meta, progress)


def _merge(parts: list[tuple[Path, PartMeta]], out: Path, meta: ShardMeta,
           progress: bool) -> ShardMeta:
    first = parts[0][1]
    writer = ShardWriter(out, meta, int(first.params["shard_size"]))
    t0 = time.perf_counter()
    for index in progress_bar(range(first.num_chunks), desc="merge", unit=" chunks",
                              disable=not progress):
        folder, part = parts[index % first.parts]
        stats = part.chunks.get(index)
        if stats is None:
            raise BertkitError(f"{folder}: chunk {index} is missing from a complete part")
        writer.add(index, _read_piece(folder / piece_name(index)), ChunkStats(**stats), 0)
    writer.finish()
    meta = writer.meta()
    if not meta.shards:
        raise BertkitError("the parts hold no instances: the corpus is empty or too small")
    return complete(out, meta, CorpusStats(**first.corpus), writer.running,
                    time.perf_counter() - t0)
