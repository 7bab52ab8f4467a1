"""BERT's basic tokenization: the step that turns raw text into words before WordPiece.

It drops NUL, U+FFFD and control characters, maps every whitespace character to a space,
puts spaces around CJK ideographs (so each is a word of its own), lower-cases and strips accents
(NFD, then drop combining marks) when the vocabulary is uncased, and splits on whitespace and on
every punctuation character (Unicode P* categories plus all non-alphanumeric ASCII symbols,
such as ``$`` and ``^``, as in Google's ``_is_punctuation``).

The work is done by the `tokenizers` library (``BertNormalizer`` + ``BertPreTokenizer``, Rust).
:class:`bertkit.tokenization.BertTokenizer` gets its normalizer and pre-tokenizer from the same
two builders below, so the words returned by :func:`pretokenize` are always exactly what
WordPiece sees. The vocabulary
trainer relies on that: it learns pieces from :func:`pretokenize`'s words.

Known differences from HF's slow (pure Python) ``BasicTokenizer``, shared with HF's fast one:

* Lower-casing is per character, so a word-final capital sigma becomes ``σ``, not ``ς``
  (Python's ``str.lower`` applies the final-sigma rule: ``"ΟΔΟΣ".lower() == "οδος"``).
* No NFC normalization. HF's slow tokenizer composes characters (``"e\\u0301"`` -> ``"é"``)
  before splitting; Google's original does not. Uncased vocabularies decompose everything
  anyway (accent stripping runs NFD), so only cased vocabularies on decomposed text differ.

Offsets quirk (also HF's fast tokenizer's): when a word ends in a separate combining mark
(``"Cafe\u0301"``, not the precomposed ``"Café"``), stripping the mark leaves nothing mapped to
it, so the word's span stops one character short, before the mark.
"""

from __future__ import annotations

import functools

from tokenizers import PreTokenizedString, normalizers, pre_tokenizers

Offsets = tuple[int, int]


@functools.lru_cache(maxsize=2)
def build_normalizer(do_lower_case: bool = True) -> normalizers.Normalizer:
    """BERT's cleaning, CJK spacing, lower-casing and accent stripping.

    ``strip_accents=None`` means "strip when lower-casing", Google's rule for uncased models.
    The objects are immutable, so one cached instance per setting is shared.
    """
    return normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=None,
        lowercase=do_lower_case,
    )


@functools.lru_cache(maxsize=1)
def build_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Split on whitespace and isolate every punctuation character."""
    return pre_tokenizers.BertPreTokenizer()


def pretokenize(text: str, do_lower_case: bool = True) -> list[str]:
    """Words of `text` after basic tokenization, exactly as the WordPiece step receives them.

    >>> pretokenize(" \\tHeLLo!how  \\n Are yoU?  ")
    ['hello', '!', 'how', 'are', 'you', '?']
    """
    normalized = build_normalizer(do_lower_case).normalize_str(text)
    return [word for word, _ in build_pre_tokenizer().pre_tokenize_str(normalized)]


def pretokenize_with_offsets(text: str, do_lower_case: bool = True) -> list[tuple[str, Offsets]]:
    """Words with their ``(start, end)`` character offsets into the original `text`.

    The word is normalized (lower-cased, accents stripped); the span ``text[start:end]`` is
    what it came from, so the two may differ in case, accents or length.
    """
    split = PreTokenizedString(text)
    normalizer = build_normalizer(do_lower_case)
    split.normalize(normalizer.normalize)
    build_pre_tokenizer().pre_tokenize(split)
    return [
        (word, offsets)
        for word, offsets, _ in split.get_splits(offset_referential="original", offset_type="char")
    ]
