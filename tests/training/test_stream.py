"""The example stream: the data order is a function of (seed, global position) alone, the
micro-batches of a step split the same global batch for any number of processes, and the
keyed permutation used above KEYED_ABOVE examples is a permutation, random-looking, in O(1)
memory."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.training import stream
from bertkit.training.stream import DataOrder, KeyedPermutation, StepPlan


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 4097])
def test_keyed_permutation_is_a_permutation(n):
    p = KeyedPermutation(n, 3, "order/0")
    assert sorted(p[i] for i in range(n)) == list(range(n))
    with pytest.raises(IndexError):
        p[n]


def test_keyed_permutation_looks_random_and_depends_on_its_key():
    n = 2000
    a = np.array([KeyedPermutation(n, 0, "order/0")[i] for i in range(n)])
    b = np.array([KeyedPermutation(n, 0, "order/1")[i] for i in range(n)])
    assert abs(np.corrcoef(np.arange(n), a)[0, 1]) < 0.1  # no trace of the identity
    assert (a == b).mean() < 0.01 and abs(np.corrcoef(a, b)[0, 1]) < 0.1  # epochs differ
    # where element 0 lands, over many keys, is spread over the whole range
    landing = [KeyedPermutation(100, seed, "order/0")[0] for seed in range(2000)]
    counts = np.bincount(landing, minlength=100)
    assert counts.min() > 0 and counts.max() < 60  # expected 20 each


def test_large_datasets_use_the_keyed_order_in_constant_memory(monkeypatch):
    monkeypatch.setattr(stream, "KEYED_ABOVE", 100)
    order = DataOrder(seed=1, n_examples=250, batch_size=10)
    first = [order.index_at(p) for p in range(250)]
    assert sorted(first) == list(range(250))
    second = [order.index_at(p) for p in range(250, 500)]
    assert sorted(second) == list(range(250)) and second != first
    assert isinstance(order._perms[1], KeyedPermutation)
    again = DataOrder(seed=1, n_examples=250, batch_size=10)
    assert [again.index_at(p) for p in range(480, 500)] == second[-20:]  # resume anywhere
    with pytest.raises(BertkitError, match="length-grouped batches"):
        DataOrder(seed=1, n_examples=250, batch_size=10, lengths=np.ones(250))


@pytest.mark.parametrize("world,micro", [(1, 8), (1, 2), (2, 4), (2, 2), (4, 1)])
def test_every_split_of_a_global_batch_covers_the_same_positions(world, micro):
    accum = 8 // world // micro
    covered = sorted(p for rank in range(world)
                     for batch in StepPlan(8, world, rank, micro, accum).micro_batches(16)
                     for p in batch)
    assert covered == list(range(16, 24))
