"""TensorFlow's checkpoint format V2 (the "tensor bundle"), read without TensorFlow.

A checkpoint `PREFIX` is an index, `PREFIX.index`, and the tensors' bytes in one or more data
shards, `PREFIX.data-00000-of-00001` ... The index is a LevelDB-style table (TensorFlow's
`lib/io/table`), written uncompressed:

    [data block][trailer] ... [metaindex block][trailer][index block][trailer][footer]
    block:   entries, then the restart array (uint32 offsets) and its length (uint32)
    entry:   varint shared, varint non_shared, varint value_length, key[shared:], value
             (each key shares `shared` leading bytes with the one before; 0 at a restart)
    trailer: 1 byte compression type (0 = none), 4 bytes masked CRC32C of block + type byte
    footer:  two block handles (varint offset, varint size: metaindex, index), zero-padded to
             40 bytes, then the 8-byte magic number 0xdb4775248b80fb57 (little-endian)

The index block maps the last key of each data block to that block's handle. In the data
blocks, the empty key holds a `BundleHeaderProto` (number of shards, endianness) and every other
key is a variable name whose value is a `BundleEntryProto` (dtype, shape, shard id, offset,
size, masked CRC32C of the tensor's bytes). The few protobuf fields are decoded here by hand.
Tensors are read from memory-mapped shards and checked against their CRC32C.

Refused, in one line naming what was found: the V1 format (a `SavedTensorSlices` table) and
sliced (partitioned) variables, whose values are spread over several entries.
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import crc32c
import numpy as np

from bertkit.errors import BertkitError

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48  # two block handles of at most 20 bytes, padded to 40, then the magic
TRAILER_SIZE = 5  # compression type + masked CRC32C
_CRC_MASK_DELTA = 0xA282EAD8

# TensorFlow's DataType enum -> numpy's dtype (little-endian); bfloat16 is read as its 16 bits
DTYPES: dict[int, tuple[str, np.dtype]] = {
    1: ("float32", np.dtype("<f4")),
    2: ("float64", np.dtype("<f8")),
    3: ("int32", np.dtype("<i4")),
    4: ("uint8", np.dtype("u1")),
    5: ("int16", np.dtype("<i2")),
    6: ("int8", np.dtype("i1")),
    9: ("int64", np.dtype("<i8")),
    10: ("bool", np.dtype("?")),
    14: ("bfloat16", np.dtype("<u2")),
    17: ("uint16", np.dtype("<u2")),
    19: ("float16", np.dtype("<f2")),
    22: ("uint32", np.dtype("<u4")),
    23: ("uint64", np.dtype("<u8")),
}
DT_STRING = 7

# What a training run saves beside the model: optimizer slots (google-research/bert's
# AdamWeightDecayOptimizer names them NAME/adam_m and NAME/adam_v; tf.train.AdamOptimizer
# NAME/Adam and NAME/Adam_1, plus beta1_power/beta2_power), the step counter, and the object
# graph a tf.train.Checkpoint adds.
OPTIMIZER_SLOT = re.compile(r"/(adam_m|adam_v|Adam|Adam_1|Momentum|lamb_m|lamb_v)$")
RUN_STATE = re.compile(r"^(global_step|beta1_power|beta2_power|_CHECKPOINTABLE_OBJECT_GRAPH)$")


def mask_crc(crc: int) -> int:
    """TensorFlow's (and LevelDB's) masked CRC32C: a CRC stored in data that is itself
    checksummed is rotated and offset, so that the CRC of a CRC is not trivially small."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes | memoryview) -> int:
    return mask_crc(crc32c.crc32c(data))


def skipped_kind(name: str) -> str | None:
    """'optimizer slot' or 'run state' for what a training run saves beside the model, else None."""
    if OPTIMIZER_SLOT.search(name):
        return "optimizer slot"
    if RUN_STATE.match(name):
        return "run state"
    return None


# --- protobuf wire format: the few fields of two messages ------------------------------------

def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    """(value, next position) of the varint at `pos`."""
    value = shift = 0
    while pos < len(buf) and shift < 70:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise BertkitError(f"{where}: damaged (a number runs past its record)")


def _fields(buf: bytes, where: str) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of a protobuf message: an int for varint
    and fixed fields, bytes for length-delimited ones."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos, where)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos, where)
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        elif wire == 2:
            length, pos = _varint(buf, pos, where)
            value, pos = buf[pos:pos + length], pos + length
        else:
            raise BertkitError(f"{where}: damaged (protobuf wire type {wire})")
        if pos > len(buf):
            raise BertkitError(f"{where}: damaged (a field runs past its record)")
        yield number, wire, value


def _int64(value: int) -> int:
    """A protobuf int64 read as a varint: negative numbers come as 64-bit two's complement."""
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >> 63 else value


@dataclass(frozen=True)
class TensorEntry:
    """One variable's `BundleEntryProto`: where its bytes are and what they hold."""

    name: str
    dtype_code: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int  # masked, as stored
    slices: int  # > 0: a partitioned variable, its value spread over slice entries

    @property
    def dtype_name(self) -> str:
        known = DTYPES.get(self.dtype_code)
        return known[0] if known else ("string" if self.dtype_code == DT_STRING
                                       else f"dtype {self.dtype_code}")


def _shape(buf: bytes, where: str) -> tuple[int, ...]:
    """TensorShapeProto: repeated Dim dim = 2 (int64 size = 1); bool unknown_rank = 3."""
    dims = []
    for number, wire, value in _fields(buf, where):
        if number == 2 and wire == 2:
            size = 0
            for n, w, v in _fields(value, where):  # type: ignore[arg-type]
                if n == 1 and w == 0:
                    size = _int64(v)  # type: ignore[arg-type]
            dims.append(size)
        elif number == 3 and value:
            raise BertkitError(f"{where}: a tensor of unknown rank")
    if any(d < 0 for d in dims):
        raise BertkitError(f"{where}: a tensor of unknown shape {tuple(dims)}")
    return tuple(dims)


def _entry(name: str, buf: bytes, where: str) -> TensorEntry:
    """BundleEntryProto: dtype = 1, shape = 2, shard_id = 3, offset = 4, size = 5,
    crc32c = 6 (fixed32), repeated TensorSliceProto slices = 7."""
    values: dict[int, int] = {1: 0, 3: 0, 4: 0, 5: 0, 6: 0}
    shape: tuple[int, ...] = ()
    slices = 0
    for number, wire, value in _fields(buf, f"{where}, entry {name!r}"):
        if number == 2 and wire == 2:
            shape = _shape(value, f"{where}, entry {name!r}")  # type: ignore[arg-type]
        elif number == 7:
            slices += 1
        elif number in values and wire in (0, 5):
            values[number] = _int64(value) if wire == 0 else value  # type: ignore[assignment]
    return TensorEntry(name, values[1], shape, values[3], values[4], values[5], values[6], slices)


# --- the index table --------------------------------------------------------------------------

def _handle(buf: bytes, pos: int, where: str) -> tuple[int, int, int]:
    """(offset, size, next position) of a BlockHandle."""
    offset, pos = _varint(buf, pos, where)
    size, pos = _varint(buf, pos, where)
    return offset, size, pos


def _block(data: bytes, offset: int, size: int, where: str) -> bytes:
    """A block's contents, its trailer checked (compression type and masked CRC32C)."""
    end = offset + size
    if end + TRAILER_SIZE > len(data) - FOOTER_SIZE:
        raise BertkitError(f"{where}: truncated (a block at byte {offset} runs past the end)")
    kind = data[end]
    stored = int.from_bytes(data[end + 1:end + TRAILER_SIZE], "little")
    if masked_crc32c(data[offset:end + 1]) != stored:
        raise BertkitError(f"{where}: damaged (CRC32C mismatch in the block at byte {offset})")
    if kind != 0:
        raise BertkitError(f"{where}: a compressed table block (type {kind}); TensorFlow writes "
                           "checkpoint indexes uncompressed, so this is not one")
    return data[offset:end]


def _block_entries(block: bytes, where: str) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of each entry of a block, keys rebuilt from their shared prefixes."""
    if len(block) < 4:
        raise BertkitError(f"{where}: damaged (a block too short for its restart count)")
    restarts = int.from_bytes(block[-4:], "little")
    limit = len(block) - 4 - 4 * restarts
    if limit < 0:
        raise BertkitError(f"{where}: damaged (a block's restart array is larger than the block)")
    pos, key = 0, b""
    while pos < limit:
        shared, pos = _varint(block, pos, where)
        unshared, pos = _varint(block, pos, where)
        length, pos = _varint(block, pos, where)
        if shared > len(key) or pos + unshared + length > limit:
            raise BertkitError(f"{where}: damaged (an entry runs past its block)")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + length]
        pos += length


def read_table(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of a TensorFlow table file, in key order."""
    where = str(path)
    data = path.read_bytes()
    if len(data) < FOOTER_SIZE or int.from_bytes(data[-8:], "little") != TABLE_MAGIC:
        raise BertkitError(f"{where}: truncated or not a TensorFlow checkpoint index (no table "
                           f"footer; {len(data)} bytes)")
    footer = data[-FOOTER_SIZE:]
    _, _, pos = _handle(footer, 0, where)  # the metaindex: empty in a checkpoint's index
    offset, size, _ = _handle(footer, pos, where)
    for _, handle in _block_entries(_block(data, offset, size, where), where):
        block_offset, block_size, _ = _handle(handle, 0, where)
        yield from _block_entries(_block(data, block_offset, block_size, where), where)


# --- the bundle --------------------------------------------------------------------------------

def index_path(prefix: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(prefix)}.index")


def shard_path(prefix: str | os.PathLike, shard: int, shards: int) -> Path:
    return Path(f"{os.fspath(prefix)}.data-{shard:05d}-of-{shards:05d}")


def _header(value: bytes, where: str) -> tuple[int, int]:
    """BundleHeaderProto: int32 num_shards = 1, Endianness endianness = 2 (LITTLE = 0), ...
    A V1 checkpoint's table holds a SavedTensorSlices there, whose field 1 is a message."""
    num_shards, endianness = 1, 0
    for number, wire, field in _fields(value, where):
        if number == 1 and wire == 2:
            raise BertkitError(f"{where}: a TensorFlow V1 checkpoint (SavedTensorSlices table); "
                               "bertkit reads the V2 format (PREFIX.index + PREFIX.data-*): "
                               "re-save it with TensorFlow (tf.compat.v1.train.Saver())")
        if number == 1:
            num_shards = field  # type: ignore[assignment]
        elif number == 2:
            endianness = field  # type: ignore[assignment]
    return num_shards, endianness


def refuse_single_file(path: Path) -> None:
    """A checkpoint that is one file: the V1 format (a table of SavedTensorSlices), or not a
    checkpoint at all. Either way a one-line refusal naming which."""
    header = next(iter(read_table(path)), None)
    if header is not None and header[0] == b"":
        _header(header[1], str(path))  # raises for V1's SavedTensorSlices
    raise BertkitError(f"{path}: one file, not a V2 checkpoint (PREFIX.index + PREFIX.data-*)")


class Bundle:
    """An opened V2 checkpoint: every entry of its index, each shard present and long enough
    for the entries it holds (checked on opening); tensors read on demand from the memory-mapped
    shards, each checked against its CRC32C."""

    def __init__(self, prefix: str | os.PathLike):
        self.prefix = Path(prefix)
        index = index_path(prefix)
        if not index.is_file() and self.prefix.is_file():
            refuse_single_file(self.prefix)
        if not index.is_file():
            raise BertkitError(f"{index}: no such file (a V2 checkpoint PREFIX has PREFIX.index)")
        self.entries: dict[str, TensorEntry] = {}
        header = None
        for key, value in read_table(index):
            if key == b"":
                header = _header(value, str(index))
                continue
            if key[:1] == b"\x00":  # the encoded (name, slice) keys of a partitioned variable
                continue
            name = key.decode("utf-8", errors="replace")
            self.entries[name] = _entry(name, value, str(index))
        if header is None:
            raise BertkitError(f"{index}: no bundle header (the empty key); not a TensorFlow "
                               "V2 checkpoint index")
        self.num_shards, endianness = header
        if endianness != 0:
            raise BertkitError(f"{index}: a big-endian checkpoint; bertkit reads little-endian ones")
        sliced = [e for e in self.entries.values() if e.slices]
        if sliced:
            raise BertkitError(f"{index}: {sliced[0].name!r} is a sliced (partitioned) variable "
                               f"({sliced[0].slices} slices; {len(sliced)} such variable(s)); "
                               "bertkit reads whole variables: save it unpartitioned")
        self._maps: dict[int, mmap.mmap] = {}
        self._check_shards()

    def _check_shards(self) -> None:
        """Every shard is there and holds the bytes its entries point to: a missing or short
        shard is found before any tensor is read."""
        sizes = {}
        for shard in range(self.num_shards):
            path = shard_path(self.prefix, shard, self.num_shards)
            if not path.is_file():
                raise BertkitError(f"{path}: missing (the checkpoint {self.prefix.name} has "
                                   f"{self.num_shards} data shard(s))")
            sizes[shard] = path.stat().st_size
        for entry in self.entries.values():
            if not 0 <= entry.shard_id < self.num_shards:
                raise BertkitError(f"{index_path(self.prefix)}: {entry.name!r} is in shard "
                                   f"{entry.shard_id} of {self.num_shards}; the index is damaged")
            end = entry.offset + entry.size
            if entry.offset < 0 or end > sizes[entry.shard_id]:
                path = shard_path(self.prefix, entry.shard_id, self.num_shards)
                raise BertkitError(f"{path}: truncated ({sizes[entry.shard_id]} bytes, but "
                                   f"{entry.name!r} ends at byte {end})")

    def _map(self, shard: int) -> mmap.mmap | None:
        if shard not in self._maps:
            path = shard_path(self.prefix, shard, self.num_shards)
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    return None  # an empty shard (every entry empty): mmap refuses length 0
                self._maps[shard] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._maps[shard]

    def read(self, name: str) -> np.ndarray:
        """The tensor `name` as a numpy array (bfloat16 widened to float32, exactly), its bytes
        checked against the CRC32C the index holds."""
        entry = self.entries[name]
        known = DTYPES.get(entry.dtype_code)
        if known is None:
            raise BertkitError(f"{index_path(self.prefix)}: {name!r} is a {entry.dtype_name} "
                               "tensor; bertkit reads numeric tensors only")
        dtype_name, dtype = known
        count = int(np.prod(entry.shape, dtype=np.int64))
        if count * dtype.itemsize != entry.size:
            raise BertkitError(f"{index_path(self.prefix)}: {name!r} has shape {entry.shape} of "
                               f"{dtype_name} but {entry.size} bytes; the index is damaged")
        mapped = self._map(entry.shard_id)
        with memoryview(mapped if mapped is not None else b"") as whole:
            data = whole[entry.offset:entry.offset + entry.size]
            crc = masked_crc32c(data)
            array = np.frombuffer(data, dtype=dtype, count=count).reshape(entry.shape).copy()
            data.release()
        if crc != entry.crc32c:
            path = shard_path(self.prefix, entry.shard_id, self.num_shards)
            raise BertkitError(f"{path}: {name!r} fails its CRC32C check (the shard is damaged "
                               "or was written by another save than the index)")
        if dtype_name == "bfloat16":  # the top half of a float32: widening is exact
            array = (array.astype(np.uint32) << 16).view(np.float32)
        return array

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
