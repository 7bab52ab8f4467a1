"""The merge loop of :class:`bertkit.vocab.merges.Merger`, compiled with numba.

Same algorithm, same arithmetic, same merges (tests/tokenization/test_merge_kernel.py checks
it against the Python :class:`~bertkit.vocab.merges.Merger` on random corpora): the
lazily re-validated heap of upper bounds with count floors, exact entries for popped losers
and parked count-free bounds; see that class for why it is correct. The Python loop spends
nearly all its time in interpreter overhead, hence this copy (timings: docs/reports/benchmarks.md,
"WordPiece vocabulary trainer"). Only the data structures differ, to suit compiled code:

* :mod:`~bertkit.vocab.merge_state`: the state, named tuples of arrays of records;
* :mod:`~bertkit.vocab.merge_tables`: pair ids by pair, unit ids by spelling, the
  linked lists of words per pair, pairs per unit and exact entries per unit;
* :mod:`~bertkit.vocab.merge_heap`: the heap, in the Python loop's tuple order;
* :mod:`~bertkit.vocab.merge_priority`: scores, bounds, the pop of the best pair;
* :mod:`~bertkit.vocab.merge_step`: one merge, its rewrites and count updates;
* this module: the first state, the loop (the only place arrays grow, before the step that
  may need the room, so the others never reallocate) and its Python entry point.

Compiled on first use and cached (``cache=True``, in ``__pycache__`` or ``NUMBA_CACHE_DIR``),
so only the first run after installing pays the compile; with no writable cache folder, it is
compiled once per process (:func:`~bertkit.vocab.merge_state.cached_njit`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from bertkit.io import progress_bar
from bertkit.vocab.merge_priority import pop_best, push, push_exact, push_marked, xlogx
from bertkit.vocab.merge_state import (
    CRITERION_CODES,
    EMPTY,
    HEAP_ENTRY,
    LOSER,
    NODE,
    PAIR,
    SCALARS,
    Corpus,
    Heap,
    Lists,
    MergeState,
    Pairs,
    Settings,
    Units,
    cached_njit,
    grow,
)
from bertkit.vocab.merge_step import merge
from bertkit.vocab.merge_tables import (
    empty_pair_table,
    index_units,
    initial_units,
    link,
    new_unit,
    pair_id,
    rehash,
)
from bertkit.vocab.merges import PREFIX

MERGE = np.dtype([("unit_a", np.int64), ("unit_b", np.int64)])  # a merge, in the loop's output


@cached_njit
def _count_pairs(corpus, pairs, units, lists, scalars):
    """Unit counts, pair counts and the word lists of the initial segmentation."""
    symbols = corpus.symbols
    for w in range(corpus.starts.shape[0]):
        start, n, freq = corpus.starts[w], corpus.lengths[w], corpus.freqs[w]
        for i in range(start, start + n):
            units.rows[symbols[i]].count += freq
        for i in range(start, start + n - 1):
            pair = pairs.rows[pair_id(pairs, units, lists, scalars, symbols[i], symbols[i + 1])]
            pair.count += freq
            pair.where = link(lists.where, scalars.n_where_nodes, w, pair.where)
            scalars.n_where_nodes += 1


@cached_njit
def _setup(corpus, unit_rows, code_points, settings):
    """The state before the first merge (Merger.__init__): pair statistics, unit counts and
    floors, and the first heap; the units as
    :func:`~bertkit.vocab.merge_tables.initial_units` gives them."""
    n_rows = corpus.symbols.shape[0] + 64
    table_size = 1024
    while table_size < 2 * n_rows:
        table_size *= 2
    pairs = Pairs(rows=np.empty(n_rows, dtype=PAIR), table=empty_pair_table(table_size),
                  touched=np.empty(n_rows, dtype=np.int64),
                  to_push=np.empty(n_rows, dtype=np.int64))
    lists = Lists(where=np.empty(n_rows, dtype=NODE), partners=np.empty(2 * n_rows, dtype=NODE),
                  exact_entries=np.empty(1024, dtype=NODE))
    scalars_row = np.zeros(1, dtype=SCALARS)
    scalars = scalars_row[0]
    scalars.n_units = unit_rows.shape[0]
    scalars.n_code_points = code_points.shape[0]
    units = Units(unit_rows, code_points, spelling_table=np.empty(0, dtype=np.int64))
    _count_pairs(corpus, pairs, units, lists, scalars)
    for u in range(scalars.n_units):
        scalars.total += units.rows[u].count
    scalars.xlogx_total, scalars.park = xlogx(scalars.total), -np.inf
    for u in range(scalars.n_units):
        unit = units.rows[u]
        unit.xlogx_count = xlogx(unit.count)
        unit.floor = unit.count * settings.keep
        unit.xlogx_floor = xlogx(unit.floor)
    units = Units(unit_rows, code_points, index_units(units, scalars.n_units))
    heap_rows = scalars.n_pairs + 64
    heap = Heap(bounds=np.empty(heap_rows), entries=np.empty(heap_rows, dtype=HEAP_ENTRY))
    for pid in range(scalars.n_pairs):
        if pairs.rows[pid].count >= settings.min_frequency:
            push(pid, pairs, units, heap, scalars, settings)
    return MergeState(corpus, units, pairs, lists, heap, scalars_row, settings)


@cached_njit(inline=True)
def _with_room_for_merge(state, pid):
    """`state` with room for what merging pair `pid` may add: new pairs and list nodes are
    at most the symbols of the words it rewrites; the pair table stays at most half full."""
    corpus, pairs, lists, scalars = state.corpus, state.pairs, state.lists, state.scalars[0]
    need, node = 0, pairs.rows[pid].where
    while node != EMPTY:
        need += corpus.lengths[lists.where[node].value]
        node = lists.where[node].next
    rows = grow(pairs.rows, scalars.n_pairs + need)
    table = pairs.table
    size = table.shape[0]
    while size < 2 * (scalars.n_pairs + need):
        size *= 2
    if size > table.shape[0]:
        table = rehash(table, size)
    pairs = Pairs(rows, table, grow(pairs.touched, rows.shape[0]),
                  grow(pairs.to_push, rows.shape[0]))
    lists = Lists(grow(lists.where, scalars.n_where_nodes + need),
                  grow(lists.partners, scalars.n_partner_nodes + 8 * need + 8),
                  lists.exact_entries)
    return MergeState(corpus, state.units, pairs, lists, state.heap, state.scalars,
                      state.settings)


@cached_njit(inline=True)
def _push_losers(state, losers, n_losers):
    """Push again, with their exact priorities, the pairs a pop took off the heap but did not
    choose (the end of Merger.pop_best); returns the state with room for their list nodes."""
    scalars, lists = state.scalars[0], state.lists
    exact_entries = grow(lists.exact_entries, scalars.n_exact_nodes + 2 * n_losers)
    for i in range(n_losers):
        push_exact(losers[i].pair, losers[i].neg_score, state.pairs, state.units, exact_entries,
                   state.heap, scalars)
    return MergeState(state.corpus, state.units, state.pairs,
                      Lists(lists.where, lists.partners, exact_entries), state.heap,
                      state.scalars, state.settings)


@cached_njit(inline=True)
def _merged_unit(state, pid):
    """The unit pair `pid` merges into, made if new: (unit, made, state)."""
    pair = state.pairs.rows[pid]
    z, made, units = new_unit(state.units, state.scalars[0], pair.unit_a, pair.unit_b)
    return z, made, MergeState(state.corpus, units, state.pairs, state.lists, state.heap,
                               state.scalars, state.settings)


@cached_njit(inline=True)
def _push_marked_pairs(state):
    """Push the pairs the merge marked, in a heap made large enough; returns the state."""
    scalars, heap = state.scalars[0], state.heap
    need = scalars.heap_size + scalars.n_to_push
    state = MergeState(state.corpus, state.units, state.pairs, state.lists,
                       Heap(grow(heap.bounds, need), grow(heap.entries, need)), state.scalars,
                       state.settings)
    push_marked(state)
    return state


@cached_njit(nogil=True)
def _run(corpus, unit_rows, code_points, settings, budget, drop_absorbed, progress):
    """Merge until `budget` new pieces exist (with `drop_absorbed`, pieces of count > 0) or no
    pair qualifies (Merger.run); returns the merges (MERGE rows) and the units (their code
    points and UNIT rows). progress[0] follows the pieces made, for a progress bar read by
    another thread (the loop runs without the GIL)."""
    state = _setup(corpus, unit_rows, code_points, settings)
    scalars = state.scalars[0]
    losers = np.empty(state.heap.bounds.shape[0], dtype=LOSER)
    merges = np.empty(budget + 16, dtype=MERGE)
    first, pieces, done = scalars.n_units, 0, 0
    while pieces < budget:
        losers = grow(losers, state.heap.bounds.shape[0])
        best, n_losers = pop_best(state, losers)
        if best < 0:
            break
        state = _push_losers(state, losers, n_losers)
        z, made, state = _merged_unit(state, best)
        a, b = state.pairs.rows[best].unit_a, state.pairs.rows[best].unit_b
        merges = grow(merges, done + 1)
        merges[done].unit_a, merges[done].unit_b = a, b
        done += 1
        units = state.units.rows
        before_a, before_b, before_z = units[a].count, units[b].count, units[z].count
        state = _with_room_for_merge(state, best)
        merge(best, z, state)
        state = _push_marked_pairs(state)
        if not drop_absorbed:
            pieces += made
        else:  # a piece counts while its count is > 0
            pieces += z >= first and before_z == 0
            pieces -= a >= first and units[a].count == 0 and before_a > 0
            pieces -= b != a and b >= first and units[b].count == 0 and before_b > 0
        progress[0] = pieces
    return (merges[:done], state.units.code_points[:scalars.n_code_points],
            state.units.rows[:scalars.n_units])


def watch_progress(work: Callable[[], Any], counter: Any, total: int, desc: str,
                   unit: str = "it", enabled: bool = True) -> Any:
    """work() and its result; when `enabled`, it runs in a thread while this one shows
    `counter[0]` of `total` on a progress bar (work must release the GIL, as the `nogil`
    loop does, and write its progress into `counter`). Its error is re-raised here."""
    if not enabled:
        return work()
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as err:  # re-raised in the caller's thread
            outcome["error"] = err

    worker = threading.Thread(target=target, name=desc, daemon=True)
    with progress_bar(total=total, unit=unit, desc=desc) as bar:
        worker.start()
        while True:  # the last update after the thread ended: a fast run ends at its count
            worker.join(0.2)
            bar.n = int(counter[0])
            bar.refresh()
            if not worker.is_alive():
                break
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


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
    symbols = np.fromiter((i for word in order for i in (first[word[0]], *map(
        inner.__getitem__, word[1:]))), dtype=np.int64)
    lengths = np.fromiter(map(len, order), dtype=np.int64, count=len(order))
    starts = np.zeros_like(lengths)
    np.cumsum(lengths[:-1], out=starts[1:])
    freqs = np.fromiter((words[word] for word in order), dtype=np.int64, count=len(order))
    corpus = Corpus(symbols, starts, lengths, freqs, scratch=np.empty(lengths.max() + 1,
                                                                      dtype=np.int64))
    code_points, rows = initial_units(units)
    settings = Settings(CRITERION_CODES[criterion], min_frequency, 1.0 - slack)
    made = np.zeros(1, dtype=np.int64)  # pieces made so far, written by the loop
    merged, code_points, rows = watch_progress(
        lambda: _run(corpus, rows, code_points, settings, budget, drop_absorbed, made),
        made, budget, "merging", "piece", progress)
    names = [code_points[offset:offset + length].tobytes().decode("utf-32-le")
             for offset, length in zip(rows["offset"].tolist(), rows["length"].tolist())]
    merges = [(names[a], names[b])
              for a, b in zip(merged["unit_a"].tolist(), merged["unit_b"].tolist())]
    pieces = [name for name, count in zip(names[len(units):], rows["count"][len(units):].tolist())
              if count > 0 or not drop_absorbed]
    return merges, pieces


def warm_up() -> None:
    """Compile the merge loop (or load it from numba's cache) on a two-word corpus: the same
    types as every real run's, so a later `run_merges` finds it compiled. `bertkit vocab
    train` calls it in a thread while the words are counted (`trainer.compile_in_background`),
    so that a fresh install's compile overlaps the counting instead of following it."""
    run_merges({"ab": 3, "abab": 1}, ["a", "b", PREFIX + "a", PREFIX + "b"], "likelihood", 1,
               budget=2, drop_absorbed=True)
