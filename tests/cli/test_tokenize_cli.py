"""`bertkit tokenize MODEL_DIR TEXT [--pair TEXT] [--max-length N]` (bertkit.cli.tokenize_cmds)."""

from __future__ import annotations

from pathlib import Path

from bertkit.cli.main import main


def test_tokenize_prints_a_table(minilm_path: Path, capsys) -> None:
    assert main(["tokenize", str(minilm_path), "H\u00e9llo, world!", "--pair", "Bye"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["#", "token", "id", "segment", "span"]
    rows = [line.split() for line in lines[1:]]
    assert rows[0] == ["0", "[CLS]", "101", "0"]
    assert rows[1] == ["1", "hello", "7592", "0", "H\u00e9llo"]  # span: the original text
    assert rows[-2] == ["6", "bye", "9061", "1", "Bye"]
    assert rows[-1] == ["7", "[SEP]", "102", "1"]


def test_tokenize_max_length(minilm_path: Path, capsys) -> None:
    assert main(["tokenize", str(minilm_path), "one two three four", "--max-length", "4"]) == 0
    tokens = [line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]]
    assert tokens == ["[CLS]", "one", "two", "[SEP]"]


def test_tokenize_without_vocab_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    assert main(["tokenize", str(tmp_path), "text"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().count("\n") == 0
    assert "no vocab.txt" in captured.err
    assert main(["tokenize", str(tmp_path / "missing"), "text"]) == 1
    assert "not a directory" in capsys.readouterr().err
