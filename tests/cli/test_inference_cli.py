"""`bertkit embed / features / similarity`: file formats, output layouts, bad records reported
with their line number."""

import json
import logging

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.inference import Encoder
from bertkit.inference.files import read_texts
from bertkit.model import BertModel
from bertkit.tokenization import BertTokenizer
from tests.inference.test_encoder import VOCAB


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("tiny-model")
    config = BertConfig.preset("tiny", vocab_size=len(VOCAB), max_position_embeddings=32)
    BertModel(config).save_pretrained(path)
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}).save_pretrained(path)
    return path


def test_embed_txt_to_npy_and_jsonl(model_dir, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="bertkit")
    lines = ["the cat sat.", "", "hello world", "the dog " * 40]  # last: over 32 tokens
    src = tmp_path / "texts.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    args = ["embed", str(model_dir), "--precision", "fp32", "--input", str(src), "--output",
            str(out), "--no-progress"]
    assert main(args + ["--pooling", "mean", "--normalize"]) == 0
    vectors = np.load(out)
    assert vectors.shape == (4, 128) and vectors.dtype == np.float32
    want = Encoder(model_dir, precision="fp32").encode(lines, pooling="mean", normalize=True)
    np.testing.assert_allclose(vectors, want, atol=1e-6)
    assert "4 texts" in caplog.text and "1 truncated at 32 tokens" in caplog.text
    out_jsonl = tmp_path / "v.jsonl"
    assert main(args[:-3] + ["--output", str(out_jsonl), "--no-progress"]) == 0
    records = [json.loads(line) for line in out_jsonl.read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2, 3] and len(records[0]["embedding"]) == 128


def test_inputs_jsonl_csv_tsv_with_pairs(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "a", "b": "x"}\n\n{"text": "b", "b": "y"}\n')
    (tmp_path / "a.csv").write_text('id,text\n1,"a, with comma"\n2,b\n', encoding="utf-8")
    (tmp_path / "a.tsv").write_text("text\tlabel\nquote \" inside\t1\n", encoding="utf-8")
    assert read_texts(tmp_path / "a.jsonl", "text", "b") == (["a", "b"], ["x", "y"])
    assert read_texts(tmp_path / "a.csv") == (["a, with comma", "b"], None)
    assert read_texts(tmp_path / "a.tsv")[0] == ['quote " inside']


@pytest.mark.parametrize("name,content,message", [
    ("bad.jsonl", '{"text": "ok"}\n{"text": "ok"}\n{"text": broken}\n', r"bad\.jsonl:3: invalid JSON"),
    ("bad.jsonl", '{"text": "ok"}\n{"text": 5}\n', r"bad\.jsonl:2: field 'text' must be a string"),
    ("bad.jsonl", '{"text": "ok"}\n\n{"body": "x"}\n', r"bad\.jsonl:3: no field 'text' \(its fields: body\)"),
    ("bad.csv", "text,label\nfine,1\nbroken\n", r"bad\.csv:3: expected 2 comma-separated fields"),
    ("bad.csv", "body,label\nfine,1\n",
     r"bad\.csv: no column 'text' \(its columns: body, label\); choose one with --text-column"),
    ("bad.txt", b"good\nstill good\n\xff\xfe bad\n", r"bad\.txt, line 3: not valid UTF-8"),
    ("bad.xml", "<a/>", r"unknown input type"),
    ("empty.txt", "", r"empty\.txt: no texts in it"),
    ("empty.jsonl", "\n", r"empty\.jsonl: no texts in it"),
])
def test_bad_record_reported_with_line_number(model_dir, tmp_path, capsys, name, content, message):
    src = tmp_path / name
    if isinstance(content, bytes):
        src.write_bytes(content)
    else:
        src.write_text(content, encoding="utf-8")
    with pytest.raises(BertkitError, match=message):
        read_texts(src)
    out = tmp_path / "v.npy"
    assert main(["embed", str(model_dir), "--input", str(src), "--output", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bertkit: error:") and not out.exists()


def test_features_cli_google_layout(model_dir, tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"text": "Hello, cat!"}) + "\n" + json.dumps("the dog") + "\n")
    out = tmp_path / "f.jsonl"
    args = ["features", str(model_dir), "--input", str(src), "--output", str(out),
            "--layers=-1,-2,0", "--no-progress"]
    assert main(args) == 0
    first, second = [json.loads(line) for line in out.read_text().splitlines()]
    assert first["linex_index"] == 0 and second["linex_index"] == 1
    tokens = first["features"]
    assert [t["token"] for t in tokens] == ["[CLS]", "hello", ",", "cat", "!", "[SEP]"]
    assert tokens[1]["offsets"] == [0, 5] and tokens[3]["offsets"] == [7, 10]
    assert [layer["index"] for layer in tokens[1]["layers"]] == [-1, -2, 0]
    assert all(len(layer["values"]) == 128 for t in tokens for layer in t["layers"])
    assert main(args + ["--combine", "concat"]) == 1  # never replaces an existing file
    concat_out = tmp_path / "concat.jsonl"
    assert main(args[:-3] + [str(concat_out), *args[-2:], "--combine", "concat"]) == 0
    concat = json.loads(concat_out.read_text().splitlines()[0])["features"][1]
    assert len(concat["values"]) == 3 * 128
    assert concat["values"][:128] == tokens[1]["layers"][0]["values"]
    assert main(args[:-2] + ["--layers=-1,x"]) == 1


def test_similarity_prints_cosine_matrix(model_dir, capsys):
    assert main(["similarity", str(model_dir), "the cat", "the cat", "hello world"]) == 0
    rows = [line.split()[1:] for line in capsys.readouterr().out.splitlines()[-3:]]
    matrix = np.array(rows, dtype=float)
    assert matrix.shape == (3, 3)
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-4)
    assert matrix[0, 1] == pytest.approx(1.0, abs=1e-4) and matrix[0, 2] < 0.9999
    np.testing.assert_allclose(matrix, matrix.T, atol=1e-4)
