"""`bertkit prepare --part I/N` + `bertkit merge-shards`: the merged folder is byte for byte what
one `bertkit prepare` of the same inputs writes, for any N (a part may get no chunk at all); a
killed part resumes; the launcher's environment names the part."""

from __future__ import annotations

import filecmp
import json
import shutil

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.data import shards as shard_io
from bertkit.data.chunks import ChunkConfig
from bertkit.data.instances import InstanceConfig
from bertkit.data.meta import META_NAME, read_meta
from bertkit.data.parts import merge_parts, parse_part, prepare_part
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.data.shards import ShardDataset
from bertkit.errors import BertkitError
from bertkit.tokenization import BertTokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = "the a cat dog sat ran on under mat rug big small red blue it was and then".split()
CONFIG = PrepareConfig(ChunkConfig(InstanceConfig(max_seq_length=32), dupe_factor=2),
                       format="google", shard_size=37, chunk_chars=700)


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizer:
    return BertTokenizer({t: i for i, t in enumerate(SPECIALS + WORDS + ["."])})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two files of short random documents: several chunks, shards cut across chunks."""
    root = tmp_path_factory.mktemp("parts")
    rng = np.random.default_rng(0)
    files = []
    for f in range(2):
        docs = ["\n".join(" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))) + "."
                          for _ in range(int(rng.integers(4, 14)))) for _ in range(25)]
        files.append(root / f"c{f}.txt")
        files[-1].write_text("\n\n".join(docs) + "\n")
    return files


@pytest.fixture(scope="module")
def one_run(corpus, tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "shards"
    prepare(corpus, tokenizer, out, CONFIG, progress=False)
    return out


def assert_same_folder(a, b):
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        if name == META_NAME:
            assert json.loads((a / name).read_text()) == json.loads((b / name).read_text())
            continue
        for array in shard_io.ARRAY_NAMES:
            assert filecmp.cmp(a / name / f"{array}.npy", b / name / f"{array}.npy",
                               shallow=False), (name, array)


@pytest.mark.parametrize("parts", [1, 2, 3, 40])
def test_parts_merge_into_exactly_one_runs_shards(corpus, tokenizer, one_run, tmp_path, parts):
    meta = read_meta(one_run)
    chunks = len(meta.chunk_starts)
    assert chunks > 3 and len(meta.shards) > 3
    dirs = [tmp_path / f"part{i}" for i in range(parts)]
    for i in reversed(range(parts)):  # any order
        prepare_part(corpus, tokenizer, dirs[i], CONFIG, part=i, parts=parts, progress=False)
    if parts > chunks:  # some parts got no chunk at all
        assert not json.loads((dirs[-1] / "meta.json").read_text())["chunks"]
    merged = tmp_path / "merged"
    merge_parts(list(reversed(dirs)), merged, progress=False)
    assert_same_folder(merged, one_run)
    assert len(ShardDataset(merged)) == meta.num_instances


def test_a_killed_part_resumes(corpus, tokenizer, one_run, tmp_path, monkeypatch):
    calls = []
    real = shard_io.write_shard

    def dying(directory, packed):
        calls.append(directory)
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed while writing its third piece
        return real(directory, packed)

    monkeypatch.setattr(shard_io, "write_shard", dying)
    with pytest.raises(KeyboardInterrupt):
        prepare_part(corpus, tokenizer, tmp_path / "p0", CONFIG, part=0, parts=2, progress=False)
    monkeypatch.setattr(shard_io, "write_shard", real)
    with pytest.raises(BertkitError, match="did not finish; run it again with --resume"):
        merge_parts([tmp_path / "p0"], tmp_path / "early", progress=False)
    with pytest.raises(BertkitError, match="already holds a prepared part"):
        prepare_part(corpus, tokenizer, tmp_path / "p0", CONFIG, part=0, parts=2, progress=False)
    prepare_part(corpus, tokenizer, tmp_path / "p0", CONFIG, part=0, parts=2, resume=True, progress=False)
    prepare_part(corpus, tokenizer, tmp_path / "p1", CONFIG, part=1, parts=2, progress=False)
    merge_parts([tmp_path / "p0", tmp_path / "p1"], tmp_path / "merged", progress=False)
    assert_same_folder(tmp_path / "merged", one_run)


def test_parts_of_other_preparations_or_missing_parts_are_refused(corpus, tokenizer, tmp_path):
    prepare_part(corpus, tokenizer, tmp_path / "a0", CONFIG, part=0, parts=2, progress=False)
    other = PrepareConfig(CONFIG.chunk, format="google", shard_size=50, chunk_chars=700)
    prepare_part(corpus, tokenizer, tmp_path / "b1", other, part=1, parts=2, progress=False)
    with pytest.raises(BertkitError, match="other params"):
        merge_parts([tmp_path / "a0", tmp_path / "b1"], tmp_path / "m", progress=False)
    with pytest.raises(BertkitError, match=r"missing \[1\]"):
        merge_parts([tmp_path / "a0"], tmp_path / "m", progress=False)
    with pytest.raises(BertkitError, match="one part of a preparation"):
        ShardDataset(tmp_path / "a0")
    with pytest.raises(BertkitError, match="is one of the parts"):
        merge_parts([tmp_path / "a0"], tmp_path / "a0", progress=False)


def test_the_part_comes_from_the_argument_or_the_launcher():
    assert parse_part("2/4", {}) == (2, 4)
    slurm = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5",
             "SLURM_ARRAY_TASK_COUNT": "3", "RANK": "0", "WORLD_SIZE": "9"}
    assert parse_part("auto", slurm) == (2, 3)  # a Slurm array first
    assert parse_part("auto", {"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)  # torchrun
    for bad, message in (("4/4", "does not exist"), ("x", "expected I/N"), ("1/0", "not exist")):
        with pytest.raises(BertkitError, match=message):
            parse_part(bad, {})
    with pytest.raises(BertkitError, match="give --part I/N"):
        parse_part("auto", {})


def test_cli_parts_and_merge(corpus, tokenizer, one_run, tmp_path, monkeypatch, capsys):
    tokenizer.save_pretrained(tmp_path / "tok")
    common = ["prepare", *map(str, corpus), "--tokenizer", str(tmp_path / "tok"), "--format",
              "google", "--max-seq-length", "32", "--dupe-factor", "2", "--shard-size", "37",
              "--chunk-chars", "700", "--max-predictions-per-seq", "20", "--no-progress"]
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    for task in ("0", "1"):  # a Slurm array of two tasks
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", task)
        assert main([*common, "--part", "auto", "--output", str(tmp_path / f"p{task}")]) == 0
    assert main(["merge-shards", str(tmp_path / "p1"), str(tmp_path / "p0"), "--output",
                 str(tmp_path / "merged"), "--no-progress"]) == 0
    assert_same_folder(tmp_path / "merged", one_run)
    capsys.readouterr()
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main([*common, "--output", str(tmp_path / "x")]) == 1  # torchrun without --part
    assert "needs --part auto" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_one_opener_two_folder_rules(corpus, tokenizer, one_run, tmp_path):
    """A prepared folder may hold a file of the user's beside its meta.json and still be
    resumed; a part (scratch for one merge) holds nothing else, ever. Neither removes it."""
    shards = tmp_path / "shards"
    shutil.copytree(one_run, shards)
    (shards / "README").write_text("ours")
    meta = prepare(corpus, tokenizer, shards, CONFIG, resume=True, progress=False)
    assert meta.complete and (shards / "README").read_text() == "ours"
    part = tmp_path / "p0"
    prepare_part(corpus, tokenizer, part, CONFIG, part=0, parts=2, progress=False)
    (part / "README").write_text("ours")
    with pytest.raises(BertkitError, match="holds other files"):
        prepare_part(corpus, tokenizer, part, CONFIG, part=0, parts=2, resume=True,
                     progress=False)
    assert (part / "README").read_text() == "ours"


def test_folders_written_before_the_version_key_still_load_and_resume(corpus, tokenizer,
                                                                       one_run, tmp_path):
    shards = tmp_path / "shards"
    shutil.copytree(one_run, shards)
    data = json.loads((shards / META_NAME).read_text())
    (shards / META_NAME).write_text(json.dumps({k: v for k, v in data.items() if k != "version"}))
    assert len(ShardDataset(shards)) == read_meta(one_run).num_instances
    assert prepare(corpus, tokenizer, shards, CONFIG, resume=True, progress=False).version == 1
