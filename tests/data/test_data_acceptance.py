"""The issue's statistical acceptance checks, on real books from ../shared/data.

Sample sizes: 8 book openings (~800k characters) tokenized once, with 14 passes of pair creation
(dupe factor), give ~24k instances and ~450k masked tokens. NSP balance: sd = sqrt(.25/24k) =
0.32%, so +-1% is a 3-sigma band; 80/10/10: sd <= 0.06%, far inside +-1%; short targets:
sd = 0.19% for the +-1% band. Every draw is seeded, so the test is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.data.chunks import ChunkConfig, build_instances, tokenize_documents
from bertkit.data.corpus import CorpusStats, read_corpus
from bertkit.data.instances import IS_NEXT, NOT_NEXT, InstanceConfig
from bertkit.data.masking import VocabInfo, mask_batch, num_to_predict
from bertkit.tokenization import BertTokenizer

BOOKS = ["austen-pride_and_prejudice", "carroll-alice", "conrad-heart_of_darkness",
         "darwin-voyage_of_the_beagle", "doyle-adventures_of_sherlock_holmes", "mill-on_liberty",
         "plato-republic", "wells-time_machine"]
CHARS_PER_BOOK = 100_000
TAG = 100_000  # document d's ids are shifted by TAG * (d + 1) to trace provenance
MAX_LEN = 128


@pytest.fixture(scope="module")
def tokenizer(minilm_path) -> BertTokenizer:
    return BertTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="module")
def instances(shared_data, tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("books")
    paths = []
    for name in BOOKS:
        text = (shared_data / "books" / f"{name}.txt").read_text(encoding="utf-8")
        paths.append(folder / f"{name}.txt")
        paths[-1].write_text(text[:CHARS_PER_BOOK], encoding="utf-8")
    documents = list(read_corpus(paths, "text", CorpusStats()))
    token_docs = tokenize_documents(documents, tokenizer)
    tagged = [[s + TAG * (d + 1) for s in doc] for d, doc in enumerate(token_docs)]
    config = ChunkConfig(InstanceConfig(max_seq_length=MAX_LEN), dupe_factor=14, seed=1)
    found = build_instances(tagged, config, tokenizer.cls_token_id, tokenizer.sep_token_id,
                            np.random.default_rng(1))
    assert len(found) > 20_000
    return found


@pytest.fixture(scope="module")
def padded(instances):
    """The untagged instances as a padded (N, T) batch plus their lengths."""
    lengths = np.array([len(i.input_ids) for i in instances])
    ids = np.zeros((len(instances), lengths.max()), dtype=np.int64)
    for row, inst in enumerate(instances):
        ids[row, : lengths[row]] = inst.input_ids % TAG
    return ids, lengths


def test_layout_length_and_provenance(instances, tokenizer):
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    for inst in instances:
        ids, s = inst.input_ids, inst.b_start
        assert len(ids) <= MAX_LEN
        assert ids[0] == cls and ids[s - 1] == sep and ids[-1] == sep
        a_docs, b_docs = set(ids[1:s - 1] // TAG), set(ids[s:-1] // TAG)
        assert len(a_docs) == 1 and 0 not in a_docs and len(b_docs) == 1 and 0 not in b_docs
        if inst.label == NOT_NEXT:
            assert a_docs != b_docs  # random next: never from A's document
        else:
            assert inst.label == IS_NEXT and a_docs == b_docs


def test_nsp_balance_and_short_targets(instances):
    labels = np.array([i.label for i in instances])
    assert abs((labels == NOT_NEXT).mean() - 0.5) < 0.01
    short = np.array([i.short_target for i in instances])
    assert abs(short.mean() - 0.10) < 0.01
    lengths = np.array([len(i.input_ids) for i in instances])
    # a full-length target almost always fills the sequence; short targets give short sequences
    assert (lengths[~short] == MAX_LEN).mean() > 0.95
    assert lengths[short].mean() < 0.75 * MAX_LEN


def test_selected_fraction_and_80_10_10(padded, tokenizer):
    ids, lengths = padded
    vocab = VocabInfo.from_tokenizer(tokenizer)
    m = mask_batch(ids, lengths, vocab, np.random.default_rng(2))
    eligible = lengths - 3  # [CLS] A [SEP] B [SEP]: no other special token in book text
    expected = [num_to_predict(int(n), 0.15, 20) for n in eligible]
    np.testing.assert_array_equal(m.counts, expected)  # the cap is respected, row by row
    assert abs(m.counts.sum() / eligible.sum() - 0.15) < 0.003
    chosen = np.arange(m.positions.shape[1]) < m.counts[:, None]
    rows = np.broadcast_to(np.arange(len(ids))[:, None], m.positions.shape)[chosen]
    now, original = m.input_ids[rows, m.positions[chosen]], m.labels[chosen]
    np.testing.assert_array_equal(original, ids[rows, m.positions[chosen]])
    as_mask = now == tokenizer.mask_token_id
    kept = now == original
    assert abs(as_mask.mean() - 0.8) < 0.01
    assert abs(kept.mean() - 0.1) < 0.01
    assert abs((~as_mask & ~kept).mean() - 0.1) < 0.01
    assert not vocab.is_special[now[~as_mask]].any()


def test_whole_word_masking_never_splits_a_word(padded, tokenizer):
    ids, lengths = padded[0][:3000], padded[1][:3000]
    vocab = VocabInfo.from_tokenizer(tokenizer)
    m = mask_batch(ids, lengths, vocab, np.random.default_rng(3), whole_word_mask=True)
    chosen = np.zeros(ids.shape, dtype=bool)
    for row in range(len(ids)):
        chosen[row, m.positions[row, : m.counts[row]]] = True
    piece = vocab.is_continuation[ids] & (np.arange(ids.shape[1]) < lengths[:, None])
    # a piece whose left neighbour is [CLS]/[SEP] (truncation cut its word) stands alone
    piece &= ~np.roll(vocab.is_special[ids], 1, axis=1)
    assert piece.sum() > 1000  # the books do have multi-piece words
    left = np.roll(chosen, 1, axis=1)
    assert (chosen[piece] == left[piece]).all()
    caps = np.array([num_to_predict(int(n) - 3, 0.15, 20) for n in lengths])
    assert (m.counts <= caps).all() and m.counts.sum() > 0.9 * caps.sum()
