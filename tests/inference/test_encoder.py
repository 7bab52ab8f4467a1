"""Encoder: packed forward == BertModel.forward, order restored after bucketing, pooling,
features layout, long / empty inputs, stride windows, precisions, and parity with
sentence-transformers on the real MiniLM checkpoint."""

import numpy as np
import pytest
import torch

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.inference import Encoder
from bertkit.inference.encoder import merge_windows
from bertkit.model import BertModel
from bertkit.tokenization import BertTokenizer

WORDS = ("the a cat dog sat on mat and of to in is was hello world paris weather today "
         "much long ##er ##s ##dog sentence about").split()
VOCAB = list(dict.fromkeys(
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "?"] + WORDS
    + list("abcdefghijklmnopqrstuvwxyz") + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]))
TEXTS = [
    "the cat sat on the mat.",
    "",
    "hello world!",
    "   \t  ",
    "a much longer sentence about the weather in paris today, and about a dog.",
    "dogs",
    "the dog sat on the cat, and the cat was not amused at all.",
]


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=len(VOCAB), max_position_embeddings=64)
    model = BertModel(config).eval()
    tokenizer = BertTokenizer({token: i for i, token in enumerate(VOCAB)})
    return model, tokenizer


@pytest.fixture(scope="module")
def encoder(tiny):
    model, tokenizer = tiny
    return Encoder(model, tokenizer=tokenizer, max_length=64)


def reference_hidden(model, tokenizer, text, pair=None):
    """BertModel.forward on one unpadded text: every hidden state, (L+1) x (T, H)."""
    enc = tokenizer.encode(text, pair, truncation=False)
    ids = torch.tensor([enc.input_ids])
    types = torch.tensor([enc.token_type_ids])
    with torch.no_grad():
        out = model(ids, types, output_hidden_states=True)
    return [h[0] for h in out.hidden_states]


def test_packed_and_padded_paths_equal_plain_forward_in_input_order(tiny):
    model, tokenizer = tiny
    pairs = ["a dog", "the cat.", "", "hello", "paris", "on the mat and on the mat", "x"]
    for packed in (True, False):
        enc = Encoder(model, tokenizer=tokenizer, max_length=64, packed=packed)
        got = enc.encode(TEXTS, pairs, pooling="mean", batch_size=3)
        assert enc.last_stats.padded_tokens > 0, "batches must really be padded"
        for i, (text, pair) in enumerate(zip(TEXTS, pairs)):
            want = reference_hidden(model, tokenizer, text, pair)[-1].mean(0)
            np.testing.assert_allclose(got[i], want.numpy(), atol=1e-5)


def test_order_restored_and_batch_size_irrelevant(encoder):
    texts = TEXTS * 3
    one = encoder.encode(texts, batch_size=1)
    many = encoder.encode(texts, batch_size=5)
    np.testing.assert_allclose(one, many, atol=1e-5)
    np.testing.assert_allclose(many[: len(TEXTS)], many[len(TEXTS): 2 * len(TEXTS)], atol=1e-6)
    assert len({tuple(np.round(v, 4)) for v in many[: len(TEXTS)]}) == len(TEXTS) - 1  # "" ~ "  "


def test_pooling_modes_and_normalize(tiny, encoder):
    model, tokenizer = tiny
    text = TEXTS[4]
    last = reference_hidden(model, tokenizer, text)[-1]  # (T, H)
    expected = {"cls": last[0], "mean": last.mean(0), "max": last.max(0).values}
    for pooling, want in expected.items():
        got = encoder.encode([TEXTS[0], text], pooling=pooling)[1]
        np.testing.assert_allclose(got, want.numpy(), atol=1e-5, err_msg=pooling)
    unit = encoder.encode(TEXTS, pooling="mean", normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    with pytest.raises(BertkitError, match="pooling"):
        encoder.encode(TEXTS, pooling="median")


def test_features_layout_on_crafted_input(tiny, encoder):
    model, tokenizer = tiny
    text = "Hello, catdog world!"
    hidden = reference_hidden(model, tokenizer, text)
    H, L = model.config.hidden_size, model.config.num_hidden_layers
    (feat,) = encoder.features([text], layers=(-1, -2, 0), combine="concat")
    assert feat.tokens == ["[CLS]", "hello", ",", "cat", "##dog", "world", "!", "[SEP]"]
    assert feat.offsets == [(0, 0), (0, 5), (5, 6), (7, 10), (10, 13), (14, 19), (19, 20), (0, 0)]
    for token, (s, e) in zip(feat.tokens[1:-1], feat.offsets[1:-1]):
        assert text[s:e].lower() == token.removeprefix("##")
    assert feat.vectors.shape == (8, 3 * H)
    np.testing.assert_allclose(feat.vectors[:, :H], hidden[L].numpy(), atol=1e-5)
    np.testing.assert_allclose(feat.vectors[:, H:2 * H], hidden[L - 1].numpy(), atol=1e-5)
    np.testing.assert_allclose(feat.vectors[:, 2 * H:], hidden[0].numpy(), atol=1e-5)
    (none,) = encoder.features([text], layers=(-1, -2, 0), combine="none")
    (total,) = encoder.features([text], layers=(-1, -2, 0), combine="sum")
    assert none.vectors.shape == (8, 3, H)
    np.testing.assert_allclose(total.vectors, none.vectors.sum(1), atol=1e-5)
    with pytest.raises(BertkitError, match="layer 5 out of range"):
        encoder.features([text], layers=(5,))


def test_pair_features_have_segments(encoder):
    (feat,) = encoder.features(["the cat"], ["a dog."], layers=(-1,))
    assert feat.tokens == ["[CLS]", "the", "cat", "[SEP]", "a", "dog", ".", "[SEP]"]
    assert feat.type_ids == [0, 0, 0, 0, 1, 1, 1, 1]
    assert feat.offsets[4:7] == [(0, 1), (2, 5), (5, 6)]  # into the pair's own text


def test_empty_whitespace_and_huge_inputs(encoder):
    huge = "the cat sat on the mat. " * 4200  # 100,800 characters
    assert len(huge) >= 100_000
    vectors = encoder.encode(["", "   ", "\n\t", huge, "cat"], pooling="mean")
    assert np.isfinite(vectors).all() and vectors.shape == (5, 128)
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)  # both are [CLS] [SEP]
    assert encoder.last_stats.truncated == 1 and encoder.last_stats.pieces == 5
    (feat,) = encoder.features([huge], layers=(-1,))
    assert len(feat.tokens) == 64 and feat.tokens[-1] == "[SEP]"


def test_stride_windows_cover_every_token_with_most_context(tiny):
    model, tokenizer = tiny
    enc = Encoder(model, tokenizer=tokenizer, max_length=16)
    text = " ".join(["the cat sat on the mat and the dog sat on a cat"] * 3)
    full = tokenizer.encode(text, truncation=False)
    (feat,) = enc.features([text], layers=(-1,), stride=6)
    assert enc.last_stats.pieces > 2 and enc.last_stats.truncated == 0
    assert feat.tokens == full.tokens and feat.offsets == full.offsets
    # a token in the middle of window 2 (content 6..19) is that window's own vector
    window = [full.input_ids[0]] + full.input_ids[7:21] + [full.input_ids[-1]]
    with torch.no_grad():
        alone = model(torch.tensor([window])).last_hidden_state[0]  # (16, H)
    np.testing.assert_allclose(feat.vectors[1 + 12], alone[1 + 6].numpy(), atol=1e-5)
    pooled = enc.encode([text], pooling="mean", stride=6)[0]
    np.testing.assert_allclose(pooled, feat.vectors.mean(0), atol=1e-5)
    with pytest.raises(BertkitError, match="stride"):
        enc.encode([text], stride=15)


def test_merge_windows_takes_max_context():
    n = 10
    a = torch.arange(8, dtype=torch.float32)[:, None] + 100  # window at 0: content 0..5
    b = torch.arange(8, dtype=torch.float32)[:, None] + 200  # window at 4: content 4..9
    merged = merge_windows([(0, a), (4, b)], n)[:, 0]
    # content 0..3 only in a; 4 (a: min(4,1)=1, b: 0) from a; 5 (a: 0, b: 1) from b
    assert merged[1:6].tolist() == [101, 102, 103, 104, 105]
    assert merged[6:11].tolist() == [202, 203, 204, 205, 206]
    assert merged[0] == 150 and merged[-1] == 157  # [CLS]/[SEP]: mean over windows


def test_reduced_precisions_stay_close(tiny, encoder):
    model, tokenizer = tiny
    ref = encoder.encode(TEXTS, pooling="mean", normalize=True)
    bf16 = Encoder(model, tokenizer=tokenizer, precision="bf16").encode(TEXTS, pooling="mean",
                                                                        normalize=True)
    assert (ref * bf16).sum(1).min() > 0.999
    q = Encoder(model, tokenizer=tokenizer, precision="int8").encode(TEXTS, pooling="mean", normalize=True)
    assert (ref * q).sum(1).min() > 0.95
    with pytest.raises(BertkitError, match="precision"):
        Encoder(model, tokenizer=tokenizer, precision="fp8")


@pytest.fixture(scope="module")
def st_reference(minilm_path, shared_data):
    st = pytest.importorskip("sentence_transformers")
    lines = (shared_data / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    texts = [line.split("\t")[0] for line in lines[1:25]]
    squad = (shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8")
    texts += ["", "   ", squad[5000:8000]]  # a long one: truncated at 256 tokens by both
    model = st.SentenceTransformer(str(minilm_path), device="cpu")
    return texts, model.encode(texts, batch_size=16, convert_to_numpy=True)


@pytest.mark.parametrize("precision,bound", [("fp32", 0.99999), ("bf16", 0.999)])
def test_parity_with_sentence_transformers(minilm_path, st_reference, precision, bound):
    texts, want = st_reference
    enc = Encoder(minilm_path, precision=precision)
    assert enc.max_length == 256 and enc.default_pooling == "mean"
    got = enc.encode(texts, pooling="mean", normalize=True, batch_size=16)
    assert enc.last_stats.truncated == 1
    cosine = (got * want).sum(1) / np.linalg.norm(want, axis=1)
    assert cosine.min() >= bound, (precision, cosine.min())
