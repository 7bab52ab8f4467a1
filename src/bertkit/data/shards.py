"""Pre-training instances on disk: fixed-size shards of flat numpy arrays plus `meta.json`
(its typed form, reading and writing in `bertkit.data.meta`).

Layout of an output directory::

    meta.json                 tokenizer fingerprint, every parameter, counts, finished shards
    shard-00000/              one directory per shard, renamed into place when whole
        input_ids.npy         (sum of lengths,) uint16 when the vocabulary fits, else int32
        lengths.npy           (n,) int32 tokens per instance, [CLS] and [SEP]s included
        b_starts.npy          (n,) int32 index of segment B's first token (= length: no B)
        masked_lm_positions.npy  (sum of counts,) int32
        masked_lm_ids.npy     (sum of counts,) the original ids at those positions
        masked_lm_counts.npy  (n,) int32 predictions per instance (0 under dynamic masking)
        next_sentence_label.npy  (n,) int8: 0 = IsNext, 1 = NotNext, -1 = no sentence task

Variable-length instances are stored back to back (no padding on disk); `ShardDataset` maps the
files into memory and slices one instance out in O(1) from prefix sums of the lengths.

A memory map holds a file descriptor for as long as it lives, 7 per shard, and a BERT-scale
dataset has thousands of shards: `ShardDataset` keeps the most recently used shards open in a
cache sized from the process's descriptor limit (`open_shard_budget`) and closes the others.
Checking a dataset (`ShardDataset.verify`) reads sizes from the file system against the counts
in `meta.json`, without opening a shard.
"""

from __future__ import annotations

import errno
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch.utils.data

from bertkit.data.meta import ShardEntry, ShardMeta, check_vocabulary, join_metas, read_meta
from bertkit.errors import BertkitError
from bertkit.io import writing

ARRAY_NAMES = (
    "input_ids",
    "lengths",
    "b_starts",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_counts",
    "next_sentence_label",
)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 halves the disk and page-cache footprint whenever the ids fit (BERT's 30,522 do)."""
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def shard_name(index: int) -> str:
    return f"shard-{index:05d}"


@dataclass(eq=False)
class PackedInstances:
    """Many instances as flat arrays (the on-disk layout of one shard, or a part of one)."""

    input_ids: np.ndarray
    lengths: np.ndarray
    b_starts: np.ndarray
    masked_lm_positions: np.ndarray
    masked_lm_ids: np.ndarray
    masked_lm_counts: np.ndarray
    next_sentence_label: np.ndarray

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @classmethod
    def empty(cls, dtype: np.dtype) -> PackedInstances:
        i32 = np.zeros(0, dtype=np.int32)
        return cls(np.zeros(0, dtype), i32, i32, i32, np.zeros(0, dtype), i32,
                   np.zeros(0, dtype=np.int8))

    @classmethod
    def concat(cls, parts: Sequence[PackedInstances]) -> PackedInstances:
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in ARRAY_NAMES))

    def slice(self, start: int, stop: int) -> PackedInstances:
        """Instances [start, stop) as a new PackedInstances (views where possible)."""
        tok = np.concatenate([[0], np.cumsum(self.lengths, dtype=np.int64)])
        msk = np.concatenate([[0], np.cumsum(self.masked_lm_counts, dtype=np.int64)])
        return PackedInstances(
            self.input_ids[tok[start]:tok[stop]],
            self.lengths[start:stop],
            self.b_starts[start:stop],
            self.masked_lm_positions[msk[start]:msk[stop]],
            self.masked_lm_ids[msk[start]:msk[stop]],
            self.masked_lm_counts[start:stop],
            self.next_sentence_label[start:stop],
        )


def write_shard(directory: Path, packed: PackedInstances) -> None:
    """Write one shard directory atomically: fill a temporary sibling, then rename it into place
    (a full disk is one error naming the shard, `io.writing`, and leaves no temporary)."""
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp")
    needed = sum(getattr(packed, name).nbytes for name in ARRAY_NAMES)
    with writing(directory, needed):
        remove_tree(tmp)
        tmp.mkdir(parents=True)
        try:
            for name in ARRAY_NAMES:
                with open(tmp / f"{name}.npy", "wb") as f:
                    np.save(f, getattr(packed, name), allow_pickle=False)
                    f.flush()
                    os.fsync(f.fileno())
            remove_tree(directory)
            os.replace(tmp, directory)
        except BaseException:
            remove_tree(tmp)
            raise


def remove_tree(path: Path) -> None:
    """Remove a shard directory (flat: files only) if it exists."""
    path = Path(path)
    if not path.exists():
        return
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def open_shard_budget(limit: int | None = None) -> int:
    """How many shards to keep open at once: a quarter of the descriptor limit (the soft
    RLIMIT_NOFILE, or `limit`) for their 7 memory maps each, leaving the rest to torch,
    DataLoader workers' pipes and the user's files; between 1 and 128."""
    if limit is None:
        limit = descriptor_limit() or 1024
        if limit < 0:  # RLIM_INFINITY
            limit = 1 << 20
    return max(1, min(128, limit // 4 // len(ARRAY_NAMES)))


def descriptor_limit() -> int | None:
    """The process's soft limit on open files (RLIMIT_NOFILE), None where it cannot be read."""
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return None


def _expected_sizes(entry: ShardEntry, dtype: np.dtype) -> dict[str, int]:
    """Data bytes of each array of a shard, from its `meta.json` entry (the arrays whose
    length the entry does not give are left out)."""
    n = entry.instances
    sizes = {"input_ids": entry.tokens * dtype.itemsize, "lengths": n * 4, "b_starts": n * 4,
             "masked_lm_counts": n * 4, "next_sentence_label": n}
    if entry.predictions is not None:
        sizes["masked_lm_positions"] = entry.predictions * 4
        sizes["masked_lm_ids"] = entry.predictions * dtype.itemsize
    return sizes


def too_many_open_files(err: OSError, where: Path) -> BertkitError:
    """EMFILE as what it is: the process's descriptor limit, not damage."""
    limit = descriptor_limit()
    return BertkitError(f"{where}: too many open files (this process may open "
                        f"{'unknown' if limit is None else limit}); raise "
                        "the limit (`ulimit -n 4096`) or use fewer DataLoader workers")


def _npy_header_size(file: Path) -> int | None:
    """Bytes before the data of a .npy file (magic, version, header length, header), or None
    when it does not start like one. Format versions 1 (2-byte length) and 2/3 (4-byte)."""
    with open(file, "rb") as f:
        start = f.read(12)
    if len(start) < 10 or not start.startswith(b"\x93NUMPY"):
        return None
    if start[6] == 1:
        return 10 + int.from_bytes(start[8:10], "little")
    if len(start) < 12:
        return None
    return 12 + int.from_bytes(start[8:12], "little")


class _Shard:
    """One shard's arrays, memory-mapped, with prefix sums for O(1) slicing."""

    def __init__(self, directory: Path):
        try:
            arrays = {n: np.load(directory / f"{n}.npy", mmap_mode="r") for n in ARRAY_NAMES}
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                raise too_many_open_files(err, directory) from err
            raise
        self.arrays = arrays
        self.tok_offsets = np.concatenate([[0], np.cumsum(arrays["lengths"], dtype=np.int64)])
        self.msk_offsets = np.concatenate(
            [[0], np.cumsum(arrays["masked_lm_counts"], dtype=np.int64)]
        )

    def item(self, i: int) -> dict[str, np.ndarray]:
        a = self.arrays
        input_ids = np.asarray(a["input_ids"][self.tok_offsets[i]:self.tok_offsets[i + 1]],
                               dtype=np.int64)
        m0, m1 = self.msk_offsets[i], self.msk_offsets[i + 1]
        # Segment ids from B's start: [CLS] A [SEP] -> 0, B [SEP] -> 1 (the paper's figure 2).
        token_type_ids = (np.arange(input_ids.shape[0]) >= a["b_starts"][i]).astype(np.int64)
        return {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "masked_lm_positions": np.asarray(a["masked_lm_positions"][m0:m1], dtype=np.int64),
            "masked_lm_ids": np.asarray(a["masked_lm_ids"][m0:m1], dtype=np.int64),
            "masked_lm_weights": np.ones(m1 - m0, dtype=np.float32),
            "next_sentence_label": np.asarray(a["next_sentence_label"][i], dtype=np.int64),
        }


class ShardDataset(torch.utils.data.Dataset):
    """Memory-mapped pre-training instances with O(1) random access.

    Items are dicts of numpy arrays under Google's feature names: `input_ids` (L,),
    `token_type_ids` (L,), `masked_lm_positions` (P,), `masked_lm_ids` (P,),
    `masked_lm_weights` (P,) float32 ones, `next_sentence_label` () (0 IsNext, 1 NotNext,
    -1 when the objective has no sentence task). Under dynamic masking P = 0 and `input_ids` is
    unmasked: batch with `bertkit.data.collate.DynamicMaskingCollate`.

    Several prepared folders (e.g. Wikipedia and books) are one dataset, their instances one
    after the other, when they were prepared with one tokenizer for one objective and masking.

    Pass the model's `tokenizer_fingerprint` and/or `vocab_size` to refuse shards made with another
    vocabulary. Files are opened lazily, so the dataset pickles cheaply into DataLoader workers.
    """

    def __init__(
        self,
        path: str | os.PathLike | Sequence[str | os.PathLike],
        tokenizer_fingerprint: str | None = None,
        vocab_size: int | None = None,
    ):
        paths = [Path(path)] if isinstance(path, (str, os.PathLike)) else [Path(p) for p in path]
        if not paths:
            raise BertkitError("no prepared folder given")
        self.paths = paths
        self.path = paths[0] if len(paths) == 1 else Path(" + ".join(map(str, paths)))
        metas: list[ShardMeta] = []
        for folder in paths:
            meta = read_meta(folder)
            if not meta.complete:
                raise BertkitError(
                    f"{folder}: `bertkit prepare` did not finish; run it again with --resume"
                )
            check_vocabulary(meta, str(folder), tokenizer_fingerprint, vocab_size)
            metas.append(meta)
        self.meta: ShardMeta = metas[0] if len(metas) == 1 else join_metas(paths, metas)
        # (folder, shard name) of each shard, in order
        self.shard_dirs = [folder / s.name for folder, meta in zip(paths, metas)
                           for s in meta.shards]
        self.shard_names = [d.name for d in self.shard_dirs]
        counts = [s.instances for s in self.meta.shards]
        self.cumulative = np.cumsum([0, *counts], dtype=np.int64)
        self.max_open = open_shard_budget()
        self._shards: OrderedDict[int, _Shard] = OrderedDict()  # most recently used last

    @property
    def dynamic_masking(self) -> bool:
        return bool(self.meta.params["dynamic_masking"])

    @property
    def max_seq_length(self) -> int:
        return int(self.meta.params["max_seq_length"])

    def __len__(self) -> int:
        return int(self.cumulative[-1])

    def _shard(self, index: int) -> _Shard:
        shard = self._shards.get(index)
        if shard is None:
            while len(self._shards) >= self.max_open:
                self._shards.popitem(last=False)  # its memory maps close with it
            shard = self._shards[index] = _Shard(self.shard_dirs[index])
        else:
            self._shards.move_to_end(index)
        return shard

    def verify(self) -> None:
        """Every shard's files exist and have the sizes `meta.json` implies (the .npy header's
        own length plus the data), each file opened for its first bytes and closed at once
        (thousands of shards, no descriptor held); a missing or truncated file is a
        BertkitError that names it."""
        dtype = np.dtype(self.meta.token_dtype or token_dtype(self.meta.tokenizer.vocab_size))
        for directory, entry in zip(self.shard_dirs, self.meta.shards):
            expected = _expected_sizes(entry, dtype)
            for name in ARRAY_NAMES:
                file = directory / f"{name}.npy"
                try:
                    size, header = file.stat().st_size, _npy_header_size(file)
                except FileNotFoundError:
                    raise BertkitError(f"{file}: missing; the dataset is incomplete (re-create "
                                       "it with `bertkit prepare`)") from None
                except OSError as err:
                    if err.errno in (errno.EMFILE, errno.ENFILE):
                        raise too_many_open_files(err, file) from err
                    raise BertkitError(f"{file}: unreadable ({err})") from err
                data = expected.get(name)
                if header is None or (data is not None and size != header + data):
                    raise BertkitError(f"{file}: {size} bytes, but meta.json implies {data} bytes "
                                       f"of data after a {header}-byte header: the file is "
                                       "truncated or damaged (re-create it with `bertkit "
                                       "prepare`)")

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"instance {index} out of range for {n} instances")
        s = int(np.searchsorted(self.cumulative, index, side="right")) - 1
        return self._shard(s).item(int(index - self.cumulative[s]))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_shards"] = {}  # memory maps are re-opened in the receiving process
        return state
