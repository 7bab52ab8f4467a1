"""Corpus readers: formats, sniffing, encodings, headings, empty documents, bad input."""

from __future__ import annotations

import json

import pytest

from bertkit.data.chunks import chunk_documents
from bertkit.data.corpus import (
    CorpusStats,
    Document,
    read_corpus,
    sniff_format,
)
from bertkit.data.sentences import split_sentences
from bertkit.errors import BertkitError


def _read(paths, fmt="auto"):
    stats = CorpusStats()
    return list(read_corpus(paths, fmt, stats)), stats


def test_google_format_on_bert_sample(shared_data):
    path = shared_data / "bert_sample" / "sample_text.txt"
    assert sniff_format(path) == "google"
    docs, stats = _read([path])
    assert len(docs) == stats.documents == 3 and all(d.presplit for d in docs)
    assert docs[0].paragraphs[0].startswith("This text is included")
    assert "力加勝北区" in docs[0].paragraphs[0]


def test_text_crlf_bom_blank_runs(tmp_path):
    path = tmp_path / "book.txt"
    path.write_bytes(b"\xef\xbb\xbfFirst line of a\r\nwrapped paragraph\r\n\r\n\r\n"
                     b"Second paragraph.\r\n")
    docs, stats = _read([path], "text")
    assert docs == [Document(("First line of a wrapped paragraph", "Second paragraph."), False,
                             f"{path}:1")]
    assert stats.invalid_utf8_bytes == 0


def test_invalid_utf8_is_replaced_and_counted(tmp_path, shared_data):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"Caf\xe9 au lait.\nPlain line.\n\nMore \xff\xfe text.\n")
    docs, stats = _read([path], "text")
    assert stats.invalid_utf8_bytes == 3 and stats.invalid_utf8_lines == 2
    assert docs[0].paragraphs[0] == "Caf\ufffd au lait. Plain line."
    # the real corpus: chesterton-ball is not valid UTF-8 (gutenberg/SOURCE.md)
    _, real = _read([shared_data / "gutenberg" / "chesterton-ball.txt"])
    assert real.invalid_utf8_bytes > 0 and real.documents == 1


def test_wikitext_headings_split_articles(tmp_path):
    path = tmp_path / "wiki.raw"
    path.write_bytes(b" = Alpha = \r\n Alpha is a letter . \r\n = = History = = \r\n It is old . \r\n"
                     b" = Beta = \r\n = Gamma = \r\n Gamma rays . \r\n")
    assert sniff_format(path) == "wikitext"
    docs, stats = _read([path])
    assert [d.paragraphs for d in docs] == [("Alpha is a letter .", "It is old ."),
                                            ("Gamma rays .",)]
    assert stats.empty_documents == 1  # Beta has no text


def test_wikitext_real_file(shared_data):
    docs, stats = _read([shared_data / "wikitext-2" / "wiki.test.raw"])
    assert stats.formats == {"wikitext": 1}
    assert 55 <= len(docs) <= 65  # WikiText-2 test holds 60 articles
    assert docs[0].paragraphs[0].startswith("Robert Boulter is an English film")


def test_jsonl_records_and_errors(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = [{"text": "One. Two.\n\nThree."}, {"text": "  "}, {"text": "Four.", "id": 3}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    docs, stats = _read([path])
    assert [d.paragraphs for d in docs] == [("One. Two.", "Three."), ("Four.",)]
    assert stats.empty_documents == 1 and docs[1].source == f"{path}:3"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": oops}\n')
    with pytest.raises(BertkitError, match=r"bad.jsonl:2: invalid JSON"):
        _read([bad])
    bad.write_text('{"body": "no text field"}\n')
    with pytest.raises(BertkitError, match=r"bad.jsonl:1: .*\"text\""):
        _read([bad])


def test_empty_text_file_is_counted(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    docs, stats = _read([tmp_path / "empty.txt"], "text")
    assert docs == [] and stats.empty_documents == 1


def test_bad_paths_and_binary(tmp_path):
    with pytest.raises(BertkitError, match="cannot read"):
        _read([tmp_path / "missing.txt"])
    with pytest.raises(BertkitError, match="is a directory"):
        _read([tmp_path], "text")
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 20)
    with pytest.raises(BertkitError, match="garbage.bin: binary data"):
        _read([garbage])
    noisy = tmp_path / "noisy.txt"
    noisy.write_bytes(bytes(range(128, 256)) * 20)
    with pytest.raises(BertkitError, match="invalid UTF-8"):
        _read([noisy], "text")
    with pytest.raises(BertkitError, match="unknown corpus format"):
        _read([noisy], "csv")


def test_sniffing(tmp_path):
    google = tmp_path / "g.txt"
    google.write_text("A sentence.\nAnother one!\n\nNew document?\nYes.\n")
    prose = tmp_path / "p.txt"
    prose.write_text("It was the best of times, it was the worst\nof times, it was the age of\n"
                     "wisdom, it was the age of foolishness.\n")
    records = tmp_path / "r.data"
    records.write_text('{"text": "x"}\n')
    assert [sniff_format(p) for p in (google, prose, records)] == ["google", "text", "jsonl"]


def test_split_sentences_keeps_abbreviations_and_dialogue():
    text = ("\u201cMy dear Mr. Bennet,\u201d replied his wife, \u201chow can you be so "
            "tiresome! You must know that I am thinking of his marrying one of them.\u201d")
    assert split_sentences(text) == [
        "\u201cMy dear Mr. Bennet,\u201d replied his wife, \u201chow can you be so tiresome!",
        "You must know that I am thinking of his marrying one of them.\u201d",
    ]
    assert split_sentences("   ") == []


def test_chunks_hold_two_documents_and_merge_the_tail():
    docs = [Document(("x" * n,), True, str(i)) for i, n in enumerate([50, 5, 70, 80, 3])]
    chunks = list(chunk_documents(docs, 60))
    assert [[d.source for d in c] for c in chunks] == [["0", "1", "2"], ["3", "4"]]
    chunks = list(chunk_documents(docs[:4], 60))  # the lone last document joins its predecessor
    assert [[d.source for d in c] for c in chunks] == [["0", "1", "2", "3"]]
    assert [len(c) for c in chunk_documents(docs[:1], 60)] == [1]
