"""`bertkit vocab train` and `bertkit vocab stats`, end to end."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.tokenization import BertTokenizer, pretokenize


def _write_corpus(directory: Path) -> list[Path]:
    """Three small files of pseudo-English (plain, sentence-per-line and JSONL)."""
    rng = random.Random(3)
    stems = ["walk", "talk", "paint", "jump", "read", "play", "work", "think", "sing", "dream"]
    ends = ["", "s", "ed", "ing", "er", "ers", "able", "ness", "ful"]

    def sentence() -> str:
        return " ".join(rng.choice(stems) + rng.choice(ends) for _ in range(10)).capitalize() + "."

    paths = [directory / "a.txt", directory / "b.txt", directory / "c.jsonl"]
    paths[0].write_text("\n".join(sentence() for _ in range(150)) + "\n", encoding="utf-8")
    paths[1].write_text("\n\n".join(sentence() for _ in range(150)) + "\n", encoding="utf-8")
    paths[2].write_text("".join(f'{{"text": "{sentence()}"}}\n' for _ in range(150)),
                        encoding="utf-8")
    return paths


def _train(paths: list[Path], out: Path, *extra: str) -> int:
    argv = ["vocab", "train", *map(str, paths), "--vocab-size", "90", "-o", str(out),
            "--no-progress", *extra]
    return main(argv)


def test_train_writes_a_loadable_vocabulary(tmp_path):
    paths = _write_corpus(tmp_path)
    assert _train(paths, tmp_path / "out", "--reserved", "3") == 0
    lines = (tmp_path / "out" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:8] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                         "[unused0]", "[unused1]", "[unused2]"]
    assert len(lines) == 90 == len(set(lines))
    tokenizer = BertTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.do_lower_case and tokenizer.vocab_size == 90
    assert "[UNK]" not in tokenizer.tokenize("Walkers paintable dreamful.")


def test_same_vocabulary_across_runs_and_workers(tmp_path):
    paths = _write_corpus(tmp_path)
    glob = str(tmp_path / "*.*")  # the same three files, through a glob
    assert _train(paths, tmp_path / "one") == 0
    assert _train([glob], tmp_path / "again") == 0
    assert _train(paths, tmp_path / "two", "--workers", "2") == 0
    first = (tmp_path / "one" / "vocab.txt").read_bytes()
    assert (tmp_path / "again" / "vocab.txt").read_bytes() == first
    assert (tmp_path / "two" / "vocab.txt").read_bytes() == first
    assert _train(paths, tmp_path / "freq", "--criterion", "frequency") == 0
    assert (tmp_path / "freq" / "vocab.txt").read_bytes() != first


@pytest.mark.parametrize("kind", ["empty", "binary", "missing"])
def test_bad_input_is_one_line_on_stderr(tmp_path, capsys, kind):
    path = tmp_path / f"{kind}.txt"
    if kind == "empty":
        path.write_text("\n\n", encoding="utf-8")
    elif kind == "binary":
        path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(200))
    assert _train([path], tmp_path / "out") == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit: error:") and "\n" not in err and str(path) in err
    assert not (tmp_path / "out" / "vocab.txt").exists()


def test_stats_reports_tokens_per_word_and_unk(tmp_path, capsys):
    paths = _write_corpus(tmp_path)
    assert _train(paths, tmp_path / "out") == 0
    held_out = tmp_path / "held_out.txt"
    held_out.write_text("Walking painters sing. Zebras ✓\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["vocab", "stats", str(tmp_path / "out"), "--input", str(held_out),
                 "--top", "2"]) == 0
    out = capsys.readouterr().out
    tokenizer = BertTokenizer.from_pretrained(tmp_path / "out")
    words = pretokenize(held_out.read_text(encoding="utf-8"))
    tokens = sum(len(tokenizer.tokenize(word)) for word in words)
    unk = sum(tokenizer.tokenize(word) == ["[UNK]"] for word in words)
    assert unk >= 1  # "✓" never occurs in training
    assert f"tokens per word  {tokens / len(words):.4f}" in out
    assert f"[UNK] rate       {unk / len(words):.4%} of words" in out
    assert "most-split words" in out and len(out.split("most-split words")[1].splitlines()) == 3
    # a bare vocab.txt works too (lower-cased unless --cased)
    assert main(["vocab", "stats", str(tmp_path / "out" / "vocab.txt"), "-i", str(held_out)]) == 0
    assert f"tokens per word  {tokens / len(words):.4f}" in capsys.readouterr().out


def test_held_out_quality_gzip_input_and_removed_name(tmp_path, capsys):
    import gzip

    from bertkit.vocab.counting import count_files, vocab_quality

    paths = _write_corpus(tmp_path)
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(paths[0].read_bytes()))
    held_out = tmp_path / "held_out.txt"
    held_out.write_text("Walking painters sing. Zebras ✓\n", encoding="utf-8")
    assert _train([packed, *paths[1:]], tmp_path / "out", "--held-out", str(held_out)) == 0
    trained = capsys.readouterr().out
    tokenizer = BertTokenizer.from_pretrained(tmp_path / "out")
    quality = vocab_quality(tokenizer, count_files(paths), count_files([held_out]))
    line = f"unigram log-likelihood per word  {quality.log_likelihood_per_word:.4f} nats"
    assert line in trained and f"tokens per word  {quality.tokens_per_word:.4f}" in trained
    assert quality.unk_rate > 0 and f"[UNK] rate       {quality.unk_rate:.4%}" in trained
    assert main(["vocab", "stats", str(tmp_path / "out"), "-i", *map(str, paths),
                 "--held-out", str(held_out)]) == 0
    assert line in capsys.readouterr().out
    # the old name of the default ("gain") is refused by the parser, before any work
    with pytest.raises(SystemExit) as exit_info:
        _train(paths, tmp_path / "old", "--criterion", "gain")
    assert exit_info.value.code == 2 and not (tmp_path / "old").exists()


def test_text_field_id_field_and_folders(tmp_path, capsys):
    """The record options `prepare` has (--text-field, --id-field) and folder inputs (read
    recursively, as WikiExtractor's out/AA/wiki_00 layout)."""
    import bz2
    import json

    records = tmp_path / "out" / "AA" / "wiki_00"  # WikiExtractor --json: no extension
    records.parent.mkdir(parents=True)
    records.write_text("".join(json.dumps({"id": i, "body": f"Walking painters sing {i}."}) + "\n"
                               for i in range(40)), encoding="utf-8")
    (tmp_path / "out" / "AB").mkdir()
    (tmp_path / "out" / "AB" / "wiki_00.bz2").write_bytes(  # WikiExtractor --compress
        bz2.compress(b'{"id": 99, "body": "Dreaming readers jump."}\n' * 5))
    assert _train([tmp_path / "out"], tmp_path / "v1") == 1  # the message names the option
    err = capsys.readouterr().err.strip()
    assert f'{records}:1: expected an object with a string "text" field' in err
    assert "choose the field with --text-field" in err and "\n" not in err
    assert _train([tmp_path / "out"], tmp_path / "v2", "--text-field", "body", "--id-field",
                  "id") == 0
    vocab = (tmp_path / "v2" / "vocab.txt").read_text(encoding="utf-8").split()
    assert {"walking", "painters", "dreaming"} <= set(vocab)  # both files were read
    assert main(["vocab", "stats", str(tmp_path / "v2"), "-i", str(tmp_path / "out"),
                 "--text-field", "body"]) == 0
    assert "words            220 (" in capsys.readouterr().out  # 40 x 5 + 5 x 4


def test_truncated_gzip_is_one_line_naming_the_file(tmp_path, capsys):
    import gzip

    paths = _write_corpus(tmp_path)
    packed = gzip.compress(paths[0].read_bytes())
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(packed[: len(packed) * 7 // 10])
    assert _train([paths[1], cut], tmp_path / "out") == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"bertkit: error: {cut}: cannot read: the gz data is cut short (it ends "
                   "before its end-of-stream marker); was its download or copy interrupted?")
    assert not (tmp_path / "out" / "vocab.txt").exists()
