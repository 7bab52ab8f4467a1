"""Fine-tuning orchestration (runs/finetune.py, runs/grid.py) without a real run: the
step plan, the random streams, the output-folder rule, the dev split and seed selection."""

from __future__ import annotations

import json

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import BertForPreTraining
from bertkit.runs.finetune import (
    FinetuneConfig,
    finetune_train_config,
    load_model,
    run_one,
    run_steps,
    train_config,
    training_collate,
)
from bertkit.runs.grid import pick_run, summarize
from bertkit.tasks import get_task
from bertkit.tasks.base import split_dev
from bertkit.tasks.squad import SquadExample
from bertkit.training.packing import feature_lengths
from bertkit.training.stream import stream_seed
from bertkit.varlen import VarlenLayout


@pytest.fixture()
def tiny_dir(tmp_path):
    torch.manual_seed(0)
    BertForPreTraining(BertConfig.preset("tiny", vocab_size=40)).save_pretrained(tmp_path / "m")
    return tmp_path / "m"


def cfg(**changes) -> FinetuneConfig:
    train = finetune_train_config("out", **changes.pop("train", {}))
    return FinetuneConfig("sst2", "m", "d", train=train, **changes)


def test_defaults_are_the_papers_recipe_and_validated():
    c = cfg()
    assert (c.train.lr, c.train.batch_size, c.epochs, c.train.warmup_ratio) == (2e-5, 32, 3.0, 0.1)
    for bad in (dict(epochs=0), dict(epochs=float("nan")), dict(max_seq_length=0),
                dict(split_dev=1.5), dict(eval_batch_size=0)):
        with pytest.raises(BertkitError):
            cfg(**bad)
    for bad in (dict(lr=float("nan")), dict(lr=0.0), dict(batch_size=0), dict(max_steps=0)):
        with pytest.raises(BertkitError):
            cfg(train=bad)


def test_steps_follow_epochs_and_max_steps_caps_them():
    assert run_steps(cfg(epochs=2.0), 100) == 8  # ceil(100 / 32) = 4 per epoch
    assert run_steps(cfg(epochs=0.5), 100) == 2
    assert run_steps(cfg(train=dict(max_steps=3)), 100) == 3
    loop = train_config(cfg(epochs=3.0), 100)
    assert loop.max_steps == 12 and loop.save_every == 4  # a resumable state per epoch
    assert train_config(cfg(epochs=3.0, train=dict(save_every=5)), 100).save_every == 5
    # 50 labels for 50 steps (2 steps an epoch): a state every 3 epochs (6 steps), not every 2
    # steps; still on an epoch's end
    assert train_config(cfg(epochs=25.0), 50).save_every == 6
    with pytest.raises(BertkitError, match="--save-every must be >= 0"):
        cfg(train=dict(save_every=-5))


def test_head_init_stream_is_independent_of_the_dropout_stream(tiny_dir):
    """Head weights, data order and dropout each come from their own stream of the run's seed.
    Before, the head was drawn after torch.manual_seed(seed) and the loop restarted that same
    stream for dropout, so the first dropout masks reused the head's random numbers."""
    task = get_task("sst2")
    run = cfg(train=dict(seed=3))
    head = load_model(task, tiny_dir, ["0", "1"], run).classifier.weight.detach().clone()
    for seed in (3, stream_seed(3, "dropout/0")):  # the old shared stream, the loop's dropout
        torch.manual_seed(seed)
        assert not torch.allclose(head, torch.empty_like(head).normal_(0.0, 0.02))
    again = load_model(task, tiny_dir, ["0", "1"], run).classifier.weight
    torch.testing.assert_close(again, head)  # the head stream is still seeded by the run
    other = load_model(task, tiny_dir, ["0", "1"], cfg(train=dict(seed=4))).classifier.weight
    assert not torch.allclose(other, head)
    seeds = {stream_seed(3, s) for s in ("head", "order/0", "order/1", "dropout/0", "dropout/1")}
    assert len(seeds) == 5 and 3 not in seeds


def test_dropout_is_the_checkpoints_unless_the_run_sets_it(tiny_dir):
    task = get_task("sst2")
    own = load_model(task, tiny_dir, ["0", "1"], cfg()).config
    assert own.hidden_dropout_prob == BertConfig.load(tiny_dir).hidden_dropout_prob
    model = load_model(task, tiny_dir, ["0", "1"], cfg(dropout=0.3))
    c = model.config
    assert (c.hidden_dropout_prob, c.attention_probs_dropout_prob, c.classifier_dropout) == (
        0.3, 0.3, 0.3)
    assert model.dropout.p == 0.3  # (the classifier's)
    with pytest.raises(BertkitError, match="--dropout must be in"):
        cfg(dropout=1.0)


def test_squad_dev_split_keeps_articles_whole():
    ex = [SquadExample(f"q{i}", "q", "c", ("c",), (0,), title=f"t{i // 3}") for i in range(12)]
    parts = split_dev(ex, 0.5, "dev.json")
    assert [e.qid for e in parts.train] == [f"q{i}" for i in range(6)]
    assert {e.title for e in parts.train}.isdisjoint({e.title for e in parts.held_out})
    assert "first 2 of the 4 articles" in parts.note
    with pytest.raises(BertkitError, match="at least one"):
        split_dev(ex, 0.01, "dev.json")


def test_grid_never_picks_a_collapsed_seed_and_uses_sample_std():
    runs = [{"seed": 0, "accuracy": 0.9, "collapsed": True}, {"seed": 1, "accuracy": 0.7},
            {"seed": 2, "accuracy": 0.8}]
    assert pick_run(runs, "accuracy")["seed"] == 2
    assert pick_run(runs[:1], "accuracy")["seed"] == 0  # nothing else to pick
    cell = summarize(1e-5, 3.0, runs, "accuracy")
    assert cell["mean"] == pytest.approx(0.8) and cell["std"] == pytest.approx(0.1)
    assert cell["collapsed_runs"] == 1


def test_finetune_never_writes_into_the_model_or_a_users_folder(tiny_dir, tmp_path):
    before = {p.name: p.read_bytes() for p in tiny_dir.iterdir()}
    with pytest.raises(BertkitError, match="is the input"):
        run_one(FinetuneConfig("sst2", str(tiny_dir), str(tmp_path),
                               train=finetune_train_config(str(tiny_dir))))
    user = tmp_path / "mine"
    user.mkdir()
    (user / "config.json").write_text("{}")
    with pytest.raises(BertkitError, match="not a folder this command wrote"):
        run_one(FinetuneConfig("sst2", str(tiny_dir), str(tmp_path),
                               train=finetune_train_config(str(user))))
    assert {p.name: p.read_bytes() for p in tiny_dir.iterdir()} == before
    assert json.loads((user / "config.json").read_text()) == {}


def test_training_batches_are_packed_where_the_loss_allows_and_not_grouped_by_length(tiny_dir):
    """Classification trains on the unpadded forward (same loss and gradients: test_heads);
    span QA, whose softmax covers the padding, keeps the padded one; `packed=False` turns it off."""
    sst2, squad = get_task("sst2"), get_task("squad1")
    features = [{"input_ids": [1] * n, "token_type_ids": [0] * n, "attention_mask": [1] * n,
                 "labels": 0} for n in (3, 5)]
    c = cfg()
    assert c.packed and not c.group_by_length  # grouped batches are not i.i.d. (issue 19)
    classifier = load_model(sst2, tiny_dir, ["neg", "pos"], c)
    batch = training_collate(sst2, classifier, c)(features)
    layout = batch["layout"]  # built on the host from the collate's mask (no device read-back)
    assert isinstance(layout, VarlenLayout) and batch["input_ids"].shape == (2, 5)
    assert layout.padded_shape == (2, 5) and layout.cu_seqlens.tolist() == [0, 5, 8]
    assert layout.indices.tolist() == [5, 6, 7, 8, 9, 0, 1, 2]  # longest first
    assert "layout" not in training_collate(sst2, classifier, cfg(packed=False))(features)
    compiled = cfg(train={"compile": True})  # the compiled graph is the padded forward's
    assert "layout" not in training_collate(sst2, classifier, compiled)(features)
    assert training_collate(squad, load_model(squad, tiny_dir, None, c), c) == squad.collate
    assert feature_lengths(features) == [3, 5]
    assert feature_lengths([{"input_ids": [[1, 2], [1, 2, 3, 4]]}]) == [4]  # multiple choice


def test_a_length_beyond_the_models_positions_is_refused_and_the_default_cut(tmp_path):
    sst2, squad = get_task("sst2"), get_task("squad1")
    with pytest.raises(BertkitError, match="--max-seq-length 256 is beyond the model's 64"):
        cfg(max_seq_length=256).settings(sst2, positions=64)
    cut = cfg().settings(squad, positions=128)  # SQuAD's default 384 and stride 128
    assert (cut.max_seq_length, cut.doc_stride) == (128, 64)
    assert cfg().settings(sst2, positions=512).max_seq_length == 128
    # refused by run_one before anything is written
    torch.manual_seed(0)
    small = BertConfig.preset("tiny", vocab_size=40, max_position_embeddings=64)
    BertForPreTraining(small).save_pretrained(tmp_path / "m")
    out = tmp_path / "out"
    run = FinetuneConfig("sst2", str(tmp_path / "m"), str(tmp_path), max_seq_length=128,
                         train=finetune_train_config(str(out)))
    with pytest.raises(BertkitError, match="beyond the model's 64 positions"):
        run_one(run)
    assert not out.exists()
