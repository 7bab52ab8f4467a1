"""bertkit.tokenization.wordpiece: BertTokenizer (WordPiece, layout, truncation, batches, I/O)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bertkit.errors import BertkitError
from bertkit.tokenization import BertTokenizer, load_vocab
from bertkit.tokenization.encoding import truncated_lengths

# ---- Google's golden cases (google-research/bert tokenization_test.py) ----------------------


def test_full_tokenizer_golden_case(google_vocab: dict[str, int]) -> None:
    tokenizer = BertTokenizer(google_vocab)
    tokens = tokenizer.tokenize("UNwant\u00e9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]


def test_wordpiece_golden_cases(google_vocab: dict[str, int]) -> None:
    tokenizer = BertTokenizer(google_vocab)
    assert tokenizer.tokenize("") == []
    assert tokenizer.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    # one unsplittable word becomes a single [UNK]; its neighbours are unaffected
    assert tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]


def test_convert_tokens_and_ids(google_vocab: dict[str, int]) -> None:
    tokenizer = BertTokenizer(google_vocab)
    assert tokenizer.convert_tokens_to_ids(["un", "##want", "##ed", "runn", "##ing"]) == [7, 4, 5, 8, 9]
    assert tokenizer.convert_tokens_to_ids("runn") == 8
    assert tokenizer.convert_tokens_to_ids(["nope"]) == [0]  # unknown -> [UNK], as in HF
    assert tokenizer.convert_ids_to_tokens([7, 4, 5]) == ["un", "##want", "##ed"]
    assert tokenizer.convert_ids_to_tokens(torch.tensor([8, 9])) == ["runn", "##ing"]
    with pytest.raises(BertkitError, match="outside the vocabulary"):
        tokenizer.convert_ids_to_tokens([11])


# ---- basic tokenization seen through the real vocabulary ----------------------------------


def test_cjk_accents_and_control_characters(minilm: BertTokenizer) -> None:
    assert minilm.tokenize("ah\u4e2d\u56fdzz") == ["ah", "\u4e2d", "\u56fd", "z", "##z"]
    assert minilm.tokenize("\u535a\u63a8") == ["\u535a", "[UNK]"]  # one [UNK] per CJK char
    assert minilm.tokenize("H\u00e9LLO na\u00efve") == ["hello", "naive"]
    assert minilm.tokenize("hel\x05lo\u200b wor\x00ld\ufffd") == ["hello", "world"]


def test_empty_string(minilm: BertTokenizer) -> None:
    assert minilm.tokenize("") == []
    encoding = minilm.encode("")
    assert encoding.tokens == ["[CLS]", "[SEP]"]
    assert encoding.input_ids == [101, 102]
    assert encoding.offsets == [(0, 0), (0, 0)]
    assert encoding.word_ids == [None, None]
    assert len(minilm.encode("", add_special_tokens=False)) == 0


def test_very_long_word_becomes_unk(minilm: BertTokenizer) -> None:
    text = "a" * 10_000
    encoding = minilm.encode(f"x {text} y", add_special_tokens=False)
    assert encoding.tokens == ["x", "[UNK]", "y"]
    assert encoding.offsets[1] == (2, 10_002)


def test_max_input_chars_per_word_default_100_and_configurable(minilm_path: Path) -> None:
    """Deviation: HF's limit (100) rather than Google's (200); words longer are [UNK]."""
    default = BertTokenizer.from_pretrained(minilm_path)
    assert default.max_input_chars_per_word == 100
    assert "[UNK]" not in default.tokenize("a" * 100)
    assert default.tokenize("a" * 101) == ["[UNK]"]
    googles = BertTokenizer(minilm_path / "vocab.txt", max_input_chars_per_word=200)
    assert "[UNK]" not in googles.tokenize("a" * 200)
    assert googles.tokenize("a" * 201) == ["[UNK]"]
    assert googles.fingerprint() != default.fingerprint()


def test_literal_special_tokens_stay_whole_unless_split(minilm_path: Path) -> None:
    """As in HF, "[MASK]" typed in the text is the mask token; Google's original (and
    split_special_tokens=True) tokenizes it as plain text."""
    whole = BertTokenizer.from_pretrained(minilm_path)
    encoding = whole.encode("a [MASK] b")
    assert encoding.tokens == ["[CLS]", "a", "[MASK]", "b", "[SEP]"]
    assert encoding.input_ids[2] == whole.mask_token_id
    assert encoding.offsets[2] == (2, 8)
    assert whole.tokenize("x[SEP]y [mask]") == ["x", "[SEP]", "y", "[", "mask", "]"]
    split = BertTokenizer.from_pretrained(minilm_path, split_special_tokens=True)
    assert split.tokenize("a [MASK] b") == ["a", "[", "mask", "]", "b"]
    assert split.fingerprint() != whole.fingerprint()


def test_literal_special_tokens_match_hf_slow(minilm: BertTokenizer, minilm_path: Path) -> None:
    legacy = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy")
    slow = legacy.BertTokenizerLegacy(str(minilm_path / "vocab.txt"))
    for text in ["a [MASK] b", "x[SEP]y [mask] [PAD][UNK]", "[CLS] [CLS]", "[MASK]ed [ MASK ]"]:
        assert minilm.tokenize(text) == slow.tokenize(text), text


# ---- layout, offsets, word ids ----------------------------------------------------------


def test_pair_layout(minilm: BertTokenizer) -> None:
    encoding = minilm.encode("Hello there", "Bye now!")
    assert encoding.tokens == ["[CLS]", "hello", "there", "[SEP]", "bye", "now", "!", "[SEP]"]
    assert encoding.token_type_ids == [0, 0, 0, 0, 1, 1, 1, 1]
    assert encoding.special_tokens_mask == [1, 0, 0, 1, 0, 0, 0, 1]
    assert encoding.attention_mask == [1] * 8
    assert encoding.word_ids == [None, 0, 1, None, 0, 1, 2, None]
    # offsets of segment B index the pair's own text
    assert encoding.offsets == [(0, 0), (0, 5), (6, 11), (0, 0), (0, 3), (4, 7), (7, 8), (0, 0)]


@pytest.mark.parametrize(
    "text, pair",
    [("Hello, world!", None), ("unaffable r\u00e9sum\u00e9s", "\u535a\u63a8 x"), ("", "b"), ("", "")],
)
def test_layout_agrees_with_the_template_post_processor(minilm, text, pair) -> None:
    """We assemble [CLS] A [SEP] B [SEP] ourselves (for Google's truncation); it must equal
    what the TemplateProcessing saved in tokenizer.json produces."""
    ours = minilm.encode(text, pair, truncation=False)
    template = minilm._engine.encode(text, pair, add_special_tokens=True)
    assert ours.input_ids == template.ids
    assert ours.token_type_ids == template.type_ids
    assert ours.special_tokens_mask == template.special_tokens_mask
    assert ours.offsets == template.offsets
    assert ours.word_ids == template.word_ids
    assert ours.tokens == template.tokens


def test_without_special_tokens_pairs_keep_segment_ids(minilm: BertTokenizer) -> None:
    encoding = minilm.encode("a b", "c", add_special_tokens=False)
    assert encoding.tokens == ["a", "b", "c"]
    assert encoding.token_type_ids == [0, 0, 1]


# ---- truncation -------------------------------------------------------------------------


def _google_truncate(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """google-research/bert's _truncate_seq_pair, literally, on lengths."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 130))
def test_truncated_lengths_is_googles_loop(len_a: int, len_b: int, budget: int) -> None:
    assert truncated_lengths(len_a, len_b, budget) == _google_truncate(len_a, len_b, budget)


def test_pair_truncation_longest_first_ties_from_b(padded_vocab: dict[str, int]) -> None:
    tokenizer = BertTokenizer(padded_vocab)
    five, ten = " ".join(["wa"] * 5), " ".join(["un"] * 10)
    # budget 10 - 3 specials = 7: B shrinks to 5, then B, A, B lose one each
    encoding = tokenizer.encode(five, ten, max_length=10)
    assert encoding.token_type_ids == [0] * 6 + [1] * 4  # [CLS] + 4 of A + [SEP], 3 of B + [SEP]
    encoding = tokenizer.encode(ten, five, max_length=10)
    assert encoding.token_type_ids == [0] * 6 + [1] * 4  # A, the longer, is cut first: same
    encoding = tokenizer.encode(five, ten, max_length=11)  # even budget: 4 and 4
    assert encoding.token_type_ids == [0] * 6 + [1] * 5


def test_single_truncation_and_limits(minilm_path: Path) -> None:
    tokenizer = BertTokenizer(minilm_path / "vocab.txt", model_max_length=6)
    text = "one two three four five six seven"
    assert minilm_tokens(tokenizer, text, max_length=4) == ["[CLS]", "one", "two", "[SEP]"]
    assert len(tokenizer.encode(text)) == 6  # model_max_length is the default limit
    assert len(tokenizer.encode(text, truncation=False)) == 9
    assert minilm_tokens(tokenizer, text, max_length=2) == ["[CLS]", "[SEP]"]
    with pytest.raises(BertkitError, match="no room for the 3 special tokens"):
        tokenizer.encode(text, "pair", max_length=2)


def minilm_tokens(tokenizer: BertTokenizer, text: str, **kwargs) -> list[str]:
    return tokenizer.encode(text, **kwargs).tokens


# ---- batches and padding ----------------------------------------------------------------


def test_batch_padding_to_longest(padded_vocab: dict[str, int]) -> None:
    tokenizer = BertTokenizer(padded_vocab)
    batch = tokenizer(["unwanted", "running wa", ""], ["wa", "un", "runn"])
    pad = tokenizer.pad_token_id
    assert batch["input_ids"] == [
        [1, 7, 4, 5, 2, 6, 2],
        [1, 8, 9, 6, 2, 7, 2],
        [1, 2, 8, 2, pad, pad, pad],
    ]
    assert batch["token_type_ids"][2] == [0, 0, 1, 1, 0, 0, 0]
    assert batch["attention_mask"][2] == [1, 1, 1, 1, 0, 0, 0]
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask"}


def test_batch_matches_one_by_one(minilm: BertTokenizer) -> None:
    texts = ["The cat sat.", "", "A much longer sentence, with commas, r\u00e9sum\u00e9s and \u535a."]
    batch = minilm.encode_batch(texts, texts[::-1], max_length=12)
    assert batch == [minilm.encode(a, b, max_length=12) for a, b in zip(texts, texts[::-1])]


@pytest.mark.parametrize("kind", ["pt", "np"])
def test_batch_tensors(minilm: BertTokenizer, kind: str) -> None:
    batch = minilm(["short", "a bit longer text"], padding="max_length", max_length=8,
                   return_tensors=kind, return_offsets=True)
    array_type = torch.Tensor if kind == "pt" else np.ndarray
    assert all(isinstance(value, array_type) for value in batch.values())
    assert tuple(batch["input_ids"].shape) == (2, 8)
    assert tuple(batch["offsets"].shape) == (2, 8, 2)
    assert batch["input_ids"].dtype in (torch.long, np.int64)
    assert batch["attention_mask"].tolist()[0] == [1, 1, 1, 0, 0, 0, 0, 0]
    assert batch["special_tokens_mask"].tolist()[0] == [1, 0, 1, 1, 1, 1, 1, 1]
    assert batch["word_ids"].tolist()[0] == [-1, 0, -1, -1, -1, -1, -1, -1]
    assert batch["offsets"].tolist()[1][1:3] == [[0, 1], [2, 5]]


def test_single_string_and_no_padding(minilm: BertTokenizer) -> None:
    single = minilm("Hello", "world", return_offsets=True)
    assert single["input_ids"] == [101, 7592, 102, 2088, 102]
    assert single["word_ids"] == [None, 0, None, 0, None]
    assert minilm("Hello", return_tensors="pt")["input_ids"].shape == (1, 3)
    ragged = minilm(["a", "a b"], padding=False)
    assert [len(row) for row in ragged["input_ids"]] == [3, 4]
    with pytest.raises(BertkitError, match="padding=True"):
        minilm(["a", "a b"], padding=False, return_tensors="np")
    empty = minilm([], return_tensors="pt")
    assert tuple(empty["input_ids"].shape) == (0, 0)


def test_batch_errors(google_vocab: dict[str, int], minilm: BertTokenizer) -> None:
    with pytest.raises(BertkitError, match="no \\[PAD\\]"):
        BertTokenizer(google_vocab)(["un", "un un"])
    with pytest.raises(BertkitError, match="2 texts but 1 pairs"):
        minilm(["a", "b"], ["c"])
    with pytest.raises(BertkitError, match="both be strings"):
        minilm("a", ["c"])
    with pytest.raises(BertkitError, match="more than max_length=3"):
        minilm(["a b c d"], padding="max_length", max_length=3, truncation=False)
    with pytest.raises(BertkitError, match="padding must be"):
        minilm(["a"], padding="longer")
    with pytest.raises(BertkitError, match=r"texts\[1\] must be a string"):
        minilm.encode_batch(["a", None])  # type: ignore[list-item]
    with pytest.raises(BertkitError, match="must be a string"):
        minilm.encode(b"bytes")  # type: ignore[arg-type]


# ---- decoding ---------------------------------------------------------------------------


def test_decode_round_trip(google_vocab: dict[str, int], minilm: BertTokenizer) -> None:
    google = BertTokenizer(google_vocab)
    assert google.decode(google.encode("UNwant\u00e9d,running").input_ids) == "unwanted, running"
    text = "the quick brown fox doesn't jump over the lazy dog's back, does it? yes!"
    ids = minilm.encode(text).input_ids
    assert minilm.decode(ids) == text
    assert minilm.decode(torch.tensor(ids)) == text
    assert minilm.decode(ids, skip_special_tokens=False) == f"[CLS] {text} [SEP]"
    with pytest.raises(BertkitError, match="outside the vocabulary"):
        minilm.decode([len(minilm)])


# ---- vocabulary, properties, fingerprint ------------------------------------------------


def test_special_token_ids_and_vocab(minilm: BertTokenizer, google_vocab) -> None:
    assert (minilm.pad_token_id, minilm.unk_token_id, minilm.cls_token_id) == (0, 100, 101)
    assert (minilm.sep_token_id, minilm.mask_token_id) == (102, 103)
    assert minilm.special_token_ids == {0, 100, 101, 102, 103}
    assert len(minilm) == minilm.vocab_size == 30522
    assert minilm.vocab["hello"] == 7592 and minilm.ids_to_tokens[7592] == "hello"
    assert minilm.do_lower_case is True and minilm.model_max_length == 512
    with pytest.raises(TypeError):
        minilm.vocab["hello"] = 1  # type: ignore[index]
    with pytest.raises(BertkitError, match="no \\[MASK\\] token"):
        _ = BertTokenizer(google_vocab).mask_token_id


def test_fingerprint(google_vocab: dict[str, int]) -> None:
    base = BertTokenizer(google_vocab).fingerprint()
    assert len(base) == 64 and base == BertTokenizer(dict(google_vocab)).fingerprint()
    assert BertTokenizer(google_vocab, do_lower_case=False).fingerprint() != base
    swapped = {**google_vocab, "want": 6, "wa": 3}
    assert BertTokenizer(swapped).fingerprint() != base


def test_bad_vocabularies(tmp_path: Path, google_vocab: dict[str, int]) -> None:
    with pytest.raises(BertkitError, match="0..N-1"):
        BertTokenizer({**google_vocab, "extra": 50})
    with pytest.raises(BertkitError, match="lacks required special tokens: \\[CLS\\]"):
        BertTokenizer({"[UNK]": 0, "[SEP]": 1})
    duplicated = tmp_path / "dup.txt"
    duplicated.write_text("[UNK]\n[CLS]\n[SEP]\nx\ny\nx\n", encoding="utf-8")
    with pytest.raises(BertkitError, match="line 6: token 'x' repeats line 4"):
        load_vocab(duplicated)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("[UNK]\n[CLS]\n[SEP]\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(BertkitError, match="not UTF-8"):
        load_vocab(latin1)


# ---- saving and loading -----------------------------------------------------------------


def test_missing_vocab_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BertkitError, match="no vocab.txt"):
        BertTokenizer.from_pretrained(tmp_path)
    with pytest.raises(BertkitError, match="vocabulary file not found"):
        BertTokenizer(tmp_path / "nope.txt")


def test_save_and_load_round_trip(tmp_path: Path, google_vocab: dict[str, int]) -> None:
    tokenizer = BertTokenizer(google_vocab, do_lower_case=False, model_max_length=64)
    written = tokenizer.save_pretrained(tmp_path / "tok")
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == sorted(p.name for p in written)
    assert sorted(p.name for p in written) == ["tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is False and config["model_max_length"] == 64
    assert config["tokenizer_class"] == "BertTokenizer"
    loaded = BertTokenizer.from_pretrained(tmp_path / "tok")
    assert dict(loaded.vocab) == google_vocab
    assert loaded.do_lower_case is False and loaded.model_max_length == 64
    assert loaded.fingerprint() == tokenizer.fingerprint()
    assert loaded.tokenize("UNwanted,running") == ["[UNK]", ",", "runn", "##ing"]  # cased


def test_saved_directory_loads_in_tokenizers_and_transformers(tmp_path: Path, minilm) -> None:
    from tokenizers import Tokenizer

    transformers = pytest.importorskip("transformers")
    minilm.save_pretrained(tmp_path)
    text, pair = "Hello, w\u00f6rld! \u535a unaffable [MASK]", "and a [SEP] second one"
    ours = minilm.encode(text, pair)
    engine = Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(text, pair)
    assert engine.ids == ours.input_ids and engine.type_ids == ours.token_type_ids
    hf = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))(text, pair)
    assert hf["input_ids"] == ours.input_ids and hf["token_type_ids"] == ours.token_type_ids


def test_config_without_do_lower_case_defaults_to_uncased(tmp_path: Path, google_vocab) -> None:
    (tmp_path / "vocab.txt").write_text("".join(f"{t}\n" for t in google_vocab), encoding="utf-8")
    assert BertTokenizer.from_pretrained(tmp_path).do_lower_case is True
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 1e30}', encoding="utf-8")
    assert BertTokenizer.from_pretrained(tmp_path).model_max_length is None


@pytest.mark.parametrize(
    "config, message",
    [
        ("{not json", "line 1: invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"do_lower_case": true, "strip_accents": false}', "strip_accents=False"),
        ('{"tokenize_chinese_chars": false}', "tokenize_chinese_chars=False"),
        ('{"do_lower_case": "yes"}', "do_lower_case must be a bool, got 'yes'"),
        ('{"max_input_chars_per_word": 0}', "max_input_chars_per_word must be >= 1"),
        ('{"tokenizer_class": "GPT2Tokenizer"}', "'GPT2Tokenizer' is not BERT's WordPiece"),
        ('{"unk_token": "[NOPE]"}', r"unk_token '\[NOPE\]' is not \[UNK\]"),
        ('{"cls_token": {"content": "<s>"}}', r"cls_token '<s>' is not \[CLS\]"),
    ],
)
def test_bad_tokenizer_config(tmp_path: Path, google_vocab, config: str, message: str) -> None:
    (tmp_path / "vocab.txt").write_text("".join(f"{t}\n" for t in google_vocab), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(config, encoding="utf-8")
    with pytest.raises(BertkitError, match=message):
        BertTokenizer.from_pretrained(tmp_path)


def test_hf_special_tokens_as_strings_or_added_tokens_are_read(tmp_path: Path, google_vocab):
    (tmp_path / "vocab.txt").write_text("".join(f"{t}\n" for t in google_vocab), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizerFast", "unk_token": "[UNK]",
         "mask_token": {"content": "[MASK]", "lstrip": False}}), encoding="utf-8")
    assert BertTokenizer.from_pretrained(tmp_path).vocab_size == len(google_vocab)


def test_corpus_ids_never_hold_special_ids_for_literal_markers(minilm_path):
    """Literal "[SEP]" / "[MASK]" in a raw corpus are text (Google's BasicTokenizer splits them
    as punctuation + word); only user-facing encode keeps them special (fill-mask needs it)."""
    tok = BertTokenizer.from_pretrained(minilm_path)
    ids = tok.ids_batch(["a [SEP] b [MASK] c"])[0]
    assert not set(ids) & {tok.sep_token_id, tok.mask_token_id, tok.cls_token_id}
    assert tok.convert_ids_to_tokens(ids) == ["a", "[", "sep", "]", "b", "[", "mask", "]", "c"]
    assert tok.mask_token_id in tok.encode("a [MASK] c").input_ids
