"""Length-grouped batch order: a permutation, batches of similar lengths, groups in random order."""

from __future__ import annotations

import torch

from bertkit.training.stream import length_grouped_order


def grouped(n=1000, batch=32, seed=0, offset=0, group_batches=50):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 128, (n,), generator=torch.Generator().manual_seed(99))
    order = torch.randperm(n, generator=gen)
    return lengths, order, length_grouped_order(order, lengths, batch, gen, offset, group_batches)


def spread(lengths, order, batch, start=0):
    """Mean (longest - shortest) over the full batches of `order` from `start` on."""
    rows = order[start:start + (len(order) - start) // batch * batch].view(-1, batch)
    return (lengths[rows].max(1).values - lengths[rows].min(1).values).float().mean().item()


def test_a_permutation_whose_batches_hold_similar_lengths():
    lengths, order, out = grouped()
    assert sorted(out.tolist()) == list(range(1000))
    # random batches span most of 3..127; grouped ones (groups of 50 batches) only a few tokens
    assert spread(lengths, order, 32) > 90
    assert spread(lengths, out, 32) < 10


def test_groups_are_shuffled_and_the_order_follows_the_generator():
    lengths, _, a = grouped(seed=0)
    _, _, b = grouped(seed=1)
    assert not torch.equal(a, b)
    assert torch.equal(a, grouped(seed=0)[2])  # same stream, same order (exact resume)
    firsts = lengths[a.view(-1, 1)[:31 * 32].view(31, 32)[:, 0]]  # first of each full batch
    assert not bool((firsts[:-1] >= firsts[1:]).all())  # not one long-to-short sweep


def test_offset_keeps_batches_aligned_with_the_steps():
    """An epoch that starts mid-batch: its first `offset` examples finish the previous step,
    then every full batch is homogeneous again."""
    lengths, order, out = grouped(n=1000, batch=32, offset=8)
    assert sorted(out.tolist()) == list(range(1000))
    assert spread(lengths, out, 32, start=8) < 10
    assert spread(lengths, out, 32, start=0) > spread(lengths, out, 32, start=8)
