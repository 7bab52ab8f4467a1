"""Instances: each named step against Google's recipe, on synthetic documents whose token ids
name their document (id // 1000), so provenance can be checked exactly."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.data.instances import (
    IS_NEXT,
    NO_LABEL,
    NOT_NEXT,
    InstanceConfig,
    assemble,
    choose_target_length,
    create_instances,
    sample_random_next,
    split_a_b,
    truncate_pair,
)
from bertkit.errors import BertkitError

CLS, SEP = 101, 102


def _documents(n_docs: int, rng: np.random.Generator) -> list[list[np.ndarray]]:
    """Document d's tokens are 1000 * (d + 1) + position, so id // 1000 - 1 is the document."""
    docs = []
    for d in range(n_docs):
        lengths = rng.integers(3, 40, size=int(rng.integers(1, 30)))
        ids = np.arange(lengths.sum(), dtype=np.int32) + 1000 * (d + 1)
        docs.append(np.split(ids, np.cumsum(lengths)[:-1]))
    return docs


def _google_truncate_lengths(la: int, lb: int, budget: int) -> tuple[int, int]:
    while la + lb > budget:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


@pytest.mark.parametrize(("la", "lb", "budget"), [(10, 3, 8), (3, 10, 8), (7, 7, 9), (50, 60, 2),
                                                   (4, 4, 20), (1, 30, 5)])
def test_truncate_pair_matches_google_longest_first(la, lb, budget):
    a, b = np.arange(la), np.arange(100, 100 + lb)
    ta, tb = truncate_pair(a, b, budget, np.random.default_rng(0))
    assert (len(ta), len(tb)) == _google_truncate_lengths(la, lb, budget)
    # what remains is a contiguous slice of each segment
    assert ta.size == 0 or np.array_equal(ta, np.arange(ta[0], ta[0] + ta.size))
    assert tb.size == 0 or np.array_equal(tb, np.arange(tb[0], tb[0] + tb.size))


def test_truncate_pair_cuts_front_and_back_at_random():
    rng = np.random.default_rng(0)
    fronts = [int(truncate_pair(np.arange(100), np.arange(5), 55, rng)[0][0]) for _ in range(400)]
    # 50 tokens removed from A, each from the front with p=0.5: mean front cut 25
    assert 23 < np.mean(fronts) < 27 and min(fronts) < 25 < max(fronts)


def test_assemble_layout():
    inst = assemble(np.array([5, 6]), np.array([7, 8, 9]), NOT_NEXT, False, CLS, SEP)
    assert inst.input_ids.tolist() == [CLS, 5, 6, SEP, 7, 8, 9, SEP]
    assert inst.b_start == 4 and inst.label == NOT_NEXT
    single = assemble(np.array([5]), None, NO_LABEL, True, CLS, SEP)
    assert single.input_ids.tolist() == [CLS, 5, SEP] and single.b_start == 3


def test_split_a_b_at_sentence_boundaries_and_inside_one_sentence():
    rng = np.random.default_rng(0)
    chunk = [np.arange(3), np.arange(3, 5), np.arange(5, 9)]
    cuts = set()
    for _ in range(50):
        a, b = split_a_b(chunk, rng)
        assert 1 <= len(a) <= 2 and len(a) + len(b) == 3
        cuts.add(len(a))
    assert cuts == {1, 2}
    a, b = split_a_b([np.arange(10)], rng)
    assert np.array_equal(np.concatenate(a + b), np.arange(10)) and len(b) == 1


def test_choose_target_length_short_branch():
    rng = np.random.default_rng(0)
    draws = [choose_target_length(125, 0.1, rng) for _ in range(5000)]
    short = [t for t, s in draws if s]
    assert 0.08 < len(short) / len(draws) < 0.12
    assert min(short) >= 2 and max(short) <= 125
    assert all(t == 125 for t, s in draws if not s)


def test_random_next_never_from_the_same_document():
    rng = np.random.default_rng(0)
    docs = _documents(3, rng)
    for _ in range(300):
        b = sample_random_next(docs, 1, 20, rng)
        assert b.size >= 1 and not (b // 1000 - 1 == 1).any()
    with pytest.raises(BertkitError, match="at least two documents"):
        sample_random_next(docs[:1], 0, 10, rng)


@pytest.mark.parametrize("objective", ["mlm+nsp", "sop"])
def test_pair_instances_layout_provenance_and_labels(objective):
    rng = np.random.default_rng(1)
    docs = _documents(6, rng)
    config = InstanceConfig(max_seq_length=64, objective=objective)
    labels = []
    for d in range(len(docs)):
        for inst in create_instances(docs, d, config, CLS, SEP, rng):
            ids, s = inst.input_ids, inst.b_start
            assert len(ids) <= 64 and ids[0] == CLS and ids[s - 1] == SEP and ids[-1] == SEP
            a, b = ids[1:s - 1], ids[s:-1]
            assert a.size >= 1 and b.size >= 1 and not np.isin([CLS, SEP], np.r_[a, b]).any()
            a_doc, b_doc = set(a // 1000 - 1), set(b // 1000 - 1)
            assert a_doc == {d} or inst.label == NOT_NEXT and objective == "sop"
            if inst.label == NOT_NEXT and objective == "mlm+nsp":
                assert d not in b_doc  # random next: another document
            else:
                assert b_doc == {d}
                first, second = (a, b) if inst.label == IS_NEXT else (b, a)
                assert first.max() < second.min()  # in order, or swapped for SOP negatives
            labels.append(inst.label)
    assert set(labels) == {IS_NEXT, NOT_NEXT}


def test_mlm_objective_single_segment_whole_sentences():
    rng = np.random.default_rng(2)
    docs = _documents(2, rng)
    config = InstanceConfig(max_seq_length=50, objective="mlm", short_seq_prob=0.0)
    instances = create_instances(docs, 0, config, CLS, SEP, rng)
    body = np.concatenate([inst.input_ids[1:-1] for inst in instances])
    whole = np.concatenate(docs[0])
    # contiguous text of one document, in order; only over-long sentences lose their tail
    assert (np.diff(body) > 0).all() and set(body) <= set(whole)
    for inst in instances:
        assert inst.label == NO_LABEL and inst.b_start == len(inst.input_ids) <= 50


def test_instance_config_validation():
    with pytest.raises(BertkitError, match="objective"):
        InstanceConfig(objective="nsp-only")
    with pytest.raises(BertkitError, match="max_seq_length"):
        InstanceConfig(max_seq_length=4)
