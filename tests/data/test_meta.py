"""meta.json as typed values: a written meta reads back equal, folders written before the
"version" key (and before later optional keys) still load as version 1, and a newer version, a
missing key or a file that is not JSON is one BertkitError that names the file."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from bertkit.data.meta import (
    META_NAME,
    VERSION,
    PartMeta,
    Preparation,
    ResumeCursor,
    ShardEntry,
    ShardMeta,
    TokenizerInfo,
    read_meta,
    read_part_meta,
    write_meta,
)
from bertkit.errors import BertkitError

TOKENIZER = {"fingerprint": "ab" * 32, "vocab_size": 30522, "do_lower_case": True,
             "pad_token_id": 0, "cls_token_id": 101, "sep_token_id": 102, "mask_token_id": 103}
PARAMS = {"max_seq_length": 128, "dupe_factor": 1, "objective": "nsp", "shard_size": 2,
          "dynamic_masking": False}
PREPARATION = Preparation(("a.txt", "b.txt"), PARAMS, TokenizerInfo(**TOKENIZER), "uint16")


def old_shards_json() -> dict:
    """A finished folder's meta.json as bertkit wrote it before the "version" key was read
    (and, like the earliest folders, without token_dtype and per-shard prediction counts)."""
    return {"format": "bertkit-pretraining-shards", "complete": True, "inputs": ["a.txt"],
            "params": PARAMS, "tokenizer": TOKENIZER,
            "shards": [{"name": "shard-00000", "instances": 2, "tokens": 40},
                       {"name": "shard-00001", "instances": 1, "tokens": 17}],
            "num_instances": 3, "stats": {"corpus": {"documents": 2}, "instances": {}}}


def old_part_json() -> dict:
    """An unfinished part as bertkit wrote it (chunk keys are strings; an empty "shards"
    list came along from the shards' meta)."""
    return {"format": "bertkit-prepare-part", "complete": False, "inputs": ["a.txt"],
            "params": PARAMS, "tokenizer": TOKENIZER, "token_dtype": "uint16", "part": 1,
            "parts": 3, "shards": [], "chunks": {"1": {"documents": 4}, "4": {"documents": 5}}}


def write_json(folder, data) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / META_NAME).write_text(json.dumps(data))


def test_shard_meta_round_trips_through_its_file(tmp_path):
    meta = dataclasses.replace(
        ShardMeta.fresh(PREPARATION),
        shards=(ShardEntry("shard-00000", 2, 40, 6), ShardEntry("shard-00001", 2, 31, 5)),
        chunk_starts=(0, 3), resume=ResumeCursor(next_chunk=2, next_offset=1, stats={"a": 1}))
    write_meta(tmp_path, meta)
    assert read_meta(tmp_path) == meta
    on_disk = json.loads((tmp_path / META_NAME).read_text())
    assert on_disk["version"] == VERSION and on_disk["format"] == "bertkit-pretraining-shards"
    assert "num_instances" not in on_disk and "stats" not in on_disk  # absent until complete
    assert on_disk["shards"][0] == {"name": "shard-00000", "instances": 2, "tokens": 40,
                                    "predictions": 6}
    done = dataclasses.replace(meta, resume=None, complete=True, num_instances=4, stats={})
    write_meta(tmp_path, done)
    assert read_meta(tmp_path) == done
    assert "resume" not in json.loads((tmp_path / META_NAME).read_text())


def test_part_meta_round_trips_through_its_file(tmp_path):
    meta = dataclasses.replace(PartMeta.fresh(PREPARATION, part=2, parts=3),
                               chunks={2: {"documents": 3}, 11: {"documents": 1}})
    write_meta(tmp_path, meta)
    assert read_part_meta(tmp_path) == meta
    on_disk = json.loads((tmp_path / META_NAME).read_text())
    assert on_disk["chunks"] == {"2": {"documents": 3}, "11": {"documents": 1}}
    assert on_disk["version"] == VERSION and "shards" not in on_disk


def test_files_without_a_version_load_as_version_1(tmp_path):
    write_json(tmp_path / "shards", old_shards_json())
    meta = read_meta(tmp_path / "shards")
    assert meta.version == 1 and meta.complete and meta.num_instances == 3
    assert meta.tokenizer.vocab_size == 30522 and meta.token_dtype is None
    assert meta.shards[1] == ShardEntry("shard-00001", 1, 17, None) and meta.chunk_starts == ()
    write_json(tmp_path / "part", old_part_json())
    part = read_part_meta(tmp_path / "part")
    assert part.version == 1 and (part.part, part.parts) == (1, 3)
    assert sorted(part.chunks) == [1, 4] and part.piece_names() == {"chunk-00000001",
                                                                    "chunk-00000004"}


@pytest.mark.parametrize("reader, data", [(read_meta, old_shards_json()),
                                          (read_part_meta, old_part_json())])
def test_a_newer_version_is_refused_naming_the_file(tmp_path, reader, data):
    write_json(tmp_path, {**data, "version": VERSION + 1})
    where = re.escape(f"{tmp_path / META_NAME}: ")
    with pytest.raises(BertkitError, match=f"{where}.*version {VERSION + 1}"):
        reader(tmp_path)


@pytest.mark.parametrize("drop, reader, data", [
    ("tokenizer", read_meta, old_shards_json()),
    ("shards", read_meta, old_shards_json()),
    ("complete", read_meta, old_shards_json()),
    ("parts", read_part_meta, old_part_json()),
    ("chunks", read_part_meta, old_part_json()),
])
def test_a_missing_key_is_refused_naming_the_file_and_key(tmp_path, drop, reader, data):
    write_json(tmp_path, {k: v for k, v in data.items() if k != drop})
    with pytest.raises(BertkitError, match=re.escape(f"{tmp_path / META_NAME}: missing key '{drop}'")):
        reader(tmp_path)


def test_a_missing_key_inside_an_entry_is_refused(tmp_path):
    data = old_shards_json()
    data["tokenizer"] = {k: v for k, v in TOKENIZER.items() if k != "vocab_size"}
    write_json(tmp_path, data)
    with pytest.raises(BertkitError, match="missing key 'vocab_size' in tokenizer"):
        read_meta(tmp_path)


@pytest.mark.parametrize("text, message", [
    ("{not json", "line 1: invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({**old_shards_json(), "shards": 7}), "malformed"),
    (json.dumps({**old_shards_json(), "format": "something-else"}),
     "expected bertkit-pretraining-shards"),
])
def test_a_malformed_file_is_refused_naming_it(tmp_path, text, message):
    (tmp_path / META_NAME).write_text(text)
    with pytest.raises(BertkitError, match=re.escape(f"{tmp_path / META_NAME}: {message}")):
        read_meta(tmp_path)


def test_a_part_and_a_prepared_folder_are_told_apart(tmp_path):
    write_json(tmp_path / "part", old_part_json())
    with pytest.raises(BertkitError, match="one part of a preparation"):
        read_meta(tmp_path / "part")
    write_json(tmp_path / "shards", old_shards_json())
    with pytest.raises(BertkitError, match="not a part"):
        read_part_meta(tmp_path / "shards")
    with pytest.raises(BertkitError, match="no meta.json"):
        read_meta(tmp_path / "nowhere")
