"""bertkit.sklearn as scikit-learn users use it: the embedder in a Pipeline, cross_val_score,
GridSearchCV over pooling, clone and pickle; the fine-tuning estimators fit / predict /
predict_proba / score on a tiny BERT; the applicable estimator checks."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.utils import estimator_checks

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import BertForPreTraining
from bertkit.inference.encoder import Encoder
from bertkit.sklearn import BertClassifier, BertEmbedder, BertRegressor
from bertkit.tokenization import BertTokenizer


@pytest.fixture(scope="module")
def sst2(shared_data) -> tuple[list[str], np.ndarray]:
    """60 real SST-2 training sentences with their labels, balanced."""
    lines = (shared_data / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines[1:]]
    pos = [r for r in rows if r[1] == "1"][:30]
    neg = [r for r in rows if r[1] == "0"][:30]
    picked = [r for pair in zip(pos, neg) for r in pair]
    return [r[0] for r in picked], np.asarray([int(r[1]) for r in picked])


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, minilm_path):
    """A tiny random BERT with MiniLM's vocabulary: fine-tuning in seconds."""
    out = tmp_path_factory.mktemp("tiny") / "m"
    tokenizer = BertTokenizer.from_pretrained(minilm_path)
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=len(tokenizer.vocab))
    BertForPreTraining(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_embedder_is_the_encoders_mean_pooled_vectors_with_names(minilm_path, sst2):
    texts, _ = sst2
    emb = BertEmbedder(minilm_path, layers=(-1, -2)).fit(texts)
    X = emb.transform(texts[:5])
    expected = Encoder(minilm_path).encode(texts[:5], layers=[-1, -2], batch_invariant=True)
    np.testing.assert_array_equal(X, expected)
    assert X.shape == (5, 2 * 384)
    names = emb.get_feature_names_out()
    assert len(names) == X.shape[1] and names[0] == "bert_l-1_0" and names[384] == "bert_l-2_0"
    # batch-invariant: a text's vector does not depend on the others in the call
    np.testing.assert_array_equal(emb.transform(texts[2:3]), X[2:3])


def test_embedder_in_a_pipeline_cross_validated_and_grid_searched(minilm_path, sst2):
    texts, y = sst2
    # (the plumbing is what is tested here: the default batching, which is faster on a few
    # texts of many lengths than the batch-invariant one)
    pipe = make_pipeline(BertEmbedder(minilm_path, batch_invariant=False, threads=1),
                         LogisticRegression(max_iter=1000))
    scores = cross_val_score(pipe, texts, y, cv=3)
    assert scores.mean() > 0.7, scores  # MiniLM's frozen features separate SST-2 sentences
    grid = GridSearchCV(pipe, {"bertembedder__pooling": ["mean", "cls"]}, cv=2)
    grid.fit(texts[:40], y[:40])
    assert grid.best_params_["bertembedder__pooling"] in ("mean", "cls")
    assert len(grid.cv_results_["mean_test_score"]) == 2


def test_embedder_clones_and_pickles_by_model_path(minilm_path, sst2, tmp_path):
    texts, _ = sst2
    emb = BertEmbedder(minilm_path, pooling="max", normalize=True)
    copy = clone(emb)
    assert copy.get_params() == emb.get_params() and "_encoder" not in copy.__dict__
    emb.fit(texts)
    data = pickle.dumps(emb)
    assert len(data) < 10_000  # settings and the path, not the weights
    again = pickle.loads(data)
    np.testing.assert_array_equal(again.transform(texts[:3]), emb.transform(texts[:3]))
    emb.set_params(pooling="mean")
    assert emb.get_params()["pooling"] == "mean"


def test_embedder_refuses_what_it_cannot_do(minilm_path):
    with pytest.raises(BertkitError, match="layer"):
        BertEmbedder(minilm_path, layers=(12,)).fit(["a"])
    emb = BertEmbedder(minilm_path).fit(["a"])
    with pytest.raises(BertkitError, match="not a text"):
        emb.transform(["fine", 3])
    with pytest.raises(BertkitError, match="shape"):
        emb.transform(np.asarray([["a", "b", "c"]]))
    with pytest.raises(BertkitError, match="model folder"):
        BertEmbedder().fit(["a"])


@pytest.mark.parametrize("check", [
    estimator_checks.check_parameters_default_constructible,
    estimator_checks.check_get_params_invariance,
    estimator_checks.check_set_params,
    estimator_checks.check_no_attributes_set_in_init,
    estimator_checks.check_estimator_cloneable,
    estimator_checks.check_do_not_raise_errors_in_init_or_set_params,
])
@pytest.mark.parametrize("cls", [BertEmbedder, BertClassifier, BertRegressor])
def test_applicable_estimator_checks(check, cls):
    check(cls.__name__, cls())


def test_classifier_fits_predicts_and_scores_pairs_and_texts(tiny_dir, sst2, tmp_path):
    texts, y = sst2
    labels = np.where(y == 1, "pos", "neg")
    clf = BertClassifier(tiny_dir, lr=1e-3, epochs=1, batch_size=16, max_length=32, seed=1,
                         output_dir=tmp_path, threads=1)
    clf.fit(texts, labels)
    assert list(clf.classes_) == ["neg", "pos"]
    proba = clf.predict_proba(texts[:8])
    assert proba.shape == (8, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-4)
    predicted = clf.predict(texts[:8])
    assert set(predicted) <= {"neg", "pos"}
    np.testing.assert_array_equal(predicted, clf.classes_[proba.argmax(axis=1)])
    assert 0.0 <= clf.score(texts, labels) <= 1.0
    # the same seed gives the same model: the same probabilities
    again = clone(clf).fit(texts, labels)
    np.testing.assert_allclose(again.predict_proba(texts[:8]), proba, atol=1e-6)
    # integer labels come back as integers; pairs are read as (A, B) columns
    pairs = np.asarray([[t, t] for t in texts[:20]], dtype=object)
    ints = BertClassifier(tiny_dir, epochs=1, max_length=32, output_dir=tmp_path).fit(pairs, y[:20])
    assert ints.predict(pairs[:4]).dtype == y.dtype
    restored = pickle.loads(pickle.dumps(ints))
    assert restored.predict(pairs[:4]).tolist() == ints.predict(pairs[:4]).tolist()


def test_regressor_fits_and_scores(tiny_dir, sst2, tmp_path):
    texts, y = sst2
    scores = y * 4.0 + 0.5
    reg = BertRegressor(tiny_dir, lr=1e-3, epochs=1, max_length=32,
                        output_dir=tmp_path).fit(texts, scores)
    predicted = reg.predict(texts[:6])
    assert predicted.shape == (6,) and np.all(np.isfinite(predicted))
    assert np.isfinite(reg.score(texts, scores))
    with pytest.raises(BertkitError, match="finite"):
        BertRegressor(tiny_dir, output_dir=tmp_path).fit(texts[:2], [1.0, float("nan")])


def test_classifier_refuses_one_class_and_mismatched_lengths(tiny_dir, tmp_path):
    with pytest.raises(BertkitError, match="one class"):
        BertClassifier(tiny_dir, output_dir=tmp_path).fit(["a", "b"], [1, 1])
    with pytest.raises(BertkitError, match="2 texts and y 3"):
        BertClassifier(tiny_dir, output_dir=tmp_path).fit(["a", "b"], [0, 1, 0])
    assert not list(tmp_path.glob("bertkit-fit-*/run/config.json"))  # nothing trained
