"""The merge loop of :class:`bertkit.tokenization.merges.Merger`, compiled with numba.

Same algorithm, same arithmetic, same merges (tests/tokenization/test_merge_kernel.py checks
it against the Python :class:`~bertkit.tokenization.merges.Merger` on random corpora): the
lazily re-validated heap of upper bounds with count floors, exact entries for popped losers
and parked count-free bounds; see that class for why it is correct. Only the data structures
differ, to suit compiled code. In Python the loop makes about 27 million calls at 30k
pieces on 50 books (11.6 s CPU of the 14.5 s end to end); compiled it takes 2.2 s, mostly
heap sifting and pointer chasing in memory (docs/benchmarks.md).

Data structures. A pair gets a permanent id (``pid``) the first time it occurs, through an
open-addressing table from ``a << 32 | b``; its statistics are one row of ``P``. The lists
"words containing the pair" (``where``), "pairs containing the unit" (``partners``) and "exact
entries of the unit" are singly linked lists in node pools (``(value, next)`` rows), so they
never move; a list is emptied by dropping its head. A pair whose count fell to 0 stays in its
units' partner lists and is skipped (the Python loop removes it; both then push only pairs
with count >= min_frequency). Unit strings are code points in one pool; a new piece is looked
up by its spelling (two pairs can spell the same piece, "a ##bc" and "ab ##c") in a second
table. Heap entries compare like the Python tuples ``(-bound, -count, unit a, unit b, key)``,
the strings by code point as Python does.

Arrays grow (doubling) only in :func:`_run`, before the step that may need the room, so the
helpers never reallocate. Compiled on first use and cached (``cache=True``, in
``__pycache__`` or ``NUMBA_CACHE_DIR``): about 20 s once, then loaded in under a second
(docs/benchmarks.md); with no writable cache folder, compiled once per process
(:func:`~bertkit.tokenization.kernel_structs.cached_njit`). The heap, tables and pools are in
:mod:`bertkit.tokenization.kernel_structs`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from bertkit.io import watch_progress
from bertkit.tokenization.kernel_structs import (
    _EMPTY,
    COUNT,
    CRIT,
    CRITERION_CODES,
    DELTA,
    EXACT,
    EXACTS,
    FLOOR,
    FLOOR_BOUND,
    FREQUENCY,
    HSIZE,
    KEEP,
    LEN,
    LIKELIHOOD,
    LINKS,
    MARK,
    MINF,
    NCPS,
    NEXACT,
    NPAIRS,
    NPART,
    NPUSH,
    NTOUCH,
    NUNITS,
    NWHERE,
    OFF,
    PARK,
    PARKED,
    PARTNERS,
    PMI,
    STAMP,
    STATE,
    TOTAL,
    UA,
    UB,
    VERSION,
    WHERE,
    XL_COUNT,
    XL_FLOOR,
    XL_TOTAL,
    _before,
    _grow,
    _hash,
    _heap_pop,
    _heap_push,
    _index_units,
    _link,
    _new_unit,
    _rehash,
    cached_njit,
    code_points,
)
from bertkit.tokenization.merges import PREFIX


@cached_njit
def _xlogx(x):
    return x * math.log(x) if x > 0 else 0.0


@cached_njit
def _score(crit, count, same, ca, cb, xa, xb, total, xl_total):
    """Merger._score, the same operations in the same order, of a pair with units counted
    ca and cb, xa = F(ca), xb = F(cb) (or floors and their F); scalars only, as array
    arguments cost reference counting on every call."""
    if crit == LIKELIHOOD:
        if same:
            change = _xlogx(ca - 2 * count) - _xlogx(ca)
            return change + _xlogx(count) - _xlogx(total - count) + _xlogx(total)
        x = ca - count
        y = cb - count
        m = total - count
        change = (((x * math.log(x) if x > 0 else 0.0) - xa)
                  + (y * math.log(y) if y > 0 else 0.0)) - xb
        return ((change + count * math.log(count)) - (m * math.log(m) if m > 0 else 0.0)) + xl_total
    if crit == PMI:  # in floats: the int64 product overflows past ~3e9 occurrences each
        return count / (float(ca) * float(cb))
    return float(count)


@cached_njit
def _free_bound(count, same, total, xl_total):
    """Merger._free_bound: a bound of the gain that holds for any unit counts."""
    m = total - count
    rest = xl_total - (m * math.log(m) if m > 0 else 0.0)
    return rest + count * math.log(count) if same else rest - count * math.log(count)


@cached_njit
def _push(pid, P, UC, UF, S, SF, HF, HI, cps, UL):
    """Merger._push: the floor bound, or the count-free bound if it is below the park."""
    a, b, count = P[pid, UA], P[pid, UB], P[pid, COUNT]
    P[pid, VERSION] += 1
    bound = np.inf
    if S[CRIT] == LIKELIHOOD:
        bound = _free_bound(count, a == b, S[TOTAL], SF[XL_TOTAL])
    if bound < SF[PARK]:
        P[pid, STATE] = PARKED
    else:
        P[pid, STATE] = FLOOR_BOUND
        bound = _score(S[CRIT], count, a == b, UF[a, FLOOR], UF[b, FLOOR], UF[a, XL_FLOOR],
                       UF[b, XL_FLOOR], S[TOTAL], SF[XL_TOTAL])
    _heap_push(HF, HI, S, -bound, -count, a, b, pid, P[pid, VERSION], cps, UL)


@cached_njit
def _push_exact(pid, neg_score, P, UL, EN, S, HF, HI, cps):
    """Merger._push_exact: the exact priority, valid until a unit count of the pair falls."""
    P[pid, VERSION] += 1
    P[pid, STATE] = EXACT
    for unit in (P[pid, UA], P[pid, UB]):
        UL[unit, EXACTS] = _link(EN, S, NEXACT, UL[unit, EXACTS], pid)
    _heap_push(HF, HI, S, neg_score, -P[pid, COUNT], P[pid, UA], P[pid, UB], pid,
               P[pid, VERSION], cps, UL)


@cached_njit
def _pop_best(P, UC, UF, S, SF, HF, HI, cps, UL, LOSE):
    """Merger.pop_best, without pushing the losers: returns (best pid or -1, losers), the
    losers' pids and exact -scores in LOSE (room for the whole heap)."""
    best, bf, nl = -1, 0.0, 0
    while S[HSIZE] > 0:
        if best >= 0 and not _before(HF[0], HI[0, 0], HI[0, 1], HI[0, 2], HI[0, 3], bf,
                                     -P[best, COUNT], P[best, UA], P[best, UB], best, cps, UL):
            break
        pid, version = HI[0, 3], HI[0, 4]
        _heap_pop(HF, HI, S, cps, UL)
        if version != P[pid, VERSION] or P[pid, COUNT] < S[MINF]:
            continue
        a, b, count = P[pid, UA], P[pid, UB], P[pid, COUNT]
        f = -_score(S[CRIT], count, a == b, UC[a], UC[b], UF[a, XL_COUNT], UF[b, XL_COUNT],
                    S[TOTAL], SF[XL_TOTAL])
        if best < 0 or _before(f, -count, a, b, pid, bf, -P[best, COUNT], P[best, UA],
                               P[best, UB], best, cps, UL):
            if best >= 0:
                LOSE[nl, 0], LOSE[nl, 1] = best, bf
                nl += 1
            best, bf = pid, f
        else:
            LOSE[nl, 0], LOSE[nl, 1] = pid, f
            nl += 1
    if best >= 0:
        SF[PARK] = -bf
    return best, nl


@cached_njit
def _pair_id(a, b, P, HT, S, UL, PN):
    """The id of pair (a, b), made (row zeroed, linked to its units' partners) if new."""
    key = a << 32 | b
    mask = HT.shape[0] - 1
    slot = _hash(key, mask)
    while HT[slot, 0] != _EMPTY:
        if HT[slot, 0] == key:
            return HT[slot, 1]
        slot = (slot + 1) & mask
    pid = S[NPAIRS]
    S[NPAIRS] += 1
    HT[slot, 0], HT[slot, 1] = key, pid
    P[pid, :] = 0
    P[pid, MARK], P[pid, WHERE], P[pid, UA], P[pid, UB] = _EMPTY, _EMPTY, a, b
    _relink(pid, P, UL, PN, S)
    return pid


@cached_njit
def _relink(pid, P, UL, PN, S):
    """Put the pair back in the partner lists of its units (bit 1: a's, bit 2: b's) that
    dropped it while it had count 0."""
    a, b = P[pid, UA], P[pid, UB]
    if not P[pid, LINKS] & 1:
        UL[a, PARTNERS] = _link(PN, S, NPART, UL[a, PARTNERS], pid)
    if b != a and not P[pid, LINKS] & 2:
        UL[b, PARTNERS] = _link(PN, S, NPART, UL[b, PARTNERS], pid)
    P[pid, LINKS] = 3


@cached_njit
def _add(x, y, change, w, P, HT, S, UL, PN, W, TOUCH):
    """Add `change` to pair (x, y)'s pending delta (w >= 0: word w now holds the pair)."""
    pid = _pair_id(x, y, P, HT, S, UL, PN)
    if P[pid, MARK] != S[STAMP]:
        P[pid, MARK], P[pid, DELTA] = S[STAMP], 0
        TOUCH[S[NTOUCH]] = pid
        S[NTOUCH] += 1
    P[pid, DELTA] += change
    if w >= 0:
        P[pid, WHERE] = _link(W, S, NWHERE, P[pid, WHERE], w)


@cached_njit
def _rewrite(w, a, b, z, SYM, WS, WL, FREQ, BUF, P, HT, S, UL, PN, W, TOUCH):
    """Merger._rewrite: merge every a b of word w, left to right; returns how many."""
    start, n, freq = WS[w], WL[w], FREQ[w]
    BUF[:n] = SYM[start:start + n]
    out, copied, last_end, merged, i = start, 0, -1, 0, 0
    while i < n - 1:
        if BUF[i] != a or BUF[i + 1] != b:
            i += 1
            continue
        if i == last_end:  # a b a b: (b, a) went with the first, (z, z) comes now
            _add(z, z, freq, w, P, HT, S, UL, PN, W, TOUCH)
        elif i > 0:
            _add(BUF[i - 1], a, -freq, -1, P, HT, S, UL, PN, W, TOUCH)
            _add(BUF[i - 1], z, freq, w, P, HT, S, UL, PN, W, TOUCH)
        if i + 2 < n:
            nxt = BUF[i + 2]
            _add(b, nxt, -freq, -1, P, HT, S, UL, PN, W, TOUCH)
            if not (nxt == a and i + 3 < n and BUF[i + 3] == b):
                _add(z, nxt, freq, w, P, HT, S, UL, PN, W, TOUCH)
        SYM[out:out + i - copied] = BUF[copied:i]
        out += i - copied
        SYM[out] = z
        out += 1
        copied = last_end = i = i + 2
        merged += 1
    if merged:
        SYM[out:out + n - copied] = BUF[copied:n]
        WL[w] = n - merged
    return merged


@cached_njit
def _may_rise(pid, new, old, P, UC, S):
    """Merger._may_rise: whether the gain may have risen although the count fell."""
    if P[pid, STATE] == PARKED:
        return False
    a, b = P[pid, UA], P[pid, UB]
    if a == b:
        return True
    ca, cb = UC[a], UC[b]
    spread = S[TOTAL] + ca + cb
    return new * (spread - 2 * new) <= ca * cb or old * (spread - 2 * old) <= ca * cb


@cached_njit
def _mark_push(pid, P, S, PUSH):
    if P[pid, MARK] != S[STAMP] + 1:
        P[pid, MARK] = S[STAMP] + 1
        PUSH[S[NPUSH]] = pid
        S[NPUSH] += 1


@cached_njit
def _apply(P, UC, S, TOUCH, PUSH, UL, PN):
    """Merger._apply: add the pending deltas; mark for pushing the pairs that grew, and
    (likelihood) those that fell but whose gain may have risen."""
    for t in range(S[NTOUCH]):
        pid = TOUCH[t]
        change = P[pid, DELTA]
        if change == 0:
            continue
        old = P[pid, COUNT]
        new = old + change
        P[pid, COUNT] = max(new, 0)
        if new <= 0:
            P[pid, WHERE] = _EMPTY  # no word holds the pair any more
        elif old == 0:
            _relink(pid, P, UL, PN, S)
        if change > 0 or (S[CRIT] == LIKELIHOOD and new > 0 and _may_rise(pid, new, old, P, UC, S)):
            _mark_push(pid, P, S, PUSH)


@cached_njit
def _push_partners(unit, P, UL, PN, S, PUSH):
    """Mark the unit's pairs but the parked for pushing; unlink those with count 0."""
    node, prev = UL[unit, PARTNERS], _EMPTY
    while node != _EMPTY:
        pid, after = PN[node, 0], PN[node, 1]
        if P[pid, COUNT] > 0:
            if P[pid, STATE] != PARKED:
                _mark_push(pid, P, S, PUSH)
            prev = node
        else:
            P[pid, LINKS] &= 2 if unit == P[pid, UA] else 1
            if prev == _EMPTY:
                UL[unit, PARTNERS] = after
            else:
                PN[prev, 1] = after
        node = after


@cached_njit
def _lower_floors(a, b, z, P, UC, UF, UL, PN, S, SF, PUSH):
    """Merger._lower_floors: a unit whose count fell below its floor gets a new floor, and
    its pairs (but the parked) are marked for pushing; a new unit gets its first floor."""
    for unit in (a, b, z):
        count, floor = UC[unit], UF[unit, FLOOR]
        if count < floor or floor == 0:
            if floor > 0:
                _push_partners(unit, P, UL, PN, S, PUSH)
            UF[unit, FLOOR] = count * SF[KEEP]
            UF[unit, XL_FLOOR] = _xlogx(UF[unit, FLOOR])


@cached_njit
def _merge(pid_ab, z, SYM, WS, WL, FREQ, BUF, P, HT, S, SF, UC, UF, UL, PN, W, EN, TOUCH, PUSH):
    """Merger.merge up to its pushes: rewrite a b -> z, update the statistics and mark in
    PUSH the pairs to push (:func:`_push_all`, once the heap has room)."""
    a, b = P[pid_ab, UA], P[pid_ab, UB]
    S[STAMP] += 2
    S[NTOUCH] = S[NPUSH] = 0
    node = P[pid_ab, WHERE]
    P[pid_ab, WHERE] = _EMPTY
    occurrences = 0
    while node != _EMPTY:
        w = W[node, 0]
        occurrences += _rewrite(w, a, b, z, SYM, WS, WL, FREQ, BUF, P, HT, S, UL, PN, W,
                                TOUCH) * FREQ[w]
        node = W[node, 1]
    _add(a, b, -occurrences, -1, P, HT, S, UL, PN, W, TOUCH)
    UC[a] -= occurrences
    UC[b] -= occurrences
    UC[z] += occurrences
    for unit in (a, b, z):
        UF[unit, XL_COUNT] = _xlogx(UC[unit])
    S[TOTAL] -= occurrences
    SF[XL_TOTAL] = _xlogx(S[TOTAL])
    _apply(P, UC, S, TOUCH, PUSH, UL, PN)
    for unit in (a, b):  # their counts fell: exact entries of their pairs are stale
        node = UL[unit, EXACTS]
        while node != _EMPTY:
            if P[EN[node, 0], STATE] == EXACT:
                _mark_push(EN[node, 0], P, S, PUSH)
            node = EN[node, 1]
        UL[unit, EXACTS] = _EMPTY
    if S[CRIT] != FREQUENCY:
        _lower_floors(a, b, z, P, UC, UF, UL, PN, S, SF, PUSH)


@cached_njit
def _push_all(P, UC, UF, S, SF, HF, HI, cps, UL, PUSH):
    for t in range(S[NPUSH]):
        if P[PUSH[t], COUNT] >= S[MINF]:
            _push(PUSH[t], P, UC, UF, S, SF, HF, HI, cps, UL)


@cached_njit
def _count_pairs(SYM, WS, WL, FREQ, P, HT, S, UC, UL, PN, W):
    """Unit counts, pair counts and the word lists of the initial segmentation."""
    for w in range(WS.shape[0]):
        start, n, freq = WS[w], WL[w], FREQ[w]
        for i in range(start, start + n):
            UC[SYM[i]] += freq
        for i in range(start, start + n - 1):
            pid = _pair_id(SYM[i], SYM[i + 1], P, HT, S, UL, PN)
            P[pid, COUNT] += freq
            P[pid, WHERE] = _link(W, S, NWHERE, P[pid, WHERE], w)


@cached_njit
def _setup(SYM, WS, WL, FREQ, cps, UL, S, SF):
    """Pair statistics, unit counts and floors, and the first heap (Merger.__init__)."""
    rows = SYM.shape[0] + 64
    P = np.empty((rows, 9), dtype=np.int64)
    size = 1024
    while size < 2 * rows:
        size *= 2
    HT = np.full((size, 2), _EMPTY, dtype=np.int64)
    W, PN = np.empty((rows, 2), dtype=np.int64), np.empty((2 * rows, 2), dtype=np.int64)
    UC = np.zeros(UL.shape[0], dtype=np.int64)
    UF = np.zeros((UL.shape[0], 3))
    _count_pairs(SYM, WS, WL, FREQ, P, HT, S, UC, UL, PN, W)
    S[TOTAL] = UC.sum()
    SF[XL_TOTAL], SF[PARK] = _xlogx(S[TOTAL]), -np.inf
    for u in range(S[NUNITS]):
        UF[u, XL_COUNT] = _xlogx(UC[u])
        UF[u, FLOOR] = UC[u] * SF[KEEP]
        UF[u, XL_FLOOR] = _xlogx(UF[u, FLOOR])
    HF, HI = np.empty(S[NPAIRS] + 64), np.empty((S[NPAIRS] + 64, 5), dtype=np.int64)
    for pid in range(S[NPAIRS]):
        if P[pid, COUNT] >= S[MINF]:
            _push(pid, P, UC, UF, S, SF, HF, HI, cps, UL)
    return P, HT, W, PN, UC, UF, HF, HI


@cached_njit(nogil=True)
def _run(SYM, WS, WL, FREQ, cps, UL, S, SF, budget, drop_absorbed, DONE):
    """Merge until `budget` new pieces exist (with `drop_absorbed`, pieces of count > 0) or no
    pair qualifies (Merger.run); returns the merges as rows (a, b, merged unit), the unit
    spellings (cps, UL) and the unit counts. DONE[0] follows the pieces made, for a progress
    bar read by another thread (the loop runs without the GIL)."""
    P, HT, W, PN, UC, UF, HF, HI = _setup(SYM, WS, WL, FREQ, cps, UL, S, SF)
    ST = _index_units(cps, UL, S)
    BUF = np.empty(WL.max() + 1, dtype=np.int64)
    TOUCH, PUSH = np.empty(P.shape[0], dtype=np.int64), np.empty(P.shape[0], dtype=np.int64)
    EN, LOSE = np.empty((1024, 2), dtype=np.int64), np.empty((HF.shape[0], 2))
    merges = np.empty((budget + 16, 3), dtype=np.int64)
    first, pieces, done = S[NUNITS], 0, 0
    while pieces < budget:
        LOSE = _grow(LOSE, HF.shape[0])
        best, losers = _pop_best(P, UC, UF, S, SF, HF, HI, cps, UL, LOSE)
        if best < 0:
            break
        EN = _grow(EN, S[NEXACT] + 2 * losers)
        for i in range(losers):
            _push_exact(np.int64(LOSE[i, 0]), LOSE[i, 1], P, UL, EN, S, HF, HI, cps)
        a, b = P[best, UA], P[best, UB]
        z, made, cps, UL, UC, UF, ST = _new_unit(a, b, cps, UL, UC, UF, S, ST)
        before_a, before_b, before_z = UC[a], UC[b], UC[z]
        merges = _grow(merges, done + 1)
        merges[done, 0], merges[done, 1], merges[done, 2] = a, b, z
        done += 1
        need, node = 0, P[best, WHERE]  # room: new pairs and list nodes <= symbols rewritten
        while node != _EMPTY:
            need += WL[W[node, 0]]
            node = W[node, 1]
        P = _grow(P, S[NPAIRS] + need)
        TOUCH, PUSH = _grow(TOUCH, P.shape[0]), _grow(PUSH, P.shape[0])
        W, PN = _grow(W, S[NWHERE] + need), _grow(PN, S[NPART] + 8 * need + 8)
        size = HT.shape[0]
        while size < 2 * (S[NPAIRS] + need):  # keep the pair table at most half full
            size *= 2
        if size > HT.shape[0]:
            HT = _rehash(HT, size)
        _merge(best, z, SYM, WS, WL, FREQ, BUF, P, HT, S, SF, UC, UF, UL, PN, W, EN, TOUCH, PUSH)
        HF, HI = _grow(HF, S[HSIZE] + S[NPUSH]), _grow(HI, S[HSIZE] + S[NPUSH])
        _push_all(P, UC, UF, S, SF, HF, HI, cps, UL, PUSH)
        if not drop_absorbed:
            pieces += made
        else:
            pieces += z >= first and before_z == 0  # UC[z] > 0 now
            pieces -= a >= first and UC[a] == 0 and before_a > 0
            pieces -= b != a and b >= first and UC[b] == 0 and before_b > 0
        DONE[0] = pieces
    return merges[:done], cps[:S[NCPS]], UL[:S[NUNITS]], UC[:S[NUNITS]]


def run_merges(
    words: Mapping[str, int], units: list[str], criterion: str, min_frequency: int,
    budget: int, slack: float = 0.03, drop_absorbed: bool = False, progress: bool = False,
) -> tuple[list[tuple[str, str]], list[str]]:
    """Merger(words, units, criterion, min_frequency, slack).run(budget, drop_absorbed,
    progress), compiled: (merges, new pieces), the same as the Python loop's."""
    if not words:  # every word unusable (too long, or a character outside the alphabet)
        return [], []
    order = sorted(words)
    ids = {unit: i for i, unit in enumerate(units)}
    first = {unit: i for unit, i in ids.items() if not unit.startswith(PREFIX)}
    inner = {unit[len(PREFIX):]: i for unit, i in ids.items() if unit.startswith(PREFIX)}
    syms = np.fromiter((i for word in order for i in (first[word[0]], *map(inner.__getitem__,
                        word[1:]))), dtype=np.int64)
    lengths = np.fromiter(map(len, order), dtype=np.int64, count=len(order))
    starts = np.zeros_like(lengths)
    np.cumsum(lengths[:-1], out=starts[1:])
    freqs = np.fromiter((words[word] for word in order), dtype=np.int64, count=len(order))
    cps, spelled = code_points(units)
    scalars = np.zeros(13, dtype=np.int64)
    scalars[NUNITS], scalars[NCPS] = len(units), spelled[-1, OFF] + spelled[-1, LEN]
    scalars[CRIT], scalars[MINF] = CRITERION_CODES[criterion], min_frequency
    floats = np.zeros(3)
    floats[KEEP] = 1.0 - slack
    done = np.zeros(1, dtype=np.int64)  # pieces made so far, written by the loop
    rows, cps, spelled, counts = watch_progress(
        lambda: _run(syms, starts, lengths, freqs, cps, spelled, scalars, floats, budget,
                     drop_absorbed, done), done, budget, "merging", "piece", progress)
    names = [chr_codes.tobytes().decode("utf-32-le") for chr_codes in
             (cps[off:off + length] for off, length in spelled[:, OFF:].tolist())]
    merges = [(names[a], names[b]) for a, b, _ in rows.tolist()]
    pieces = [name for name, count in zip(names[len(units):], counts[len(units):].tolist())
              if count > 0 or not drop_absorbed]
    return merges, pieces
