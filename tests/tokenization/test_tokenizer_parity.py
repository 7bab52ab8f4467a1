"""BertTokenizer against `transformers` on real text, with the real MiniLM (uncased) vocabulary.

What is covered, line by line (every line, no sampling):
* SQuAD v1.1 dev: all 2,067 contexts and 10,570 questions;
* WikiText-2 test: all 2,891 lines (CRLF line ends; `` = Heading = `` lines included);
* Alice's Adventures in Wonderland (Gutenberg): all lines, blank ones included.

Reference for ids and segment ids: HF's slow, pure-Python tokenizer (``BertTokenizerLegacy`` in
transformers 5; it reproduces Google's algorithm). To keep this file fast it is used the way
Google's ``FullTokenizer`` is built: its ``BasicTokenizer`` runs on every distinct line, its
``WordpieceTokenizer`` once per distinct word (the word -> pieces map is cached), and its vocab
maps pieces to ids. This skips only the slow tokenizer's matching of literal special-token
strings in the text, which these corpora do not contain. Single texts are compared with
``[CLS] ids [SEP]``, all segment 0; pairs go through the slow tokenizer's own
``prepare_for_model`` for special tokens, segment ids and longest-first truncation.
Offsets: the slow tokenizer has none, so they are compared with HF's fast tokenizer, and each
token is also checked against the original text span it points at.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.tokenization import BertTokenizer
from bertkit.tokenization.basic import build_normalizer

transformers = pytest.importorskip("transformers")


def _read_lines(shared_data: Path) -> dict[str, list[str]]:
    squad = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    paragraphs = [p for article in squad["data"] for p in article["paragraphs"]]
    wiki = (shared_data / "wikitext-2" / "wiki.test.raw").read_text(encoding="utf-8")
    alice = (shared_data / "books" / "carroll-alice.txt").read_text(encoding="utf-8")
    return {
        "contexts": [p["context"] for p in paragraphs],
        "questions": [q["question"] for p in paragraphs for q in p["qas"]],
        "first_questions": [p["qas"][0]["question"] for p in paragraphs],
        "wikitext": wiki.split("\n"),
        "alice": alice.split("\n"),
    }


@pytest.fixture(scope="module")
def corpus(shared_data: Path) -> dict[str, list[str]]:
    lines = _read_lines(shared_data)
    assert len(lines["contexts"]) == 2067 and len(lines["questions"]) == 10570
    assert len(lines["wikitext"]) >= 2891 and len(lines["alice"]) > 3000
    return lines


@pytest.fixture(scope="module")
def all_lines(corpus: dict[str, list[str]]) -> list[str]:
    return corpus["contexts"] + corpus["questions"] + corpus["wikitext"] + corpus["alice"]


@pytest.fixture(scope="module")
def ours(minilm_path: Path) -> BertTokenizer:
    return BertTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="module")
def encodings(ours: BertTokenizer, all_lines: list[str]) -> list:
    return ours.encode_batch(all_lines, truncation=False)


@pytest.fixture(scope="module")
def slow(minilm_path: Path):
    legacy = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy")
    return legacy.BertTokenizerLegacy(str(minilm_path / "vocab.txt"), do_lower_case=True)


@pytest.fixture(scope="module")
def slow_ids(slow, all_lines: list[str]) -> dict[str, list[int]]:
    """The slow tokenizer's ids (no specials) for every distinct line, computed once."""
    pieces: dict[str, list[str]] = {}
    ids = {}
    for text in set(all_lines):
        tokens = []
        for word in slow.basic_tokenizer.tokenize(text):
            if word not in pieces:
                pieces[word] = slow.wordpiece_tokenizer.tokenize(word)
            tokens += pieces[word]
        ids[text] = [slow.vocab[token] for token in tokens]
    return ids


def _slow_encode(slow, ids_a, ids_b=None, max_length=None) -> dict[str, list[int]]:
    truncation = "longest_first" if max_length is not None else False
    return slow.prepare_for_model(
        ids_a, ids_b, truncation=truncation, max_length=max_length, return_token_type_ids=True
    )


def test_single_texts_match_slow_tokenizer(slow, slow_ids, all_lines, encodings) -> None:
    cls, sep = slow.cls_token_id, slow.sep_token_id
    mismatches = [
        text
        for text, encoding in zip(all_lines, encodings)
        if encoding.input_ids != [cls, *slow_ids[text], sep]
        or encoding.token_type_ids != [0] * (len(slow_ids[text]) + 2)
    ]
    assert not mismatches, f"{len(mismatches)} lines differ, first: {mismatches[0]!r}"


def test_pairs_truncate_like_slow_tokenizer(ours, slow, slow_ids, corpus) -> None:
    """(question, context): only the context is cut. (context, next context): both are cut, and
    the budget, 128 - 3 specials = 125, is odd, so which side loses the extra token matters
    (`tokenizers`' own LongestFirst truncation gives 978 of these 2,067 pairs differently)."""
    max_length = 128
    contexts, questions = corpus["contexts"], corpus["first_questions"]
    pairs = list(zip(questions, contexts)) + list(zip(contexts, contexts[1:] + contexts[:1]))
    encodings = ours.encode_batch(
        [a for a, _ in pairs], [b for _, b in pairs], max_length=max_length
    )
    for (a, b), encoding in zip(pairs, encodings):
        expected = _slow_encode(slow, slow_ids[a], slow_ids[b], max_length=max_length)
        assert encoding.input_ids == expected["input_ids"], (a, b)
        assert encoding.token_type_ids == expected["token_type_ids"], (a, b)
        assert len(encoding) <= max_length


def test_offsets_match_fast_tokenizer(minilm_path, all_lines, encodings) -> None:
    fast = transformers.BertTokenizerFast.from_pretrained(str(minilm_path))
    expected = fast(all_lines, return_offsets_mapping=True, truncation=False)
    for index, encoding in enumerate(encodings):
        assert encoding.input_ids == expected["input_ids"][index], all_lines[index]
        assert encoding.offsets == [tuple(o) for o in expected["offset_mapping"][index]]


def test_offsets_point_at_the_text_each_token_came_from(all_lines, encodings) -> None:
    """Normalizing text[start:end] gives the token back (without its ##); an [UNK] covers a
    whole word, which we cannot check piece by piece, so it is only checked to be non-empty."""
    normalize = build_normalizer(do_lower_case=True).normalize_str
    normalized: dict[str, str] = {}  # spans repeat a lot ("the"): normalize each one once
    unk_seen = 0
    for text, encoding in zip(all_lines, encodings):
        for token, (start, end), special in zip(
            encoding.tokens, encoding.offsets, encoding.special_tokens_mask
        ):
            span = text[start:end]
            if special:
                assert (start, end) == (0, 0)
            elif token == "[UNK]":
                unk_seen += 1
                assert span.strip()
            else:
                if span not in normalized:
                    # strip: the normalizer pads CJK characters with spaces
                    normalized[span] = normalize(span).strip()
                assert normalized[span] == token.removeprefix("##"), (text, token)
    assert unk_seen > 0  # the real data does contain unknown words; make sure we saw some


def test_decode_matches_slow_tokenizer(ours, slow, slow_ids, corpus) -> None:
    for text in corpus["questions"][:3000]:
        ids = _slow_encode(slow, slow_ids[text])["input_ids"]
        assert ours.decode(ids) == slow.decode(ids, skip_special_tokens=True), text
