"""Word counting for the vocabulary trainer: exactness of the chunk fast path, .gz input,
bounded memory (max_words), file-order merging, and the held-out quality numbers."""

from __future__ import annotations

import gzip
import math
from collections import Counter
from pathlib import Path

from bertkit.tokenization import BertTokenizer, pretokenize
from bertkit.vocab.counting import (
    WordCounter,
    count_file,
    count_files,
    count_words,
    vocab_quality,
)

# Python splits on \x0b \x0c \x1c-\x1f \x85, which BERT deletes as control characters (so
# "a\x1cb" is one word); NBSP, U+2028 and ideographic space are whitespace to both; CJK
# ideographs and punctuation are split off; a combining accent may start a chunk.
TRICKY = [
    "Héllo, World! a\x0bb c\x0cd e\x1cf g\x1dh i\x1ej k\x1fl m\x85n",
    "nbsp\xa0here line\u2028sep ideo\u3000space 東京タワー e\u0301t\u0301é \u0301x",
    "tabs\tand\r\nCRLF $5.00 (it's) — «quoted» z\ufffdw",
    "",
]


def _reference(texts: list[str], lower: bool = True) -> Counter[str]:
    return Counter(word for text in texts for word in pretokenize(text, lower))


def test_chunk_fast_path_equals_the_basic_tokenizer():
    assert count_words(TRICKY) == _reference(TRICKY)
    assert count_words(TRICKY, do_lower_case=False) == _reference(TRICKY, lower=False)
    assert count_words(["a\x1cb"]) == {"ab": 1}


def test_files_plain_gzip_and_workers_agree(tmp_path):
    text = "\n".join(TRICKY * 50) + "\n"
    plain = tmp_path / "a.txt"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "b.txt.gz"
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    jsonl = tmp_path / "c.jsonl.gz"
    jsonl.write_bytes(gzip.compress(b'{"text": "Gzipped JSONL, too."}\n'))
    expected = _reference(TRICKY * 50)
    assert count_file(plain).words == expected == count_file(packed).words
    assert count_file(jsonl).words == {"gzipped": 1, "jsonl": 1, ",": 1, "too": 1, ".": 1}
    both = count_files([plain, packed, jsonl], workers=1)
    assert both == count_files([plain, packed, jsonl], workers=2)
    assert both["hello"] == 100


def test_blocks_cut_at_line_ends(tmp_path, monkeypatch):
    import bertkit.vocab.counting as counting

    monkeypatch.setattr(counting, "_BLOCK_BYTES", 7)  # many blocks, words across block edges
    lines = ["alpha beta", "gamma", "", "delta-epsilon", "caf\u00e9 na\u00efve"] * 3
    path = tmp_path / "t.txt"
    path.write_text("\ufeff" + "\n".join(lines), encoding="utf-8")  # BOM, no final newline
    assert count_file(path).words == _reference(lines)


def test_max_words_prunes_the_rarest_and_bounds_memory():
    counter = WordCounter(max_words=4)
    counter.add_counts({"the": 9, "a": 5, "cat": 2, "dog": 1, "eel": 1})
    # 5 > 4 distinct: drop count < 2 (3 left, > 2), then count < 3 (2 left = 4 // 2).
    assert counter.words == {"the": 9, "a": 5} and counter.pruned_below == 2
    texts = [" ".join(f"w{i}" for i in range(k)) for k in range(1, 60)]
    pruned = count_words(texts, max_words=20)
    assert len(pruned) <= 20
    full = count_words(texts)
    assert all(full[w] == f for w, f in pruned.items())  # kept words keep their counts
    assert set(pruned) == {w for w, _ in full.most_common(len(pruned))}


def test_vocab_quality_on_a_tiny_known_case():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b", "b"]
    tokenizer = BertTokenizer({t: i for i, t in enumerate(vocab)})
    # training: "ab" x2 = a ##b, "b" x1 = b -> a 2, ##b 2, b 1; 5 pieces + 8 (add-one) = 13
    # held out: "ab" (a ##b) and "c" ([UNK]): 3 tokens for 2 words, half of them [UNK]
    quality = vocab_quality(tokenizer, {"ab": 2, "b": 1}, {"ab": 1, "c": 1})
    assert quality.words == 2 and quality.tokens_per_word == 1.5 and quality.unk_rate == 0.5
    expected = (2 * math.log(3 / 13) + math.log(1 / 13)) / 2
    assert math.isclose(quality.log_likelihood_per_word, expected)


def test_real_books_count_exactly(shared_data: Path):
    path = shared_data / "gutenberg" / "chesterton-ball.txt"  # invalid UTF-8 inside
    text = path.read_bytes().decode("utf-8", errors="replace")
    assert count_file(path).words == _reference(text.splitlines())
