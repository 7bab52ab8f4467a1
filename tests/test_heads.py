"""Every head class equals its transformers counterpart with identical weights (fp32, eval), and
the round trip through save_pretrained works both ways."""

import pytest
import torch
import transformers

import bertkit.model
from bertkit import heads
from bertkit.checkpoint import to_hf_state_dict
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.model import packed_layout
from tests.helpers import real_sentences

TOL = 1e-5


@pytest.fixture(scope="module")
def enc(minilm_path, shared_data):
    tok = transformers.BertTokenizerFast.from_pretrained(minilm_path)
    texts = real_sentences(shared_data, 4)
    return dict(tok(texts[:2], texts[2:], padding=True, return_tensors="pt"))


def hf_then_ours(minilm_path, tmp_path, hf_cls, ours_cls, **hf_kwargs):
    """A transformers head model on MiniLM (its head seeded), saved, then loaded by bertkit."""
    torch.manual_seed(0)
    ref = hf_cls.from_pretrained(minilm_path, **hf_kwargs).eval()
    ref.save_pretrained(tmp_path / "hf")
    ours = ours_cls.from_pretrained(tmp_path / "hf")
    return ref, ours


def close(a, b):
    return (a - b).abs().max().item() < TOL


def test_pretraining_head(minilm_path, tmp_path, enc):
    ref, ours = hf_then_ours(minilm_path, tmp_path, transformers.BertForPreTraining,
                             heads.BertForPreTraining)
    labels = enc["input_ids"].clone()
    labels[:, ::2] = -100
    nsp = torch.tensor([0, 1])
    with torch.no_grad():
        a = ours(**enc, labels=labels, next_sentence_label=nsp)
        b = ref(**enc, labels=labels, next_sentence_label=nsp)
    assert close(a.mlm_logits, b.prediction_logits)
    assert close(a.nsp_logits, b.seq_relationship_logits)
    assert close(a.loss, b.loss)


def test_sparse_mlm_equals_dense_at_the_positions(minilm_path, tmp_path, enc):
    _, ours = hf_then_ours(minilm_path, tmp_path, transformers.BertForPreTraining,
                           heads.BertForPreTraining)
    positions = torch.tensor([[1, 3, 5], [2, 4, 0]])
    ids = torch.gather(enc["input_ids"], 1, positions)
    weights = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # last slot is padding
    with torch.no_grad():
        dense = ours(**enc).mlm_logits
        sparse = ours(**enc, masked_lm_positions=positions, masked_lm_ids=ids,
                      masked_lm_weights=weights)
    assert sparse.mlm_logits.shape == (2, 3, 30522)
    gathered = dense[torch.arange(2)[:, None], positions]
    assert close(sparse.mlm_logits, gathered)
    # Google's loss: weighted mean over the real masked positions only
    ce = torch.nn.functional.cross_entropy(gathered.reshape(-1, 30522), ids.reshape(-1),
                                           reduction="none")
    expected = (ce * weights.reshape(-1)).sum() / weights.sum()
    assert abs(sparse.mlm_loss.item() - expected.item()) < 1e-4
    assert sparse.nsp_loss is None and torch.equal(sparse.loss, sparse.mlm_loss)


def test_masked_lm_head(minilm_path, tmp_path, enc):
    ref, ours = hf_then_ours(minilm_path, tmp_path, transformers.BertForMaskedLM,
                             heads.BertForMaskedLM)
    labels = torch.where(enc["attention_mask"].bool(), enc["input_ids"], -100)
    with torch.no_grad():
        a, b = ours(**enc, labels=labels), ref(**enc, labels=labels)
    assert close(a.logits, b.logits) and close(a.loss, b.loss)


@pytest.mark.parametrize("num_labels", [3, 1])
def test_sequence_classification_head(minilm_path, tmp_path, enc, num_labels):
    ref, ours = hf_then_ours(minilm_path, tmp_path, transformers.BertForSequenceClassification,
                             heads.BertForSequenceClassification, num_labels=num_labels)
    labels = torch.tensor([0.3, 4.1]) if num_labels == 1 else torch.tensor([2, 0])
    with torch.no_grad():
        a, b = ours(**enc, labels=labels), ref(**enc, labels=labels)
    assert a.logits.shape == (2, num_labels)
    assert close(a.logits, b.logits) and close(a.loss, b.loss)


def test_token_classification_head(minilm_path, tmp_path, enc):
    ref, ours = hf_then_ours(minilm_path, tmp_path, transformers.BertForTokenClassification,
                             heads.BertForTokenClassification, num_labels=9)
    labels = torch.randint(0, 9, enc["input_ids"].shape)
    labels[:, 1::2] = -100
    with torch.no_grad():
        a, b = ours(**enc, labels=labels), ref(**enc, labels=labels)
    assert a.logits.shape == enc["input_ids"].shape + (9,)
    assert close(a.logits, b.logits) and close(a.loss, b.loss)


def test_question_answering_head(minilm_path, tmp_path, enc):
    ref, ours = hf_then_ours(minilm_path, tmp_path, transformers.BertForQuestionAnswering,
                             heads.BertForQuestionAnswering)
    start, end = torch.tensor([3, 500]), torch.tensor([5, 600])  # 2nd is outside: ignored
    with torch.no_grad():
        a = ours(**enc, start_positions=start, end_positions=end)
        b = ref(**enc, start_positions=start, end_positions=end)
    assert close(a.start_logits, b.start_logits) and close(a.end_logits, b.end_logits)
    assert close(a.loss, b.loss)


def test_multiple_choice_head(minilm_path, tmp_path, enc):
    ref, ours = hf_then_ours(minilm_path, tmp_path, transformers.BertForMultipleChoice,
                             heads.BertForMultipleChoice)
    choices = {k: v.unsqueeze(0).expand(3, -1, -1).contiguous() for k, v in enc.items()}  # (3, 2, T)
    labels = torch.tensor([1, 0, 1])
    with torch.no_grad():
        a, b = ours(**choices, labels=labels), ref(**choices, labels=labels)
    assert a.logits.shape == (3, 2)
    assert close(a.logits, b.logits) and close(a.loss, b.loss)
    with pytest.raises(ValueError, match="choices"):
        ours(**enc)


def test_round_trip_ours_to_transformers_and_back(tmp_path, enc):
    torch.manual_seed(1)
    config = BertConfig.preset("tiny", hidden_dropout_prob=0.0)
    ours = heads.BertForPreTraining(config).eval()
    with torch.no_grad():  # make the MLM bias non-trivial so a lost bias would show
        ours.mlm.bias.normal_()
    ours.save_pretrained(tmp_path / "ours")
    ref, info = transformers.BertForPreTraining.from_pretrained(tmp_path / "ours",
                                                                output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ref.eval()
    with torch.no_grad():
        a, b = ours(**enc), ref(**enc)
    assert close(a.mlm_logits, b.prediction_logits) and close(a.nsp_logits, b.seq_relationship_logits)
    ref.save_pretrained(tmp_path / "back")
    again = heads.BertForPreTraining.from_pretrained(tmp_path / "back")
    with torch.no_grad():
        c = again(**enc)
    assert torch.equal(c.mlm_logits, a.mlm_logits) and torch.equal(c.nsp_logits, a.nsp_logits)


@pytest.mark.parametrize("cls", sorted(heads.HEAD_CLASSES))
def test_every_head_saves_and_loads_identically(tmp_path, cls):
    torch.manual_seed(0)
    model = heads.HEAD_CLASSES[cls](BertConfig.preset("tiny", vocab_size=50)).eval()
    model.save_pretrained(tmp_path)
    again = heads.HEAD_CLASSES[cls].from_pretrained(tmp_path)
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name
    if hasattr(again, "mlm"):  # the decoder stays tied to the word embeddings
        assert again.mlm.word_embeddings.weight is again.bert.embeddings.word_embeddings.weight


def test_training_trajectory_equals_transformers():
    """30 AdamW steps from the same weights on the same batches: our sparse, weighted MLM + NSP
    loss and transformers' dense one (labels -100 elsewhere) stay equal step by step, so our
    gradients and weight tying match (the check behind docs/reports/ablations.md, finding 3)."""
    config = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    ours = heads.BertForPreTraining(config)
    ref = transformers.BertForPreTraining(transformers.BertConfig.from_dict(config.to_dict()))
    ref.load_state_dict(to_hf_state_dict(ours.state_dict()), strict=False)
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01) for m in (ours, ref)]
    g = torch.Generator().manual_seed(1)
    losses = []
    pool = torch.randint(5, 97, (8, 16), generator=g)  # a few sequences to memorise
    for _ in range(30):
        ids = pool[torch.randint(0, 8, (4,), generator=g)]  # (B, T)
        positions = torch.stack([torch.randperm(15, generator=g)[:3] + 1 for _ in range(4)])  # (B, P)
        weights = torch.tensor([[1.0, 1.0, 0.0]]).expand(4, 3)  # one padded prediction slot
        targets = torch.gather(ids, 1, positions)
        inputs = ids.scatter(1, positions, 4)  # [MASK] = 4 at the predicted positions
        nsp = torch.randint(0, 2, (4,), generator=g)
        labels = torch.full_like(ids, -100).scatter(1, positions[:, :2], targets[:, :2])
        a = ours(inputs, masked_lm_positions=positions, masked_lm_ids=targets,
                 masked_lm_weights=weights, next_sentence_label=nsp).loss
        b = ref(input_ids=inputs, labels=labels, next_sentence_label=nsp).loss
        losses.append((a.item(), b.item()))
        for model_loss, opt in zip((a, b), opts):
            model_loss.backward()
            opt.step()
            opt.zero_grad()
    first, last = (sum(x for x, _ in part) / 10 for part in (losses[:10], losses[-10:]))
    assert last < first - 0.2, losses  # it learned something: the gradients are not zero
    assert all(abs(x - y) < 1e-4 for x, y in losses), losses



@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_tied_decoder_gradients_equal_f_linear(precision):
    """The decoder's hand-written backward (`heads._TiedDecoderFunction`, which lets autograd add
    the embedding's gradient in place) gives F.linear's outputs and gradients, under bf16
    autocast too, and the tied weight still receives both uses' gradients."""
    torch.manual_seed(0)
    weight = torch.randn(50, 8, requires_grad=True)  # (V, H), also looked up as an embedding
    bias = torch.randn(50, requires_grad=True)
    ids = torch.randint(0, 50, (3, 5))
    results = []
    for decoder in (heads.tied_decoder, torch.nn.functional.linear):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            h = torch.nn.functional.embedding(ids, weight).tanh()  # (3, 5, H)
            logits = decoder(h[:, :2], weight, bias)  # (3, 2, V)
        if decoder is heads.tied_decoder:  # the hand-written backward is the one under test
            assert type(logits.grad_fn).__name__ == "_TiedDecoderFunctionBackward"
        (logits.float() * torch.linspace(-1, 1, 50)).sum().backward()
        results.append((logits, weight.grad, bias.grad))
        weight.grad = bias.grad = None
    for ours, reference in zip(*results):
        assert ours.dtype == reference.dtype
        assert torch.equal(ours, reference)


def test_tied_decoder_traces_as_a_linear_layer():
    """torch.jit.trace with gradients on (its check reruns under no_grad): the decoder is traced
    as F.linear, not as an opaque Python autograd node that makes the check fail."""
    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(50, 8))
            self.bias = torch.nn.Parameter(torch.randn(50))

        def forward(self, h):
            return heads.tied_decoder(h, self.weight, self.bias)

    torch.manual_seed(0)
    decoder = Decoder()
    traced = torch.jit.trace(decoder, torch.randn(3, 8))
    assert "aten::linear" in str(traced.graph) and "TiedDecoder" not in str(traced.graph)
    h = torch.randn(4, 8)
    assert torch.equal(traced(h), decoder(h))


# ---- packed training: the dense layers on real tokens only, same loss and gradients ------------

PACKED_TOL = 2e-5


def padded_batch(B=4, K=None, vocab=500, seed=0):
    """Random ids with lengths 3..T (right padding; one row full length), labels for each head."""
    g = torch.Generator().manual_seed(seed)
    T = 17
    rows = B * (K or 1)
    lengths = torch.randint(3, T, (rows,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (rows, T)
    ids = torch.randint(5, vocab, (rows, T), generator=g) * mask
    types = (torch.arange(T)[None, :] >= lengths[:, None] // 2).long() * mask
    shape = (B, K, T) if K else (B, T)
    return {"input_ids": ids.view(shape), "token_type_ids": types.view(shape),
            "attention_mask": mask.view(shape)}, g


def head_cases():
    def seq(batch, g):
        return {**batch, "labels": torch.randint(0, 3, (4,), generator=g)}

    def tok(batch, g):
        labels = torch.randint(0, 3, batch["input_ids"].shape, generator=g)
        return {**batch, "labels": labels.masked_fill(batch["attention_mask"] == 0, -100)}

    def pre(batch, g):
        pos = torch.stack([torch.randperm(3, generator=g) + 1 for _ in range(4)])  # (B, 3) real
        return {**batch, "masked_lm_positions": pos, "masked_lm_ids": torch.randint(5, 500, (4, 3)),
                "masked_lm_weights": torch.ones(4, 3), "next_sentence_label": torch.tensor([0, 1, 1, 0])}

    def choice(batch, g):
        return {**batch, "labels": torch.tensor([0, 1, 0, 1])}

    return {
        "sequence classification": (heads.BertForSequenceClassification, None, seq, {0: "a", 1: "b", 2: "c"}),
        "token classification": (heads.BertForTokenClassification, None, tok, {0: "O", 1: "B", 2: "I"}),
        "pre-training (MLM + NSP)": (heads.BertForPreTraining, None, pre, None),
        "masked LM (dense labels)": (heads.BertForMaskedLM, None, tok, None),
        "multiple choice": (heads.BertForMultipleChoice, 2, choice, None),
    }


@pytest.mark.parametrize("group_cost", [0.0, None])
@pytest.mark.parametrize("case", sorted(head_cases()))
def test_packed_training_gives_the_padded_loss_and_gradients(case, group_cost, monkeypatch):
    """Gradients, not only outputs: one backward through each, every parameter compared
    (dropout off so that both see the same function; tolerance PACKED_TOL, absolute).
    group_cost 0: attention runs once per distinct length (None: the default grouping)."""
    if group_cost is not None:
        monkeypatch.setattr(bertkit.model, "GROUP_COST", group_cost)
    cls, K, make_labels, id2label = head_cases()[case]
    labels = {"id2label": id2label, "label2id": {v: k for k, v in id2label.items()}} if id2label else {}
    config = BertConfig.preset("tiny", vocab_size=500, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0, **labels)
    torch.manual_seed(0)
    model = cls(config).train()
    batch, g = padded_batch(K=K)
    batch = make_labels(batch, g)
    calls = []
    unpadded = model.bert.forward_varlen
    model.bert.forward_varlen = lambda *a: calls.append(1) or unpadded(*a)
    grads = {}
    mask = batch["attention_mask"]
    for packed in (False, True):
        model.zero_grad()
        layout = packed_layout(mask.reshape(-1, mask.shape[-1])) if packed else None
        loss = model(**batch, layout=layout).loss
        loss.backward()
        grads[packed] = (loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()
                                       if p.grad is not None})
    assert calls == [1]  # the packed path ran (once), the padded one did not use it
    (loss_pad, g_pad), (loss_packed, g_packed) = grads[False], grads[True]
    assert abs(loss_pad - loss_packed) < PACKED_TOL
    assert g_pad.keys() == g_packed.keys() and len(g_pad) > 10
    for name in g_pad:
        assert (g_pad[name] - g_packed[name]).abs().max().item() < PACKED_TOL, name
    assert any(g.abs().sum() > 0 for g in g_pad.values())


def test_packed_forward_matches_at_real_tokens_and_trains_with_dropout():
    config = BertConfig.preset("tiny", vocab_size=500)
    torch.manual_seed(0)
    model = heads.BertForSequenceClassification(config).eval()
    batch, _ = padded_batch()
    ref = model.bert(**batch).last_hidden_state
    layout = packed_layout(batch["attention_mask"])
    out = model.bert(**batch, layout=layout).last_hidden_state
    real = batch["attention_mask"].bool()
    assert (ref[real] - out[real]).abs().max().item() < PACKED_TOL
    assert out[~real].abs().max().item() == 0  # padding comes back as zeros
    model.train()  # dropout on: runs, and differs from eval
    loss = model(**batch, labels=torch.zeros(4, dtype=torch.long), layout=layout).loss
    loss.backward()
    assert torch.isfinite(loss) and model.bert.embeddings.word_embeddings.weight.grad is not None


def test_span_qa_says_it_cannot_pack_and_refuses_a_layout():
    """QA's softmax over T reads padding positions: no head-level packing, and a layout given
    anyway is an error, not a silent padded forward."""
    assert [cls.supports_packing for cls in heads.HEAD_CLASSES.values()] == \
        [cls is not heads.BertForQuestionAnswering for cls in heads.HEAD_CLASSES.values()]
    model = heads.BertForQuestionAnswering(BertConfig.preset("tiny", vocab_size=500)).eval()
    batch, _ = padded_batch()
    with pytest.raises(BertkitError, match="BertForQuestionAnswering has no packed forward"):
        model(**batch, layout=packed_layout(batch["attention_mask"]))


@pytest.mark.parametrize("name,cls", [
    ("mlm+nsp", "BertForPreTraining"), ("mlm", "BertForMaskedLM"),
    ("classification", "BertForSequenceClassification"), ("tagging", "BertForTokenClassification"),
    ("span", "BertForQuestionAnswering"), ("choice", "BertForMultipleChoice")])
def test_every_head_builds_only_what_its_loss_trains(name, cls):
    """Under DDP a parameter that gets no gradient stops the second step (no
    find_unused_parameters cost is paid): one backward of each head's loss reaches every one of
    its parameters (the pooler only where the head reads it)."""
    import bertkit.heads as heads

    config = BertConfig.preset("tiny", vocab_size=50, id2label={0: "a", 1: "b", 2: "c"})
    torch.manual_seed(0)
    model = getattr(heads, cls)(config)
    B, T = 2, 9
    ids = torch.randint(5, 50, (B, T))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if name == "mlm+nsp":
        batch.update(masked_lm_positions=torch.tensor([[1, 4], [2, 3]]),
                     masked_lm_ids=torch.tensor([[7, 8], [9, 10]]),
                     next_sentence_label=torch.tensor([0, 1]))
    elif name == "mlm":
        batch.update(masked_lm_positions=torch.tensor([[1, 4], [2, 3]]),
                     masked_lm_ids=torch.tensor([[7, 8], [9, 10]]))
    elif name == "classification":
        batch["labels"] = torch.tensor([0, 2])
    elif name == "tagging":
        batch["labels"] = torch.randint(0, 3, (B, T))
    elif name == "span":
        batch.update(start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))
    else:
        K = 4
        batch = {"input_ids": torch.randint(5, 50, (B, K, T)),
                 "attention_mask": torch.ones(B, K, T, dtype=torch.long),
                 "labels": torch.tensor([0, 3])}
    model(**batch).loss.backward()
    unused = [n for n, p in model.named_parameters() if p.grad is None]
    assert unused == []
