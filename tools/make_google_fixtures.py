"""Make the Google-format BERT checkpoints under tests/fixtures/google/ with real TensorFlow.

The checkpoints are written the way google-research/bert writes them: `tf.compat.v1` variables
under Google's names (`bert/embeddings/word_embeddings`, `bert/encoder/layer_0/attention/self/
query/kernel`, `cls/predictions/output_bias`, ...) saved by `tf.compat.v1.train.Saver`. Beside
them, `expected.json` records what TensorFlow's own reader (`tf.train.load_checkpoint`) returns
for every tensor (dtype, shape, sha256 of the bytes), and what `transformers`' own TensorFlow
converter (`load_tf_weights_in_bert`, transformers 4.x: 5.x dropped it) makes of the pre-training
checkpoint (sha256 of every tensor of its state dict). The tests compare bertkit's reader and
converter against both, without TensorFlow.

TensorFlow is never a dependency of bertkit or of its tests: run this in an environment of its
own, outside the repository (torch first and pinned, or pip pulls a CUDA build):

    python3 -m venv /tmp/tfenv
    /tmp/tfenv/bin/pip install torch==2.13.0
    /tmp/tfenv/bin/pip install tensorflow-cpu "transformers<5"
    /tmp/tfenv/bin/python tools/make_google_fixtures.py tests/fixtures/google

Values come from a fixed seed, so a rerun with the same TensorFlow writes the same bytes.

What it writes (a tiny BERT: 2 layers, hidden 16, 2 heads, intermediate 32, vocabulary 100):
  uncased_L-2_H-16_A-2/          a release folder: bert_config.json, vocab.txt, bert_model.ckpt
                                 (pre-training heads: MLM transform + output bias, NSP), 1 shard
  uncased_L-2_H-16_A-2_sharded/  the same variables saved over 3 devices: 3 data shards
  run_classifier/                a run_classifier.py output folder: model.ckpt-30 with
                                 output_weights/output_bias (3 labels), adam_m/adam_v slots,
                                 global_step, and TensorFlow's `checkpoint` state file
  run_squad/                     a run_squad.py output: cls/squad/output_weights/output_bias
  v1/                            the same release saved in TensorFlow's old V1 format
  sliced/                        a checkpoint whose word embeddings are partitioned (2 slices)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402 (after the log level)

tf1 = tf.compat.v1

CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 16,
    "initializer_range": 0.02,
    "intermediate_size": 32,
    "max_position_embeddings": 128,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "type_vocab_size": 2,
    "vocab_size": 100,
}
NUM_LABELS = 3
RELEASE = "uncased_L-2_H-16_A-2"


def vocabulary() -> list[str]:
    """100 tokens in Google's order (specials first), lower-cased as an uncased release's are."""
    specials = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = ["the", "of", "and", "to", "in", "is", "was", "it", "for", "on", "as", "with",
             "he", "she", "they", "at", "by", "this", "that", "from", "be", "are", "an", "or",
             "his", "her", "one", "two", "new", "first", "time", "year", "bert", "model", "text"]
    pieces = [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    chars = list("abcdefghijklmnopqrstuvwxyz") + list(".,;:!?'\"()-")
    tokens = specials + words + pieces + chars
    return tokens[:CONFIG["vocab_size"]]


def encoder_variables(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """google-research/bert's modeling.py names and shapes (a dense kernel is [in, out])."""
    H, I, V = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]
    P, S = CONFIG["max_position_embeddings"], CONFIG["type_vocab_size"]

    def normal(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(prefix: str, out: dict[str, np.ndarray]) -> None:
        # gamma near 1 and beta near 0, but neither exactly: a swapped pair would show
        out[f"{prefix}/LayerNorm/gamma"] = (1.0 + normal(H, scale=0.1)).astype(np.float32)
        out[f"{prefix}/LayerNorm/beta"] = normal(H, scale=0.1)

    out: dict[str, np.ndarray] = {
        "bert/embeddings/word_embeddings": normal(V, H),
        "bert/embeddings/token_type_embeddings": normal(S, H),
        "bert/embeddings/position_embeddings": normal(P, H),
    }
    norm("bert/embeddings", out)
    for i in range(CONFIG["num_hidden_layers"]):
        layer = f"bert/encoder/layer_{i}"
        for part in ("query", "key", "value"):
            # larger than the initializer's scale, so attention is far from uniform
            out[f"{layer}/attention/self/{part}/kernel"] = normal(H, H, scale=0.3)
            out[f"{layer}/attention/self/{part}/bias"] = normal(H, scale=0.1)
        out[f"{layer}/attention/output/dense/kernel"] = normal(H, H, scale=0.2)
        out[f"{layer}/attention/output/dense/bias"] = normal(H, scale=0.1)
        norm(f"{layer}/attention/output", out)
        out[f"{layer}/intermediate/dense/kernel"] = normal(H, I, scale=0.2)
        out[f"{layer}/intermediate/dense/bias"] = normal(I, scale=0.1)
        out[f"{layer}/output/dense/kernel"] = normal(I, H, scale=0.2)
        out[f"{layer}/output/dense/bias"] = normal(H, scale=0.1)
        norm(f"{layer}/output", out)
    out["bert/pooler/dense/kernel"] = normal(H, H, scale=0.2)
    out["bert/pooler/dense/bias"] = normal(H, scale=0.1)
    return out


def pretraining_heads(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """run_pretraining.py's get_masked_lm_output and get_next_sentence_output: the NSP and
    the squad/classifier weights are [labels, hidden] (used with transpose_b=True)."""
    H, V = CONFIG["hidden_size"], CONFIG["vocab_size"]
    return {
        "cls/predictions/transform/dense/kernel": (rng.standard_normal((H, H)) * 0.2).astype(np.float32),
        "cls/predictions/transform/dense/bias": (rng.standard_normal(H) * 0.1).astype(np.float32),
        "cls/predictions/transform/LayerNorm/gamma": (1 + rng.standard_normal(H) * 0.1).astype(np.float32),
        "cls/predictions/transform/LayerNorm/beta": (rng.standard_normal(H) * 0.1).astype(np.float32),
        "cls/predictions/output_bias": (rng.standard_normal(V) * 0.1).astype(np.float32),
        "cls/seq_relationship/output_weights": (rng.standard_normal((2, H)) * 0.2).astype(np.float32),
        "cls/seq_relationship/output_bias": (rng.standard_normal(2) * 0.1).astype(np.float32),
    }


def save(values: dict[str, np.ndarray], prefix: Path, *, devices: int = 1, adam: bool = False,
         global_step: int | None = None, version: int = 2, partition: str | None = None) -> None:
    """Save `values` as tf.compat.v1 variables under their own names, the way a
    google-research/bert run does (Saver; AdamWeightDecayOptimizer's slots NAME/adam_m and
    NAME/adam_v when `adam`). `devices` > 1 places the variables round-robin on that many CPU
    devices and saves one shard per device (Saver(sharded=True))."""
    graph = tf1.Graph()
    with graph.as_default():
        rng = np.random.default_rng(7)
        variables, assigns = [], []
        for n, (name, value) in enumerate(values.items()):
            with tf1.device(f"/cpu:{n % devices}"):
                if name == partition:
                    # a partitioned variable: several slice variables saved as one sliced entry
                    var = tf1.get_variable(name, shape=value.shape, dtype=tf.float32,
                                           initializer=tf1.zeros_initializer(),
                                           partitioner=tf1.fixed_size_partitioner(2))
                    for piece in var:  # each slice takes its rows of the value
                        start = piece._save_slice_info.var_offset[0]
                        assigns.append(piece.assign(value[start:start + piece.shape[0]]))
                        variables.append(piece)
                    continue
                variables.append(tf1.Variable(value, name=name))
                if adam:
                    for slot in ("adam_m", "adam_v"):
                        moment = rng.standard_normal(value.shape).astype(np.float32) * 1e-3
                        variables.append(tf1.Variable(np.abs(moment) if slot == "adam_v" else moment,
                                                      name=f"{name}/{slot}", trainable=False))
        if global_step is not None:
            variables.append(tf1.Variable(np.int64(global_step), name="global_step",
                                          trainable=False))
        write_version = tf1.train.SaverDef.V1 if version == 1 else tf1.train.SaverDef.V2
        saver = tf1.train.Saver(sharded=devices > 1, write_version=write_version,
                                save_relative_paths=True)
        config = tf1.ConfigProto(device_count={"CPU": devices})
        with tf1.Session(graph=graph, config=config) as session:
            session.run(tf1.global_variables_initializer())
            session.run(assigns)
            saver.save(session, str(prefix), global_step=None, write_meta_graph=False,
                       write_state=global_step is not None)
    if global_step is not None:  # a run's name, model.ckpt-STEP, as run_*.py's estimator writes
        state = prefix.parent / "checkpoint"
        state.write_text(f'model_checkpoint_path: "{prefix.name}"\n'
                         f'all_model_checkpoint_paths: "{prefix.name}"\n', encoding="utf-8")


def tensor_record(array: np.ndarray) -> dict:
    array = np.asarray(array)  # a scalar stays 0-d (np.ascontiguousarray makes it 1-d)
    return {"dtype": str(array.dtype), "shape": list(array.shape),
            "sha256": hashlib.sha256(array.tobytes()).hexdigest()}


def tf_reading(prefix: Path) -> dict[str, dict]:
    """TensorFlow's own reader on `prefix`: every tensor it lists."""
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: tensor_record(reader.get_tensor(name))
            for name in sorted(reader.get_variable_to_shape_map())}


def transformers_conversion(folder: Path) -> dict:
    """transformers' own converter on a release folder: BertForPreTraining's state dict."""
    import torch
    import transformers
    from transformers.models.bert.modeling_bert import load_tf_weights_in_bert

    config = transformers.BertConfig.from_json_file(str(folder / "bert_config.json"))
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(config)
    load_tf_weights_in_bert(model, config, str(folder / "bert_model.ckpt"))
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return {"transformers": transformers.__version__,
            "tensors": {k: tensor_record(v) for k, v in sorted(state.items())}}


def write_release_files(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bert_config.json").write_text(json.dumps(CONFIG, indent=2) + "\n", encoding="utf-8")
    (folder / "vocab.txt").write_text("".join(f"{t}\n" for t in vocabulary()), encoding="utf-8")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output", type=Path, help="tests/fixtures/google")
    out = parser.parse_args(argv).output
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rng = np.random.default_rng(2018)
    encoder = encoder_variables(rng)
    heads = pretraining_heads(rng)
    H = CONFIG["hidden_size"]
    classifier = {"output_weights": (rng.standard_normal((NUM_LABELS, H)) * 0.2).astype(np.float32),
                  "output_bias": (rng.standard_normal(NUM_LABELS) * 0.1).astype(np.float32)}
    squad = {"cls/squad/output_weights": (rng.standard_normal((2, H)) * 0.2).astype(np.float32),
             "cls/squad/output_bias": (rng.standard_normal(2) * 0.1).astype(np.float32)}

    checkpoints = {
        f"{RELEASE}/bert_model.ckpt": dict(values={**encoder, **heads}),
        f"{RELEASE}_sharded/bert_model.ckpt": dict(values={**encoder, **heads}, devices=3),
        "run_classifier/model.ckpt-30": dict(values={**encoder, **classifier}, adam=True,
                                             global_step=30),
        "run_squad/model.ckpt-12": dict(values={**encoder, **squad}, global_step=12),
        "sliced/bert_model.ckpt": dict(values={**encoder, **heads},
                                       partition="bert/embeddings/word_embeddings"),
    }
    expected: dict = {"tensorflow": tf.__version__, "config": CONFIG, "checkpoints": {}}
    for rel, kwargs in checkpoints.items():
        prefix = out / rel
        prefix.parent.mkdir(parents=True, exist_ok=True)
        save(prefix=prefix, **kwargs)
        expected["checkpoints"][rel] = tf_reading(prefix)
    for folder in (RELEASE, f"{RELEASE}_sharded", "sliced"):
        write_release_files(out / folder)
    try:
        (out / "v1").mkdir()
        save({**encoder, **heads}, out / "v1" / "bert_model.ckpt", version=1)
        write_release_files(out / "v1")
    except Exception as err:  # a TensorFlow that no longer writes V1: the tests make their own
        shutil.rmtree(out / "v1", ignore_errors=True)
        print(f"no V1 checkpoint: {type(err).__name__}: {err}", file=sys.stderr)
    expected["transformers_converter"] = {RELEASE: transformers_conversion(out / RELEASE)}
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")
    for path in sorted(out.rglob("*")):
        if path.is_file():
            print(f"{path.stat().st_size:8d}  {path.relative_to(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
