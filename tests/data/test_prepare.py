"""`bertkit prepare` end to end: byte-identical output for any number of workers and across
reruns, resume after a kill, and bad input (clear message, no half-written shard)."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.data import shards
from bertkit.data.chunks import ChunkConfig, encode_sentences
from bertkit.data.instances import InstanceConfig
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.data.shards import ShardDataset
from bertkit.errors import BertkitError
from bertkit.tokenization import BertTokenizer

CONFIG = PrepareConfig(ChunkConfig(InstanceConfig(max_seq_length=64), dupe_factor=2, seed=7),
                       shard_size=250, chunk_chars=30_000)


@pytest.fixture(scope="module")
def tokenizer(minilm_path) -> BertTokenizer:
    return BertTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory) -> list[Path]:
    """A slice of real data in two formats: 500 lines of WikiText-2 (CRLF, headings) and
    Google's sample file."""
    wiki = (shared_data / "wikitext-2" / "wiki.test.raw").read_bytes().split(b"\r\n")[:500]
    path = tmp_path_factory.mktemp("corpus") / "wiki.raw"
    path.write_bytes(b"\r\n".join(wiki))
    return [path, shared_data / "bert_sample" / "sample_text.txt"]


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_sentence_ids_match_the_public_tokenizer(tokenizer):
    texts = ["Hello, world!", "Unbelievable résumés — naïve café.", "x" * 150]
    expected = [e.input_ids for e in tokenizer.encode_batch(texts, truncation=False,
                                                            add_special_tokens=False)]
    assert [a.tolist() for a in encode_sentences(tokenizer, texts)] == expected


def test_output_identical_for_any_workers_and_reruns(tmp_path, tokenizer, corpus):
    runs = {}
    for name, workers in (("w1", 1), ("w2", 2), ("w1-again", 1)):
        prepare(corpus, tokenizer, tmp_path / name, CONFIG, workers=workers, progress=False)
        runs[name] = _files(tmp_path / name)
    assert len([k for k in runs["w1"] if k.endswith("lengths.npy")]) >= 3  # several shards
    assert runs["w1"] == runs["w2"] == runs["w1-again"]
    meta = json.loads(runs["w1"]["meta.json"])
    assert meta["stats"]["corpus"]["formats"] == {"wikitext": 1, "google": 1}
    assert meta["num_instances"] == len(ShardDataset(tmp_path / "w1"))


def _die_while_writing(directory: Path, packed, state={"n": 0}) -> None:  # noqa: B006
    """A write_shard that is killed (os._exit, no clean-up) during the third shard: half of its
    files in the temporary directory."""
    if state["n"] == 2:
        tmp = directory.with_name(f".{directory.name}.tmp")
        tmp.mkdir()
        (tmp / "input_ids.npy").write_bytes(b"\x93NUMPY half")
        os._exit(137)
    state["n"] += 1
    REAL_WRITE_SHARD(directory, packed)


def _die_before_recording(directory: Path, packed, state={"n": 0}) -> None:  # noqa: B006
    """Killed after the third shard is renamed into place but before meta.json records it."""
    REAL_WRITE_SHARD(directory, packed)
    state["n"] += 1
    if state["n"] == 3:
        os._exit(137)


REAL_WRITE_SHARD = shards.write_shard


def _killed_run(corpus, tokenizer, out, killer) -> None:
    shards.write_shard = killer  # only in this forked child
    prepare(corpus, tokenizer, out, CONFIG, progress=False)


@pytest.mark.parametrize("killer", [_die_while_writing, _die_before_recording])
def test_resume_after_kill_equals_uninterrupted(tmp_path, tokenizer, corpus, killer):
    prepare(corpus, tokenizer, tmp_path / "whole", CONFIG, progress=False)
    out = tmp_path / "killed"
    child = multiprocessing.get_context("fork").Process(
        target=_killed_run, args=(corpus, tokenizer, out, killer))
    child.start()
    child.join(60)
    assert child.exitcode == 137
    meta = json.loads((out / "meta.json").read_text())
    assert not meta["complete"] and len(meta["shards"]) == 2
    with pytest.raises(BertkitError, match="--resume"):
        ShardDataset(out)
    with pytest.raises(BertkitError, match="--resume"):
        prepare(corpus, tokenizer, out, CONFIG, progress=False)
    prepare(corpus, tokenizer, out, CONFIG, workers=2, resume=True, progress=False)
    assert _files(out) == _files(tmp_path / "whole")
    other = PrepareConfig(ChunkConfig(InstanceConfig(max_seq_length=64), seed=8))
    with pytest.raises(BertkitError, match="other inputs, parameters"):
        prepare(corpus, tokenizer, out, other, resume=True, progress=False)


def _cli(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        (bytes(range(256)) * 64, "binary data"),
        (b"\n\n", "input.txt: no documents"),
        (b"The only sentence of this corpus.\n", "need at least two"),
    ],
)
def test_bad_input_clear_message_nothing_written(tmp_path, minilm_path, capsys, content, message):
    path = tmp_path / "input.txt"
    if content is not None:
        path.write_bytes(content)
    out = tmp_path / "out"
    code, err = _cli(["prepare", str(path), "--tokenizer", str(minilm_path), "--output",
                      str(out), "--no-progress"], capsys)
    assert code == 1 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())


def test_bad_file_after_good_ones_leaves_only_whole_shards(tmp_path, tokenizer, corpus):
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(b"\x00\x01" * 1000)
    out = tmp_path / "out"
    with pytest.raises(BertkitError, match="binary data"):
        prepare([*corpus, garbage], tokenizer, out, CONFIG, progress=False)
    meta = json.loads((out / "meta.json").read_text())
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["meta.json", *(s["name"] for s in meta["shards"])])
    assert not meta["complete"]


def test_cli_prepare_runs_and_refuses_to_clobber(tmp_path, minilm_path, corpus, capsys):
    out = tmp_path / "cli"
    args = ["prepare", *map(str, corpus), "--tokenizer", str(minilm_path), "--output", str(out),
            "--max-seq-length", "64", "--whole-word-mask", "--workers", "2", "--no-progress"]
    code, _ = _cli(args, capsys)
    assert code == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["params"]["whole_word_mask"] and meta["params"]["max_predictions_per_seq"] == 10
    assert meta["params"]["dupe_factor"] == 5
    item = ShardDataset(out)[0]
    assert len(item["input_ids"]) <= 64 and np.isin(item["masked_lm_ids"], [0, 101, 102]).sum() == 0
    code, err = _cli(args, capsys)
    assert code == 1 and "--overwrite" in err
    code, _ = _cli([*args, "--resume"], capsys)  # already complete: nothing to do
    assert code == 0
