"""Which pair merges next, in the compiled merge loop: the scores, the bounds pushed on the
heap and the pop of the best pair, as :class:`~bertkit.vocab.merges.Merger` does them
(the same operations in the same order, so the same floating-point results). See that class
for why the lazily re-validated heap of upper bounds finds the true best pair.
"""

from __future__ import annotations

import math

import numpy as np

from bertkit.vocab.merge_heap import heap_pop, heap_push, priority_before
from bertkit.vocab.merge_state import EXACT, FLOOR_BOUND, LIKELIHOOD, PARKED, PMI, cached_njit
from bertkit.vocab.merge_tables import link


@cached_njit
def xlogx(x):
    return x * math.log(x) if x > 0 else 0.0


@cached_njit
def score(criterion, count, same, count_a, count_b, xlogx_a, xlogx_b, total, xlogx_total):
    """Merger._score of a pair with units counted `count_a` and `count_b` (or their floors),
    xlogx_a = F(count_a), xlogx_b = F(count_b); scalars only, as array arguments cost
    reference counting on every call."""
    if criterion == LIKELIHOOD:
        if same:
            change = xlogx(count_a - 2 * count) - xlogx(count_a)
            return change + xlogx(count) - xlogx(total - count) + xlogx(total)
        x = count_a - count
        y = count_b - count
        m = total - count
        change = (((x * math.log(x) if x > 0 else 0.0) - xlogx_a)
                  + (y * math.log(y) if y > 0 else 0.0)) - xlogx_b
        return ((change + count * math.log(count)) - (m * math.log(m) if m > 0 else 0.0)) + xlogx_total
    if criterion == PMI:  # in floats: the int64 product overflows past ~3e9 occurrences each
        return count / (float(count_a) * float(count_b))
    return float(count)


@cached_njit
def _free_bound(count, same, total, xlogx_total):
    """Merger._free_bound: a bound of the gain that holds for any unit counts."""
    m = total - count
    rest = xlogx_total - (m * math.log(m) if m > 0 else 0.0)
    return rest + count * math.log(count) if same else rest - count * math.log(count)


@cached_njit
def push(pid, pairs, units, heap, scalars, settings):
    """Merger._push: the floor bound, or the count-free bound if it is below the park."""
    pair = pairs.rows[pid]
    a, b, count = pair.unit_a, pair.unit_b, pair.count
    pair.version += 1
    bound = np.inf
    if settings.criterion == LIKELIHOOD:
        bound = _free_bound(count, a == b, scalars.total, scalars.xlogx_total)
    if bound < scalars.park:
        pair.entry_kind = PARKED
    else:
        pair.entry_kind = FLOOR_BOUND
        row_a, row_b = units.rows[a], units.rows[b]
        bound = score(settings.criterion, count, a == b, row_a.floor, row_b.floor,
                      row_a.xlogx_floor, row_b.xlogx_floor, scalars.total, scalars.xlogx_total)
    heap_push(heap, units, scalars, -bound, -count, a, b, pid, pair.version)


@cached_njit
def push_exact(pid, neg_score, pairs, units, exact_entries, heap, scalars):
    """Merger._push_exact: the exact priority, valid until a unit count of the pair falls;
    the pair joins its units' lists in `exact_entries` (Lists.exact_entries)."""
    pair = pairs.rows[pid]
    pair.version += 1
    pair.entry_kind = EXACT
    for unit in (pair.unit_a, pair.unit_b):
        units.rows[unit].exact_entries = link(exact_entries, scalars.n_exact_nodes, pid,
                                              units.rows[unit].exact_entries)
        scalars.n_exact_nodes += 1
    heap_push(heap, units, scalars, neg_score, -pair.count, pair.unit_a, pair.unit_b, pid,
              pair.version)


@cached_njit
def pop_best(state, losers):
    """Merger.pop_best, without pushing the losers: returns (best pid or -1, losers), the
    losers' pids and exact -scores in `losers` (LOSER rows, room for the whole heap)."""
    units, heap, settings, rows = state.units, state.heap, state.settings, state.pairs.rows
    scalars = state.scalars[0]
    best, best_neg_score, n_losers = -1, 0.0, 0
    while scalars.heap_size > 0:
        top = heap.entries[0]
        if best >= 0 and not priority_before(
                heap.bounds[0], top.neg_count, top.unit_a, top.unit_b, top.pair,
                best_neg_score, -rows[best].count, rows[best].unit_a, rows[best].unit_b, best,
                units):
            break
        pid, version = top.pair, top.version
        heap_pop(heap, units, scalars)
        pair = rows[pid]
        if version != pair.version or pair.count < settings.min_frequency:
            continue
        a, b, count = pair.unit_a, pair.unit_b, pair.count
        row_a, row_b = units.rows[a], units.rows[b]
        neg_score = -score(settings.criterion, count, a == b, row_a.count, row_b.count,
                           row_a.xlogx_count, row_b.xlogx_count, scalars.total,
                           scalars.xlogx_total)
        if best < 0 or priority_before(neg_score, -count, a, b, pid, best_neg_score,
                                       -rows[best].count, rows[best].unit_a, rows[best].unit_b,
                                       best, units):
            if best >= 0:
                losers[n_losers].pair, losers[n_losers].neg_score = best, best_neg_score
                n_losers += 1
            best, best_neg_score = pid, neg_score
        else:
            losers[n_losers].pair, losers[n_losers].neg_score = pid, neg_score
            n_losers += 1
    if best >= 0:
        scalars.park = -best_neg_score
    return best, n_losers


@cached_njit(inline=True)
def push_marked(state):
    """Push the pairs the merge marked (Pairs.to_push) that still qualify."""
    pairs, scalars, settings = state.pairs, state.scalars[0], state.settings
    for t in range(scalars.n_to_push):
        pid = pairs.to_push[t]
        if pairs.rows[pid].count >= settings.min_frequency:
            push(pid, pairs, state.units, state.heap, scalars, settings)
