"""The merge loop of the WordPiece trainer (:mod:`bertkit.vocab.trainer`).

Cost. Pair counts, unit counts and an index pair -> words are kept up to date incrementally:
a merge rewrites only the words that contain the merged pair, so its cost is proportional to
the words it touches, not to the vocabulary or the corpus. The best pair comes from a lazy
max-heap; see :class:`Merger` for why it is correct although the likelihood score of a pair
changes whenever the count of either of its units changes.

This is the reference implementation: the trainer runs its compiled copy,
:mod:`bertkit.vocab.merge_kernel` (the same algorithm and arithmetic, checked to give
the same merges), as the Python loop spends nearly all its time in interpreter overhead.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Mapping

from bertkit.errors import BertkitError

PREFIX = "##"


def _xlogx(x: float) -> float:
    return x * math.log(x) if x > 0 else 0.0


_log = math.log


def likelihood_gain(count: int, count_a: float, count_b: float, total: int, same: bool) -> float:
    """Exact change of the training words' unigram log-likelihood ``sum_u c_u log(c_u / N)``
    when the `count` occurrences of ``a b`` become one new unit.

    With ``F(x) = x log x`` the log-likelihood is ``sum_u F(c_u) - F(N)``; the merge takes
    `count` from a and from b (twice from a when a is b), gives it to the new unit and takes
    it from N. Decreasing in `count_a` and `count_b` (so count floors give upper bounds) and
    increasing in N (which only falls, so old heap entries stay upper bounds).
    """
    if same:
        change = _xlogx(count_a - 2 * count) - _xlogx(count_a)
    else:
        change = _xlogx(count_a - count) - _xlogx(count_a) + _xlogx(count_b - count) - _xlogx(count_b)
    return change + _xlogx(count) - _xlogx(total - count) + _xlogx(total)


# A pair of unit ids (a, b) is packed into one int, a * _SHIFT + b: int keys hash and compare
# faster than tuples, and the dictionaries below are hit millions of times.
_SHIFT = 1 << 21
MAX_UNITS = _SHIFT


class Merger:
    """The merge loop: incremental pair statistics and a lazily re-validated max-heap.

    State, all weighted by word frequency: ``counts[u]`` (occurrences of unit u in the current
    segmentation), ``pair_count[k]`` (adjacent occurrences of pair k), ``where[k]`` (indices of
    the words that contain k; entries may be stale, i.e. name a word that no longer contains
    k, which a merge simply skips) and ``partners[u]`` (the live pairs that contain u).

    Priority of a pair: ``(score, count, then the lexicographically smallest (a, b))``, a total
    order, so ties are broken the same way on every run and the result does not depend on
    the order of the words.

    The heap holds *upper bounds*: entries ``(-bound, -count, a, b, key)``. Scores move under our
    feet: merging ``a b -> z`` lowers count(a) and count(b), which *raises* the likelihood score
    (and the gain) of every other pair containing a or b. Re-pushing all those pairs after every
    merge would cost thousands of pushes per merge for a common unit such as ``##s``, so a
    pair's bound is its score computed with count *floors*, ``floor[u] = (1 - slack) *
    count(u)`` taken when u's pairs were last pushed: scores fall as unit counts rise, so while
    count(u) >= floor[u] every bound involving u stays an upper bound. When a merge takes
    count(u) below floor[u], the floor is lowered and all pairs of u are pushed again (once per
    ``slack`` share of u's count lost, not once per merge). Pairs whose count changed are pushed
    at once (only those that grew, except for the gain, which can also rise as a count falls);
    the gain also falls with N, which only ever falls. For ``frequency`` the floors are unused.

    Invariant: in heap order (smaller tuple = higher priority) every pair with count >=
    min_frequency has an entry <= its exact priority ``(-score, -count, a, b, key)``.
    Pop: pop entries, computing each one's exact priority from the current counts, until the
    top entry is not before the best exact priority seen; every pair q still in the heap then
    has exact(q) >= entry(q) >= best, so the best seen is the true maximum of the total order.
    The popped losers are pushed again, keeping the invariant.

    Two kinds of entry besides the floor bound keep the likelihood gain fast at 30k pieces.
    A popped loser is pushed with its *exact* priority, valid until the count of one of its
    units falls (:meth:`merge` then pushes its pairs again): otherwise a loser whose floor
    bound still beats the top would be popped again at every merge. A pair whose count-free
    bound (:meth:`_free_bound`) is below the last merge's score is *parked* with that bound,
    which no falling unit count makes stale, so lowering a floor skips it. (What each bound
    saves is measured in docs/reports/benchmarks.md, the vocabulary trainer's "Speed, what changed".)
    """

    def __init__(
        self,
        words: Mapping[str, int],
        units: list[str],
        criterion: str,
        min_frequency: int,
        slack: float = 0.03,
    ) -> None:
        self.units = list(units)
        self.unit_id = {unit: i for i, unit in enumerate(self.units)}
        self.counts = [0] * len(self.units)
        self.partners: list[set[int]] = [set() for _ in self.units]
        self.criterion = criterion
        self.floors_used = criterion != "frequency"
        self.min_frequency = min_frequency
        self.keep = 1.0 - slack
        self.words: list[list[int]] = []
        self.freqs: list[int] = []
        self.pair_count: dict[int, int] = {}
        self.where: defaultdict[int, list[int]] = defaultdict(list)
        self._segment_words(words)
        self.total = sum(self.counts)
        self.xlogx_total = _xlogx(self.total)
        self.xlogx_counts = [_xlogx(count) for count in self.counts]
        self.floor = [count * self.keep for count in self.counts]
        self.xlogx_floor = [_xlogx(floor) for floor in self.floor]
        for key in self.pair_count:
            self.partners[key // _SHIFT].add(key)
            self.partners[key % _SHIFT].add(key)
        self.version: dict[int, int] = {}
        self.parked: set[int] = set()  # pairs whose latest entry is the count-free bound
        self.exact: set[int] = set()  # pairs whose latest entry is their exact priority
        self.exact_by_unit: list[list[int]] = [[] for _ in self.units]  # may hold stale keys
        self.park = -math.inf  # free bounds below this are parked: the last merge's score
        self.heap: list[tuple[float, int, str, str, int, int]] = []
        for key in sorted(self.pair_count):
            if self.pair_count[key] >= min_frequency:
                self._push(key)

    def _segment_words(self, words: Mapping[str, int]) -> None:
        """Split every word into character units and count units and pairs."""
        first = self.unit_id
        inner = {unit[len(PREFIX):]: i for unit, i in first.items() if unit.startswith(PREFIX)}
        counts, pair_count, where = self.counts, self.pair_count, self.where
        for w, word in enumerate(sorted(words)):
            freq = words[word]
            syms = [first[word[0]]] + [inner[char] for char in word[1:]]
            self.words.append(syms)
            self.freqs.append(freq)
            for unit in syms:
                counts[unit] += freq
            for x, y in zip(syms, syms[1:]):
                key = x * _SHIFT + y
                pair_count[key] = pair_count.get(key, 0) + freq
                where[key].append(w)

    def _score(self, count: int, a: int, b: int, unit_counts: list, xlogx: list) -> float:
        """Score of pair (a, b) with `count` occurrences, given unit counts and their F(c)."""
        if self.criterion == "likelihood":
            if a == b:
                return likelihood_gain(count, unit_counts[a], unit_counts[b], self.total, True)
            # likelihood_gain, inlined (the hot path), with F(c_a), F(c_b), F(N) cached
            x, y, m = unit_counts[a] - count, unit_counts[b] - count, self.total - count
            change = ((x * _log(x) if x > 0 else 0.0) - xlogx[a]
                      + (y * _log(y) if y > 0 else 0.0) - xlogx[b])
            return change + count * _log(count) - (m * _log(m) if m > 0 else 0.0) + self.xlogx_total
        if self.criterion == "pmi":
            return count / (float(unit_counts[a]) * float(unit_counts[b]))  # as the kernel
        return count

    def _push_exact(self, entry: tuple[float, int, str, str, int]) -> None:
        """Push a pair's exact priority, valid until the count of one of its units falls
        (then :meth:`merge` pushes it again) or its own count changes (pushed anyway)."""
        key = entry[4]
        version = self.version[key] = self.version[key] + 1
        self.parked.discard(key)
        self.exact.add(key)
        a, b = divmod(key, _SHIFT)
        self.exact_by_unit[a].append(key)
        self.exact_by_unit[b].append(key)
        heapq.heappush(self.heap, (*entry, version))

    def _push(self, key: int) -> None:
        """Push the pair's bound, which supersedes (by version) any older entry of it.

        For the likelihood gain, a pair far below the top gets the *count-free* bound
        (:meth:`_free_bound`) instead of the floor bound: it never goes stale as unit counts
        fall, so such a pair is not pushed again when a floor is lowered (most pairs of a
        common unit such as ``##s`` are rare, and stay parked there until the top comes down).
        """
        a, b = divmod(key, _SHIFT)
        count = self.pair_count[key]
        version = self.version[key] = self.version.get(key, 0) + 1
        self.exact.discard(key)
        bound = self._free_bound(count, a == b) if self.criterion == "likelihood" else math.inf
        if bound < self.park:
            self.parked.add(key)
        else:
            self.parked.discard(key)
            bound = self._score(count, a, b, self.floor, self.xlogx_floor)
        heapq.heappush(self.heap, (-bound, -count, self.units[a], self.units[b], key, version))

    def _free_bound(self, count: int, same: bool) -> float:
        """A bound of the gain that holds for any unit counts (each is at least `count`):
        ``F(c - n) - F(c)`` is largest at ``c = n``, so the gain is at most
        ``F(N) - F(N - n) - F(n)`` (``F(N) - F(N - n) + F(n)`` when a is b, by the same
        argument on ``F(c - 2n)``, taken as 0 below 0). Falls with N, like the gain."""
        m = self.total - count
        rest = self.xlogx_total - (m * _log(m) if m > 0 else 0.0)
        return rest + count * _log(count) if same else rest - count * _log(count)

    def score(self, key: int) -> float:
        """The pair's current score under the criterion."""
        a, b = divmod(key, _SHIFT)
        return self._score(self.pair_count[key], a, b, self.counts, self.xlogx_counts)

    def _exact(self, key: int) -> tuple[float, int, str, str, int]:
        """The pair's current priority, in heap order (smaller is better)."""
        a, b = divmod(key, _SHIFT)
        count = self.pair_count[key]
        score = self._score(count, a, b, self.counts, self.xlogx_counts)
        return (-score, -count, self.units[a], self.units[b], key)

    def pop_best(self) -> int | None:
        """Key of the pair with the highest current priority, or None when none qualifies."""
        heap, pair_count, minimum, version = self.heap, self.pair_count, self.min_frequency, self.version
        best: tuple[float, int, str, str, int] | None = None
        losers: dict[int, tuple[float, int, str, str, int]] = {}
        while heap and (best is None or heap[0] < best):
            *_, key, pushed = heapq.heappop(heap)
            if pushed != version[key]:
                continue  # superseded: a newer entry of this pair is in the heap
            if pair_count.get(key, 0) < minimum:
                continue  # a pair whose count grows back above the threshold is pushed then
            exact = self._exact(key)
            if best is None or exact < best:
                if best is not None:
                    losers[best[4]] = best
                best = exact
            elif exact != best:
                losers[key] = exact
        if best is not None:
            self.park = -best[0]
        for entry in losers.values():
            self._push_exact(entry)
        return None if best is None else best[4]

    def run(self, budget: int, progress: bool = False, drop_absorbed: bool = False
            ) -> tuple[list[tuple[str, str]], list[str]]:
        """Merge until `budget` new pieces exist or no pair qualifies; (merges, new pieces).

        With `drop_absorbed`, a piece whose count fell to 0 (every occurrence merged into
        longer pieces, e.g. "perhap" once "perhaps" exists) does not count and is left out of
        the pieces: it has probability 0 under the unigram model, and the merges go on until
        `budget` pieces of positive count exist.
        """
        from bertkit.io import progress_bar

        merges: list[tuple[str, str]] = []
        pieces: list[str] = []
        first = len(self.units)
        alive = 0
        with progress_bar(total=budget, unit="merge", desc="merging", disable=not progress) as bar:
            while (alive if drop_absorbed else len(pieces)) < budget:
                key = self.pop_best()
                if key is None:
                    break
                a, b = divmod(key, _SHIFT)
                merged = self.units[a] + self.units[b][len(PREFIX):]
                merges.append((self.units[a], self.units[b]))
                if merged not in self.unit_id:
                    # Two different pairs can spell the same piece ("a ##bc", "ab ##c"); it is
                    # one unit and one vocabulary entry.
                    self._add_unit(merged)
                    pieces.append(merged)
                    bar.update(1)
                z = self.unit_id[merged]
                alive -= sum(self.counts[u] > 0 for u in {a, b, z} if u >= first)
                self.merge(a, b, z)
                alive += sum(self.counts[u] > 0 for u in {a, b, z} if u >= first)
        if drop_absorbed:
            pieces = [piece for piece in pieces if self.counts[self.unit_id[piece]] > 0]
        return merges, pieces

    def _add_unit(self, unit: str) -> None:
        if len(self.units) >= MAX_UNITS:
            raise BertkitError(f"more than {MAX_UNITS} units; lower the vocabulary size")
        self.unit_id[unit] = len(self.units)
        self.units.append(unit)
        self.counts.append(0)
        self.floor.append(0.0)
        self.xlogx_counts.append(0.0)
        self.xlogx_floor.append(0.0)
        self.exact_by_unit.append([])
        self.partners.append(set())

    def merge(self, a: int, b: int, z: int) -> None:
        """Rewrite ``a b -> z`` in the words that contain it and update every statistic."""
        key_ab = a * _SHIFT + b
        delta: defaultdict[int, int] = defaultdict(int)
        occurrences = 0
        for w in self.where.pop(key_ab, ()):
            occurrences += self._rewrite(w, a, b, z, delta) * self.freqs[w]
        delta[key_ab] -= occurrences
        counts = self.counts
        counts[a] -= occurrences
        counts[b] -= occurrences
        counts[z] += occurrences
        for unit in (a, b, z):
            self.xlogx_counts[unit] = _xlogx(counts[unit])
        self.total -= occurrences
        self.xlogx_total = _xlogx(self.total)
        push = self._apply(delta, pushes_shrunk=self.criterion == "likelihood")
        for unit in (a, b):  # their counts fell: exact entries of their pairs are stale
            push.update(key for key in self.exact_by_unit[unit] if key in self.exact)
            self.exact_by_unit[unit] = []
        if self.floors_used:
            push.update(self._lower_floors(a, b, z))
        pair_count, minimum = self.pair_count, self.min_frequency
        for key in push:
            if pair_count.get(key, 0) >= minimum:
                self._push(key)

    def _lower_floors(self, *units: int) -> set[int]:
        """Lower the floor of each unit whose count fell below it; returns the pairs to push.

        A unit whose floor is 0 (new, or its count once fell to 0) gets a floor now; it has
        no entries yet, as all its pairs are new and pushed anyway.
        """
        refresh: set[int] = set()
        for unit in units:
            count = self.counts[unit]
            if count < self.floor[unit] or self.floor[unit] == 0:
                if self.floor[unit] > 0:
                    refresh.update(self.partners[unit] - self.parked)
                self.floor[unit] = count * self.keep
                self.xlogx_floor[unit] = _xlogx(self.floor[unit])
        return refresh

    def _apply(self, delta: dict[int, int], pushes_shrunk: bool) -> set[int]:
        """Add pair-count changes; returns the pairs whose count grew (or changed at all, with
        `pushes_shrunk`: a gain can rise when a pair's count falls)."""
        pair_count, partners, grown = self.pair_count, self.partners, set()
        for key, change in delta.items():
            if change == 0:
                continue
            old = pair_count.get(key, 0)
            new = old + change
            if new > 0:
                pair_count[key] = new
                if old == 0:
                    partners[key // _SHIFT].add(key)
                    partners[key % _SHIFT].add(key)
            else:
                del pair_count[key]
                self.where.pop(key, None)  # count 0: no word holds the pair any more
                partners[key // _SHIFT].discard(key)
                partners[key % _SHIFT].discard(key)
            if change > 0 or (pushes_shrunk and new > 0 and self._may_rise(key, new, old)):
                grown.add(key)
        return grown

    def _may_rise(self, key: int, new: int, old: int) -> bool:
        """Whether the gain of a pair whose count fell from `old` to `new` may now exceed its
        entry. Not when parked (the count-free bound grows with the count), nor when the gain
        grows with the count over [new, old]: its derivative in n is
        ``log(n (N - n) / ((c_a - n) (c_b - n)))``, positive where ``f(n) = n (N + c_a + c_b
        - 2n) - c_a c_b > 0``, and f is concave, so checking both ends suffices."""
        if key in self.parked:
            return False
        a, b = divmod(key, _SHIFT)
        if a == b:
            return True
        ca, cb, spread = self.counts[a], self.counts[b], self.total + self.counts[a] + self.counts[b]
        return new * (spread - 2 * new) <= ca * cb or old * (spread - 2 * old) <= ca * cb

    def _rewrite(self, w: int, a: int, b: int, z: int, delta: defaultdict[int, int]) -> int:
        """Merge every ``a b`` of word `w` (left to right, no overlaps); returns how many.

        Each occurrence at i turns pairs (prev, a) and (b, next) into (prev, z) and (z, next).
        For back-to-back occurrences ``a b a b`` the pair between them, (b, a), is removed
        once (by the first) and (z, z) is added once (by the second).
        """
        syms = self.words[w]
        n = len(syms)
        freq = self.freqs[w]
        where = self.where
        out: list[int] = []
        start = found = 0
        last_end = -1
        while True:
            try:
                i = syms.index(a, found)
            except ValueError:
                break
            if i + 1 >= n or syms[i + 1] != b:
                found = i + 1
                continue
            if i == last_end:
                key = z * _SHIFT + z
                delta[key] += freq
                where[key].append(w)
            elif i > 0:
                prev = syms[i - 1]
                key = prev * _SHIFT + a
                delta[key] -= freq
                key = prev * _SHIFT + z
                delta[key] += freq
                where[key].append(w)
            if i + 2 < n:
                nxt = syms[i + 2]
                key = b * _SHIFT + nxt
                delta[key] -= freq
                if not (nxt == a and i + 3 < n and syms[i + 3] == b):
                    key = z * _SHIFT + nxt
                    delta[key] += freq
                    where[key].append(w)
            out.extend(syms[start:i])
            out.append(z)
            start = found = last_end = i + 2
        if start == 0:
            return 0  # stale index entry: the word no longer holds the pair
        out.extend(syms[start:])
        self.words[w] = out
        return (n - len(out))

    def recount(self) -> tuple[list[int], dict[int, int]]:
        """Unit and pair counts computed from scratch (for tests of the incremental ones)."""
        counts = [0] * len(self.units)
        pairs: dict[int, int] = {}
        for syms, freq in zip(self.words, self.freqs):
            for unit in syms:
                counts[unit] += freq
            for x, y in zip(syms, syms[1:]):
                pairs[x * _SHIFT + y] = pairs.get(x * _SHIFT + y, 0) + freq
        return counts, pairs
