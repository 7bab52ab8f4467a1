"""The heap of the compiled merge loop: a binary min-heap of pair entries
(:class:`~bertkit.vocab.merge_state.Heap`) in exactly the order of the Python loop's
``heapq`` of tuples ``(-bound, -count, unit a, unit b, pair id, version)``, the units compared
by their spellings, code point by code point, as Python compares strings. Entries rarely tie
on the bound, so the rest of the comparison is kept out of line.
"""

from __future__ import annotations

from bertkit.vocab.merge_state import cached_njit


@cached_njit
def _spelling_order(units, x, y):
    """-1, 0 or 1 as unit x's spelling sorts before, with or after unit y's."""
    code_points = units.code_points
    offset_x, length_x = units.rows[x].offset, units.rows[x].length
    offset_y, length_y = units.rows[y].offset, units.rows[y].length
    for i in range(min(length_x, length_y)):
        if code_points[offset_x + i] != code_points[offset_y + i]:
            return -1 if code_points[offset_x + i] < code_points[offset_y + i] else 1
    return -1 if length_x < length_y else (1 if length_x > length_y else 0)


@cached_njit
def priority_before(neg_score1, neg_count1, a1, b1, pid1, neg_score2, neg_count2, a2, b2, pid2,
                    units):
    """(neg_score1, neg_count1, a1, b1, pid1) < (neg_score2, ...) in the Python tuple order,
    the units by spelling."""
    if neg_score1 != neg_score2:
        return neg_score1 < neg_score2
    if neg_count1 != neg_count2:
        return neg_count1 < neg_count2
    if a1 != a2:
        return _spelling_order(units, a1, a2) < 0
    if b1 != b2:
        return _spelling_order(units, b1, b2) < 0
    return pid1 < pid2


@cached_njit
def _tie_before(neg_count1, a1, b1, pid1, version1, neg_count2, a2, b2, pid2, version2, units):
    """Two entries with equal bounds: entries of one pair by (-count, version), as Python's
    tuples; others by (-count, unit a, unit b)."""
    if pid1 == pid2:
        return neg_count1 < neg_count2 or (neg_count1 == neg_count2 and version1 < version2)
    return priority_before(0.0, neg_count1, a1, b1, pid1, 0.0, neg_count2, a2, b2, pid2, units)


@cached_njit
def _entry_before(heap, i, j, units):
    """Entry i of the heap before entry j."""
    if heap.bounds[i] != heap.bounds[j]:
        return heap.bounds[i] < heap.bounds[j]
    first, second = heap.entries[i], heap.entries[j]
    return _tie_before(first.neg_count, first.unit_a, first.unit_b, first.pair, first.version,
                       second.neg_count, second.unit_a, second.unit_b, second.pair,
                       second.version, units)


@cached_njit
def heap_push(heap, units, scalars, neg_bound, neg_count, a, b, pid, version):
    """Push the entry (-bound, -count, a, b, pid, version); the caller made the room."""
    bounds, entries = heap.bounds, heap.entries
    i = scalars.heap_size
    scalars.heap_size += 1
    while i > 0:
        parent = (i - 1) >> 1
        above = entries[parent]
        if neg_bound > bounds[parent] or (neg_bound == bounds[parent] and not _tie_before(
                neg_count, a, b, pid, version, above.neg_count, above.unit_a, above.unit_b,
                above.pair, above.version, units)):
            break
        bounds[i] = bounds[parent]
        entries[i] = entries[parent]
        i = parent
    bounds[i] = neg_bound
    entry = entries[i]
    entry.neg_count, entry.unit_a, entry.unit_b, entry.pair, entry.version = (
        neg_count, a, b, pid, version)


@cached_njit
def heap_pop(heap, units, scalars):
    """Remove the top entry (read it at row 0 first): the last entry sinks from the top."""
    bounds, entries = heap.bounds, heap.entries
    last = scalars.heap_size - 1
    scalars.heap_size = last
    i = 0
    while True:
        child = 2 * i + 1
        if child >= last:
            break
        if child + 1 < last and (bounds[child + 1] < bounds[child] or (
                bounds[child + 1] == bounds[child] and _entry_before(heap, child + 1, child,
                                                                     units))):
            child += 1
        if bounds[child] > bounds[last] or (bounds[child] == bounds[last] and not _entry_before(
                heap, child, last, units)):
            break
        bounds[i] = bounds[child]
        entries[i] = entries[child]
        i = child
    bounds[i] = bounds[last]
    entries[i] = entries[last]
