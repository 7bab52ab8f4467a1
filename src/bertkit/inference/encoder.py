"""Embeddings and per-token features for many texts, fast: `Encoder`.

Shape legend: B pieces in a batch, T longest piece, S real tokens of the batch (sum of lengths),
H hidden, N heads, D head dim, L layers asked for.

Where the speed comes from, in the order it pays on a CPU:
- pieces are sorted by token length and batched with their neighbours (dynamic padding); results
  go back to the input order;
- packed dense layers: the real tokens of a batch are laid end to end, (S, H), for the embeddings,
  the linear layers, GELU and LayerNorm; only attention sees the padded (B, N, T, D) layout, so no
  FLOP outside attention is spent on padding;
- `torch.inference_mode`; bf16 autocast (CPUs with AVX512-BF16/AMX, GPUs); int8 dynamic
  quantization of the linear layers as an option (`bertkit.inference.int8`: a recipe that keeps
  the quality, and the int8 variant folders `bertkit quantize` writes with their measured drift).

Texts are taken a window at a time (`WINDOW_TEXTS`, `encode_windows`): tokenized, grouped by length
and run, so memory stays flat in the number of texts and results arrive from the first window.
With `batch_invariant`, every batch holds pieces of one length (no padding) and every dense layer
sees at least `min_rows()` rows, so a text's vector is bit-for-bit the same whatever its batch
and neighbours (fp32 on one machine); the default batching mixes neighbouring lengths and may
differ in the last bits.

Long texts are truncated at `max_length` (counted in `last_stats.truncated`) or, with `stride`,
cut into overlapping windows whose token vectors are merged: each token is taken from the window
where it has the most context, as in BERT's SQuAD recipe (`_check_is_max_context`).
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from bertkit.checkpoint import check_model_dir, check_vocab
from bertkit.errors import BertkitError
from bertkit.inference.int8 import Int8Recipe, Int8Variant, default_recipe, quantize_model, read_variant
from bertkit.io import progress_bar, read_json_object
from bertkit.model import BertModel
from bertkit.tokenization import BertTokenizer
from bertkit.tokenization.windows import context_score, window_starts
from bertkit.training.hardware import PRECISIONS, resolve_device, resolve_precision
from bertkit.varlen import VarlenLayout

log = logging.getLogger("bertkit")

Pooling = Literal["cls", "mean", "max"]
Combine = Literal["concat", "sum", "none"]
POOLINGS = ("cls", "mean", "max")
COMBINES = ("concat", "sum", "none")
# the training precisions, and int8 (dynamic quantization of the Linear layers) for inference
INFERENCE_PRECISIONS = (*PRECISIONS, "int8")
# The pooling of a plain BERT's frozen features: the mean over the tokens is the stronger sentence
# vector; the raw [CLS] vector was trained only for next-sentence prediction (Reimers & Gurevych,
# Sentence-BERT, 2019). A sentence-transformers checkpoint names its own (its 1_Pooling config).
FROZEN_POOLING: Pooling = "mean"
WINDOW_TEXTS = 8192  # texts tokenized and batched at a time: memory is bounded by a window


@dataclass
class InferenceStats:
    """What the last `encode`/`features` call did (for the CLI summary)."""

    texts: int = 0
    pieces: int = 0  # model inputs: one per text, more for texts cut into windows
    tokens: int = 0  # real tokens, [CLS]/[SEP] included
    padded_tokens: int = 0  # attention slots spent on padding
    truncated: int = 0  # texts cut at max_length (no stride)
    seconds: float = 0.0


@dataclass
class TokenFeatures:
    """Per-token vectors of one text (the layout of Google's `extract_features.py`)."""

    tokens: list[str]
    offsets: list[tuple[int, int]]  # character offsets into the text; (0, 0) for [CLS]/[SEP]
    type_ids: list[int]  # 0 = first text, 1 = pair text
    vectors: np.ndarray  # (T, L*H) concat, (T, H) sum, (T, L, H) none


@dataclass
class TextWindow:
    """Consecutive texts (and pair texts) encoded together; `keys` are the caller's (ids, line
    numbers), carried through untouched so results can be written beside them."""

    texts: Sequence[str]
    pairs: Sequence[str] | None = None
    keys: Sequence[Any] | None = None


def text_windows(texts: Sequence[str], pairs: Sequence[str] | None = None,
                 size: int = WINDOW_TEXTS) -> Iterator[TextWindow]:
    """`texts` (and `pairs`) cut into windows of `size`."""
    for i in range(0, len(texts), size):
        yield TextWindow(texts[i:i + size], None if pairs is None else pairs[i:i + size])


@dataclass
class _Piece:
    """One model input row: a whole text, or one window of a long text."""

    text: int  # index of the text it comes from
    ids: list[int]
    type_ids: list[int]
    start: int = 0  # index of its first content token among the text's content tokens


@dataclass
class _Tokenized:
    """One text after tokenization, [CLS]/[SEP] included, before windowing."""

    ids: list[int]
    type_ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]


class Encoder:
    """Texts -> vectors (`encode`) or per-token features (`features`) with a BERT encoder.

    `Encoder(model_dir)` loads the model and tokenizer from an HF-layout directory; a
    sentence-transformers directory also gives the default pooling (`1_Pooling/config.json`) and
    maximum length (`sentence_bert_config.json`). `Encoder(model, tokenizer=tok)` wraps objects.

    An int8 variant folder (`bertkit quantize`) runs at int8 with its recipe under precision
    None (the default: the model's own), "auto" or "int8", its measured drift logged, and at
    fp32 when asked; `int8=` gives a recipe or a variant's record directly. A plain model at
    "int8" takes `int8.default_recipe`, whose drift nobody measured (said in the log).
    """

    def __init__(self, model: str | os.PathLike | BertModel, tokenizer: BertTokenizer | None = None,
                 *, device: str | torch.device = "cpu", precision: str | None = None,
                 max_length: int | None = None, pooling: Pooling | None = None,
                 packed: bool = True, int8: Int8Recipe | Int8Variant | None = None):
        if precision is not None and precision not in INFERENCE_PRECISIONS:
            raise BertkitError(f"precision must be one of {', '.join(INFERENCE_PRECISIONS)}, "
                               f"got {precision!r}")
        st_length, st_pooling = None, None
        self.variant = int8 if isinstance(int8, Int8Variant) else None
        int8 = int8.recipe if isinstance(int8, Int8Variant) else int8
        if not isinstance(model, nn.Module):
            model_dir = check_model_dir(model)
            self.variant = self.variant or read_variant(model_dir)
            int8 = int8 or (self.variant.recipe if self.variant else None)
            st_length, st_pooling = sentence_transformers_settings(model_dir)
            tokenizer = tokenizer or BertTokenizer.from_pretrained(model_dir)
            model = BertModel.from_pretrained(model_dir)
            check_vocab(model.config, tokenizer, model_dir)
        if tokenizer is None:
            raise BertkitError("Encoder(model) needs tokenizer=... when given a model object")
        self.device = resolve_device(device)
        # a quantized variant's own precision is int8 (None: the model's own, fp32 otherwise);
        # fp32 stays one explicit request away
        if precision in (None, "auto") and int8 is not None:
            precision = "int8"
        self.precision = resolve_precision(precision or "fp32", self.device)
        if self.precision == "int8":
            int8 = int8 or default_recipe(model)
            if self.variant is not None:
                log.info("%s", self.variant.summary())
            else:
                log.info("int8: %s; its drift from fp32 was not measured (`bertkit quantize` "
                         "measures it on your texts)", int8.describe())
        self.int8 = int8 if self.precision == "int8" else None  # the recipe in use
        self.tokenizer = tokenizer
        self.config = model.config
        self.max_length = min(max_length or st_length or self.config.max_position_embeddings,
                              self.config.max_position_embeddings)
        if self.max_length < 3:
            raise BertkitError(f"max_length must be at least 3 ([CLS] x [SEP]), got {max_length}")
        self.default_pooling: Pooling = pooling or st_pooling or FROZEN_POOLING
        self.packed = packed
        self.model = prepare_model(model, self.device, self.precision, self.int8)
        self.last_stats = InferenceStats()

    # ---- public API -------------------------------------------------------------------------

    def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
               pooling: Pooling | None = None, normalize: bool = False, batch_size: int = 32,
               stride: int | None = None, progress: bool = False, layers: Sequence[int] = (-1,),
               batch_invariant: bool = False) -> np.ndarray:
        """One vector per text, (len(texts), L*H) float32, in the input order: the pooled
        vector of each of `layers` (HF `hidden_states` numbering, -1 = last), concatenated in
        the order asked. Runs a window of texts at a time (`encode_windows`)."""
        out = np.zeros((len(texts), len(layers) * self.config.hidden_size), dtype=np.float32)
        row = 0
        for _, vectors in self.encode_windows(text_windows(texts, pairs), total=len(texts),
                                              pooling=pooling, normalize=normalize,
                                              batch_size=batch_size, stride=stride,
                                              progress=progress, layers=layers,
                                              batch_invariant=batch_invariant):
            out[row:row + len(vectors)] = vectors
            row += len(vectors)
        return out

    def encode_windows(self, windows: Iterable[TextWindow], total: int | None = None,
                       pooling: Pooling | None = None, normalize: bool = False,
                       batch_size: int = 32, stride: int | None = None, progress: bool = False,
                       layers: Sequence[int] = (-1,), batch_invariant: bool = False
                       ) -> Iterator[tuple[TextWindow, np.ndarray]]:
        """(window, its vectors (len(window.texts), L*H) float32) for each window, in order,
        as each is done; `total` texts (when known) sizes the progress bar. `last_stats` counts
        the whole stream."""
        pooling = pooling or self.default_pooling
        if pooling not in POOLINGS:
            raise BertkitError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        hidden_index = self.check_layers(layers)
        self._check_run(batch_size, stride)
        yield from self._each_window(windows, total, progress, lambda window, bar: (
            self._encode_window(window, hidden_index, pooling, normalize, batch_size, stride,
                                bar, batch_invariant)))

    def features(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                 layers: Sequence[int] = (-1, -2, -3, -4), combine: Combine = "concat",
                 batch_size: int = 32, stride: int | None = None,
                 progress: bool = False, batch_invariant: bool = False) -> list[TokenFeatures]:
        """Per-token vectors of the given layers (HF `hidden_states` numbering: 0 = embeddings,
        -1 = last layer), with tokens and character offsets. The paper's feature-based NER used
        the concat of the last four layers."""
        result: list[TokenFeatures] = []
        for _, feats in self.features_windows(text_windows(texts, pairs), total=len(texts),
                                              layers=layers, combine=combine,
                                              batch_size=batch_size, stride=stride,
                                              progress=progress, batch_invariant=batch_invariant):
            result.extend(feats)
        return result

    def features_windows(self, windows: Iterable[TextWindow], total: int | None = None,
                         layers: Sequence[int] = (-1, -2, -3, -4), combine: Combine = "concat",
                         batch_size: int = 32, stride: int | None = None,
                         progress: bool = False, batch_invariant: bool = False
                         ) -> Iterator[tuple[TextWindow, list[TokenFeatures]]]:
        """`features` a window at a time: (window, its texts' features), in order."""
        if combine not in COMBINES:
            raise BertkitError(f"combine must be one of {', '.join(COMBINES)}, got {combine!r}")
        hidden_index = self.check_layers(layers)
        self._check_run(batch_size, stride)
        yield from self._each_window(windows, total, progress, lambda window, bar: (
            self._features_window(window, hidden_index, combine, batch_size, stride, bar,
                                  batch_invariant)))

    def _each_window(self, windows: Iterable[TextWindow], total: int | None, progress: bool,
                     work: Callable[[TextWindow, Any], Any]) -> Iterator[tuple[TextWindow, Any]]:
        """(window, work(window, bar)) for each window, in order, under one progress bar;
        `last_stats` counts the whole stream."""
        start_time = time.perf_counter()
        self.last_stats = InferenceStats()
        with self._progress(total, progress) as bar:
            for window in windows:
                yield window, work(window, bar)
                self.last_stats.seconds = time.perf_counter() - start_time

    def precision_record(self) -> dict[str, Any]:
        """What an answer says about how its vectors were computed: the precision and, at int8,
        the recipe and the drift measured for it (None when nobody measured it)."""
        record: dict[str, Any] = {"precision": self.precision}
        if self.int8 is not None:
            record["int8"] = self.int8.describe()
            record["drift"] = asdict(self.variant.drift) if self.variant else None
        return record

    def check_layers(self, layers: Sequence[int]) -> list[int]:
        """The `hidden_states` indices of `layers`; a layer the model lacks is an error."""
        if not layers:
            raise BertkitError("no layer given")
        return [self._hidden_index(i) for i in layers]

    # ---- one window -------------------------------------------------------------------------

    def _encode_window(self, window: TextWindow, hidden_index: list[int], pooling: Pooling,
                       normalize: bool, batch_size: int, stride: int | None, bar: Any,
                       batch_invariant: bool) -> np.ndarray:
        items = self._tokenize(window.texts, window.pairs)
        pieces = self._pieces(items, stride)
        out = np.zeros((len(items), len(hidden_index) * self.config.hidden_size), dtype=np.float32)
        windowed: dict[int, list[tuple[int, torch.Tensor]]] = {}
        n_windows = count_by_text(pieces)
        for batch, hidden in self._run(pieces, hidden_index, batch_size, bar, batch_invariant):
            x = torch.cat([h.float() for h in hidden], dim=1)  # (S, L*H), layers in the order asked
            lengths = [len(p.ids) for p in batch]
            single = [i for i, p in enumerate(batch) if n_windows[p.text] == 1]
            if single:
                pooled = pool_packed(x, lengths, pooling)  # (B, L*H)
                rows = [batch[i].text for i in single]
                out[rows] = pooled[single].cpu().numpy()
            if len(single) < len(batch):
                for piece, vec in zip(batch, x.split(lengths)):
                    if n_windows[piece.text] > 1:
                        windowed.setdefault(piece.text, []).append((piece.start, vec))
        for text, parts in windowed.items():
            merged = merge_windows(parts, len(items[text].ids) - 2)  # (T, L*H)
            out[text] = pool_packed(merged, [merged.shape[0]], pooling)[0].cpu().numpy()
        if normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def _features_window(self, window: TextWindow, hidden_index: list[int], combine: Combine,
                         batch_size: int, stride: int | None, bar: Any,
                         batch_invariant: bool) -> list[TokenFeatures]:
        items = self._tokenize(window.texts, window.pairs)
        pieces = self._pieces(items, stride)
        parts: dict[int, list[tuple[int, torch.Tensor]]] = {}
        for batch, hidden in self._run(pieces, hidden_index, batch_size, bar, batch_invariant):
            stacked = torch.stack([h.float() for h in hidden], dim=1)  # (S, L, H)
            for piece, vec in zip(batch, stacked.split([len(p.ids) for p in batch])):
                parts.setdefault(piece.text, []).append((piece.start, vec.cpu()))
        result = []
        for text, item in enumerate(items):
            vec = merge_windows(parts[text], len(item.ids) - 2)  # (T, L, H)
            if combine == "concat":
                vec = vec.reshape(vec.shape[0], -1)  # (T, L*H), layers in the order asked
            elif combine == "sum":
                vec = vec.sum(dim=1)  # (T, H)
            result.append(TokenFeatures(item.tokens, item.offsets, item.type_ids, vec.numpy()))
        return result

    # ---- steps ------------------------------------------------------------------------------

    def _hidden_index(self, layer: int) -> int:
        n = self.config.num_hidden_layers
        if not -(n + 1) <= layer <= n:
            raise BertkitError(f"layer {layer} out of range for a {n}-layer model "
                               f"(0 = embeddings .. {n}, or -1 = last .. {-(n + 1)})")
        return layer if layer >= 0 else n + 1 + layer

    def _tokenize(self, texts: Sequence[str], pairs: Sequence[str] | None) -> list[_Tokenized]:
        """Tokenize in full (`tokenizers` uses its threads); pairs longer than max_length are
        cut by the tokenizer's longest-first rule, single texts later by `_pieces`."""
        self.last_stats.texts += len(texts)
        encodings = self.tokenizer.encode_batch(texts, pairs, truncation=False)
        items = []
        for i, enc in enumerate(encodings):
            if pairs is not None and len(enc.input_ids) > self.max_length:
                self.last_stats.truncated += 1
                enc = self.tokenizer.encode(texts[i], pairs[i], max_length=self.max_length)
            items.append(_Tokenized(enc.input_ids, enc.token_type_ids, enc.tokens, enc.offsets))
        return items

    def _pieces(self, items: list[_Tokenized], stride: int | None) -> list[_Piece]:
        """Cut each long text to max_length: truncate it (and count), or windows with `stride`.
        A truncated text's item is replaced by its kept part, so features show what was seen."""
        M = self.max_length
        pieces = []
        for i, item in enumerate(items):
            if len(item.ids) <= M:
                pieces.append(_Piece(i, item.ids, item.type_ids))
            elif stride is None:
                self.last_stats.truncated += 1
                cut = slice(0, M - 1)  # keep [CLS] + the first M-2 tokens, then the final [SEP]
                items[i] = _Tokenized(item.ids[cut] + item.ids[-1:], item.type_ids[:M],
                                      item.tokens[cut] + item.tokens[-1:],
                                      item.offsets[cut] + item.offsets[-1:])
                pieces.append(_Piece(i, items[i].ids, items[i].type_ids))
            else:
                pieces.extend(window_pieces(i, item.ids, M, stride))
        self.last_stats.pieces += len(pieces)
        return pieces

    def _check_run(self, batch_size: int, stride: int | None) -> None:
        if batch_size < 1:
            raise BertkitError(f"batch_size must be positive, got {batch_size}")
        M = self.max_length
        if stride is not None and not 1 <= stride <= M - 2:
            raise BertkitError(f"stride must be in [1, {M - 2}] (max_length - 2), got {stride}")

    def _progress(self, total: int | None, progress: bool) -> Any:
        return progress_bar(total=total, disable=not progress, unit="text", desc="encoding")

    def _run(self, pieces: list[_Piece], hidden_index: list[int], batch_size: int, bar: Any,
             batch_invariant: bool = False):
        """Yield (batch of pieces, [hidden (S, H) per asked-for layer]) in length-sorted order;
        `bar` counts a text when its first piece is done."""
        lengths = [len(p.ids) for p in pieces]
        if batch_invariant:
            batches = exact_length_batches(lengths, batch_size)
        else:
            batches = length_batches(lengths, batch_size)
        with torch.inference_mode(), self._autocast():
            for index in batches:
                batch = [pieces[i] for i in index]
                run = batch_with_min_rows(batch, min_rows()) if batch_invariant else batch
                packed = pack(run, self.device)
                real = sum(len(p.ids) for p in batch)
                self.last_stats.tokens += real
                self.last_stats.padded_tokens += len(run) * packed.max_len - packed.num_tokens
                if self.packed:
                    hidden = packed_forward(self.model, packed, hidden_index)
                else:
                    hidden = padded_forward(self.model, packed, hidden_index)
                yield batch, [h[:real] for h in hidden]
                bar.update(sum(1 for p in batch if p.start == 0))

    def _autocast(self) -> AbstractContextManager:
        if self.precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
            return torch.autocast(self.device.type, dtype=dtype)
        return nullcontext()


# ---- model preparation ----------------------------------------------------------------------


def sentence_transformers_settings(model_dir: Path) -> tuple[int | None, Pooling | None]:
    """(max_seq_length, pooling) of a sentence-transformers directory, (None, None) otherwise:
    all-MiniLM-L6-v2 was trained with 256 tokens and mean pooling, and its vectors need both."""
    length, pooling = None, None
    st_config = model_dir / "sentence_bert_config.json"
    if st_config.is_file():
        length = read_json_object(st_config).get("max_seq_length")
    pool_config = model_dir / "1_Pooling" / "config.json"
    if pool_config.is_file():
        modes = read_json_object(pool_config)
        for mode, name in (("cls_token", "cls"), ("mean_tokens", "mean"), ("max_tokens", "max")):
            if modes.get(f"pooling_mode_{mode}"):
                pooling = name
                break
    return length, pooling


def prepare_model(model: BertModel, device: torch.device, precision: str,
                  int8: Int8Recipe | None = None) -> nn.Module:
    """Eval mode on `device`. bf16/fp16: a copy whose linear weights are cast once (autocast
    would cast them again for every batch), LayerNorm and embeddings stay fp32. int8: a copy with
    the encoder's linear layers quantized by `int8` (default `int8.default_recipe`), CPU only.
    The pooler is never used here."""
    if precision == "int8" and device.type != "cpu":
        raise BertkitError("precision int8 (dynamic quantization) runs on the CPU only")
    if precision == "fp16" and device.type == "cpu":
        raise BertkitError("precision fp16 needs a GPU; use bf16 on the CPU")
    if precision in ("bf16", "fp16"):
        model = copy.deepcopy(model)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.to(dtype)
    model = model.to(device).eval()
    if precision == "int8":
        model = quantize_model(model, int8 or default_recipe(model))
    return model


# ---- batching, windows, pooling --------------------------------------------------------------


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (memory trouble shows at
    once, not after an hour); the caller puts the results back in the input order."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def exact_length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of one length each, longest first: no padding, so a piece's
    attention never depends on its neighbours' lengths."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < batch_size and lengths[batches[-1][0]] == lengths[i]:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def min_rows() -> int:
    """The fewest rows a dense layer sees in batch-invariant mode. CPU BLAS kernels take
    another summation order for a matrix of few rows (measured: under 12 rows with 2 threads,
    under 52 with 32; so it grows with the threads); above that, a row's result does not depend
    on how many other rows there are."""
    return max(256, 8 * torch.get_num_threads())


def batch_with_min_rows(batch: list[_Piece], rows: int) -> list[_Piece]:
    """`batch` repeated until it holds at least `rows` tokens; the copies come after the
    originals, so the first rows of the result are the batch's own."""
    tokens = sum(len(p.ids) for p in batch)
    return batch * -(-rows // tokens)


def window_pieces(text: int, ids: list[int], max_length: int, stride: int) -> list[_Piece]:
    """[CLS] c_s .. c_{s+W-1} [SEP] windows of W = max_length-2 content tokens, starting every
    `stride` tokens (Google's doc_stride), until the last content token is covered."""
    content = ids[1:-1]
    W = max_length - 2
    return [_Piece(text, ids[:1] + content[s:s + W] + ids[-1:],
                   [0] * (len(content[s:s + W]) + 2), s)
            for s in window_starts(len(content), W, stride)]


def count_by_text(pieces: list[_Piece]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for piece in pieces:
        counts[piece.text] = counts.get(piece.text, 0) + 1
    return counts


def merge_windows(parts: list[tuple[int, torch.Tensor]], n_content: int) -> torch.Tensor:
    """Token vectors of a text's windows -> one (n_content + 2, ...) sequence. Each content token
    comes from the window where min(left, right) context is largest (+0.01 x window length to
    break ties, as BERT's run_squad); [CLS] and [SEP] are averaged over the windows."""
    if len(parts) == 1:
        return parts[0][1]
    first = parts[0][1]
    out = first.new_zeros((n_content + 2, *first.shape[1:]))
    best = torch.full((n_content,), -1.0, device=first.device)
    for start, vec in parts:
        W = vec.shape[0] - 2
        j = torch.arange(W, device=first.device)
        score = context_score(j, W)  # (W,)
        take = score > best[start:start + W]
        best[start:start + W] = torch.where(take, score, best[start:start + W])
        out[1 + start:1 + start + W][take] = vec[1:-1][take]
    out[0] = torch.stack([vec[0] for _, vec in parts]).mean(0)
    out[-1] = torch.stack([vec[-1] for _, vec in parts]).mean(0)
    return out


def pool_packed(x: torch.Tensor, lengths: Sequence[int], pooling: Pooling) -> torch.Tensor:
    """(S, H) tokens of B pieces laid end to end -> (B, H). Mean and max include [CLS]/[SEP], as
    sentence-transformers does."""
    n = torch.as_tensor(lengths, device=x.device)  # (B,)
    if pooling == "cls":
        return x.index_select(0, n.cumsum(0) - n)  # the first token of each piece
    seg = torch.repeat_interleave(torch.arange(len(lengths), device=x.device), n)  # (S,)
    if pooling == "mean":
        total = x.new_zeros(len(lengths), x.shape[1]).index_add_(0, seg, x)  # (B, H)
        return total / n[:, None].to(x.dtype)
    out = x.new_full((len(lengths), x.shape[1]), float("-inf"))  # (B, H)
    return out.scatter_reduce_(0, seg[:, None].expand_as(x), x, "amax")


# ---- packed batches: the real tokens end to end (model.py runs them) -----------------------


@dataclass
class PackedBatch:
    input_ids: torch.Tensor  # (S,) the real tokens of B pieces, end to end
    type_ids: torch.Tensor  # (S,)
    positions: torch.Tensor  # (S,) position of each token in its piece
    layout: VarlenLayout  # their cu_seqlens, and where they sit in a padded (B, T) batch
    lengths: list[int]

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def max_len(self) -> int:
        return self.layout.max_seqlen


def pack(pieces: Sequence[_Piece], device: torch.device) -> PackedBatch:
    lengths = [len(p.ids) for p in pieces]
    ids = torch.tensor([t for p in pieces for t in p.ids], dtype=torch.long)  # (S,)
    types = torch.tensor([t for p in pieces for t in p.type_ids], dtype=torch.long)  # (S,)
    n = torch.tensor(lengths)
    starts = torch.repeat_interleave(n.cumsum(0) - n, n)  # (S,) offset of each token's piece
    positions = torch.arange(len(ids)) - starts  # (S,)
    return PackedBatch(ids.to(device), types.to(device), positions.to(device),
                       VarlenLayout.from_lengths(lengths, device=device), lengths)


def packed_forward(model: BertModel, batch: PackedBatch, hidden_index: list[int]
                   ) -> list[torch.Tensor]:
    """`BertModel.forward_varlen` on a packed batch: hidden states (S, H) per index."""
    return model.forward_varlen(batch.input_ids, batch.type_ids, batch.positions, batch.layout,
                                hidden_index)


def padded_forward(model: BertModel, batch: PackedBatch, hidden_index: list[int]
                   ) -> list[torch.Tensor]:
    """The plain `BertModel.forward` on the padded batch, results packed to (S, H) (reference
    path, and the one to use if the packed path ever disagrees with a changed model.py)."""
    layout = batch.layout
    ids, types = layout.pad(batch.input_ids), layout.pad(batch.type_ids)  # (B, T)
    mask = layout.pad(torch.ones_like(batch.input_ids))  # (B, T)
    out = model(ids, types, mask, output_hidden_states=True)
    return [layout.unpad(out.hidden_states[i]) for i in hidden_index]
