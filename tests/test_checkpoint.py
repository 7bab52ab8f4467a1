"""HF-layout checkpoints: the name table, encoder-only loads, clear errors, safe and atomic I/O."""

import logging
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertkit import checkpoint, heads
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.model import BertModel

TINY = BertConfig.preset("tiny", vocab_size=60)


def test_name_table_round_trip_and_hf_names():
    model = heads.BertForPreTraining(TINY)
    hf = checkpoint.to_hf_state_dict(model.state_dict())
    assert "bert.encoder.layer.1.attention.self.key.weight" in hf
    assert "cls.predictions.transform.LayerNorm.bias" in hf
    assert "cls.seq_relationship.weight" in hf
    assert not any("qkv" in k or "mlm." in k for k in hf)
    assert hf["bert.encoder.layer.0.attention.self.query.weight"].shape == (128, 128)
    back = checkpoint.from_hf_state_dict(hf)
    own = {k: v for k, v in model.state_dict().items() if not checkpoint.TIED_KEYS.match(k)}
    assert set(back) == set(own)
    for k in own:
        assert torch.equal(back[k], own[k]), k


def test_encoder_only_checkpoint_into_head_class(minilm_path, caplog):
    with caplog.at_level(logging.INFO, logger="bertkit"):
        model = heads.BertForSequenceClassification.from_pretrained(minilm_path)
    notice = [r.message for r in caplog.records if "newly initialized" in r.message]
    assert len(notice) == 1 and "classifier.weight" in notice[0] and "classifier.bias" in notice[0]
    encoder = BertModel.from_pretrained(minilm_path)
    assert torch.equal(model.bert.layers[3].ffn.up.weight, encoder.layers[3].ffn.up.weight)
    assert not model.training


def test_pretraining_checkpoint_into_bare_encoder(tmp_path):
    full = heads.BertForPreTraining(TINY)
    full.save_pretrained(tmp_path)
    encoder = BertModel.from_pretrained(tmp_path)
    assert torch.equal(encoder.embeddings.word_embeddings.weight,
                       full.bert.embeddings.word_embeddings.weight)


def test_mismatched_weights_are_listed(tmp_path):
    heads.BertForPreTraining(TINY).save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    del state["bert.encoder.layer.1.output.dense.weight"]
    state["bert.encoder.layer.0.intermediate.dense.bias"] = torch.zeros(7)
    state["bert.encoder.mystery.weight"] = torch.zeros(3)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(BertkitError) as err:
        heads.BertForPreTraining.from_pretrained(tmp_path)
    msg = str(err.value)
    assert "missing: bert.layers.1.ffn.down.weight" in msg
    assert "unexpected: bert.encoder.mystery.weight" in msg
    assert "mis-shaped: bert.layers.0.ffn.up.bias: checkpoint (7,) vs model (512,)" in msg


def test_num_labels_mismatch_is_an_error(tmp_path):
    heads.BertForSequenceClassification(TINY.replace(id2label={0: "a", 1: "b", 2: "c"})) \
        .save_pretrained(tmp_path)
    with pytest.raises(BertkitError, match=r"classifier.weight: checkpoint \(3, 128\) vs model \(2, 128\)"):
        heads.BertForSequenceClassification.from_pretrained(tmp_path, id2label={0: "a", 1: "b"})


def test_directory_without_config(tmp_path):
    with pytest.raises(BertkitError, match="no config.json"):
        BertModel.from_pretrained(tmp_path)
    with pytest.raises(BertkitError, match="not a directory"):
        BertModel.from_pretrained(tmp_path / "nope")
    TINY.save(tmp_path)
    with pytest.raises(BertkitError, match="no model.safetensors or pytorch_model.bin"):
        BertModel.from_pretrained(tmp_path)


def test_legacy_bin_loads_with_weights_only(tmp_path):
    model = BertModel(TINY)
    TINY.save(tmp_path)
    torch.save(checkpoint.to_hf_state_dict(model.state_dict()), tmp_path / "pytorch_model.bin")
    again = BertModel.from_pretrained(tmp_path)
    assert torch.equal(again.pooler.dense.weight, model.pooler.dense.weight)


class Boom:
    def __reduce__(self):
        return (exec, ("raise SystemExit('pickle executed')",))


def test_malicious_pickle_is_refused_not_executed(tmp_path):
    TINY.save(tmp_path)
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        pickle.dump({"x": Boom()}, f)
    with pytest.raises(BertkitError, match="cannot be read safely"):
        BertModel.from_pretrained(tmp_path)


def test_saves_are_atomic_and_leave_no_temp_files(tmp_path, monkeypatch):
    model = BertModel(TINY)
    model.save_pretrained(tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()

    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(checkpoint, "save_file", crash)
    with pytest.raises(RuntimeError):
        BertModel(TINY).save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
