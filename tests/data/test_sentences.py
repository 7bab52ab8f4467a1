"""Sentence splitting where blingfire loads and where it does not: the rules agree with blingfire
on the cases that matter, and a platform without blingfire (or numba) still runs every command,
saying which splitter made its shards."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bertkit.data.sentences import RULES, split_sentences, split_with_rules, splitter_name

# A process where blingfire and numba cannot be imported, as on aarch64 or Apple Silicon.
WITHOUT = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("blingfire", "numba"):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
sys.meta_path.insert(0, Block())
from bertkit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

CASES = [
    ("\u201cMy dear Mr. Bennet,\u201d replied his wife, \u201chow can you be so tiresome! You "
     "must know that I am thinking of his marrying one of them.\u201d",
     ["\u201cMy dear Mr. Bennet,\u201d replied his wife, \u201chow can you be so tiresome!",
      "You must know that I am thinking of his marrying one of them.\u201d"]),
    ("J. K. Rowling wrote it. It sold well.", ["J. K. Rowling wrote it.", "It sold well."]),
    ("Prices rose 3.5 percent, e.g. for bread. Then   they fell?  Yes.",
     ["Prices rose 3.5 percent, e.g. for bread.", "Then they fell?", "Yes."]),
    ("no capital after this. so one sentence", ["no capital after this. so one sentence"]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
]


@pytest.mark.parametrize("text,expected", CASES)
def test_the_rules_split_like_blingfire_on_the_common_cases(text, expected):
    assert split_with_rules(text) == expected
    if splitter_name() != RULES:  # blingfire loads here: the two agree on these
        assert split_sentences(text) == expected
    assert split_with_rules("   ") == []


def run_without(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT, *argv], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def test_every_command_runs_without_blingfire_and_numba(tmp_path, minilm_path):
    """--help and info start without them; vocab train falls back to the Python merge loop and
    prepare to the rules, each saying so once, and meta.json names the splitter."""
    assert run_without("--help").returncode == 0
    info = run_without("info", str(minilm_path))
    assert info.returncode == 0, info.stderr[-2000:]
    corpus = tmp_path / "book.txt"
    corpus.write_text("\n\n".join(
        f"Chapter {i}. The cat sat on the mat. Mr. Smith saw it! Then it ran away, far away."
        for i in range(60)), encoding="utf-8")
    other = tmp_path / "other.txt"
    other.write_text("A second document. It has two sentences.\n", encoding="utf-8")
    vocab = run_without("vocab", "train", str(corpus), "--vocab-size", "120", "--output",
                        str(tmp_path / "vocab"), "--no-progress")
    assert vocab.returncode == 0, vocab.stderr[-2000:]
    assert vocab.stderr.count("numba is not available") == 1
    prep = run_without("prepare", str(corpus), str(other), "--tokenizer", str(tmp_path / "vocab"),
                       "--output", str(tmp_path / "shards"), "--format", "text",
                       "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress")
    assert prep.returncode == 0, prep.stderr[-2000:]
    assert prep.stderr.count("blingfire does not load") == 1
    meta = json.loads((tmp_path / "shards" / "meta.json").read_text())
    assert meta["params"]["sentence_splitter"] == RULES
