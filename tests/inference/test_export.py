"""`bertkit export --format onnx`: dynamic batch/sequence axes, validated against PyTorch with
onnxruntime (skipped when the optional extra is absent); a failed validation leaves no file."""

import numpy as np
import pytest
import torch

import bertkit.inference.export
from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.inference import Encoder
from bertkit.inference.export import export_onnx
from bertkit.model import BertModel
from bertkit.tokenization import BertTokenizer
from tests.inference.test_encoder import VOCAB

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(2)
    path = tmp_path_factory.mktemp("tiny-model")
    config = BertConfig.preset("tiny", vocab_size=len(VOCAB), max_position_embeddings=32)
    BertModel(config).save_pretrained(path)
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}).save_pretrained(path)
    return path


def test_export_onnx_dynamic_axes(model_dir, tmp_path):
    out = tmp_path / "m.onnx"
    assert main(["export", str(model_dir), "--output", str(out)]) == 0
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    enc = Encoder(model_dir)
    texts = ["the cat sat on the mat.", "hello", "a dog and a cat in paris"]
    batch = enc.tokenizer.encode_padded(texts, return_tensors="np")
    inputs = {k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask",
                                                     "token_type_ids")}
    (hidden,) = session.run(None, inputs)
    mask = inputs["attention_mask"][..., None]
    pooled = (hidden * mask).sum(1) / mask.sum(1)  # (B, H) mean over real tokens
    np.testing.assert_allclose(pooled, enc.encode(texts, pooling="mean"), atol=1e-4)


def test_failed_validation_leaves_no_file(model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(bertkit.inference.export, "TOLERANCE", -1.0)  # nothing can pass
    out = tmp_path / "m.onnx"
    with pytest.raises(BertkitError, match="differs from PyTorch"):
        export_onnx(model_dir, out)
    assert not out.exists() and list(tmp_path.iterdir()) == []
