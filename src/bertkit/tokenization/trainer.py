"""WordPiece vocabulary learning by likelihood, the criterion of Google's (unreleased) learner.

Start from characters, in word-initial form (``a``) and continuation form (``##a``), and keep
adding the merge of two adjacent units ``a b`` that most increases the unigram likelihood of
the training words. That gain is scored, as in the usual description of WordPiece, by

    score(a, b) = count(a b) / (count(a) * count(b))

where the counts are those of the *current* segmentation of the corpus, each distinct word
weighted by its frequency. ``criterion="frequency"`` scores a pair by ``count(a b)`` alone,
which is BPE (what ``tokenizers``' WordPieceTrainer does), through the same code.

That ratio is a pointwise mutual information: it favours pairs that are rare but always
together (completing rare words) over frequent ones, and with a small ``min_frequency`` the
vocabulary splits common text into many more pieces (docs/benchmarks.md). The likelihood gain
itself, ``criterion="gain"`` (:func:`likelihood_gain`), weighs that association by the count:
the exact increase of the unigram log-likelihood of the training words when ``a b`` becomes a
unit. It is slower (its top scores are many and all move with each merge).

Cost. Pair counts, unit counts and an index pair -> words are kept up to date incrementally:
a merge rewrites only the words that contain the merged pair, so its cost is proportional to
the words it touches, not to the vocabulary or the corpus. The best pair comes from a lazy
max-heap; see :class:`Merger` for why it is correct although the likelihood score of a pair
changes whenever the count of either of its units changes.

Words that WordPiece would turn into ``[UNK]`` whole (longer than 100 characters, or holding a
character outside the alphabet) are left out of learning: no piece learned from them could
ever be used.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.tokenization.counting import count_files, count_words, expand_inputs

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CRITERIA = ("likelihood", "frequency", "gain")
PREFIX = "##"
# BertTokenizer (like Google's) maps a word longer than this many characters to [UNK] whole.
MAX_WORD_CHARS = 100


@dataclass(frozen=True)
class TrainerConfig:
    """Settings of one vocabulary-learning run (validated once, here).

    `vocab_size` counts everything (special, reserved, character and learned tokens);
    `limit_alphabet` counts characters, each of which may give two units (``a`` and ``##a``);
    `min_frequency` is the smallest pair count that may be merged.
    """

    vocab_size: int = 30522
    criterion: str = "likelihood"
    min_frequency: int = 2
    limit_alphabet: int = 1000
    reserved: int = 0
    do_lower_case: bool = True
    special_tokens: tuple[str, ...] = SPECIAL_TOKENS

    def __post_init__(self) -> None:
        if self.criterion not in CRITERIA:
            raise BertkitError(f"criterion must be one of {CRITERIA}, got {self.criterion!r}")
        if self.vocab_size < 1 or self.limit_alphabet < 1:
            raise BertkitError("vocab_size and limit_alphabet must be positive")
        if self.min_frequency < 1 or self.reserved < 0:
            raise BertkitError("min_frequency must be >= 1 and reserved >= 0")
        if len(set(self.special_tokens)) != len(self.special_tokens):
            raise BertkitError(f"special tokens repeat: {self.special_tokens}")


@dataclass
class TrainResult:
    """The learned vocabulary (in file order) and how it came about."""

    vocab: list[str]
    merges: list[tuple[str, str]] = field(default_factory=list)  # every merge, in order
    pieces: list[str] = field(default_factory=list)  # the new vocabulary entries, in order
    alphabet: list[str] = field(default_factory=list)  # kept characters, most frequent first
    stopped_early: bool = False
    skipped_words: int = 0  # distinct words WordPiece maps to [UNK] (rare char or too long)


def choose_alphabet(words: Mapping[str, int], limit: int) -> list[str]:
    """The `limit` most frequent characters (ties by code point), most frequent first."""
    chars: Counter[str] = Counter()
    for word, freq in words.items():
        for char in word:
            chars[char] += freq
    ranked = sorted(chars.items(), key=lambda item: (-item[1], item[0]))
    return [char for char, _ in ranked[:limit]]


def _usable_words(words: Mapping[str, int], alphabet: set[str]) -> tuple[dict[str, int], int]:
    """Words WordPiece could split into pieces (known characters, at most 100 of them)."""
    usable: dict[str, int] = {}
    skipped = 0
    for word, freq in words.items():
        if len(word) <= MAX_WORD_CHARS and alphabet.issuperset(word):
            usable[word] = freq
        else:
            skipped += 1
    return usable, skipped


def _initial_units(words: Mapping[str, int], alphabet: list[str]) -> list[str]:
    """Character units that occur: word-initial forms first, then ``##`` forms, alphabet order."""
    initial = {word[0] for word in words}
    inner = {char for word in words for char in word[1:]}
    return [c for c in alphabet if c in initial] + [PREFIX + c for c in alphabet if c in inner]


def _xlogx(x: float) -> float:
    return x * math.log(x) if x > 0 else 0.0


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
        self.floor = [count * self.keep for count in self.counts]
        for key in self.pair_count:
            self.partners[key // _SHIFT].add(key)
            self.partners[key % _SHIFT].add(key)
        self.heap = [self._bound(k) for k, c in self.pair_count.items() if c >= min_frequency]
        heapq.heapify(self.heap)

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

    def _score(self, count: int, a: int, b: int, unit_counts: list) -> float:
        if self.criterion == "likelihood":
            return count / (unit_counts[a] * unit_counts[b])
        if self.criterion == "gain":
            return likelihood_gain(count, unit_counts[a], unit_counts[b], self.total, a == b)
        return count

    def _bound(self, key: int) -> tuple[float, int, str, str, int]:
        """Heap entry: an upper bound of the pair's priority until a floor is lowered."""
        a, b = divmod(key, _SHIFT)
        count = self.pair_count[key]
        bound = self._score(count, a, b, self.floor)
        return (-bound, -count, self.units[a], self.units[b], key)

    def score(self, key: int) -> float:
        """The pair's current score under the criterion."""
        a, b = divmod(key, _SHIFT)
        return self._score(self.pair_count[key], a, b, self.counts)

    def _exact(self, key: int) -> tuple[float, int, str, str, int]:
        """The pair's current priority, in heap order (smaller is better)."""
        a, b = divmod(key, _SHIFT)
        count = self.pair_count[key]
        return (-self._score(count, a, b, self.counts), -count, self.units[a], self.units[b], key)

    def pop_best(self) -> int | None:
        """Key of the pair with the highest current priority, or None when none qualifies."""
        heap, pair_count, minimum = self.heap, self.pair_count, self.min_frequency
        best: tuple[float, int, str, str, int] | None = None
        losers: set[int] = set()
        while heap and (best is None or heap[0] < best):
            key = heapq.heappop(heap)[4]
            if pair_count.get(key, 0) < minimum:
                continue  # a pair whose count grows back above the threshold is pushed then
            exact = self._exact(key)
            if best is None or exact < best:
                if best is not None:
                    losers.add(best[4])
                best = exact
            elif exact != best:
                losers.add(key)
        for key in losers:
            heapq.heappush(heap, self._bound(key))
        return None if best is None else best[4]

    def run(self, budget: int, progress: bool = False) -> tuple[list[tuple[str, str]], list[str]]:
        """Merge until `budget` new pieces exist or no pair qualifies; (merges, new pieces)."""
        from bertkit.io import progress_bar

        merges: list[tuple[str, str]] = []
        pieces: list[str] = []
        with progress_bar(total=budget, unit="merge", desc="merging", disable=not progress) as bar:
            while len(pieces) < budget:
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
                self.merge(a, b, self.unit_id[merged])
        return merges, pieces

    def _add_unit(self, unit: str) -> None:
        if len(self.units) >= MAX_UNITS:
            raise BertkitError(f"more than {MAX_UNITS} units; lower the vocabulary size")
        self.unit_id[unit] = len(self.units)
        self.units.append(unit)
        self.counts.append(0)
        self.floor.append(0.0)
        self.partners.append(set())

    def merge(self, a: int, b: int, z: int) -> None:
        """Rewrite ``a b -> z`` in the words that contain it and update every statistic."""
        key_ab = a * _SHIFT + b
        delta: defaultdict[int, int] = defaultdict(int)
        occurrences = 0
        for w in self.where.pop(key_ab, ()):
            occurrences += self._rewrite(w, a, b, z, delta) * self.freqs[w]
        delta[key_ab] -= occurrences
        self.counts[a] -= occurrences
        self.counts[b] -= occurrences
        self.counts[z] += occurrences
        self.total -= occurrences
        push = self._apply(delta, pushes_shrunk=self.criterion == "gain")
        if self.floors_used:
            push.update(self._lower_floors(a, b, z))
        pair_count, heap, minimum = self.pair_count, self.heap, self.min_frequency
        for key in push:
            if pair_count.get(key, 0) >= minimum:
                heapq.heappush(heap, self._bound(key))

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
                    refresh.update(self.partners[unit])
                self.floor[unit] = count * self.keep
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
            if change > 0 or pushes_shrunk:
                grown.add(key)
        return grown

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


def train_from_counts(
    word_counts: Mapping[str, int], config: TrainerConfig, progress: bool = False
) -> TrainResult:
    """Learn a WordPiece vocabulary from pre-tokenized word counts.

    The result depends only on the counts (not on their order), so it is the same for any
    number of counting workers.
    """
    words = {w: int(f) for w, f in word_counts.items() if f > 0 and w}
    if not words:
        raise BertkitError("the corpus is empty: no words to learn a vocabulary from")
    head = list(config.special_tokens) + [f"[unused{k}]" for k in range(config.reserved)]
    alphabet = choose_alphabet(words, config.limit_alphabet)
    usable, skipped = _usable_words(words, set(alphabet))
    units = _initial_units(usable, alphabet)
    clash = set(head).intersection(units)
    if clash:
        raise BertkitError(f"special tokens also occur as characters: {sorted(clash)}")
    budget = config.vocab_size - len(head) - len(units)
    if budget < 0:
        raise BertkitError(
            f"vocab_size {config.vocab_size} is smaller than the {len(head)} special/reserved "
            f"tokens plus the {len(units)} character units; raise --vocab-size or lower "
            "--limit-alphabet"
        )
    merger = Merger(usable, units, config.criterion, config.min_frequency)
    merges, pieces = merger.run(budget, progress=progress)
    result = TrainResult(head + units + pieces, merges, pieces, alphabet, len(pieces) < budget,
                         skipped)
    if result.stopped_early:
        logger.warning(
            "stopped early: no pair left with frequency >= %d; final vocabulary size %d "
            "(requested %d)", config.min_frequency, len(result.vocab), config.vocab_size,
        )
    return result


def train_from_texts(
    texts: Iterable[str], config: TrainerConfig, progress: bool = False
) -> TrainResult:
    """Learn a vocabulary from an iterable of raw strings (pre-tokenized here, streaming)."""
    from bertkit.io import progress_bar

    texts = progress_bar(texts, desc="counting words", unit=" texts", disable=not progress)
    return train_from_counts(count_words(texts, config.do_lower_case), config, progress)


def train_from_files(
    patterns: Sequence[str | os.PathLike],
    config: TrainerConfig,
    workers: int = 1,
    progress: bool = False,
) -> TrainResult:
    """Learn a vocabulary from text/JSONL files (globs allowed), counting on `workers`."""
    paths = expand_inputs(patterns)
    counts = count_files(paths, config.do_lower_case, workers=workers, progress=progress)
    if not counts:
        named = ", ".join(map(str, paths[:3])) + (f" and {len(paths) - 3} more" * (len(paths) > 3))
        raise BertkitError(f"the corpus is empty: no words in {named}")
    return train_from_counts(counts, config, progress)


def save_vocab(result: TrainResult, out_dir: str | os.PathLike, do_lower_case: bool) -> Path:
    """Write ``vocab.txt`` and ``tokenizer_config.json`` (atomically) so that
    ``BertTokenizer.from_pretrained(out_dir)`` works at once. Returns the vocab path."""
    out = Path(out_dir)
    config = {"do_lower_case": do_lower_case, "tokenizer_class": "BertTokenizer",
              "model_max_length": 512}
    atomic_write_text(out / "vocab.txt", "".join(token + "\n" for token in result.vocab))
    atomic_write_text(out / "tokenizer_config.json", json.dumps(config, indent=2) + "\n")
    return out / "vocab.txt"
