"""`BertTokenizer`: BERT's WordPiece tokenizer, used everywhere in bertkit.

Basic tokenization (see :mod:`bertkit.tokenization.basic`), then greedy longest-match-first
WordPiece: each word is cut into the longest vocabulary piece from its start, then the longest
``##``-prefixed piece from there, and so on; a word that cannot be cut all the way becomes one
``[UNK]``. The `tokenizers` library (Rust) does the work; this module adds BERT's input layout
and Google's pair truncation (:mod:`bertkit.tokenization.encoding`), padding
(:mod:`bertkit.tokenization.batching`) and (de)serialization.

Ids and segment ids match ``transformers``' slow, pure-Python BERT tokenizer (``BertTokenizer``
before transformers 5, ``BertTokenizerLegacy`` since; it reproduces Google's algorithm), and
offsets match HF's fast one. Intentional differences:

* ``max_input_chars_per_word`` defaults to 100 (HF); Google's original uses 200. Longer words
  become ``[UNK]``. It is a constructor argument.
* Literal special-token strings in the text (``"[MASK]"``, ``"[SEP]"``) stay whole and get their
  special id, as in HF (so ``fill-mask`` can read a typed ``[MASK]``); Google's original splits
  them into ``[``, ``mask``, ``]``. Pass ``split_special_tokens=True`` (HF's option of the same
  name) for Google's behaviour, e.g. so raw corpora cannot inject control tokens.
* Without special tokens, a pair still gets segment ids 0 then 1 (HF's slow tokenizer gives 0s).
* Decoding an id outside the vocabulary raises instead of yielding ``[UNK]``.
* :meth:`BertTokenizer.fingerprint` covers every setting that changes ids, not just the vocab.
* The basic-tokenization differences listed in :mod:`bertkit.tokenization.basic`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, overload

from tokenizers import AddedToken, Tokenizer, decoders, models, processors

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.tokenization.basic import build_normalizer, build_pre_tokenizer
from bertkit.tokenization.batching import Padding, TensorKind, pad_rows, padding_length, to_tensors
from bertkit.tokenization.encoding import Encoding, assemble
from bertkit.tokenization.vocab_io import (
    CLS,
    MASK,
    PAD,
    SEP,
    SPECIAL_NAMES,
    SPECIAL_TOKENS,
    UNK,
    check_vocab_entries,
    known_max_length,
    load_vocab,
    read_tokenizer_config,
)

DEFAULT_MAX_CHARS_PER_WORD = 100


def _build_engine(
    vocab: dict[str, int], do_lower_case: bool, max_chars: int, split_special_tokens: bool
) -> Tokenizer:
    """The Rust pipeline; the post-processor and decoder only matter for the saved tokenizer.json
    (our own encode assembles [CLS]/[SEP] itself to truncate pairs exactly as Google does)."""
    engine = Tokenizer(models.WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=max_chars))
    engine.normalizer = build_normalizer(do_lower_case)
    engine.pre_tokenizer = build_pre_tokenizer()
    engine.post_processor = processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}",
        pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])],
    )
    engine.decoder = decoders.WordPiece(prefix="##")
    if not split_special_tokens:
        present = [token for token in SPECIAL_TOKENS if token in vocab]
        engine.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in present])
    return engine


class BertTokenizer:
    """WordPiece tokenizer with BERT's conventions (see the module docstring).

    `vocab` is a token -> id mapping (ids 0..N-1) or the path of a vocab.txt. `model_max_length`
    (tokens, specials included) is the default truncation length when `max_length` is not given.
    """

    def __init__(
        self,
        vocab: Mapping[str, int] | str | os.PathLike,
        do_lower_case: bool = True,
        max_input_chars_per_word: int = DEFAULT_MAX_CHARS_PER_WORD,
        model_max_length: int | None = None,
        split_special_tokens: bool = False,
    ) -> None:
        if not isinstance(vocab, Mapping):
            vocab = load_vocab(vocab)
        if max_input_chars_per_word < 1:
            raise BertkitError(f"max_input_chars_per_word must be >= 1, got {max_input_chars_per_word}")
        if model_max_length is not None and model_max_length < 2:
            raise BertkitError(f"model_max_length must be >= 2, got {model_max_length}")
        self._vocab = check_vocab_entries(vocab)
        self._id_to_token = {index: token for token, index in self._vocab.items()}
        self._do_lower_case = bool(do_lower_case)
        self._split_special_tokens = bool(split_special_tokens)
        self._max_chars = max_input_chars_per_word
        self._model_max_length = model_max_length
        self._special_ids = frozenset(self._vocab[t] for t in SPECIAL_TOKENS if t in self._vocab)
        self._engine = _build_engine(
            self._vocab, self._do_lower_case, max_input_chars_per_word, self._split_special_tokens
        )

    # ---- loading and saving -------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, **overrides: Any) -> BertTokenizer:
        """Load vocab.txt and (if present) tokenizer_config.json from an HF-layout directory;
        keyword arguments (those of the constructor) override the file's settings."""
        directory = Path(directory)
        vocab_path = directory / "vocab.txt"
        if not vocab_path.is_file():
            raise BertkitError(f"{directory}: no vocab.txt (a WordPiece vocabulary, one token a line)")
        config = read_tokenizer_config(directory / "tokenizer_config.json")
        settings = {
            "do_lower_case": config.get("do_lower_case", True),
            "max_input_chars_per_word": config.get(
                "max_input_chars_per_word", DEFAULT_MAX_CHARS_PER_WORD
            ),
            "model_max_length": known_max_length(config.get("model_max_length")),
            "split_special_tokens": config.get("split_special_tokens", False),
        }
        return cls(load_vocab(vocab_path), **{**settings, **overrides})

    def save_pretrained(self, directory: str | os.PathLike) -> list[Path]:
        """Write vocab.txt, tokenizer_config.json and tokenizer.json, each atomically."""
        directory = Path(directory)
        config: dict[str, Any] = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self._do_lower_case,
            "max_input_chars_per_word": self.max_input_chars_per_word,
            "split_special_tokens": self._split_special_tokens,
            **{f"{name}_token": token for name, token in zip(SPECIAL_NAMES, SPECIAL_TOKENS)},
        }
        if self.model_max_length is not None:
            config["model_max_length"] = self.model_max_length
        files = {
            "vocab.txt": "".join(f"{token}\n" for token in self._tokens_in_id_order()),
            "tokenizer_config.json": json.dumps(config, indent=2, ensure_ascii=False) + "\n",
            "tokenizer.json": self._engine.to_str(pretty=True),
        }
        for name, text in files.items():
            atomic_write_text(directory / name, text)
        return [directory / name for name in files]

    def fingerprint(self) -> str:
        """sha256 of the vocabulary and every setting that changes ids; data shards record it
        so a shard made with another tokenizer is refused instead of silently misread."""
        settings = (
            f"do_lower_case={self._do_lower_case}\n"
            f"max_input_chars_per_word={self.max_input_chars_per_word}\n"
            f"split_special_tokens={self._split_special_tokens}\n"
        )
        digest = hashlib.sha256(settings.encode("utf-8"))
        for token in self._tokens_in_id_order():
            digest.update(token.encode("utf-8") + b"\n")
        return digest.hexdigest()

    # ---- vocabulary -----------------------------------------------------------------------

    @property
    def vocab(self) -> Mapping[str, int]:
        return MappingProxyType(self._vocab)

    @property
    def ids_to_tokens(self) -> Mapping[int, str]:
        return MappingProxyType(self._id_to_token)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)

    @property
    def do_lower_case(self) -> bool:
        return self._do_lower_case

    @property
    def max_input_chars_per_word(self) -> int:
        return self._max_chars

    @property
    def model_max_length(self) -> int | None:
        """Default truncation length (tokens, specials included); None when unknown."""
        return self._model_max_length

    @property
    def split_special_tokens(self) -> bool:
        return self._split_special_tokens

    @property
    def pad_token_id(self) -> int:
        return self._special_id(PAD)

    @property
    def unk_token_id(self) -> int:
        return self._special_id(UNK)

    @property
    def cls_token_id(self) -> int:
        return self._special_id(CLS)

    @property
    def sep_token_id(self) -> int:
        return self._special_id(SEP)

    @property
    def mask_token_id(self) -> int:
        return self._special_id(MASK)

    @property
    def special_token_ids(self) -> frozenset[int]:
        """Ids of [PAD] [UNK] [CLS] [SEP] [MASK] (those in the vocabulary)."""
        return self._special_ids

    @overload
    def convert_tokens_to_ids(self, tokens: str) -> int: ...
    @overload
    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]: ...
    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int]:
        """Ids of `tokens`; tokens outside the vocabulary map to [UNK] (as in HF)."""
        unk = self._vocab[UNK]
        if isinstance(tokens, str):
            return self._vocab.get(tokens, unk)
        return [self._vocab.get(token, unk) for token in tokens]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Tokens of `ids` (ints, or anything `int()` accepts: numpy/torch scalars)."""
        try:
            return [self._id_to_token[int(index)] for index in ids]
        except KeyError as err:
            raise BertkitError(
                f"token id {err.args[0]} is outside the vocabulary (size {len(self._vocab)})"
            ) from None

    # ---- encoding -------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[str]:
        """WordPiece tokens of `text`, without special tokens."""
        _check_text(text, "text")
        return self._engine.encode(text, add_special_tokens=False).tokens

    def encode(
        self,
        text: str,
        pair: str | None = None,
        *,
        max_length: int | None = None,
        truncation: bool = True,
        add_special_tokens: bool = True,
    ) -> Encoding:
        """Encode `text` (segment A) and optionally `pair` (segment B) for the model.

        With `truncation`, the result has at most `max_length` tokens (default:
        `model_max_length`; no limit when both are None), special tokens included; a pair is cut
        longest-first like Google's ``_truncate_seq_pair``.
        """
        _check_text(text, "text")
        if pair is not None:
            _check_text(pair, "pair")
        first = self._engine.encode(text, add_special_tokens=False)
        second = None if pair is None else self._engine.encode(pair, add_special_tokens=False)
        limit = self._limit(max_length, truncation)
        return self._assemble(first, second, limit, add_special_tokens)

    def encode_batch(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        *,
        max_length: int | None = None,
        truncation: bool = True,
        add_special_tokens: bool = True,
    ) -> list[Encoding]:
        """:meth:`encode` for many texts at once; `tokenizers` spreads the work over threads."""
        texts = _check_texts(texts, "texts")
        if pairs is not None:
            pairs = _check_texts(pairs, "pairs")
            if len(pairs) != len(texts):
                raise BertkitError(f"got {len(texts)} texts but {len(pairs)} pairs")
        firsts = self._engine.encode_batch(texts, add_special_tokens=False)
        seconds: list[Any] = [None] * len(texts)
        if pairs is not None:
            seconds = self._engine.encode_batch(pairs, add_special_tokens=False)
        limit = self._limit(max_length, truncation)
        return [self._assemble(a, b, limit, add_special_tokens) for a, b in zip(firsts, seconds)]

    def ids_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """WordPiece ids of each text, no special tokens, no truncation: the fast path for corpora
        (half the cost of `encode_batch`). A literal "[SEP]" in corpus text becomes `[ sep ]`,
        as Google's tokenizer reads it, never the special id (which would corrupt instances)."""
        texts = _check_texts(texts, "texts")
        self._engine.encode_special_tokens = True
        try:
            encoded = self._engine.encode_batch(texts, add_special_tokens=False)
        finally:
            self._engine.encode_special_tokens = False
        return [e.ids for e in encoded]

    def encode_padded(
        self,
        texts: str | Sequence[str],
        pairs: str | Sequence[str] | None = None,
        *,
        padding: Padding = True,
        max_length: int | None = None,
        truncation: bool = True,
        add_special_tokens: bool = True,
        return_tensors: TensorKind = None,
        return_offsets: bool = False,
    ) -> dict[str, Any]:
        """Encode and pad a batch into ``input_ids``, ``token_type_ids``, ``attention_mask``.

        `padding`: True/"longest" pads to the longest sequence, "max_length" to `max_length`
        (or `model_max_length`), False not at all. Pads get [PAD], segment 0 and attention 0.
        `return_tensors`: None (lists), "pt" (torch.long) or "np" (int64), shape (B, T).
        `return_offsets` adds ``offsets`` (B, T, 2), ``special_tokens_mask`` (1 at specials
        and pads) and ``word_ids`` (None, or -1 in tensors, at specials and pads).
        A single string (with a single string pair) gives one unbatched row when
        `return_tensors` is None, as in HF, and a batch of one otherwise.
        """
        single = isinstance(texts, str)
        if pairs is not None and isinstance(pairs, str) != single:
            raise BertkitError("texts and pairs must both be strings or both be lists")
        batch_texts = [texts] if single else texts
        batch_pairs = [pairs] if single and pairs is not None else pairs
        encodings = self.encode_batch(
            batch_texts,  # type: ignore[arg-type]
            batch_pairs,  # type: ignore[arg-type]
            max_length=max_length,
            truncation=truncation,
            add_special_tokens=add_special_tokens,
        )
        length = padding_length(encodings, padding, max_length, self.model_max_length)
        # [PAD] is looked up only when needed: a vocabulary without it can still encode batches
        # of equal length (Google's test vocabulary has none)
        needs_pad = length is not None and any(len(e) < length for e in encodings)
        pad_id = self.pad_token_id if needs_pad else 0
        rows = pad_rows(encodings, length, pad_id, return_offsets)
        if return_tensors is not None:
            return to_tensors(rows, return_tensors)
        return {key: value[0] for key, value in rows.items()} if single else rows

    __call__ = encode_padded

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`: pieces joined with spaces, ``##`` continuations glued to their word,
        then HF's clean-up of spaces before punctuation and contractions (``do n't`` -> ``don't``).
        `skip_special_tokens` drops all of :attr:`special_token_ids`, [UNK] included (as HF).
        Lower-casing, accents and the original spacing are not recovered."""
        ids = [int(index) for index in ids]
        if skip_special_tokens:
            ids = [index for index in ids if index not in self._special_ids]
        text = " ".join(self.convert_ids_to_tokens(ids)).replace(" ##", "").strip()
        return _clean_up_spaces(text)

    # ---- helpers --------------------------------------------------------------------------

    def _special_id(self, token: str) -> int:
        if token not in self._vocab:
            raise BertkitError(f"the vocabulary has no {token} token")
        return self._vocab[token]

    def _tokens_in_id_order(self) -> list[str]:
        return [self._id_to_token[index] for index in range(len(self._id_to_token))]

    def _limit(self, max_length: int | None, truncation: bool) -> int | None:
        if not truncation:
            return None
        return max_length if max_length is not None else self.model_max_length

    def _assemble(self, first: Any, second: Any, limit: int | None, specials: bool) -> Encoding:
        return assemble(first, second, limit, specials, self._vocab[CLS], self._vocab[SEP])


def _clean_up_spaces(text: str) -> str:
    """HF's ``clean_up_tokenization``: undo the spaces WordPiece decoding leaves before
    punctuation and English contractions."""
    for spaced, joined in _CLEAN_UP:
        text = text.replace(spaced, joined)
    return text


# HF's clean_up_tokenization pairs, in HF's order.
_CLEAN_UP = (
    (" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
    (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"),
)  # fmt: skip


def _check_text(text: object, name: str) -> None:
    if not isinstance(text, str):
        raise BertkitError(f"{name} must be a string, got {type(text).__name__}")


def _check_texts(texts: object, name: str) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise BertkitError(f"{name} must be a list of strings, got {type(texts).__name__}")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise BertkitError(f"{name}[{index}] must be a string, got {type(text).__name__}")
    return list(texts)
