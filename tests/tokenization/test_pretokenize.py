"""bertkit.tokenization.basic: BERT's basic tokenization (cleaning, case, accents, CJK, punct.)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.tokenization import BertTokenizer, pretokenize, pretokenize_with_offsets


# Google's golden cases (google-research/bert tokenization_test.py).
def test_lower_case() -> None:
    assert pretokenize(" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you", "?"]
    assert pretokenize("H\u00e9llo") == ["hello"]


def test_no_lower_case_keeps_case_and_accents() -> None:
    words = pretokenize(" \tHeLLo!how  \n Are yoU?  ", do_lower_case=False)
    assert words == ["HeLLo", "!", "how", "Are", "yoU", "?"]
    assert pretokenize("H\u00e9llo", do_lower_case=False) == ["H\u00e9llo"]


def test_cjk_characters_are_words() -> None:
    assert pretokenize("ah\u535a\u63a8zz") == ["ah", "\u535a", "\u63a8", "zz"]
    # Hiragana is not in the CJK ideograph blocks: it stays one word (cased, to keep the
    # voicing mark of \u304c, which accent stripping would remove, as in Google's uncased BERT)
    hiragana = "\u3072\u3089\u304c\u306a"
    assert pretokenize(hiragana, do_lower_case=False) == [hiragana]
    assert pretokenize(hiragana) == ["\u3072\u3089\u304b\u306a"]


def test_accents_are_stripped_only_when_uncased() -> None:
    assert pretokenize("\u00d1and\u00fa Cr\u00e8me") == ["nandu", "creme"]
    assert pretokenize("\u00d1and\u00fa", do_lower_case=False) == ["\u00d1and\u00fa"]


def test_control_characters_are_dropped_and_whitespace_splits() -> None:
    # \x05 (Cc), NUL, U+FFFD and zero-width space (Cf) vanish without splitting the word
    assert pretokenize("he\x05l\x00l\ufffdo wo\u200brld") == ["hello", "world"]
    # tab, newline, carriage return and no-break space all separate words
    assert pretokenize("a\tb\nc\rd\u00a0e") == ["a", "b", "c", "d", "e"]


def test_every_punctuation_character_is_its_own_word() -> None:
    assert pretokenize("$5-`x`...") == ["$", "5", "-", "`", "x", "`", ".", ".", "."]
    words = ["\u00ab", "hi", "\u00bb", "\u2014", "don", "'", "t"]
    assert pretokenize("\u00abhi\u00bb \u2014 don't") == words


@pytest.mark.parametrize("text", ["", " ", "\n\t\r ", "\x00\x05\ufffd"])
def test_empty_and_blank_text_gives_no_words(text: str) -> None:
    assert pretokenize(text) == []
    assert pretokenize_with_offsets(text) == []


def test_offsets_index_the_original_text() -> None:
    text = "  H\u00e9llo, \u4e16\u754c!"
    words = pretokenize_with_offsets(text)
    assert [w for w, _ in words] == ["hello", ",", "\u4e16", "\u754c", "!"]
    assert [text[s:e] for _, (s, e) in words] == ["H\u00e9llo", ",", "\u4e16", "\u754c", "!"]


def test_offsets_of_accented_words() -> None:
    assert pretokenize_with_offsets("Caf\u00e9 au lait")[0] == ("cafe", (0, 4))
    assert pretokenize_with_offsets("Cre\u0300me")[0] == ("creme", (0, 6))
    # Known quirk (HF's fast tokenizer has it too): a separate combining mark that ends a word
    # is removed with nothing mapped to it, so the word's span stops before it.
    assert pretokenize_with_offsets("Cafe\u0301 au lait")[0] == ("cafe", (0, 4))


# Known, documented differences from HF's slow BasicTokenizer (module docstring of `basic`).
def test_deviation_final_sigma_is_lowercased_per_character() -> None:
    assert "\u039f\u0394\u039f\u03a3".lower() == "\u03bf\u03b4\u03bf\u03c2"  # Python: final ς
    assert pretokenize("\u039f\u0394\u039f\u03a3") == ["\u03bf\u03b4\u03bf\u03c3"]  # ours: σ


def test_deviation_no_nfc_composition_when_cased() -> None:
    # HF's slow tokenizer would compose e + U+0301 into é; Google's and ours keep it as given
    assert pretokenize("e\u0301t\u00e9", do_lower_case=False) == ["e\u0301t\u00e9"]
    # the same for CJK compatibility ideographs, which NFC maps to unified ones (U+F900 -> U+8C48)
    assert pretokenize("\uf900", do_lower_case=False) == ["\uf900"]
    assert pretokenize("\uf900") == ["\u8c48"]  # uncased: NFD maps it too, as HF's does


_text = st.text(
    alphabet=st.sampled_from(
        list("aAbZ \t\n.,!'-$\u00e9\u00c9\u0301\u535a\u4e16\x05\u200b\ufffd\u03a3\u0130")
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(text=_text, lower=st.booleans())
def test_pretokenize_agrees_with_what_the_tokenizer_splits(text: str, lower: bool) -> None:
    """Each pretokenized word is exactly one word of BertTokenizer: its pieces carry one word id
    and together cover the word's span of the original text."""
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}  # every word becomes one [UNK]
    tokenizer = BertTokenizer(vocab, do_lower_case=lower)
    words = pretokenize_with_offsets(text, do_lower_case=lower)
    encoding = tokenizer.encode(text, add_special_tokens=False)
    assert encoding.word_ids == list(range(len(words)))
    assert encoding.offsets == [offsets for _, offsets in words]
    assert [w for w, _ in words] == pretokenize(text, do_lower_case=lower)


TRICKY = [
    "\u0130stanbul \u00c5ngstr\u00f6m \u00df \ufb01ne",  # dotted I, ring, sharp s, fi ligature
    "na\u00efve co\u00f6perate r\u00e9sum\u00e9 \u00e6ther",
    # Devanagari (with a virama, category Mn), Arabic, Hebrew
    "\u0915\u094d\u0937\u093f \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd",
    "\U0001f600emoji\U0001f44d\u200d\U0001f3fd x\u00b2+y\u00b3=\u00bd",
    "\uff08\u5168\u89d2\uff09\u3001\u3002 \U00020000\U0002a700",  # full-width, CJK extensions
    "tab\there\u2028line\u2029para\u3000ideographic-space\u00a0nbsp",
    "[MASK] [CLS] ##ing <unk> \\ ^ ~ | @ # % & * _ + = { } < >",
]


@pytest.mark.parametrize("lower", [True, False])
def test_matches_hf_slow_basic_tokenizer_on_tricky_text(lower: bool) -> None:
    legacy = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy")
    reference = legacy.BasicTokenizer(do_lower_case=lower)
    for text in TRICKY:
        assert pretokenize(text, do_lower_case=lower) == reference.tokenize(text), text
