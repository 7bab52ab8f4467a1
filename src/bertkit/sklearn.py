"""scikit-learn estimators over bertkit: text in, numbers or predictions out.

- `BertEmbedder`: a transformer (`fit` / `transform`) that turns texts into fixed vectors from a
  BERT held at its weights (frozen features), for any scikit-learn model on top:
  `make_pipeline(BertEmbedder(model), LogisticRegression())`. Mean pooling by default (a plain
  BERT's [CLS] vector was trained for next-sentence prediction, not as a sentence vector; a
  sentence-transformers folder's own pooling wins when it names one), fp32 and batch-invariant,
  so a text's vector is the same whatever else is in the call.
- `BertClassifier` / `BertRegressor`: fine-tune the whole BERT with bertkit's own fine-tuning
  (`bertkit finetune custom`: the paper's recipe, seeded; `max_length` None: 128 tokens, or the
  model's positions when it has fewer), then `predict` / `predict_proba` / `score` as any
  scikit-learn estimator. Each `fit` writes its run folder (the fine-tuned model
  in Hugging Face's layout) under `output_dir`, a new folder per fit.

Texts come as a sequence of strings (a list, a 1-D array, a pandas Series), or as pairs: a 2-D
array or DataFrame of two text columns (sentence A, sentence B). The estimators are picklable by
model path: a pickled one holds its settings and folders, not the model's weights.
"""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.inference.encoder import Encoder
from bertkit.inference.finetuned import predict_examples, task_of
from bertkit.runs.finetune import FinetuneConfig, finetune_train_config, run_one
from bertkit.tasks import ColumnSpec
from bertkit.tasks.glue import TextExample

__all__ = ["BertClassifier", "BertEmbedder", "BertRegressor"]


def texts_and_pairs(X: Any) -> tuple[list[str], list[str] | None]:
    """X as (texts, pairs or None): a sequence of strings, or two columns of them."""
    if hasattr(X, "to_numpy"):  # a pandas Series or DataFrame
        X = X.to_numpy()
    array = np.asarray(X, dtype=object)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim == 1:
        texts, pairs = list(array), None
    elif array.ndim == 2 and array.shape[1] == 2:
        texts, pairs = list(array[:, 0]), list(array[:, 1])
    else:
        raise BertkitError(f"X must be a sequence of texts or two columns of them (sentence "
                           f"pairs); got an array of shape {array.shape}")
    for i, value in enumerate(texts + (pairs or [])):
        if not isinstance(value, str):
            raise BertkitError(f"X: row {i % len(texts)} holds a {type(value).__name__}, not a "
                               "text")
    return texts, pairs


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's thread count set for the block (None: as it is), then restored."""
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.lru_cache(maxsize=2)
def shared_encoder(model: str, max_length: int | None, precision: str) -> Encoder:
    """One loaded encoder per (model, settings), shared by the embedder's clones: a grid search
    or a cross-validation clones the embedder for every fit, and would otherwise load the same
    weights each time. (Kept out of pickles: a pickled embedder holds the path.)"""
    return Encoder(model, precision=precision, max_length=max_length)


class BertEmbedder(TransformerMixin, BaseEstimator):
    """Texts -> frozen BERT vectors, one row per text: (n, len(layers) * hidden).

    `model`: a model folder (HF layout, e.g. a sentence-transformers checkpoint or a bertkit
    export). `pooling`: "mean", "cls" or "max" (None: the folder's own, else mean). `layers`:
    which hidden states to pool (-1 the last; several are concatenated). `normalize`: unit
    length rows. `batch_invariant` (default): every text's vector bit-for-bit the same whatever
    its batch. `threads`: torch threads while transforming (None: as set)."""

    def __init__(self, model: str | Path | None = None, pooling: str | None = None,
                 layers: Sequence[int] = (-1,), normalize: bool = False,
                 max_length: int | None = None, batch_size: int = 32,
                 precision: str = "fp32", batch_invariant: bool = True,
                 threads: int | None = None):
        self.model = model
        self.pooling = pooling
        self.layers = layers
        self.normalize = normalize
        self.max_length = max_length
        self.batch_size = batch_size
        self.precision = precision
        self.batch_invariant = batch_invariant
        self.threads = threads

    def fit(self, X: Any = None, y: Any = None) -> BertEmbedder:
        """Load the model and check the settings (nothing is learned: the BERT is frozen)."""
        if self.model is None:
            raise BertkitError("BertEmbedder(model=...): give a model folder")
        encoder = self._load()
        encoder.check_layers(list(self.layers))  # a layer the model lacks: refused here
        self.hidden_size_ = encoder.config.hidden_size
        self.pooling_ = self.pooling or encoder.default_pooling
        self.n_features_out_ = len(self.layers) * self.hidden_size_
        return self

    def transform(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "n_features_out_")
        texts, pairs = texts_and_pairs(X)
        with torch_threads(self.threads):
            return self._load().encode(texts, pairs, pooling=self.pooling_,
                                       normalize=self.normalize, batch_size=self.batch_size,
                                       layers=list(self.layers),
                                       batch_invariant=self.batch_invariant)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """`bert_l{layer}_{i}`: the i-th component of the pooled layer."""
        check_is_fitted(self, "n_features_out_")
        return np.asarray([f"bert_l{layer}_{i}" for layer in self.layers
                           for i in range(self.hidden_size_)], dtype=object)

    def _load(self) -> Encoder:
        return shared_encoder(str(self.model), self.max_length, self.precision)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.requires_fit = True
        return tags


class _FineTuned(BaseEstimator):
    """What the classifier and the regressor share: the run, and predictions from its model."""

    _regression = False

    def __init__(self, model: str | Path | None = None, lr: float = 2e-5, epochs: float = 3.0,
                 batch_size: int = 32, max_length: int | None = None, seed: int = 0,
                 dropout: float | None = None, precision: str = "fp32",
                 output_dir: str | Path | None = None, threads: int | None = None,
                 progress: bool = False):
        self.model = model
        self.lr = lr
        self.epochs = epochs
        self.batch_size = batch_size
        self.max_length = max_length
        self.seed = seed
        self.dropout = dropout
        self.precision = precision
        self.output_dir = output_dir
        self.threads = threads
        self.progress = progress

    def _fit_run(self, X: Any, labels: list[str] | list[float]) -> None:
        """Fine-tune on (X, labels) into a new folder under output_dir; `model_dir_` is the
        fine-tuned model."""
        if self.model is None:
            raise BertkitError(f"{type(self).__name__}(model=...): give a model folder")
        texts, pairs = texts_and_pairs(X)
        if len(texts) != len(labels):
            raise BertkitError(f"X has {len(texts)} texts and y {len(labels)} labels")
        root = Path(self.output_dir) if self.output_dir is not None else Path(tempfile.gettempdir())
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="bertkit-fit-", dir=root))
        train_file = work / "train.jsonl"
        with train_file.open("w", encoding="utf-8") as f:
            for i, (text, label) in enumerate(zip(texts, labels)):
                row = {"text": text, "label": label, **({"pair": pairs[i]} if pairs else {})}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        columns = ColumnSpec(pair="pair" if pairs else None, regression=self._regression)
        train = finetune_train_config(str(work / "run"), lr=self.lr, batch_size=self.batch_size,
                                      seed=self.seed, precision=self.precision,
                                      progress=self.progress)
        cfg = FinetuneConfig(task="custom", model_dir=str(self.model), data_dir=str(work),
                             train=train, epochs=self.epochs, max_seq_length=self.max_length,
                             train_file=str(train_file), columns=columns, dropout=self.dropout,
                             predict_test=False)
        with torch_threads(self.threads):
            self.record_ = run_one(cfg)
        self.model_dir_ = str(work / "run")

    def _predictions(self, X: Any, scores: bool = False) -> list[dict[str, Any]]:
        check_is_fitted(self, "model_dir_")
        texts, pairs = texts_and_pairs(X)
        task = task_of(self.model_dir_, None)
        examples = [TextExample(str(i), text, pairs[i] if pairs else None, None, f"X[{i}]")
                    for i, text in enumerate(texts)]
        positions = BertConfig.load(self.model_dir_).max_position_embeddings
        settings = FinetuneConfig(task="custom", model_dir=self.model_dir_, data_dir=".",
                                  max_seq_length=self.max_length).settings(task, positions)
        with torch_threads(self.threads):
            return predict_examples(self.model_dir_, task, examples, settings,
                                    batch_size=max(self.batch_size, 64), scores=scores)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.non_deterministic = False
        return tags


class BertClassifier(ClassifierMixin, _FineTuned):
    """Fine-tune BERT to classify texts (or pairs); `classes_` in sorted order, as y held them."""

    def fit(self, X: Any, y: Any) -> BertClassifier:
        y = np.asarray(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) < 2:
            raise BertkitError(f"y holds one class ({self.classes_[0]!r}); a classifier needs two "
                               "or more")
        self._fit_run(X, [str(label) for label in y])
        return self

    def predict(self, X: Any) -> np.ndarray:
        by_name = {str(c): c for c in self.classes_}
        return np.asarray([by_name[r["label"]] for r in self._predictions(X)],
                          dtype=self.classes_.dtype)

    def predict_proba(self, X: Any) -> np.ndarray:
        """One column per class of `classes_`: the softmax of the model's logits."""
        names = [str(c) for c in self.classes_]
        return np.asarray([[r["scores"][n] for n in names]
                           for r in self._predictions(X, scores=True)], dtype=np.float64)


class BertRegressor(RegressorMixin, _FineTuned):
    """Fine-tune BERT to score texts (or pairs) with one number (a regression head)."""

    _regression = True

    def fit(self, X: Any, y: Any) -> BertRegressor:
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise BertkitError("y holds a value that is not a finite number")
        self._fit_run(X, [float(v) for v in y])
        return self

    def predict(self, X: Any) -> np.ndarray:
        return np.asarray([float(r["score"]) for r in self._predictions(X)])
