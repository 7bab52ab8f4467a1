"""The frozen-feature approach of the learning curves (`learning_curve`, the demo's): the
model held at its weights, a mean-pooled vector per text (fp32, batch-invariant: a text's
vector is the same whatever else is encoded with it), and a linear model on top whose
regularization is chosen by cross-validation on the labelled subset alone: logistic regression
for a classification task, ridge regression for a regression task.

A pair task's two texts are one input (`[CLS] a [SEP] b [SEP]`) by default; with `apart`, each
text is embedded on its own and the linear model reads how the two vectors compare
(`pair_features`): the way a sentence encoder is used for similarity and inference.

A variant's vectors are computed once per text and kept under WORK/features/, so that every
size and seed reads them instead of encoding again."""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import BertkitError
from bertkit.inference.encoder import Encoder
from bertkit.io import atomic_path
from bertkit.studies.pipeline import main_score
from bertkit.tasks import get_task
from bertkit.tasks.glue import TextExample

POOLING = "mean"  # a plain BERT's [CLS] vector was trained for next-sentence prediction
FOLDS = 5  # cross-validation folds for the regularization (fewer where a class has fewer)


class FeatureCache:
    """One variant's vectors of one split's examples, by example index: encoded when first
    asked for, kept in FOLDER/NAME.npz (rewritten whole, atomically, as it grows)."""

    def __init__(self, encoder: Encoder, examples: Sequence[TextExample], path: Path,
                 apart: bool = False):
        self.encoder, self.examples, self.path, self.apart = encoder, examples, path, apart
        self.known: dict[int, np.ndarray] = {}
        if path.is_file():
            with np.load(path) as saved:
                self.known = dict(zip(saved["index"].tolist(), saved["vectors"]))

    def vectors(self, indices: Sequence[int]) -> np.ndarray:
        missing = sorted({int(i) for i in indices} - self.known.keys())
        if missing:
            texts = [self.examples[i].text_a for i in missing]
            pairs = [self.examples[i].text_b for i in missing]
            if self.apart:
                found = pair_features(self.encode(texts), self.encode(pairs))
            else:
                found = self.encode(texts, pairs if pairs[0] is not None else None)
            self.known.update(zip(missing, found))
            index = np.array(sorted(self.known), dtype=np.int64)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(self.path) as tmp, open(tmp, "wb") as f:
                np.savez(f, index=index, vectors=np.stack([self.known[i] for i in index]))
        return np.stack([self.known[int(i)] for i in indices])

    def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> np.ndarray:
        return self.encoder.encode(list(texts), None if pairs is None else list(pairs),
                                   pooling=POOLING, batch_invariant=True)


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """[u, v, |u - v|, u * v, cos(u, v)] per pair: the two texts' vectors and how they compare
    (the features of InferSent's and Sentence-BERT's classifiers, and the cosine a similarity
    search ranks by)."""
    norms = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    cosine = np.sum(u * v, axis=1) / np.maximum(norms, 1e-12)
    return np.concatenate([u, v, np.abs(u - v), u * v, cosine[:, None]], axis=1).astype(np.float32)


def frozen_encoder(model_dir: Path, max_length: int) -> Encoder:
    """The model at its weights in fp32 (never bf16: the vectors a model is fitted on must not
    depend on the batch or the CPU)."""
    return Encoder(model_dir, precision="fp32", max_length=max_length)


def fit_predict(task: str, train_x: np.ndarray, train_y: Sequence[Any], dev_x: np.ndarray,
                seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The linear model fitted on the subset (standardized features; its regularization chosen
    by cross-validation there) and its dev predictions, with the chosen regularization."""
    try:
        from sklearn.linear_model import LogisticRegressionCV, RidgeCV
        from sklearn.model_selection import StratifiedKFold
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
    except ImportError:
        raise BertkitError("the frozen approach fits scikit-learn's linear models: pip install "
                           "'bertkit[sklearn]' (or --approach finetune)") from None

    if get_task(task).regression:
        model = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-2, 5, 15)))
        model.fit(train_x, np.asarray(train_y, dtype=np.float64))
        return model.predict(dev_x), {"alpha": float(model[-1].alpha_)}
    labels = np.asarray([str(y) for y in train_y])
    smallest = min(np.unique(labels, return_counts=True)[1])
    folds = min(FOLDS, int(smallest))
    if folds < 2:
        raise BertkitError(f"{len(labels)} labels at seed {seed}: a class has {smallest} "
                           "example, and cross-validation needs two of each (use larger --sizes)")
    cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
    model = make_pipeline(StandardScaler(), LogisticRegressionCV(
        Cs=10, cv=cv, max_iter=2000, scoring="accuracy", **quiet_options(LogisticRegressionCV)))
    model.fit(train_x, labels)
    return model.predict(dev_x), {"C": float(np.ravel(model[-1].C_)[0]), "folds": folds}


def quiet_options(estimator: type) -> dict[str, Any]:
    """The L2 penalty and the fitted attributes said explicitly where scikit-learn (1.8 on) asks
    for them, so that its transition warnings stay out of the study's log; nothing before."""
    names = inspect.signature(estimator).parameters
    return {k: v for k, v in (("l1_ratios", (0.0,)), ("use_legacy_attributes", False)) if k in names}


def frozen_run(task: str, train: FeatureCache, dev: FeatureCache, indices: np.ndarray,
               seed: int) -> dict[str, Any]:
    """One frozen-feature measurement on the subset `indices`: its score on dev (0-100),
    whether every prediction is one answer (`collapsed`), the chosen regularization."""
    t0 = time.perf_counter()
    dev_idx = list(range(len(dev.examples)))
    predicted, chosen = fit_predict(task, train.vectors(indices),
                                    [train.examples[i].label for i in indices],
                                    dev.vectors(dev_idx), seed)
    t = get_task(task)
    predictions = {e.guid: (float(p) if t.regression else str(p))
                   for e, p in zip(dev.examples, predicted)}
    metrics = t.score(dev.examples, predictions)
    reason = t.collapse_reason(dev.examples, predictions)
    return {"score": round(main_score(task, metrics), 3), "collapsed": reason is not None,
            **({"collapse_reason": reason} if reason else {}), **chosen,
            "seconds": round(time.perf_counter() - t0, 1)}
