"""Data structures of the compiled merge loop (:mod:`bertkit.tokenization.merge_kernel`):
the heap of pair entries, the pair and spelling hash tables, linked lists in node pools and
growable arrays, all plain numpy arrays so that numba compiles and caches them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

LIKELIHOOD, PMI, FREQUENCY = 0, 1, 2
CRITERION_CODES = {"likelihood": LIKELIHOOD, "pmi": PMI, "frequency": FREQUENCY}
# Pair rows (P) and their columns; entry states (the Python loop's `parked`/`exact` sets).
COUNT, VERSION, STATE, MARK, DELTA, WHERE, UA, UB, LINKS = range(9)
FLOOR_BOUND, PARKED, EXACT = 0, 1, 2
# Unit columns: UF (floats) FLOOR, XL_COUNT, XL_FLOOR; UL (ints) PARTNERS, EXACTS, OFF, LEN.
FLOOR, XL_COUNT, XL_FLOOR = range(3)
PARTNERS, EXACTS, OFF, LEN = range(4)
# Scalars (S): pool sizes, the heap size, N, the stamp marking this merge's pairs, settings.
(NPAIRS, NWHERE, NPART, NEXACT, NUNITS, NCPS, HSIZE, TOTAL, STAMP, CRIT, MINF, NTOUCH,
 NPUSH) = range(13)
XL_TOTAL, PARK, KEEP = range(3)  # float scalars (SF)
_EMPTY = -1


def cached_njit(func=None, *, nogil: bool = False):
    """`njit` with numba's on-disk cache (``__pycache__`` beside the source, else
    ``NUMBA_CACHE_DIR`` or the user's cache folder). Where none is writable (a read-only
    install and home), numba refuses ``cache=True`` at import; the function is then compiled
    in every process that uses it (about 20 s for the merge loop) instead of failing.
    `nogil`: the compiled function releases the GIL (so a Python thread can show progress)."""
    if func is None:
        return lambda f: cached_njit(f, nogil=nogil)
    try:
        return njit(cache=True, nogil=nogil)(func)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=nogil)(func)


@cached_njit
def _str_cmp(cps, UL, x, y):
    """-1, 0 or 1 as unit x's spelling sorts before, with or after unit y's (by code point)."""
    ox, lx, oy, ly = UL[x, OFF], UL[x, LEN], UL[y, OFF], UL[y, LEN]
    for i in range(min(lx, ly)):
        if cps[ox + i] != cps[oy + i]:
            return -1 if cps[ox + i] < cps[oy + i] else 1
    return -1 if lx < ly else (1 if lx > ly else 0)


@cached_njit
def _before(f1, c1, a1, b1, k1, f2, c2, a2, b2, k2, cps, UL):
    """(f1, c1, a1, b1, k1) < (f2, c2, a2, b2, k2) in the Python tuple order."""
    if f1 != f2:
        return f1 < f2
    if c1 != c2:
        return c1 < c2
    if a1 != a2:
        return _str_cmp(cps, UL, a1, a2) < 0
    if b1 != b2:
        return _str_cmp(cps, UL, b1, b2) < 0
    return k1 < k2


@cached_njit
def _tie_less(c1, a1, b1, k1, v1, c2, a2, b2, k2, v2, cps, UL):
    """Two heap entries with equal bounds: entries of one pair by (count, version), as
    Python's tuples; others by (count, unit a, unit b). Rare, so kept out of line."""
    if k1 == k2:
        return c1 < c2 or (c1 == c2 and v1 < v2)
    return _before(0.0, c1, a1, b1, k1, 0.0, c2, a2, b2, k2, cps, UL)


@cached_njit
def _rows_less(HF, HI, i, j, cps, UL):
    """Heap row i before row j."""
    if HF[i] != HF[j]:
        return HF[i] < HF[j]
    return _tie_less(HI[i, 0], HI[i, 1], HI[i, 2], HI[i, 3], HI[i, 4],
                     HI[j, 0], HI[j, 1], HI[j, 2], HI[j, 3], HI[j, 4], cps, UL)


@cached_njit
def _heap_push(HF, HI, S, neg_bound, neg_count, a, b, pid, version, cps, UL):
    """Push (caller made the room) entry (-bound, -count, a, b, pid, version)."""
    i = S[HSIZE]
    S[HSIZE] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if neg_bound > HF[parent] or (neg_bound == HF[parent] and not _tie_less(
                neg_count, a, b, pid, version, HI[parent, 0], HI[parent, 1], HI[parent, 2],
                HI[parent, 3], HI[parent, 4], cps, UL)):
            break
        HF[i] = HF[parent]
        HI[i, :] = HI[parent, :]
        i = parent
    HF[i] = neg_bound
    HI[i, 0], HI[i, 1], HI[i, 2], HI[i, 3], HI[i, 4] = neg_count, a, b, pid, version


@cached_njit
def _heap_pop(HF, HI, S, cps, UL):
    """Remove the top entry (read it at row 0 first): the last entry sinks from the top."""
    n = S[HSIZE] - 1
    S[HSIZE] = n
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and (HF[child + 1] < HF[child] or (HF[child + 1] == HF[child] and
                                                              _rows_less(HF, HI, child + 1, child, cps, UL))):
            child += 1
        if HF[child] > HF[n] or (HF[child] == HF[n] and not _rows_less(HF, HI, child, n, cps, UL)):
            break
        HF[i] = HF[child]
        HI[i, :] = HI[child, :]
        i = child
    HF[i] = HF[n]
    HI[i, :] = HI[n, :]


@cached_njit
def _link(pool, S, size_slot, head, value):
    """Prepend `value` to the list starting at `head`; returns the new head."""
    node = S[size_slot]
    S[size_slot] += 1
    pool[node, 0], pool[node, 1] = value, head
    return node


@cached_njit
def _hash(key, mask):
    """splitmix64's finalizer (int64 arithmetic; shifts masked to be logical)."""
    x = (key ^ ((key >> 30) & 0x3FFFFFFFF)) * -4658895280553007687
    x = (x ^ ((x >> 27) & 0x1FFFFFFFFF)) * -7723592293110705685
    return (x ^ ((x >> 31) & 0x1FFFFFFFF)) & mask


@cached_njit
def _rehash(HT, size):
    new = np.full((size, 2), _EMPTY, dtype=np.int64)
    for row in range(HT.shape[0]):
        if HT[row, 0] != _EMPTY:
            slot = _hash(HT[row, 0], size - 1)
            while new[slot, 0] != _EMPTY:
                slot = (slot + 1) & (size - 1)
            new[slot, 0], new[slot, 1] = HT[row, 0], HT[row, 1]
    return new


@cached_njit
def _grow(arr, need):
    """`arr` with at least `need` rows (doubling; the old rows copied)."""
    if arr.shape[0] >= need:
        return arr
    new = np.empty((max(need, 2 * arr.shape[0]),) + arr.shape[1:], dtype=arr.dtype)
    new[:arr.shape[0]] = arr
    return new


@cached_njit
def _spelling_hash(cps, off, length, mask):
    h = 1469598103934665603
    for i in range(off, off + length):
        h = (h ^ cps[i]) * 1099511628211
    return (h >> 8) & mask


@cached_njit
def _find_unit(cps, off, length, UL, ST):
    """The slot of the unit spelled cps[off:off+length] in ST, or of the empty slot for it."""
    mask = ST.shape[0] - 1
    slot = _spelling_hash(cps, off, length, mask)
    while ST[slot] != _EMPTY:
        u = ST[slot]
        if UL[u, LEN] == length and np.array_equal(cps[UL[u, OFF]:UL[u, OFF] + length],
                                                   cps[off:off + length]):
            return slot
        slot = (slot + 1) & mask
    return slot


@cached_njit
def _index_units(cps, UL, S):
    """The spelling table of the first S[NUNITS] units."""
    size = 1024
    while size < 4 * UL.shape[0]:
        size *= 2
    ST = np.full(size, _EMPTY, dtype=np.int64)
    for u in range(S[NUNITS]):
        ST[_find_unit(cps, UL[u, OFF], UL[u, LEN], UL, ST)] = u
    return ST


@cached_njit
def _new_unit(a, b, cps, UL, UC, UF, S, ST):
    """The unit spelled a + b without its "##" (made if new); (unit, made, cps, UL, UC, UF, ST)."""
    length = UL[a, LEN] + UL[b, LEN] - 2
    cps = _grow(cps, S[NCPS] + length)
    off = S[NCPS]
    cps[off:off + UL[a, LEN]] = cps[UL[a, OFF]:UL[a, OFF] + UL[a, LEN]]
    cps[off + UL[a, LEN]:off + length] = cps[UL[b, OFF] + 2:UL[b, OFF] + UL[b, LEN]]
    slot = _find_unit(cps, off, length, UL, ST)
    if ST[slot] != _EMPTY:
        return ST[slot], False, cps, UL, UC, UF, ST
    z = S[NUNITS]
    UL, UC, UF = _grow(UL, z + 1), _grow(UC, z + 1), _grow(UF, z + 1)
    UL[z, PARTNERS], UL[z, EXACTS], UL[z, OFF], UL[z, LEN] = _EMPTY, _EMPTY, off, length
    UC[z] = 0
    UF[z, :] = 0.0
    S[NUNITS] += 1
    S[NCPS] += length
    if 2 * S[NUNITS] > ST.shape[0]:
        ST = _index_units(cps, UL, S)
    else:
        ST[slot] = z
    return z, True, cps, UL, UC, UF, ST


def code_points(units: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The units' spellings as one array of code points and rows (-, -, offset, length)."""
    lengths = np.fromiter(map(len, units), dtype=np.int64, count=len(units))
    spelled = np.full((len(units), 4), _EMPTY, dtype=np.int64)
    spelled[:, LEN] = lengths
    spelled[:, OFF] = np.cumsum(lengths) - lengths
    cps = np.frombuffer("".join(units).encode("utf-32-le"), dtype=np.int32).copy()
    return cps, spelled
