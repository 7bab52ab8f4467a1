"""The state of the compiled merge loop (:mod:`bertkit.vocab.merge_kernel`).

Named tuples of numpy arrays whose rows are numpy records with named fields: numba compiles
(and caches) functions that take them, and reads and writes ``pairs.rows[pid].count`` as it
would a column of a 2-D array. A tuple is immutable but its arrays are not: the compiled
functions change rows in place, and the loop's scalars (fill counts, totals) are the fields
of the one row of ``MergeState.scalars``. An array that must grow is replaced by a larger
copy, so the tuple holding it is rebuilt; only the driver does that, before the step that
may need the room.

Numba counts references to every array a compiled function receives, on entry and on exit,
so the hot functions take the few tuples they use rather than the whole state, and the
scalars are one record, passed as such (a record is a pointer into ``MergeState.scalars``,
not counted).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

EMPTY = -1  # no node, no list, a free table slot

LIKELIHOOD, PMI, FREQUENCY = 0, 1, 2
CRITERION_CODES = {"likelihood": LIKELIHOOD, "pmi": PMI, "frequency": FREQUENCY}

# What a pair's newest heap entry holds: a bound from its units' count floors, its count-free
# bound (the Python loop's `parked` set) or its exact priority (its `exact` set).
FLOOR_BOUND, PARKED, EXACT = 0, 1, 2

# The loop's scalars: one row, MergeState.scalars.
SCALARS = np.dtype([
    ("n_units", np.int64),  # rows used in Units.rows
    ("n_code_points", np.int64),  # code points used in Units.code_points
    ("n_pairs", np.int64),  # rows used in Pairs.rows
    ("heap_size", np.int64),  # entries in Heap
    ("n_where_nodes", np.int64),  # nodes used in Lists.where
    ("n_partner_nodes", np.int64),  # nodes used in Lists.partners
    ("n_exact_nodes", np.int64),  # nodes used in Lists.exact_entries
    ("n_touched", np.int64),  # pair ids in Pairs.touched
    ("n_to_push", np.int64),  # pair ids in Pairs.to_push
    ("stamp", np.int64),  # this merge's stamp (see PAIR's mark)
    ("total", np.int64),  # N, the occurrences of all units
    ("xlogx_total", np.float64),  # F(N), F(x) = x log x
    ("park", np.float64),  # count-free bounds below this are parked: the last merge's score
])

# One row per unit (a character or a piece made by a merge); a unit's id is its row.
UNIT = np.dtype([
    ("count", np.int64),  # occurrences in the current segmentation
    ("xlogx_count", np.float64),  # F(count)
    ("floor", np.float64),  # the count its pairs' floor bounds were computed with
    ("xlogx_floor", np.float64),
    ("partners", np.int64),  # head of its list in Lists.partners
    ("exact_entries", np.int64),  # head of its list in Lists.exact_entries
    ("offset", np.int64),  # spelling: Units.code_points[offset:offset + length]
    ("length", np.int64),
])

# One row per pair ever seen; a pair's id (pid) is its row and never changes.
PAIR = np.dtype([
    ("count", np.int64),  # adjacent occurrences in the current segmentation
    ("version", np.int64),  # raised by every push: an entry of an older version is stale
    ("entry_kind", np.int64),  # FLOOR_BOUND, PARKED or EXACT: what its newest entry holds
    ("mark", np.int64),  # stamp: touched in this merge; stamp + 1: marked for a push
    ("delta", np.int64),  # the count change pending in this merge
    ("where", np.int64),  # head of its list in Lists.where; EMPTY: no word holds it
    ("unit_a", np.int64),
    ("unit_b", np.int64),
    ("links", np.int64),  # bit 1: in unit a's partner list, bit 2: in unit b's
])

# A slot of the pair table: the pair (a, b) as the key a << 32 | b, and its id.
PAIR_SLOT = np.dtype([("key", np.int64), ("pair", np.int64)])

# A heap entry after its first key (Heap.bounds): the rest of the Python loop's tuple
# (-bound, -count, unit a, unit b, pair id, version).
HEAP_ENTRY = np.dtype([
    ("neg_count", np.int64),
    ("unit_a", np.int64),
    ("unit_b", np.int64),
    ("pair", np.int64),
    ("version", np.int64),
])

NODE = np.dtype([("value", np.int64), ("next", np.int64)])  # a linked-list node

LOSER = np.dtype([("pair", np.int64), ("neg_score", np.float64)])  # a pair popped, not best


class Settings(NamedTuple):
    criterion: int  # LIKELIHOOD, PMI or FREQUENCY
    min_frequency: int  # pairs seen fewer times are never merged
    keep: float  # 1 - slack: a unit's floor is keep * its count


class Corpus(NamedTuple):
    """The distinct words as unit ids, rewritten in place as pairs merge."""

    symbols: np.ndarray  # every word's units, word after word (sorted words)
    starts: np.ndarray  # word w is symbols[starts[w]:starts[w] + lengths[w]]
    lengths: np.ndarray  # falls as the word's pairs merge
    freqs: np.ndarray  # how often each word occurs
    scratch: np.ndarray  # a copy of the word being rewritten


class Units(NamedTuple):
    rows: np.ndarray  # UNIT rows
    code_points: np.ndarray  # the units' spellings, one after another
    spelling_table: np.ndarray  # open addressing: unit ids by spelling, EMPTY in free slots


class Pairs(NamedTuple):
    rows: np.ndarray  # PAIR rows
    table: np.ndarray  # PAIR_SLOT rows, open addressing, at most half full
    touched: np.ndarray  # ids of the pairs with a pending count change in this merge
    to_push: np.ndarray  # ids of the pairs to push once this merge's counts are up to date


class Lists(NamedTuple):
    """Singly linked lists, each kind in one pool of NODE rows: nodes never move, and a list
    is emptied by dropping its head (an EMPTY head is the empty list). The heads are in the
    rows of the units and pairs; some lists may name items that no longer belong."""

    where: np.ndarray  # per pair: the words that hold it
    partners: np.ndarray  # per unit: the pairs that contain it
    exact_entries: np.ndarray  # per unit: the pairs pushed exact since its count last fell


class Heap(NamedTuple):
    """A binary min-heap in the order of the Python loop's tuples (merge_heap); its size is
    the scalars' heap_size."""

    bounds: np.ndarray  # -bound of each entry: its first key, apart so sifting reads it densely
    entries: np.ndarray  # HEAP_ENTRY rows, the rest of each entry


class MergeState(NamedTuple):
    corpus: Corpus
    units: Units
    pairs: Pairs
    lists: Lists
    heap: Heap
    scalars: np.ndarray  # one SCALARS row
    settings: Settings


def cached_njit(func=None, *, nogil: bool = False, inline: bool = False):
    """`njit` with numba's on-disk cache (``__pycache__`` beside the source, else
    ``NUMBA_CACHE_DIR`` or the user's cache folder). Where none is writable (a read-only
    install and home), numba refuses ``cache=True`` at import; the function is then compiled
    in every process that uses it instead of failing.
    `nogil`: the compiled function releases the GIL (so a Python thread can show progress).
    `inline`: numba inlines the function into its callers, which saves the reference counting
    of every array in its arguments on every call (see the module docstring) at the cost of a
    longer compile: for the small functions called for each pair occurrence a merge rewrites,
    and for the once-a-merge steps that have a single caller (nothing is compiled twice)."""
    if func is None:
        return lambda f: cached_njit(f, nogil=nogil, inline=inline)
    options = {"nogil": nogil, "inline": "always" if inline else "never"}
    try:
        return njit(cache=True, **options)(func)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(**options)(func)


@cached_njit
def grow(arr, need):
    """`arr` with at least `need` rows (doubling; the old rows copied)."""
    if arr.shape[0] >= need:
        return arr
    new = np.empty((max(need, 2 * arr.shape[0]),) + arr.shape[1:], dtype=arr.dtype)
    new[:arr.shape[0]] = arr
    return new
