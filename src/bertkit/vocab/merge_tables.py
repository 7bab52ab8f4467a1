"""The tables of the compiled merge loop: pair ids by pair, unit ids by spelling, and the
linked lists in node pools (:mod:`bertkit.vocab.merge_state`).

A pair gets a permanent id the first time it occurs, through an open-addressing table keyed
by ``a << 32 | b``. A unit is looked up by its spelling in a second table, as two pairs can
spell the same piece ("a ##bc" and "ab ##c"). Both tables probe linearly and are kept at
most half full. Lists and the pair table work in the room the driver made beforehand;
:func:`new_unit` makes its own and returns the units rebuilt.
"""

from __future__ import annotations

import numpy as np

from bertkit.vocab.merge_state import (
    EMPTY,
    PAIR_SLOT,
    UNIT,
    Units,
    cached_njit,
    grow,
)


@cached_njit
def link(nodes, node, value, head):
    """Node `node` (the next free one of its pool) holds `value` and leads to the list
    starting at `head`: returns it, the list's new head."""
    nodes[node].value = value
    nodes[node].next = head
    return node


@cached_njit
def _hash(key, mask):
    """splitmix64's finalizer (int64 arithmetic; shifts masked to be logical)."""
    x = (key ^ ((key >> 30) & 0x3FFFFFFFF)) * -4658895280553007687
    x = (x ^ ((x >> 27) & 0x1FFFFFFFFF)) * -7723592293110705685
    return (x ^ ((x >> 31) & 0x1FFFFFFFF)) & mask


@cached_njit
def empty_pair_table(size):
    """A pair table of `size` slots (a power of 2), all free."""
    table = np.empty(size, dtype=PAIR_SLOT)
    for slot in range(size):
        table[slot].key = EMPTY
        table[slot].pair = EMPTY
    return table


@cached_njit
def rehash(table, size):
    """The pairs of `table` in a new table of `size` slots."""
    new = empty_pair_table(size)
    for row in range(table.shape[0]):
        if table[row].key != EMPTY:
            slot = _hash(table[row].key, size - 1)
            while new[slot].key != EMPTY:
                slot = (slot + 1) & (size - 1)
            new[slot] = table[row]
    return new


@cached_njit(inline=True)
def pair_id(pairs, units, lists, scalars, a, b):
    """The id of pair (a, b), made if new: its row zeroed and linked to its units' partners."""
    key = a << 32 | b
    table = pairs.table
    mask = table.shape[0] - 1
    slot = _hash(key, mask)
    while table[slot].key != EMPTY:
        if table[slot].key == key:
            return table[slot].pair
        slot = (slot + 1) & mask
    pid = scalars.n_pairs
    scalars.n_pairs += 1
    table[slot].key = key
    table[slot].pair = pid
    pair = pairs.rows[pid]
    pair.count = pair.version = pair.entry_kind = pair.delta = pair.links = 0
    pair.mark = pair.where = EMPTY
    pair.unit_a, pair.unit_b = a, b
    relink(pair, pid, units, lists, scalars)
    return pid


@cached_njit
def relink(pair, pid, units, lists, scalars):
    """Put pair `pid` (its row: `pair`) back in the partner lists of its units that dropped
    it while its count was 0 (see PAIR's links)."""
    a, b = pair.unit_a, pair.unit_b
    if not pair.links & 1:
        units.rows[a].partners = link(lists.partners, scalars.n_partner_nodes, pid,
                                      units.rows[a].partners)
        scalars.n_partner_nodes += 1
    if b != a and not pair.links & 2:
        units.rows[b].partners = link(lists.partners, scalars.n_partner_nodes, pid,
                                      units.rows[b].partners)
        scalars.n_partner_nodes += 1
    pair.links = 3


@cached_njit
def _spelling_hash(code_points, offset, length, mask):
    """FNV-1a over the code points."""
    h = 1469598103934665603
    for i in range(offset, offset + length):
        h = (h ^ code_points[i]) * 1099511628211
    return (h >> 8) & mask


@cached_njit
def _find_unit(units, spelling_table, offset, length):
    """The slot of the unit spelled code_points[offset:offset + length] in the spelling table,
    or of the free slot for it."""
    code_points, rows = units.code_points, units.rows
    mask = spelling_table.shape[0] - 1
    slot = _spelling_hash(code_points, offset, length, mask)
    while spelling_table[slot] != EMPTY:
        u = spelling_table[slot]
        if rows[u].length == length and np.array_equal(
                code_points[rows[u].offset:rows[u].offset + length],
                code_points[offset:offset + length]):
            return slot
        slot = (slot + 1) & mask
    return slot


@cached_njit
def index_units(units, n_units):
    """A spelling table of the first `n_units` units, at most a quarter full for as many
    units as rows."""
    size = 1024
    while size < 4 * units.rows.shape[0]:
        size *= 2
    spelling_table = np.full(size, EMPTY, dtype=np.int64)
    for u in range(n_units):
        slot = _find_unit(units, spelling_table, units.rows[u].offset, units.rows[u].length)
        spelling_table[slot] = u
    return spelling_table


@cached_njit
def new_unit(units, scalars, a, b):
    """The unit spelled a + b without b's "##", made if new: (unit, made, units), the units
    rebuilt with the room a new one needs."""
    row_a, row_b = units.rows[a], units.rows[b]
    length = row_a.length + row_b.length - 2
    offset = scalars.n_code_points
    code_points = grow(units.code_points, offset + length)
    code_points[offset:offset + row_a.length] = code_points[
        row_a.offset:row_a.offset + row_a.length]
    code_points[offset + row_a.length:offset + length] = code_points[
        row_b.offset + 2:row_b.offset + row_b.length]
    units = Units(grow(units.rows, scalars.n_units + 1), code_points, units.spelling_table)
    slot = _find_unit(units, units.spelling_table, offset, length)
    if units.spelling_table[slot] != EMPTY:
        return units.spelling_table[slot], False, units
    z = scalars.n_units
    row = units.rows[z]
    row.count = 0
    row.xlogx_count = row.floor = row.xlogx_floor = 0.0
    row.partners = row.exact_entries = EMPTY
    row.offset, row.length = offset, length
    scalars.n_units += 1
    scalars.n_code_points += length
    if 2 * scalars.n_units > units.spelling_table.shape[0]:
        units = Units(units.rows, units.code_points, index_units(units, scalars.n_units))
    else:
        units.spelling_table[slot] = z
    return z, True, units


def initial_units(units: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The units' spellings as one array of code points, and their UNIT rows (spelling set,
    count 0, no lists)."""
    lengths = np.fromiter(map(len, units), dtype=np.int64, count=len(units))
    rows = np.zeros(len(units), dtype=UNIT)
    rows["partners"] = rows["exact_entries"] = EMPTY
    rows["length"] = lengths
    rows["offset"] = np.cumsum(lengths) - lengths
    code_points = np.frombuffer("".join(units).encode("utf-32-le"), dtype=np.int32).copy()
    return code_points, rows
