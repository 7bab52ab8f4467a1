"""Corpus readers: formats, sniffing, encodings, headings, empty documents, bad input,
compressed files cut short, folders."""

from __future__ import annotations

import bz2
import gzip
import json
import logging

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
from bertkit.io import check_output_outside


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


def test_a_corpus_without_documents_is_an_error_naming_its_files(tmp_path, caplog):
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    stats = CorpusStats()
    with pytest.raises(BertkitError, match=r"empty\.txt: no documents \(the file is empty"):
        list(read_corpus([tmp_path / "empty.txt"], "text", stats))
    assert stats.empty_documents == 1  # counted before the error
    (tmp_path / "empty.jsonl").write_bytes(b"")
    with pytest.raises(BertkitError, match=r"empty\.jsonl: no documents"):
        _read([tmp_path / "empty.jsonl"])
    # beside files with documents, an empty one is read and named in a warning
    (tmp_path / "full.txt").write_text("Some text.\n")
    with caplog.at_level(logging.WARNING, logger="bertkit.data.corpus"):
        docs, _ = _read([tmp_path / "empty.jsonl", tmp_path / "full.txt"])
    assert [d.paragraphs for d in docs] == [("Some text.",)]
    assert "1 of 2 files gave no documents" in caplog.text and "empty.jsonl" in caplog.text


def test_bad_paths_and_binary(tmp_path):
    with pytest.raises(BertkitError, match="cannot read"):
        _read([tmp_path / "missing.txt"])
    with pytest.raises(BertkitError, match="an empty folder"):
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


TEXT = "".join(f"Sentence {i} of the corpus is here.\nAnd one more follows it.\n\n"
               for i in range(400)).encode()


def _zstd(data: bytes) -> bytes:
    zstandard = pytest.importorskip("zstandard", reason=".zst needs zstandard (the corpus extra)")
    return zstandard.ZstdCompressor().compress(data)


COMPRESSORS = {"txt.gz": gzip.compress, "jsonl.gz": gzip.compress, "txt.bz2": bz2.compress,
               "txt.zst": _zstd}


def _content(name: str) -> bytes:
    if name.startswith("jsonl"):
        return b"".join(json.dumps({"text": p}).encode() + b"\n" for p in TEXT.decode().split("\n\n"))
    return TEXT


@pytest.mark.parametrize("name", list(COMPRESSORS))
def test_compressed_files_read_whole_and_cut_short_are_errors(tmp_path, name):
    from bertkit.vocab.counting import count_file

    packed = COMPRESSORS[name](_content(name))
    whole, cut = tmp_path / f"whole.{name}", tmp_path / f"cut.{name}"
    whole.write_bytes(packed)
    cut.write_bytes(packed[: len(packed) * 7 // 10])  # an interrupted download
    plain = tmp_path / ("plain." + name.split(".")[0])
    plain.write_bytes(_content(name))
    expected = [d.paragraphs for d in _read([plain])[0]]
    assert len(expected) == 400 and [d.paragraphs for d in _read([whole])[0]] == expected
    # never a traceback from the codec, never a shorter corpus: one error naming the file, in
    # `prepare`'s reader and in `vocab train`'s counting alike
    message = rf"cut\.{name.replace('.', '[.]')}: cannot read: the \w+ data is cut short"
    with pytest.raises(BertkitError, match=message):
        _read([cut])
    with pytest.raises(BertkitError, match=message):
        count_file(cut)


def test_zstd_of_several_frames_is_read_to_the_end(tmp_path):
    path = tmp_path / "frames.txt.zst"  # what pzstd or `cat a.zst b.zst` write
    path.write_bytes(_zstd(b"First part.\n\n") + _zstd(b"Second part.\n"))
    docs, _ = _read([path], "google")
    assert [d.paragraphs for d in docs] == [("First part.",), ("Second part.",)]
    path.write_bytes(_zstd(b"First part.\n") + b"trailing junk")
    with pytest.raises(BertkitError, match=r"frames\.txt\.zst: cannot read: damaged or not zst"):
        _read([path])


def _wiki(doc_id: int, body: str) -> str:
    return (f'<doc id="{doc_id}" url="https://x/?curid={doc_id}" title="T{doc_id}">\n'
            f"T{doc_id}\n\n{body}\n</doc>\n")


def test_a_folder_is_read_recursively_in_sorted_order(tmp_path):
    """WikiExtractor's out/ (AA/wiki_00 ..., --compress: .bz2), hidden and _ files skipped."""
    out = tmp_path / "out"
    (out / "AB").mkdir(parents=True)
    (out / "AA").mkdir()
    (out / "AB" / "wiki_00.bz2").write_bytes(bz2.compress(_wiki(3, "Third.").encode()))
    (out / "AA" / "wiki_01").write_text(_wiki(2, "Second."))
    (out / "AA" / "wiki_00").write_text(_wiki(1, "First."))
    (out / ".DS_Store").write_bytes(b"\x00\x01binary")
    (out / "_SUCCESS").write_bytes(b"")
    docs, stats = _read([out])
    assert [d.paragraphs for d in docs] == [("First.",), ("Second.",), ("Third.",)]
    assert docs[2].source == f"{out / 'AB' / 'wiki_00.bz2'}:1 (id 3)"
    assert stats.files == 3 and stats.formats == {"wikiextractor": 3}
    # an output folder inside an input folder would be read back as input by the next run
    with pytest.raises(BertkitError, match=r"--output .*shards is inside the input folder"):
        check_output_outside(out / "AA" / "shards", [out])
    check_output_outside(tmp_path / "shards", [out])  # beside it is fine
