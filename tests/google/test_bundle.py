"""The TensorFlow checkpoint reader against TensorFlow's own reading of real checkpoints
(tests/fixtures/google, made by tools/make_google_fixtures.py), and on damaged copies."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.google.bundle import (
    TABLE_MAGIC,
    Bundle,
    index_path,
    masked_crc32c,
    read_table,
    shard_path,
    skipped_kind,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "google"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
RELEASE = FIXTURES / "uncased_L-2_H-16_A-2" / "bert_model.ckpt"
WHOLE = [rel for rel in EXPECTED["checkpoints"] if not rel.startswith("sliced/")]


def sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(array).tobytes()).hexdigest()


@pytest.mark.parametrize("rel", WHOLE)
def test_every_tensor_equals_tensorflows_reading(rel):
    expected = EXPECTED["checkpoints"][rel]
    with Bundle(FIXTURES / rel) as bundle:
        assert sorted(bundle.entries) == sorted(expected)
        for name, record in expected.items():
            array = bundle.read(name)
            assert (str(array.dtype), list(array.shape)) == (record["dtype"], record["shape"]), name
            assert sha256(array) == record["sha256"], name


def test_several_shards_hold_the_one_shard_checkpoints_tensors():
    sharded = FIXTURES / "uncased_L-2_H-16_A-2_sharded" / "bert_model.ckpt"
    with Bundle(RELEASE) as one, Bundle(sharded) as three:
        assert (one.num_shards, three.num_shards) == (1, 3)
        assert {e.shard_id for e in three.entries.values()} == {0, 1, 2}
        for name in one.entries:
            assert np.array_equal(one.read(name), three.read(name)), name


def test_run_state_and_optimizer_slots_are_told_apart():
    with Bundle(FIXTURES / "run_classifier" / "model.ckpt-30") as bundle:
        kinds = {name: skipped_kind(name) for name in bundle.entries}
    assert kinds["global_step"] == "run state"
    assert kinds["bert/embeddings/word_embeddings/adam_m"] == "optimizer slot"
    assert kinds["output_weights/adam_v"] == "optimizer slot"
    assert kinds["output_weights"] is None and kinds["bert/pooler/dense/kernel"] is None
    weights = [n for n, k in kinds.items() if k is None]
    assert sum(k == "optimizer slot" for k in kinds.values()) == 2 * len(weights)


# --- damaged and unsupported inputs: one line each ------------------------------------------------

def copy_release(tmp_path: Path, name: str = "uncased_L-2_H-16_A-2") -> Path:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    return folder / "bert_model.ckpt"


def refusal(prefix: Path, read_all: bool = True) -> str:
    with pytest.raises(BertkitError) as err:
        with Bundle(prefix) as bundle:
            if read_all:
                for name in bundle.entries:
                    bundle.read(name)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("keep", [0, 30, 1000, -1])
def test_truncated_index(tmp_path, keep):
    prefix = copy_release(tmp_path)
    data = index_path(prefix).read_bytes()
    index_path(prefix).write_bytes(data[:keep] if keep >= 0 else data[:-20])
    assert "truncated or not a TensorFlow checkpoint index" in refusal(prefix)


def test_index_block_damaged(tmp_path):
    prefix = copy_release(tmp_path)
    data = bytearray(index_path(prefix).read_bytes())
    data[60] ^= 0x01  # inside the first data block: its trailer's CRC no longer matches
    index_path(prefix).write_bytes(bytes(data))
    assert "CRC32C mismatch in the block" in refusal(prefix)


def test_missing_data_shard(tmp_path):
    prefix = copy_release(tmp_path, "uncased_L-2_H-16_A-2_sharded")
    shard_path(prefix, 1, 3).unlink()
    message = refusal(prefix, read_all=False)
    assert "bert_model.ckpt.data-00001-of-00003: missing" in message and "3 data shard" in message


def test_short_data_shard_found_on_opening(tmp_path):
    prefix = copy_release(tmp_path)
    shard = shard_path(prefix, 0, 1)
    shard.write_bytes(shard.read_bytes()[:-100])
    assert "truncated" in refusal(prefix, read_all=False)


def test_tensor_crc_mismatch(tmp_path):
    prefix = copy_release(tmp_path)
    with Bundle(prefix) as bundle:
        entry = bundle.entries["bert/encoder/layer_1/output/dense/kernel"]
    shard = shard_path(prefix, 0, 1)
    data = bytearray(shard.read_bytes())
    data[entry.offset + 5] ^= 0x40
    shard.write_bytes(bytes(data))
    message = refusal(prefix)
    assert "'bert/encoder/layer_1/output/dense/kernel' fails its CRC32C check" in message


def test_v1_checkpoint_is_refused_by_name():
    message = refusal(FIXTURES / "v1" / "bert_model.ckpt", read_all=False)
    assert "V1 checkpoint" in message


def test_v1_table_given_as_an_index(tmp_path):
    prefix = tmp_path / "bert_model.ckpt"
    shutil.copy(FIXTURES / "v1" / "bert_model.ckpt", index_path(prefix))
    assert "V1 checkpoint" in refusal(prefix, read_all=False)


def test_sliced_variable_is_refused_by_name():
    message = refusal(FIXTURES / "sliced" / "bert_model.ckpt", read_all=False)
    assert "'bert/embeddings/word_embeddings' is a sliced (partitioned) variable (2 slices" in message


def test_another_file_is_not_an_index(tmp_path):
    prefix = tmp_path / "model.ckpt"
    index_path(prefix).write_text("not a table at all, but long enough to hold a footer " * 2)
    assert "not a TensorFlow checkpoint index" in refusal(prefix, read_all=False)


# --- an index of several blocks ---------------------------------------------------------------------
# TensorFlow writes a new data block every 256 KiB of entries: an index that large (thousands of
# variables) is rebuilt here from a real one, in LevelDB's layout, with small blocks.

def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def block(items: list[tuple[bytes, bytes]], restart_every: int) -> bytes:
    out, restarts, last = bytearray(), [], b""
    for n, (key, value) in enumerate(items):
        shared = 0
        if n % restart_every:
            while shared < min(len(key), len(last)) and key[shared] == last[shared]:
                shared += 1
        else:
            restarts.append(len(out))
        out += varint(shared) + varint(len(key) - shared) + varint(len(value))
        out += key[shared:] + value
        last = key
    for offset in restarts:
        out += offset.to_bytes(4, "little")
    return bytes(out + len(restarts).to_bytes(4, "little"))


def write_table(path: Path, items: list[tuple[bytes, bytes]], per_block: int = 5) -> None:
    data = bytearray()

    def append(contents: bytes) -> bytes:
        handle = varint(len(data)) + varint(len(contents))
        data.extend(contents + b"\x00" + masked_crc32c(contents + b"\x00").to_bytes(4, "little"))
        return handle

    index = []
    for start in range(0, len(items), per_block):
        chunk = items[start:start + per_block]
        index.append((chunk[-1][0], append(block(chunk, restart_every=3))))
    meta = append(block([], 1))
    footer = meta + append(block(index, 1))
    data += footer.ljust(40, b"\x00") + TABLE_MAGIC.to_bytes(8, "little")
    path.write_bytes(bytes(data))


def test_index_of_many_blocks(tmp_path):
    prefix = copy_release(tmp_path)
    items = list(read_table(index_path(prefix)))
    write_table(index_path(prefix), items)
    assert index_path(prefix).read_bytes() != index_path(RELEASE).read_bytes()
    expected = EXPECTED["checkpoints"]["uncased_L-2_H-16_A-2/bert_model.ckpt"]
    with Bundle(prefix) as bundle:
        assert sorted(bundle.entries) == sorted(expected)
        for name, record in expected.items():
            assert sha256(bundle.read(name)) == record["sha256"], name
