"""`bertkit convert google` on checkpoints made by real TensorFlow (tests/fixtures/google):
the converted folders load in transformers and bertkit with equal outputs and hold what
transformers' own TensorFlow converter makes; bad inputs give one line and write nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertkit.checkpoint import check_model_dir
from bertkit.cli.main import main
from bertkit.errors import BertkitError
from bertkit.google.bundle import Bundle, shard_path
from bertkit.google.convert import GoogleConversion, convert_google, hf_name
from bertkit.heads import BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification
from bertkit.tokenization.wordpiece import BertTokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "google"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
RELEASE = FIXTURES / "uncased_L-2_H-16_A-2"


def sha256(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()


def inputs(vocab_size: int = 100) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(7, vocab_size, (3, 12), generator=g)
    segments = torch.zeros_like(ids)
    segments[:, 7:] = 1
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    return {"input_ids": ids, "token_type_ids": segments, "attention_mask": mask}


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("convert") / "bert-tiny"
    convert_google(GoogleConversion(RELEASE, out))
    return out


def test_release_loads_in_transformers_with_bertkits_logits(converted):
    import transformers

    reference = transformers.BertForPreTraining.from_pretrained(converted).eval()
    ours = BertForPreTraining.from_pretrained(converted)
    batch = inputs()
    with torch.no_grad():
        theirs, mine = reference(**batch), ours(**batch)
    real = batch["attention_mask"].bool()
    assert torch.allclose(theirs.prediction_logits[real], mine.mlm_logits[real], atol=1e-5)
    assert torch.allclose(theirs.seq_relationship_logits, mine.nsp_logits, atol=1e-5)
    assert mine.mlm_logits.std() > 0.05  # the weights are the checkpoint's, not zeros
    assert json.loads((converted / "config.json").read_text())["architectures"] == ["BertForPreTraining"]


def test_state_dict_equals_transformers_tf_converter(converted):
    reference = EXPECTED["transformers_converter"]["uncased_L-2_H-16_A-2"]["tensors"]
    ours = load_file(converted / "model.safetensors")
    tied = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.bias": "cls.predictions.bias"}
    assert set(reference) - set(ours) == set(tied)  # copies of tensors it holds, tied on loading
    assert set(ours) <= set(reference)
    for name, tensor in ours.items():
        assert sha256(tensor) == reference[name]["sha256"], name
    for copy, source in tied.items():
        assert reference[copy]["sha256"] == reference[source]["sha256"]


def test_tensors_are_tensorflows_values_under_hf_names(converted):
    ours = load_file(converted / "model.safetensors")
    with Bundle(RELEASE / "bert_model.ckpt") as bundle:
        for name in bundle.entries:
            hf, transpose = hf_name(name)
            value = bundle.read(name)
            assert np.array_equal(ours[hf].numpy(), value.T if transpose else value), name


def test_several_shards_convert_to_the_same_tensors(converted, tmp_path):
    out = tmp_path / "out"
    convert_google(GoogleConversion(FIXTURES / "uncased_L-2_H-16_A-2_sharded", out))
    one, three = load_file(converted / "model.safetensors"), load_file(out / "model.safetensors")
    assert one.keys() == three.keys()
    assert all(torch.equal(one[k], three[k]) for k in one)


def test_tokenizer_is_the_releases_lowercased(converted):
    tokenizer = BertTokenizer.from_pretrained(converted)
    assert tokenizer.do_lower_case
    assert tokenizer.vocab == BertTokenizer(RELEASE / "vocab.txt").vocab
    assert tokenizer.encode("The Model").input_ids == tokenizer.encode("the model").input_ids


def test_run_classifier_checkpoint_is_a_classifier(tmp_path):
    import transformers

    out = tmp_path / "classifier"
    result = convert_google(GoogleConversion(FIXTURES / "run_classifier", out,
                                             config_file=RELEASE / "bert_config.json",
                                             vocab_file=RELEASE / "vocab.txt"))
    assert result.architecture == "BertForSequenceClassification"
    assert result.checkpoint.name == "model.ckpt-30"
    assert result.left_out["run state"] == ["global_step"]
    assert len(result.left_out["optimizer slot"]) == 2 * result.tensors
    model = BertForSequenceClassification.from_pretrained(out)
    assert model.config.num_labels == 3
    with Bundle(FIXTURES / "run_classifier" / "model.ckpt-30") as bundle:
        assert np.array_equal(model.classifier.weight.detach().numpy(), bundle.read("output_weights"))
        assert np.array_equal(model.classifier.bias.detach().numpy(), bundle.read("output_bias"))
    reference = transformers.BertForSequenceClassification.from_pretrained(out).eval()
    batch = inputs()
    with torch.no_grad():
        assert torch.allclose(reference(**batch).logits, model(**batch).logits, atol=1e-5)


def test_run_squad_checkpoint_is_a_span_head(tmp_path):
    out = tmp_path / "squad"
    result = convert_google(GoogleConversion(FIXTURES / "run_squad", out,
                                             config_file=RELEASE / "bert_config.json",
                                             vocab_file=RELEASE / "vocab.txt"))
    assert result.architecture == "BertForQuestionAnswering"
    assert result.left_out["not part of BertForQuestionAnswering"] == [
        "bert/pooler/dense/bias", "bert/pooler/dense/kernel"]  # HF's span model has no pooler
    model = BertForQuestionAnswering.from_pretrained(out)
    with Bundle(FIXTURES / "run_squad" / "model.ckpt-12") as bundle:
        weights = bundle.read("cls/squad/output_weights")
    assert np.array_equal(model.qa_outputs.weight.detach().numpy(), weights)
    out_span = model(**inputs())
    assert out_span.start_logits.shape == (3, 12)


def test_bertkits_loader_points_at_the_command():
    with pytest.raises(BertkitError, match="convert it first: bertkit convert google"):
        BertForPreTraining.from_pretrained(RELEASE)
    with pytest.raises(BertkitError, match="convert it first: bertkit convert google"):
        check_model_dir(RELEASE)


# --- lower-casing: the folder's name, checked against the vocabulary ------------------------------

def release_named(tmp_path: Path, name: str, capitals: bool = False) -> Path:
    folder = tmp_path / name
    shutil.copytree(RELEASE, folder)
    if capitals:
        vocab = folder / "vocab.txt"
        lines = vocab.read_text(encoding="utf-8").splitlines()
        lines[10] = lines[10].capitalize()
        vocab.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("name, capitals, flag, lower", [
    ("bert_tiny", False, None, True),  # a silent name: an uncased vocabulary decides
    ("bert_tiny", True, None, False),  # capitals: cased
    ("cased_L-2_H-16_A-2", True, None, False),
    ("cased_L-2_H-16_A-2", False, False, False),  # the flag settles a disagreement
    ("uncased_L-2_H-16_A-2", True, True, True),
])
def test_lowercasing_decided(tmp_path, name, capitals, flag, lower):
    out = tmp_path / "out"
    result = convert_google(GoogleConversion(release_named(tmp_path, name, capitals), out,
                                             lowercase=flag))
    assert result.lowercase is lower
    assert BertTokenizer.from_pretrained(out).do_lower_case is lower


@pytest.mark.parametrize("name, capitals", [("cased_L-2_H-16_A-2", False),
                                            ("multi_uncased_L-2_H-16_A-2", True)])
def test_lowercasing_name_and_vocabulary_disagree(tmp_path, capsys, name, capitals):
    out = tmp_path / "out"
    code = main(["convert", "google", str(release_named(tmp_path, name, capitals)),
                 "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "pass --lowercase or --no-lowercase" in err
    assert not out.exists()


# --- damaged inputs: one line, exit 1, nothing written --------------------------------------------

def damage_truncated_index(folder: Path) -> None:
    index = folder / "bert_model.ckpt.index"
    index.write_bytes(index.read_bytes()[:-7])


def damage_missing_shard(folder: Path) -> None:
    shard_path(folder / "bert_model.ckpt", 0, 1).unlink()


def damage_short_shard(folder: Path) -> None:
    shard = shard_path(folder / "bert_model.ckpt", 0, 1)
    shard.write_bytes(shard.read_bytes()[:1000])


def damage_crc(folder: Path) -> None:
    shard = shard_path(folder / "bert_model.ckpt", 0, 1)
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x10  # inside the last tensor written
    shard.write_bytes(bytes(data))


def config_change(**changes):
    def damage(folder: Path) -> None:
        path = folder / "bert_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return damage


def damage_missing_config(folder: Path) -> None:
    (folder / "bert_config.json").unlink()


def damage_vocab_size(folder: Path) -> None:
    vocab = folder / "vocab.txt"
    vocab.write_text(vocab.read_text(encoding="utf-8") + "extra\n", encoding="utf-8")


@pytest.mark.parametrize("damage, says", [
    (damage_truncated_index, "truncated or not a TensorFlow checkpoint index"),
    (damage_missing_shard, "bert_model.ckpt.data-00000-of-00001: missing"),
    (damage_short_shard, "truncated"),
    (damage_crc, "fails its CRC32C check"),
    (config_change(hidden_size=32, intermediate_size=64),
     "does not describe this checkpoint: 'bert/embeddings/LayerNorm/beta' is [16] but the config "
     "gives [32]"),
    (config_change(num_hidden_layers=1), "which the config's model has not (num_hidden_layers 1)"),
    (config_change(num_hidden_layers=3), "has no tensor for bert.encoder.layer.2."),
    (config_change(max_position_embeddings=512), "'bert/embeddings/position_embeddings' is [128, 16]"),
    (damage_missing_config, "bert_config.json: not found"),
    (damage_vocab_size, "vocab.txt has 101 tokens but the model's vocab_size is 100"),
])
def test_damaged_release_gives_one_line_and_writes_nothing(tmp_path, capsys, damage, says):
    folder = release_named(tmp_path, "uncased_L-2_H-16_A-2")
    damage(folder)
    out = tmp_path / "out"
    code = main(["convert", "google", str(folder), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("bertkit: error: ") and err.count("\n") == 1, err
    assert says in err
    assert not out.exists()


@pytest.mark.parametrize("source, says", [
    (FIXTURES / "v1", "V1 checkpoint"),
    (FIXTURES / "v1" / "bert_model.ckpt", "V1 checkpoint"),
    (FIXTURES / "sliced", "sliced (partitioned) variable"),
    (FIXTURES / "nowhere", "no such folder or checkpoint"),
])
def test_unsupported_checkpoints_give_one_line(tmp_path, capsys, source, says):
    out = tmp_path / "out"
    code = main(["convert", "google", str(source), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and says in err, err
    assert not out.exists()


# --- the run folder: which checkpoint -----------------------------------------------------------

def run_folder_with_two(tmp_path: Path, state_file: bool) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(FIXTURES / "run_classifier", folder)
    for path in list(folder.glob("model.ckpt-30.*")):
        shutil.copy(path, folder / path.name.replace("-30.", "-10."))
    if not state_file:
        (folder / "checkpoint").unlink()
    return folder


def test_run_folder_latest_from_its_checkpoint_file(tmp_path):
    folder = run_folder_with_two(tmp_path, state_file=True)
    (folder / "checkpoint").write_text('model_checkpoint_path: "/elsewhere/model.ckpt-10"\n')
    result = convert_google(GoogleConversion(folder, tmp_path / "out",
                                             config_file=RELEASE / "bert_config.json",
                                             vocab_file=RELEASE / "vocab.txt"))
    assert result.checkpoint == folder / "model.ckpt-10"  # the folder moved since: its name


def test_run_folder_with_two_checkpoints_and_no_state_file(tmp_path, capsys):
    folder = run_folder_with_two(tmp_path, state_file=False)
    code = main(["convert", "google", str(folder), "--output", str(tmp_path / "out"),
                 "--config", str(RELEASE / "bert_config.json")])
    err = capsys.readouterr().err
    assert code == 1 and "holds 2 checkpoints (model.ckpt-10, model.ckpt-30)" in err
    code = main(["convert", "google", str(folder / "model.ckpt-10"), "--output",
                 str(tmp_path / "out"), "--config", str(RELEASE / "bert_config.json"),
                 "--vocab", str(RELEASE / "vocab.txt")])
    assert code == 0


# --- the output folder: bertkit.io's rules ------------------------------------------------------

def test_output_folder_rules(tmp_path, capsys):
    source = release_named(tmp_path, "uncased_L-2_H-16_A-2")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("keep me")
    assert main(["convert", "google", str(source), "--output", str(theirs)]) == 1
    assert "not a folder this command wrote" in capsys.readouterr().err
    assert (theirs / "notes.txt").read_text() == "keep me"

    assert main(["convert", "google", str(source), "--output", str(source)]) == 1
    assert "is the input" in capsys.readouterr().err

    out = tmp_path / "out"
    assert main(["convert", "google", str(source), "--output", str(out)]) == 0
    assert main(["convert", "google", str(source), "--output", str(out)]) == 1
    assert "holds an earlier conversion; pass --overwrite" in capsys.readouterr().err
    assert main(["convert", "google", str(source), "--output", str(out), "--overwrite"]) == 0


def test_cli_end_to_end(tmp_path, capsys):
    out = tmp_path / "classifier"
    code = main(["convert", "google", str(FIXTURES / "run_classifier"), "--output", str(out),
                 "--config", str(RELEASE / "bert_config.json"), "--vocab", str(RELEASE / "vocab.txt")])
    printed = capsys.readouterr().out.splitlines()
    assert code == 0
    assert printed[0].startswith(f"wrote {out}: BertForSequenceClassification from ")
    assert printed[1] == "lower-casing on (the folder name 'uncased_L-2_H-16_A-2', and vocab.txt agrees)"
    assert "left out (optimizer slot): bert/embeddings/LayerNorm/beta/adam_m" in printed[2]
    assert printed[3] == "left out (run state): global_step"
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["layers"], info["hidden"], info["labels"]) == (2, 16, {"0": "LABEL_0", "1": "LABEL_1",
                                                                        "2": "LABEL_2"})


def test_classifier_label_names(tmp_path, capsys):
    common = ["--config", str(RELEASE / "bert_config.json"), "--vocab", str(RELEASE / "vocab.txt")]
    out = tmp_path / "mnli"
    assert main(["convert", "google", str(FIXTURES / "run_classifier"), "--output", str(out),
                 "--labels", "contradiction,entailment,neutral", *common]) == 0
    assert BertForSequenceClassification.from_pretrained(out).config.id2label == {
        0: "contradiction", 1: "entailment", 2: "neutral"}
    capsys.readouterr()
    assert main(["convert", "google", str(FIXTURES / "run_classifier"), "--output",
                 str(tmp_path / "two"), "--labels", "yes,no", *common]) == 1
    assert "--labels names 2 labels but the classifier (output_weights) has 3 outputs" in \
        capsys.readouterr().err
    assert main(["convert", "google", str(RELEASE), "--output", str(tmp_path / "pre"),
                 "--labels", "yes,no"]) == 1
    assert "no classifier (it converts to BertForPreTraining)" in capsys.readouterr().err
    assert not (tmp_path / "two").exists() and not (tmp_path / "pre").exists()
