"""Unit tests of the MLM masking function on a tiny generated vocabulary (real-data statistics
are in test_data_acceptance.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.data.masking import VocabInfo, mask_batch, mask_tokens, num_to_predict
from bertkit.errors import BertkitError

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "cat", "sat", "on", "mat", "un", "##believ", "##able", "dog", "##s"]


@pytest.fixture(scope="module")
def vocab() -> VocabInfo:
    tokens = SPECIALS + WORDS + [f"w{i}" for i in range(40)]
    return VocabInfo.from_vocab({t: i for i, t in enumerate(tokens)})


def _sequence(n_words: int, rng: np.random.Generator) -> np.ndarray:
    body = rng.integers(5, 55, size=n_words)
    return np.concatenate([[2], body, [3]]).astype(np.int32)  # [CLS] ... [SEP]


def test_vocab_info_marks_specials_and_pieces(vocab):
    assert vocab.mask_token_id == 4
    # [UNK] (id 1) is an ordinary token by default, as in Google's script.
    assert vocab.is_special[[0, 2, 3, 4]].all() and not vocab.is_special[5:].any()
    assert not vocab.is_special[1]
    assert vocab.is_continuation[len(SPECIALS) + WORDS.index("##believ")]
    assert not vocab.is_continuation[len(SPECIALS) + WORDS.index("un")]
    assert set(vocab.replacement_ids.tolist()).isdisjoint({0, 2, 3, 4})
    assert 1 in vocab.replacement_ids


def test_unk_is_masked_at_the_rate_of_any_token_unless_special(vocab):
    """Google treats [UNK] as an ordinary token: chosen at the same 15% rate as the others,
    predicted (its label is [UNK]) and drawn as a random replacement; `mask_unk=False` never."""
    rng = np.random.default_rng(5)
    body = rng.integers(5, 55, size=(400, 60))
    body[:, ::4] = 1  # a quarter of the tokens are [UNK]
    ids = np.concatenate([np.full((400, 1), 2), body, np.full((400, 1), 3)], axis=1)
    lengths = np.full(400, ids.shape[1])
    m = mask_batch(ids, lengths, vocab, rng, max_predictions=60)
    chosen = [ids[b, m.positions[b, :m.counts[b]]] for b in range(400)]
    unk_share = np.mean(np.concatenate(chosen) == 1)
    assert unk_share == pytest.approx(0.25, abs=0.02)  # its share of the eligible tokens
    changed = m.input_ids != ids
    assert (m.input_ids[changed] == 1).sum() > 0  # drawn as a random replacement
    tokens = SPECIALS + WORDS + [f"w{i}" for i in range(40)]
    strict = VocabInfo.from_vocab({t: i for i, t in enumerate(tokens)}, mask_unk=False)
    m = mask_batch(ids, lengths, strict, rng, max_predictions=60)
    assert not any((ids[b, m.positions[b, :m.counts[b]]] == 1).any() for b in range(400))
    assert 1 not in strict.replacement_ids


@pytest.mark.parametrize(("n", "expected"), [(0, 0), (1, 1), (3, 1), (10, 2), (100, 15),
                                             (125, 19), (1000, 20)])
def test_num_to_predict_rounds_and_caps(n, expected):
    assert num_to_predict(n, 0.15, 20) == expected


def test_mask_tokens_is_pure_and_records_originals(vocab):
    ids = _sequence(60, np.random.default_rng(1))
    before = ids.copy()
    a = mask_tokens(ids, vocab, np.random.default_rng(7))
    b = mask_tokens(ids, vocab, np.random.default_rng(7))
    np.testing.assert_array_equal(ids, before)  # input untouched
    np.testing.assert_array_equal(a.input_ids, b.input_ids)
    np.testing.assert_array_equal(a.positions, b.positions)
    assert a.positions.size == num_to_predict(60, 0.15, 20) == 9
    assert (np.diff(a.positions) > 0).all()
    np.testing.assert_array_equal(a.labels, ids[a.positions])
    unchanged = np.setdiff1d(np.arange(ids.size), a.positions)
    np.testing.assert_array_equal(a.input_ids[unchanged], ids[unchanged])


def test_specials_never_selected_nor_inserted(vocab):
    rng = np.random.default_rng(3)
    for _ in range(200):
        ids = _sequence(int(rng.integers(1, 40)), rng)
        m = mask_tokens(ids, vocab, rng, masked_lm_prob=0.5)
        assert not vocab.is_special[ids[m.positions]].any()
        changed = m.input_ids != ids
        inserted = m.input_ids[changed]
        assert not vocab.is_special[inserted[inserted != vocab.mask_token_id]].any()
        assert m.input_ids[0] == 2 and m.input_ids[-1] == 3


def test_batch_ignores_padding_and_matches_counts(vocab):
    rng = np.random.default_rng(0)
    lengths = np.array([5, 30, 12])
    ids = np.full((3, 30), 999, dtype=np.int64)  # padding holds an out-of-vocabulary id
    for b, n in enumerate(lengths):
        ids[b, :n] = _sequence(int(n) - 2, rng)
    m = mask_batch(ids, lengths, vocab, rng)
    for b, n in enumerate(lengths):
        k = int(m.counts[b])
        assert k == num_to_predict(int(n) - 2, 0.15, 20)
        assert (m.positions[b, :k] < n).all() and (m.positions[b, k:] == 0).all()
        assert (m.input_ids[b, n:] == 999).all()


def test_out_of_range_ids_are_refused(vocab):
    with pytest.raises(BertkitError, match="out of range"):
        mask_tokens(np.array([2, 5000, 3]), vocab, np.random.default_rng(0))


def test_whole_word_mask_takes_words_whole(vocab):
    # [CLS] un ##believ ##able dog ##s the cat [SEP], many times over
    word = [10, 11, 12, 13, 14, 5, 6]
    ids = np.array([2] + word * 12 + [3], dtype=np.int32)
    rng = np.random.default_rng(5)
    for _ in range(100):
        m = mask_tokens(ids, vocab, rng, whole_word_mask=True)
        chosen = np.zeros(ids.size, dtype=bool)
        chosen[m.positions] = True
        pieces = vocab.is_continuation[ids]
        # a ## piece is chosen exactly when the token before it is
        assert (chosen[1:][pieces[1:]] == chosen[:-1][pieces[1:]]).all()
        assert m.positions.size <= num_to_predict(ids.size - 2, 0.15, 20)
