import json

import pytest
import transformers

from bertkit.config import PRESETS, BertConfig
from bertkit.errors import BertkitError

SHARED_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
    "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id",
)


def test_defaults_equal_transformers():
    ours, ref = BertConfig(), transformers.BertConfig()
    for key in SHARED_KEYS:
        assert getattr(ours, key) == getattr(ref, key), key


def test_json_is_hf_config_json(tmp_path):
    cfg = BertConfig.preset("tiny", vocab_size=1000)
    cfg.save(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["model_type"] == "bert"
    ref = transformers.BertConfig.from_pretrained(tmp_path)
    for key in SHARED_KEYS:
        assert getattr(ref, key) == getattr(cfg, key), key
    # and back: HF's own config.json loads here
    ref.save_pretrained(tmp_path / "hf")
    assert BertConfig.load(tmp_path / "hf") == cfg


def test_unknown_keys_kept_on_save(tmp_path, minilm_path):
    cfg = BertConfig.load(minilm_path)
    assert cfg.extra["_name_or_path"] == "nreimers/MiniLM-L6-H384-uncased"
    cfg.save(tmp_path)
    again = json.loads((tmp_path / "config.json").read_text())
    original = json.loads((minilm_path / "config.json").read_text())
    for key, value in original.items():
        assert again[key] == value, key


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets(name):
    layers, hidden, heads = PRESETS[name]
    cfg = BertConfig.preset(name)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (layers, hidden, heads)
    assert cfg.intermediate_size == 4 * hidden


def test_preset_table_is_the_issue_table():
    assert PRESETS == {"tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8),
                       "medium": (8, 512, 8), "base": (12, 768, 12), "large": (24, 1024, 16)}


@pytest.mark.parametrize("changes, message", [
    (dict(hidden_size=100, num_attention_heads=12), "divisible"),
    (dict(num_hidden_layers=0), "positive"),
    (dict(vocab_size=-5), "positive"),
    (dict(hidden_act="gelu_fancy"), "hidden_act"),
    (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob"),
    (dict(layer_norm_eps=-1.0), "layer_norm_eps must be a finite number > 0"),
    (dict(layer_norm_eps=0), "layer_norm_eps"),
    (dict(layer_norm_eps=float("nan")), "layer_norm_eps"),
    (dict(initializer_range="x"), "initializer_range"),
    (dict(id2label={0: "x", 1: "x"}), "names 'x' for more than one id"),
    (dict(id2label={0: "a", 1: "b"}, label2id={"a": 1, "b": 0}), "label2id disagrees"),
])
def test_validation_messages(changes, message):
    with pytest.raises(BertkitError, match=message):
        BertConfig(**changes)


def test_a_config_files_error_names_the_file(tmp_path):
    config = BertConfig(layer_norm_eps=1e-12).to_dict()
    (tmp_path / "config.json").write_text(json.dumps({**config, "layer_norm_eps": -1}))
    with pytest.raises(BertkitError, match=r"config\.json: BertConfig\.layer_norm_eps"):
        BertConfig.load(tmp_path)


def test_unknown_preset():
    with pytest.raises(BertkitError, match="unknown model preset"):
        BertConfig.preset("huge")


def test_frozen_and_replace():
    cfg = BertConfig.preset("tiny")
    with pytest.raises(AttributeError):
        cfg.hidden_size = 64  # type: ignore[misc]
    with pytest.raises(BertkitError):
        cfg.replace(num_attention_heads=3)
    assert cfg.replace(id2label={0: "neg", 1: "pos", 2: "neu"}).num_labels == 3


def test_id2label_json_keys(tmp_path):
    cfg = BertConfig.preset("tiny", id2label={0: "neg", 1: "pos"})
    cfg.save(tmp_path)
    loaded = BertConfig.load(tmp_path)
    assert loaded.id2label == {0: "neg", 1: "pos"} and loaded.label2id == {"neg": 0, "pos": 1}


def test_missing_and_bad_config(tmp_path):
    with pytest.raises(BertkitError, match="no config.json"):
        BertConfig.load(tmp_path)
    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(BertkitError, match="line 1"):
        BertConfig.load(tmp_path)
