"""BertModel: parity with transformers on the real MiniLM checkpoint, padding invariance,
determinism, the causal mask, initialization and bad input."""

import pytest
import torch
import transformers

from bertkit.config import BertConfig
from bertkit.model import BertModel
from tests.helpers import real_sentences

TOL = 2e-5  # max abs difference, fp32, eval (oneDNN picks its GEMM kernels per CPU: 1.08e-5 seen on a Xeon)


@pytest.fixture(scope="module")
def pair(minilm_path):
    ours = BertModel.from_pretrained(minilm_path)
    ref = transformers.BertModel.from_pretrained(minilm_path, attn_implementation="eager").eval()
    return ours, ref


@pytest.fixture(scope="module")
def batch(minilm_path, shared_data):
    tok = transformers.BertTokenizerFast.from_pretrained(minilm_path)
    texts = real_sentences(shared_data, 8)
    enc = tok(texts, padding=True, return_tensors="pt")
    enc2 = tok(texts[:2], texts[2:4], padding=True, return_tensors="pt")  # pairs: segment ids 1
    assert enc["attention_mask"].float().mean() < 0.9, "the batch must really be padded"
    return enc, enc2


def max_diff(a, b):
    return (a - b).abs().max().item()


def test_parity_with_transformers(pair, batch):
    ours, ref = pair
    for enc in batch:
        with torch.no_grad():
            a = ours(**enc, output_hidden_states=True, output_attentions=True)
            b = ref(**enc, output_hidden_states=True, output_attentions=True)
        mask = enc["attention_mask"].bool()
        assert max_diff(a.last_hidden_state[mask], b.last_hidden_state[mask]) < TOL
        assert max_diff(a.last_hidden_state, b.last_hidden_state) < TOL
        assert max_diff(a.pooler_output, b.pooler_output) < TOL
        assert len(a.hidden_states) == len(b.hidden_states) == 7
        for x, y in zip(a.hidden_states, b.hidden_states):
            assert max_diff(x, y) < TOL
        assert len(a.attentions) == len(b.attentions) == 6
        for x, y in zip(a.attentions, b.attentions):
            assert x.shape == y.shape == (enc["input_ids"].shape[0], 12) + enc["input_ids"].shape[1:] * 2
            assert max_diff(x, y) < TOL


def test_sdpa_path_equals_explicit_softmax_path(pair, batch):
    ours, _ = pair
    enc = batch[0]
    with torch.no_grad():
        fast = ours(**enc).last_hidden_state
        slow = ours(**enc, output_attentions=True).last_hidden_state
    assert max_diff(fast, slow) < TOL


def test_padding_invariance(pair, minilm_path, shared_data):
    ours, _ = pair
    tok = transformers.BertTokenizerFast.from_pretrained(minilm_path)
    short, *longer = real_sentences(shared_data, 4)
    alone = tok([short], return_tensors="pt")
    together = tok([short, *longer], padding=True, return_tensors="pt")
    T = alone["input_ids"].shape[1]
    assert together["input_ids"].shape[1] > T
    with torch.no_grad():
        a = ours(**alone)
        b = ours(**together)
    assert max_diff(a.last_hidden_state[0], b.last_hidden_state[0, :T]) < TOL
    assert max_diff(a.pooler_output[0], b.pooler_output[0]) < TOL


def test_eval_is_deterministic_and_train_is_not():
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("tiny", vocab_size=100)).eval()
    ids = torch.randint(0, 100, (2, 16))
    with torch.no_grad():
        assert torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)
        model.train()
        assert not torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)


def test_causal_mask_hides_the_future():
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("tiny", vocab_size=100)).eval()
    ids = torch.randint(0, 100, (1, 12))
    changed = ids.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 100
    with torch.no_grad():
        a = model(ids, causal=True).last_hidden_state
        b = model(changed, causal=True).last_hidden_state
        c = model(changed).last_hidden_state
    assert max_diff(a[:, :8], b[:, :8]) == 0.0
    assert max_diff(a[:, 8:], b[:, 8:]) > 1e-3
    assert max_diff(a[:, :8], c[:, :8]) > 1e-3  # bidirectional does see the change


def test_bert_initialization():
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("mini"))
    w = model.layers[0].ffn.up.weight
    assert abs(w.std().item() - 0.02) < 0.001 and abs(w.mean().item()) < 0.001
    assert abs(model.embeddings.word_embeddings.weight[1:].std().item() - 0.02) < 0.001
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert torch.all(p == 0), name
        if "norm" in name and name.endswith("weight"):
            assert torch.all(p == 1), name


@pytest.mark.parametrize("ids, kwargs, message", [
    (torch.tensor([[1, 2, 100]]), {}, "input_ids out of range"),
    (torch.tensor([[1, -1]]), {}, "input_ids out of range"),
    (torch.tensor([1, 2, 3]), {}, "2-D"),
    (torch.tensor([[1.0, 2.0]]), {}, "integer"),
    (torch.zeros(1, 600, dtype=torch.long), {}, "max_position_embeddings"),
    (torch.tensor([[1, 2]]), {"attention_mask": torch.ones(1, 3)}, "attention_mask shape"),
    (torch.tensor([[1, 2]]), {"token_type_ids": torch.tensor([[0, 2]])}, "token_type_ids out"),
])
def test_bad_input_is_a_clear_value_error(ids, kwargs, message):
    model = BertModel(BertConfig.preset("tiny", vocab_size=100))
    with pytest.raises(ValueError, match=message):
        model(ids, **kwargs)
