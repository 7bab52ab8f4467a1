"""Reading and checking a WordPiece vocabulary (vocab.txt) and tokenizer_config.json."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.io import read_json_object

UNK, CLS, SEP, PAD, MASK = "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
SPECIAL_NAMES = ("pad", "unk", "cls", "sep", "mask")  # HF's tokenizer_config keys: pad_token ...
# tokenizer_config.json's tokenizer_class values that are this WordPiece tokenizer
WORDPIECE_CLASSES = frozenset({"BertTokenizer", "BertTokenizerFast", "DistilBertTokenizer",
                               "DistilBertTokenizerFast", "ElectraTokenizer",
                               "ElectraTokenizerFast"})
REQUIRED_TOKENS = (UNK, CLS, SEP)
# HF writes int(1e30) as model_max_length to mean "no limit known".
_NO_LIMIT_SENTINEL = 10**9


def load_vocab(path: str | os.PathLike) -> dict[str, int]:
    """Read vocab.txt (one token per line, id = line number from 0), as BERT and HF do."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BertkitError(f"{path}: vocabulary file not found") from None
    except UnicodeDecodeError as err:
        raise BertkitError(f"{path}: not UTF-8 text (byte {err.start})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last token, it does not start an empty one
    vocab: dict[str, int] = {}
    for index, token in enumerate(lines):
        if token in vocab:
            raise BertkitError(
                f"{path}: line {index + 1}: token {token!r} repeats line {vocab[token] + 1}"
            )
        vocab[token] = index
    return vocab


def check_vocab_entries(vocab: Mapping[str, int]) -> dict[str, int]:
    """Ids must be 0..N-1 so vocab.txt (whose line number is the id) can hold them."""
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise BertkitError("vocabulary ids must be 0..N-1, each used once")
    missing = [token for token in REQUIRED_TOKENS if token not in vocab]
    if missing:
        raise BertkitError(f"vocabulary lacks required special tokens: {', '.join(missing)}")
    broken = [token for token in vocab if "\n" in token or "\r" in token]
    if broken:
        raise BertkitError(f"vocabulary token {broken[0]!r} contains a line break")
    return dict(vocab)


_CONFIG_TYPES = {"do_lower_case": bool, "split_special_tokens": bool, "max_input_chars_per_word": int}


def read_tokenizer_config(path: Path) -> dict[str, Any]:
    """tokenizer_config.json as a dict ({} when absent); refuses settings we do not implement
    rather than silently tokenizing differently from the model's own tokenizer."""
    if not path.is_file():
        return {}
    config = read_json_object(path)
    for key, kind in _CONFIG_TYPES.items():
        if key in config and not isinstance(config[key], kind):
            raise BertkitError(f"{path}: {key} must be a {kind.__name__}, got {config[key]!r}")
    lower = config.get("do_lower_case", True)
    unsupported = {
        "strip_accents": config.get("strip_accents") not in (None, lower),
        "tokenize_chinese_chars": config.get("tokenize_chinese_chars", True) is not True,
        "do_basic_tokenize": config.get("do_basic_tokenize", True) is not True,
    }
    for key, bad in unsupported.items():
        if bad:
            raise BertkitError(f"{path}: {key}={config[key]!r} is not supported by bertkit")
    kind = config.get("tokenizer_class")
    if kind is not None and kind not in WORDPIECE_CLASSES:
        raise BertkitError(f"{path}: tokenizer_class {kind!r} is not BERT's WordPiece tokenizer "
                           f"({', '.join(sorted(WORDPIECE_CLASSES))}); bertkit would split the "
                           "text differently from the model's own tokenizer")
    for name, token in zip(SPECIAL_NAMES, SPECIAL_TOKENS):
        given = config.get(f"{name}_token")
        given = given.get("content") if isinstance(given, dict) else given  # (HF's AddedToken)
        if given is not None and given != token:
            raise BertkitError(f"{path}: {name}_token {given!r} is not {token}, the token "
                               "bertkit's BERT inputs use")
    return config


def known_max_length(value: object) -> int | None:
    if isinstance(value, int) and 2 <= value < _NO_LIMIT_SENTINEL:
        return value
    return None
