"""WordPiece vocabulary trainer: exact merge sequences, incremental statistics, round trips."""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path

import pytest

from bertkit.errors import BertkitError
from bertkit.tokenization import BertTokenizer, pretokenize
from bertkit.vocab.counting import count_words
from bertkit.vocab.merges import _SHIFT, Merger, likelihood_gain
from bertkit.vocab.trainer import (
    TrainerConfig,
    save_vocab,
    train_from_counts,
    train_from_files,
    train_from_texts,
)

# The corpus of the Hugging Face course's WordPiece chapter, as word counts. Starting units:
#   hug x10 = h ##u ##g        pug x5 = p ##u ##g        pun x12 = p ##u ##n
#   bun x4  = b ##u ##n        hugs x5 = h ##u ##g ##s
# unit counts: h 15, p 17, b 4, ##u 36, ##g 20, ##n 16, ##s 5
# pair counts: (h ##u) 15, (p ##u) 17, (b ##u) 4, (##u ##g) 20, (##u ##n) 16, (##g ##s) 5
HUG = {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}

# PMI, score = count(ab) / (count(a) count(b)); ties by pair count, then (a, b) order.
# 1. Every pair containing ##u scores exactly 1/36 (e.g. 15/(15*36)); (##g ##s) = 5/(20*5) =
#    1/20 wins although it is the second rarest pair.                       -> ##gs
# 2. Now ##g 15, ##s 0, new pair (##u ##gs) 5 = 5/(36*5). All six pairs score exactly 1/36:
#    the tie goes to the most frequent pair, (p ##u) with 17.              -> pu (##u 36 -> 19)
# 3. (h ##u) = 15/(15*19), (b ##u) = 4/(4*19), (##u ##gs) = 5/(19*5) all = 1/19, the top
#    ((pu ##n) = 12/(17*16) = 0.044); of the tied three (h ##u) has the count 15. -> hu (##u 4)
# 4. (b ##u) = 4/(4*4) = 0.25 beats (##u ##n) 4/(4*16), (hu ##gs) 5/(15*5) = 0.067. -> bu
# 5. (hu ##gs) = 5/75 = 0.067 beats (bu ##n) = 4/(4*16) = 0.0625 and (hu ##g) = 10/225.
#                                                                           -> hugs (hu 10)
# 6. (hu ##g) = 10/(10*15) = 0.067 beats (bu ##n) 0.0625, (pu ##g) 5/(17*15). -> hug (##g 5)
# 7. (bu ##n) = 0.0625 beats (pu ##g) = 5/(17*5) = 0.0588 and (pu ##n) 12/(17*16). -> bun
# 8. ##n 12: (pu ##n) = 12/(17*12) = 1/17 = (pu ##g) = 5/(17*5); count 12 > 5. -> pun
# 9. (pu ##g) is the last pair.                                             -> pug
PMI_MERGES = [
    ("##g", "##s"), ("p", "##u"), ("h", "##u"), ("b", "##u"), ("hu", "##gs"),
    ("hu", "##g"), ("bu", "##n"), ("pu", "##n"), ("pu", "##g"),
]
# Likelihood (the default): the exact gain of the unigram log-likelihood sum_u c_u log(c_u / N),
# F(x) = x log x, gain = F(c_a - n) - F(c_a) + F(c_b - n) - F(c_b) + F(n) - F(N - n) + F(N).
# 1. N 113: (##u ##g) 28.0 > (p ##u) 23.0 > (##u ##n) 21.4 > (h ##u) 19.8.      -> ##ug
# 2. N 93, ##u 16: (##u ##n) takes every ##u left: 42.7 > (h ##ug) 29.8.         -> ##un
# 3. N 77: (h ##ug) 26.7 > (p ##un) 14.0 > (##ug ##s) 7.3.                       -> hug
# 4. N 62: (p ##un) 11.2 > (hug ##s) 7.8 > (p ##ug) 7.1 > (b ##un) 5.8.          -> pun
# 5. N 50, p 5: (p ##ug) 16.3 > (b ##un) 13.9 > (hug ##s) 6.7 (BPE, tied at 5,
#    takes hug ##s here).                                                        -> pug
# 6. N 45: (b ##un) 13.5 > (hug ##s) 6.1.  7. (hug ##s) 5.7.
LIKELIHOOD_MERGES = [
    ("##u", "##g"), ("##u", "##n"), ("h", "##ug"), ("p", "##un"), ("p", "##ug"),
    ("b", "##un"), ("hug", "##s"),
]
# Frequency (BPE): the most frequent pair, ties by (a, b) order.
# 1. (##u ##g) 20.  Left: (h ##ug) 15, (p ##ug) 5, (p ##u) 12, (##u ##n) 16, (b ##u) 4, (##ug ##s) 5
# 2. (##u ##n) 16.  Left: (h ##ug) 15, (p ##ug) 5, (p ##un) 12, (b ##un) 4, (##ug ##s) 5
# 3. (h ##ug) 15.   Left: (p ##ug) 5, (p ##un) 12, (b ##un) 4, (hug ##s) 5
# 4. (p ##un) 12.
# 5. (hug ##s) and (p ##ug) tie at 5: "hug" sorts before "p".
# 6. (p ##ug) 5.  7. (b ##un) 4.
FREQUENCY_MERGES = [
    ("##u", "##g"), ("##u", "##n"), ("h", "##ug"), ("p", "##un"), ("hug", "##s"),
    ("p", "##ug"), ("b", "##un"),
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _config(**changes) -> TrainerConfig:
    return TrainerConfig(**{"vocab_size": 100, "min_frequency": 1, **changes})


def test_default_likelihood_merge_sequence_is_exact():
    result = train_from_counts(HUG, _config())
    assert TrainerConfig().criterion == "likelihood"
    assert result.merges == LIKELIHOOD_MERGES
    # ##ug and ##un end with count 0 (merged into hug, pug and pun, bun): not in the vocabulary
    assert result.pieces == ["hug", "pun", "pug", "bun", "hugs"]
    kept = train_from_counts(HUG, _config(drop_absorbed=False))
    assert kept.merges == LIKELIHOOD_MERGES
    assert kept.pieces == ["##ug", "##un", "hug", "pun", "pug", "bun", "hugs"]


def test_absorbed_pieces_do_not_count():
    # 17 = 5 specials + 7 characters + 5 pieces. Keeping absorbed pieces, the first five merges
    # fill it; dropping them, pug takes the last ##ug (dead) and bun the last ##un (dead), so
    # the merges go on to hugs, the fifth piece with a positive count.
    kept = train_from_counts(HUG, _config(vocab_size=17, drop_absorbed=False))
    assert kept.merges == LIKELIHOOD_MERGES[:5] and len(kept.vocab) == 17
    dropped = train_from_counts(HUG, _config(vocab_size=17))
    assert dropped.merges == LIKELIHOOD_MERGES and len(dropped.vocab) == 17
    assert dropped.pieces == ["hug", "pun", "pug", "bun", "hugs"] and not dropped.stopped_early


def test_the_removed_alias_gain_is_refused():
    # "gain" was the likelihood criterion's old name (docs/reports/benchmarks.md); it is no longer accepted
    with pytest.raises(BertkitError, match="criterion must be one of"):
        _config(criterion="gain")


def test_pmi_merge_sequence_is_exact():
    result = train_from_counts(HUG, _config(criterion="pmi"))
    assert result.merges == PMI_MERGES
    # specials, word-initial characters and ## characters (by character frequency), pieces
    # (##gs, pu, hu, bu end with count 0)
    assert result.vocab == SPECIALS + ["p", "h", "b", "##u", "##g", "##n", "##s"] + [
        "hugs", "hug", "bun", "pun", "pug"]


def test_frequency_merge_sequence_is_exact_and_differs():
    result = train_from_counts(HUG, _config(criterion="frequency"))
    assert result.merges == FREQUENCY_MERGES
    assert result.pieces == ["hug", "pun", "hugs", "pug", "bun"]


def test_vocab_size_stops_the_merges():
    # 5 specials + 2 reserved + 7 characters + 3 pieces
    result = train_from_counts(HUG, _config(vocab_size=17, reserved=2, criterion="pmi"))
    assert result.vocab[5:7] == ["[unused0]", "[unused1]"]
    assert result.pieces == ["##gs", "pu", "hu"] and len(result.vocab) == 17
    assert not result.stopped_early


def test_min_frequency_blocks_rare_pairs():
    # With min_frequency 6, (##g ##s) (5) and (b ##u) (4) may not merge. The four ##u pairs all
    # score 1/36; (##u ##g) has the highest count, 20.                       -> ##ug
    # Then (##u ##n) = 16/(16*16) = 0.0625 > (h ##ug) = 15/(15*20) = 0.05 > (p ##u) 12/(17*16).
    # Then (h ##ug) 0.05 > (p ##un) = 12/(17*16) = 0.044; then (p ##un); the rest have count
    # <= 5: (p ##ug) 5, (hug ##s) 5, (b ##un) 4.
    result = train_from_counts(HUG, _config(min_frequency=6, criterion="pmi"))
    assert result.merges == [("##u", "##g"), ("##u", "##n"), ("h", "##ug"), ("p", "##un")]
    assert result.stopped_early


def test_stops_early_with_a_notice(caplog):
    with caplog.at_level(logging.WARNING):
        result = train_from_counts(HUG, _config(vocab_size=1000))
    assert result.stopped_early and len(result.vocab) == 17  # 5 + 7 characters + 5 pieces
    assert "final vocabulary size 17 (requested 1000)" in caplog.text


def test_result_does_not_depend_on_word_order():
    reordered = dict(reversed(list(HUG.items())))
    for criterion in ("likelihood", "pmi", "frequency"):
        assert (train_from_counts(reordered, _config(criterion=criterion)).vocab
                == train_from_counts(HUG, _config(criterion=criterion)).vocab)


def _brute_force_best(merger: Merger, minimum: int) -> int | None:
    counts, pairs = merger.recount()

    def priority(key: int) -> tuple:
        a, b = divmod(key, _SHIFT)
        n, ca, cb = pairs[key], counts[a], counts[b]
        score = {"likelihood": likelihood_gain(n, ca, cb, sum(counts), a == b),
                 "pmi": n / (ca * cb), "frequency": n}[merger.criterion]
        return (-score, -pairs[key], merger.units[a], merger.units[b])

    candidates = [key for key, count in pairs.items() if count >= minimum]
    return min(candidates, key=priority) if candidates else None


@pytest.mark.parametrize("criterion", ["likelihood", "pmi", "frequency"])
def test_incremental_statistics_match_a_full_recount(criterion):
    """Random corpora over a tiny alphabet (lots of overlaps such as 'a a a' and repeated
    spellings): after every merge the incremental counts equal a recount, and the chosen pair
    is the brute-force best under the total order."""
    rng = random.Random(1234)
    for _ in range(60):
        words = {"".join(rng.choice("aabc") for _ in range(rng.randint(1, 9))): rng.randint(1, 5)
                 for _ in range(rng.randint(1, 25))}
        units = sorted({w[0] for w in words}) + sorted({"##" + c for w in words for c in w[1:]})
        minimum = rng.choice([1, 2])
        merger = Merger(words, units, criterion, minimum, slack=rng.choice([0.01, 0.3]))
        while True:
            key = merger.pop_best()
            assert key == _brute_force_best(merger, minimum)
            if key is None:
                break
            a, b = divmod(key, _SHIFT)
            merged = merger.units[a] + merger.units[b][2:]
            if merged not in merger.unit_id:
                merger._add_unit(merged)
            merger.merge(a, b, merger.unit_id[merged])
            assert merger.recount() == (merger.counts, merger.pair_count)


def _log_likelihood(merger: Merger) -> float:
    counts, _ = merger.recount()
    total = sum(counts)
    return sum(c * math.log(c / total) for c in counts if c)


def test_likelihood_score_is_the_exact_change_of_log_likelihood():
    # First merge on HUG (N = 113 units): (##u ##g) gains 28.1 nats, (p ##u) 22.9, (##u ##n)
    # 21.4, (h ##u) 19.8, (##g ##s) 9.2: unlike the ratio score, the gain grows with the count.
    assert train_from_counts(HUG, _config()).merges[0] == ("##u", "##g")
    rng = random.Random(5)
    words = {"".join(rng.choice("abcd") for _ in range(rng.randint(2, 8))): rng.randint(1, 9)
             for _ in range(40)}
    units = sorted({w[0] for w in words}) + sorted({"##" + c for w in words for c in w[1:]})
    merger = Merger(words, units, "likelihood", 1)
    for _ in range(15):
        key = merger.pop_best()
        a, b = divmod(key, _SHIFT)
        a_is_b_overlaps = a == b  # "a a a" merges once, not twice: the count overstates it
        expected, before = merger.score(key), _log_likelihood(merger)
        merged = merger.units[a] + merger.units[b][2:]
        if merged not in merger.unit_id:
            merger._add_unit(merged)
        merger.merge(a, b, merger.unit_id[merged])
        if not a_is_b_overlaps:
            assert _log_likelihood(merger) - before == pytest.approx(expected, abs=1e-6)


def _sample_text() -> list[str]:
    rng = random.Random(7)
    stems = ["walk", "talk", "run", "jump", "read", "play", "work", "think", "un", "re"]
    ends = ["", "s", "ed", "ing", "er", "ers", "able", "ness"]
    lines = []
    for _ in range(300):
        words = [rng.choice(stems) + rng.choice(ends) for _ in range(12)]
        lines.append(" ".join(words).capitalize() + ", naïve café — 東京! ")
    return lines


@pytest.mark.parametrize("criterion", ["likelihood", "pmi", "frequency"])
def test_vocabulary_round_trips_through_bert_tokenizer(tmp_path, criterion):
    lines = _sample_text() + ["zebra ✓ x" + "y" * 120 + " qq"]
    # limit_alphabet keeps 24 characters: rare ones ("✓", "東", "京", "z", "q" ...) fall out.
    config = TrainerConfig(vocab_size=110, criterion=criterion, limit_alphabet=24)
    result = train_from_texts(lines, config)
    assert len(result.vocab) == len(set(result.vocab)) == 110
    save_vocab(result, tmp_path, config.do_lower_case)
    tokenizer = BertTokenizer.from_pretrained(tmp_path)
    assert tokenizer.vocab_size == 110 and tokenizer.do_lower_case
    alphabet = set(result.alphabet)
    words = {w for line in lines for w in pretokenize(line)}
    assert len(alphabet) == 24 and not alphabet.issuperset("".join(words))
    for word in words:
        pieces = tokenizer.tokenize(word)
        if len(word) > 100 or not alphabet.issuperset(word):
            assert pieces == ["[UNK]"], word
        else:
            assert "[UNK]" not in pieces and set(pieces) <= set(result.vocab)
            assert "".join(p.removeprefix("##") for p in pieces) == word


def test_round_trip_on_real_text(shared_data: Path, tmp_path):
    path = shared_data / "bert_sample" / "sample_text.txt"
    result = train_from_files([path], TrainerConfig(vocab_size=400))
    save_vocab(result, tmp_path, True)
    tokenizer = BertTokenizer.from_pretrained(tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines()
    for word in {w for line in lines for w in pretokenize(line)}:
        pieces = tokenizer.tokenize(word)
        assert "[UNK]" not in pieces or not set(result.alphabet).issuperset(word), word


def test_no_usable_word_leaves_the_special_tokens(caplog):
    """Every word maps to [UNK] whole (over 100 characters, or a character outside the
    alphabet): the vocabulary holds the special tokens and the alphabet's units, nothing else."""
    with caplog.at_level(logging.WARNING):
        result = train_from_counts({"x" * 101: 3}, _config(vocab_size=20))
    assert result.vocab == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and not result.merges
    assert result.stopped_early and result.skipped_words == 1
    result = train_from_counts({"ab": 3, "ac": 1}, _config(vocab_size=20, limit_alphabet=1))
    assert result.alphabet == ["a"] and result.vocab[5:] == [] and result.skipped_words == 2


def test_bad_input_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    binary = tmp_path / "data.bin"
    binary.write_bytes(bytes(range(256)) * 10)
    config = TrainerConfig(vocab_size=50)
    with pytest.raises(BertkitError, match="corpus is empty"):
        train_from_files([empty], config)
    with pytest.raises(BertkitError, match=r"data\.bin.*(binary|NUL)"):
        train_from_files([binary], config)
    with pytest.raises(BertkitError, match="missing.txt"):
        train_from_files([tmp_path / "missing.txt"], config)
    with pytest.raises(BertkitError, match="no file matches"):
        train_from_files([str(tmp_path / "*.jsonl")], config)
    with pytest.raises(BertkitError, match="corpus is empty"):
        train_from_texts([], config)
    with pytest.raises(BertkitError, match="smaller than"):
        train_from_texts(["abcdefgh"], TrainerConfig(vocab_size=8))
    with pytest.raises(BertkitError, match="criterion"):
        TrainerConfig(criterion="bpe")


def test_jsonl_and_invalid_utf8_are_read(tmp_path, caplog):
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"text": "Hello world"}\n\n{"text": "hello again"}\n', encoding="utf-8")
    broken = tmp_path / "broken.txt"
    broken.write_bytes(b"caf\xe9 hello\nworld\n")
    with caplog.at_level(logging.WARNING):
        result = train_from_files([jsonl, broken], TrainerConfig(vocab_size=40))
    assert "broken.txt: 1 invalid UTF-8 byte" in caplog.text
    assert {"h", "w", "a", "c"} <= set(result.vocab)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"body": "no text"}\n', encoding="utf-8")
    with pytest.raises(BertkitError, match=r"bad\.jsonl:2"):
        train_from_files([bad], TrainerConfig(vocab_size=40))


def test_count_words_matches_pretokenize():
    texts = ["Héllo, World!", "", "hello   world\tagain", "東京"]
    expected: dict[str, int] = {}
    for text in texts:
        for word in pretokenize(text):
            expected[word] = expected.get(word, 0) + 1
    assert count_words(texts) == expected
    assert count_words(["Hello"], do_lower_case=False) == {"Hello": 1}
