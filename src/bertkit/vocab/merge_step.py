"""One merge of the compiled merge loop, as :meth:`bertkit.vocab.merges.Merger.merge`:
rewrite ``a b -> z`` in the words that hold it, update the unit and pair counts, and mark the
pairs whose heap entries must be pushed again (in ``Pairs.to_push``; the driver pushes them
once the heap has room, :func:`~bertkit.vocab.merge_priority.push_marked`).

A pair's count changes are first summed in its row's ``delta`` (the pairs touched are listed
in ``Pairs.touched``), then applied at once, as the Python loop's ``delta`` dictionary. A pair
whose count fell to 0 stays in its units' partner lists and is skipped (the Python loop
removes it; both then push only pairs with count >= min_frequency).
"""

from __future__ import annotations

from bertkit.vocab.merge_priority import xlogx
from bertkit.vocab.merge_state import EMPTY, EXACT, FREQUENCY, LIKELIHOOD, PARKED, cached_njit
from bertkit.vocab.merge_tables import link, pair_id, relink


@cached_njit(inline=True)
def _add(pairs, units, lists, scalars, x, y, change, w):
    """Add `change` to pair (x, y)'s pending delta (w >= 0: word w now holds the pair)."""
    pid = pair_id(pairs, units, lists, scalars, x, y)
    pair = pairs.rows[pid]
    if pair.mark != scalars.stamp:
        pair.mark, pair.delta = scalars.stamp, 0
        pairs.touched[scalars.n_touched] = pid
        scalars.n_touched += 1
    pair.delta += change
    if w >= 0:
        pair.where = link(lists.where, scalars.n_where_nodes, w, pair.where)
        scalars.n_where_nodes += 1


@cached_njit
def _rewrite(w, a, b, z, corpus, pairs, units, lists, scalars):
    """Merger._rewrite: merge every a b of word w, left to right; returns how many."""
    symbols, word = corpus.symbols, corpus.scratch
    start, n, freq = corpus.starts[w], corpus.lengths[w], corpus.freqs[w]
    word[:n] = symbols[start:start + n]
    out, copied, last_end, merged, i = start, 0, -1, 0, 0
    while i < n - 1:
        if word[i] != a or word[i + 1] != b:
            i += 1
            continue
        if i == last_end:  # a b a b: (b, a) went with the first, (z, z) comes now
            _add(pairs, units, lists, scalars, z, z, freq, w)
        elif i > 0:
            _add(pairs, units, lists, scalars, word[i - 1], a, -freq, -1)
            _add(pairs, units, lists, scalars, word[i - 1], z, freq, w)
        if i + 2 < n:
            after = word[i + 2]
            _add(pairs, units, lists, scalars, b, after, -freq, -1)
            if not (after == a and i + 3 < n and word[i + 3] == b):
                _add(pairs, units, lists, scalars, z, after, freq, w)
        symbols[out:out + i - copied] = word[copied:i]
        out += i - copied
        symbols[out] = z
        out += 1
        copied = last_end = i = i + 2
        merged += 1
    if merged:
        symbols[out:out + n - copied] = word[copied:n]
        corpus.lengths[w] = n - merged
    return merged


@cached_njit
def _may_rise(pair, new, old, units, scalars):
    """Merger._may_rise: whether the gain may have risen although the count fell."""
    if pair.entry_kind == PARKED:
        return False
    a, b = pair.unit_a, pair.unit_b
    if a == b:
        return True
    count_a, count_b = units.rows[a].count, units.rows[b].count
    spread = scalars.total + count_a + count_b
    return (new * (spread - 2 * new) <= count_a * count_b
            or old * (spread - 2 * old) <= count_a * count_b)


@cached_njit
def _mark_push(pid, pairs, scalars):
    pair = pairs.rows[pid]
    if pair.mark != scalars.stamp + 1:
        pair.mark = scalars.stamp + 1
        pairs.to_push[scalars.n_to_push] = pid
        scalars.n_to_push += 1


@cached_njit(inline=True)
def _apply(state):
    """Merger._apply: add the pending deltas; mark for pushing the pairs that grew, and
    (likelihood) those that fell but whose gain may have risen."""
    pairs, units, lists, scalars = state.pairs, state.units, state.lists, state.scalars[0]
    likelihood = state.settings.criterion == LIKELIHOOD
    for t in range(scalars.n_touched):
        pid = pairs.touched[t]
        pair = pairs.rows[pid]
        change = pair.delta
        if change == 0:
            continue
        old = pair.count
        new = old + change
        pair.count = max(new, 0)
        if new <= 0:
            pair.where = EMPTY  # no word holds the pair any more
        elif old == 0:
            relink(pair, pid, units, lists, scalars)
        if change > 0 or (likelihood and new > 0 and _may_rise(pair, new, old, units, scalars)):
            _mark_push(pid, pairs, scalars)


@cached_njit
def _push_partners(unit, pairs, units, lists, scalars):
    """Mark the unit's pairs but the parked for pushing; unlink those with count 0."""
    nodes = lists.partners
    node, previous = units.rows[unit].partners, EMPTY
    while node != EMPTY:
        pid, after = nodes[node].value, nodes[node].next
        pair = pairs.rows[pid]
        if pair.count > 0:
            if pair.entry_kind != PARKED:
                _mark_push(pid, pairs, scalars)
            previous = node
        else:
            pair.links &= 2 if unit == pair.unit_a else 1
            if previous == EMPTY:
                units.rows[unit].partners = after
            else:
                nodes[previous].next = after
        node = after


@cached_njit(inline=True)
def _lower_floors(a, b, z, state):
    """Merger._lower_floors: a unit whose count fell below its floor gets a new floor, and
    its pairs (but the parked) are marked for pushing; a new unit gets its first floor."""
    units, keep = state.units, state.settings.keep
    for unit in (a, b, z):
        row = units.rows[unit]
        count, floor = row.count, row.floor
        if count < floor or floor == 0:
            if floor > 0:
                _push_partners(unit, state.pairs, units, state.lists, state.scalars[0])
            row.floor = count * keep
            row.xlogx_floor = xlogx(row.floor)


@cached_njit
def merge(pid_ab, z, state):
    """Merger.merge up to its pushes: rewrite a b -> z, update the statistics and mark in
    Pairs.to_push the pairs to push. The caller made the room for the pairs and list nodes
    the rewrites may add."""
    corpus, pairs, units, lists = state.corpus, state.pairs, state.units, state.lists
    scalars = state.scalars[0]
    a, b = pairs.rows[pid_ab].unit_a, pairs.rows[pid_ab].unit_b
    scalars.stamp += 2
    scalars.n_touched = scalars.n_to_push = 0
    node = pairs.rows[pid_ab].where
    pairs.rows[pid_ab].where = EMPTY
    occurrences = 0
    while node != EMPTY:
        w = lists.where[node].value
        occurrences += _rewrite(w, a, b, z, corpus, pairs, units, lists, scalars) * corpus.freqs[w]
        node = lists.where[node].next
    _add(pairs, units, lists, scalars, a, b, -occurrences, -1)
    units.rows[a].count -= occurrences
    units.rows[b].count -= occurrences
    units.rows[z].count += occurrences
    for unit in (a, b, z):
        units.rows[unit].xlogx_count = xlogx(units.rows[unit].count)
    scalars.total -= occurrences
    scalars.xlogx_total = xlogx(scalars.total)
    _apply(state)
    for unit in (a, b):  # their counts fell: exact entries of their pairs are stale
        node = units.rows[unit].exact_entries
        while node != EMPTY:
            if pairs.rows[lists.exact_entries[node].value].entry_kind == EXACT:
                _mark_push(lists.exact_entries[node].value, pairs, scalars)
            node = lists.exact_entries[node].next
        units.rows[unit].exact_entries = EMPTY
    if state.settings.criterion != FREQUENCY:
        _lower_floors(a, b, z, state)
