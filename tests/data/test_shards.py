"""Shards on disk, ShardDataset, collate functions, and the batch BertForPreTraining consumes."""

from __future__ import annotations

import dataclasses
import os
import pickle

import numpy as np
import pytest
import torch

from bertkit.config import BertConfig
from bertkit.data.chunks import ChunkConfig
from bertkit.data.collate import DynamicMaskingCollate, collate_pretraining
from bertkit.data.instances import InstanceConfig
from bertkit.data.masking import VocabInfo
from bertkit.data.meta import read_meta, write_meta
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.data.shards import ShardDataset
from bertkit.errors import BertkitError
from bertkit.heads import BertForPreTraining
from bertkit.tokenization import BertTokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = "the a cat dog sat ran on under mat rug big small red blue it was and then".split()


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizer:
    return BertTokenizer({t: i for i, t in enumerate(SPECIALS + WORDS + ["."])})


def _corpus(path, n_docs=12, seed=0):
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n_docs):
        sentences = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 15)))) + "."
                     for _ in range(int(rng.integers(4, 20)))]
        docs.append("\n".join(sentences))
    path.write_text("\n\n".join(docs) + "\n")
    return path


def _prepare(tmp_path, tokenizer, name="out", **chunk_kwargs):
    chunk = ChunkConfig(InstanceConfig(max_seq_length=32), dupe_factor=2, **chunk_kwargs)
    config = PrepareConfig(chunk, format="google", shard_size=40, chunk_chars=600)
    out = tmp_path / name
    prepare([_corpus(tmp_path / "corpus.txt")], tokenizer, out, config, progress=False)
    return out


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tokenizer):
    return _prepare(tmp_path_factory.mktemp("shards"), tokenizer)


def test_dataset_items_follow_googles_features(prepared, tokenizer):
    ds = ShardDataset(prepared, tokenizer_fingerprint=tokenizer.fingerprint(),
                      vocab_size=tokenizer.vocab_size)
    meta = read_meta(prepared)
    assert len(ds) == meta.num_instances == sum(s.instances for s in meta.shards)
    assert len(meta.shards) > 2 and meta.token_dtype == "uint16"
    for i in (0, 39, 40, len(ds) - 1, -1):
        item = ds[i]
        ids, types = item["input_ids"], item["token_type_ids"]
        assert ids.dtype == np.int64 and ids.shape == types.shape and len(ids) <= 32
        b = int(np.argmax(types))
        assert ids[0] == 2 and ids[b - 1] == 3 and ids[-1] == 3 and types[:b].sum() == 0
        assert (types[b:] == 1).all()
        assert item["masked_lm_positions"].shape == item["masked_lm_ids"].shape
        assert (item["masked_lm_weights"] == 1).all()
        assert int(item["next_sentence_label"]) in (0, 1)
        assert item["masked_lm_ids"].size >= 1
        assert not np.isin(item["masked_lm_ids"], [0, 1, 2, 3, 4]).any()  # never a special
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_dataset_pickles_without_open_maps(prepared):
    ds = ShardDataset(prepared)
    first = ds[5]
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[5]["input_ids"], first["input_ids"])


def test_other_vocabulary_is_refused(prepared):
    with pytest.raises(BertkitError, match="tokenizer"):
        ShardDataset(prepared, tokenizer_fingerprint="0" * 64)
    with pytest.raises(BertkitError, match="vocab_size=30522"):
        ShardDataset(prepared, vocab_size=30522)


def test_collate_pads_to_batch_max_and_feeds_the_model(prepared):
    ds = ShardDataset(prepared)
    items = [ds[i] for i in range(6)]
    batch = collate_pretraining(items)
    T = max(len(it["input_ids"]) for it in items)
    P = max(len(it["masked_lm_positions"]) for it in items)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (6, T)
    assert batch["masked_lm_positions"].shape == batch["masked_lm_weights"].shape == (6, P)
    assert batch["next_sentence_label"].shape == (6,)
    assert batch["masked_lm_weights"].dtype == torch.float32
    for b, it in enumerate(items):
        n, k = len(it["input_ids"]), len(it["masked_lm_positions"])
        assert batch["attention_mask"][b].sum() == n and (batch["input_ids"][b, n:] == 0).all()
        assert batch["masked_lm_weights"][b].sum() == k
    config = BertConfig.preset("tiny", vocab_size=24, max_position_embeddings=64)
    out = BertForPreTraining(config)(**batch)
    assert torch.isfinite(out.loss) and out.mlm_logits.shape == (6, P, 24)


def test_dynamic_masking_shards_and_collate(tmp_path, tokenizer):
    out = _prepare(tmp_path, tokenizer, dynamic_masking=True)
    ds = ShardDataset(out)
    assert ds.dynamic_masking and ds[0]["masked_lm_positions"].size == 0
    items = [ds[i] for i in range(8)]
    assert 4 not in np.concatenate([it["input_ids"] for it in items])  # stored unmasked
    with pytest.raises(BertkitError, match="DynamicMaskingCollate"):
        collate_pretraining(items)
    collate = DynamicMaskingCollate(VocabInfo.from_tokenizer(tokenizer), seed=3)
    first, second = collate(items, range(8)), collate(items, range(8, 16))
    assert (first["masked_lm_weights"].sum(1) >= 1).all()
    assert not torch.equal(first["input_ids"], second["input_ids"])  # new masks per position
    again = DynamicMaskingCollate(VocabInfo.from_tokenizer(tokenizer), seed=3)(items, range(8))
    assert torch.equal(first["input_ids"], again["input_ids"])  # reproducible from the seed
    # an example's masks depend on its position alone, not on the batch it was collated in
    alone = collate([items[5]], [5])
    n = int(alone["attention_mask"].sum())
    assert torch.equal(alone["input_ids"][0, :n], first["input_ids"][5, :n])
    k = int(alone["masked_lm_weights"].sum())
    assert torch.equal(alone["masked_lm_positions"][0, :k], first["masked_lm_positions"][5, :k])
    rows = first["masked_lm_positions"]
    picked = first["input_ids"].gather(1, rows)[first["masked_lm_weights"] > 0]
    assert (picked == 4).float().mean() > 0.5  # mostly [MASK]


def test_mlm_objective_has_no_sentence_label(tmp_path, tokenizer):
    chunk = ChunkConfig(InstanceConfig(max_seq_length=32, objective="mlm"), dupe_factor=1)
    out = tmp_path / "mlm"
    prepare([_corpus(tmp_path / "c.txt")], tokenizer, out,
            PrepareConfig(chunk, format="google"), progress=False)
    ds = ShardDataset(out)
    batch = collate_pretraining([ds[0], ds[1]])
    assert "next_sentence_label" not in batch and (batch["token_type_ids"] == 0).all()


def test_unfinished_output_is_refused(prepared, tmp_path):
    write_meta(tmp_path, dataclasses.replace(read_meta(prepared), complete=False))
    with pytest.raises(BertkitError, match="--resume"):
        ShardDataset(tmp_path)
    with pytest.raises(BertkitError, match="not a directory made by"):
        ShardDataset(tmp_path / "nowhere")


# ---- thousands of shards in a few file descriptors -------------------------------------------

NOFILE = 256


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory, tokenizer):
    """≥ 3,000 one-instance shards. fsync off: 21,000 fsyncs would only test the disk; meta.json
    written once, complete: prepare rewrites it after every shard (its resume cursor), and 3,000
    rewrites of a growing shard list would only test prepare's resumability (test_prepare.py)."""
    root = tmp_path_factory.mktemp("many")
    chunk = ChunkConfig(InstanceConfig(max_seq_length=32), dupe_factor=2)

    def write_complete_meta(folder, meta):
        if meta.complete:
            write_meta(folder, meta)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("bertkit.data.shards.os.fsync", lambda fd: None)
        mp.setattr("bertkit.data.prepare.write_meta", write_complete_meta)
        prepare([_corpus(root / "corpus.txt", n_docs=520)], tokenizer, root / "shards",
                PrepareConfig(chunk, format="google", shard_size=1), progress=False)
    assert len(read_meta(root / "shards").shards) >= 3000
    tokenizer.save_pretrained(root / "tok")
    return root


def test_open_shards_stay_within_the_descriptor_budget(many_shards):
    from bertkit.data.shards import open_shard_budget

    assert open_shard_budget(256) == 9 and open_shard_budget(1024) == 36
    assert open_shard_budget(10) == 1 and open_shard_budget(10**6) == 128
    ds = ShardDataset(many_shards / "shards")
    ds.verify()  # by size only: opens nothing
    assert len(ds._shards) == 0
    order = np.random.default_rng(0).permutation(len(ds))[:2000]
    for i in order:
        assert len(ds[int(i)]["input_ids"]) > 0
        assert len(ds._shards) <= ds.max_open
    # the cache still serves the same items as a fresh dataset
    fresh = ShardDataset(many_shards / "shards")
    assert all(np.array_equal(ds[int(i)]["input_ids"], fresh[int(i)]["input_ids"])
               for i in order[:50])


def test_verify_names_a_missing_or_truncated_file(many_shards, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(many_shards / "shards", broken)
    ShardDataset(broken).verify()
    lengths = broken / "shard-01234" / "lengths.npy"
    lengths.write_bytes(lengths.read_bytes()[:-2])
    with pytest.raises(BertkitError, match="shard-01234/lengths.npy: .* truncated"):
        ShardDataset(broken).verify()
    shutil.rmtree(broken / "shard-01234")
    with pytest.raises(BertkitError, match="shard-01234/input_ids.npy: missing"):
        ShardDataset(broken).verify()


def test_too_many_open_files_is_reported_as_what_it_is(prepared, monkeypatch):
    import errno

    def emfile(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr("bertkit.data.shards.np.load", emfile)
    with pytest.raises(BertkitError, match="too many open files .*ulimit -n") as info:
        ShardDataset(prepared)[0]
    assert "corrupt" not in str(info.value)


def test_pretraining_on_3000_shards_under_a_low_descriptor_limit_resumes(many_shards, tmp_path):
    """`bertkit pretrain` under `ulimit -n 256` on ≥ 3,000 shards (at 7 descriptors a shard,
    opening them all would need 21,000): trains, and a run cut after its step-2 checkpoint
    resumes to the same losses."""
    import json
    import resource
    import subprocess
    import sys

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"vocab_size": 24, "hidden_size": 16, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "intermediate_size": 32,
                                  "max_position_embeddings": 32, "hidden_dropout_prob": 0.1}))

    def pretrain(out, *extra):
        def low_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))

        argv = [sys.executable, "-m", "bertkit", "pretrain", "--data",
                str(many_shards / "shards"), "--tokenizer", str(many_shards / "tok"),
                "--config", str(config), "--output", str(out), "--max-steps", "4",
                "--save-every", "2", "--keep", "0", "--batch-size", "64", "--lr", "1e-3",
                "--log-every", "1", "--eval-holdout", "0", "--precision", "fp32",
                "--device", "cpu", "--no-progress", *extra]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=240,
                              preexec_fn=low_limit, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        return [json.loads(x)["loss"] for x in (out / "metrics.jsonl").read_text().splitlines()]

    full = pretrain(tmp_path / "full")
    assert len(full) == 4
    import shutil

    # the run killed between the two saves: the uninterrupted run's folder (the same command
    # writes the same files) without its step-4 state
    cut = shutil.copytree(tmp_path / "full", tmp_path / "cut")
    shutil.rmtree(cut / "checkpoints" / "step-4")
    assert pretrain(cut, "--resume") == full
