"""The compiled merge loop gives exactly the merges of the Python reference loop (Merger);
its progress watcher."""

from __future__ import annotations

import importlib.util
import math
import random

import numba.core.config
import numpy as np
import pytest
from numba import njit
from numba.core import caching

from bertkit.vocab import merge_kernel, merge_tables, trainer
from bertkit.vocab.merge_kernel import run_merges, watch_progress
from bertkit.vocab.merge_priority import score
from bertkit.vocab.merge_state import PMI
from bertkit.vocab.merges import Merger


def _units(words: dict[str, int]) -> list[str]:
    return sorted({w[0] for w in words}) + sorted({"##" + c for w in words for c in w[1:]})


@pytest.mark.parametrize("criterion", ["likelihood", "pmi", "frequency"])
def test_compiled_loop_matches_the_reference(criterion):
    """Random corpora over small alphabets (overlaps such as 'a a a', repeated spellings
    "a ##bc" / "ab ##c", ties broken by spelling), every budget up to exhaustion, two slacks:
    the same merges and pieces, in the same order, keeping or dropping absorbed pieces."""
    rng = random.Random(99)
    for trial in range(80):
        alphabet = rng.choice(["aabc", "abcdé", "xyz"])
        words = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))):
                 rng.randint(1, 40) for _ in range(rng.randint(1, 60))}
        units = _units(words)
        minimum, slack = rng.choice([1, 2, 3]), rng.choice([0.01, 0.03, 0.3])
        budget, drop = rng.choice([3, 1000]), rng.choice([False, True])
        expected = Merger(words, units, criterion, minimum, slack=slack).run(
            budget, drop_absorbed=drop)
        got = run_merges(words, units, criterion, minimum, budget, slack=slack, drop_absorbed=drop)
        assert got == expected, trial


def test_compiled_loop_matches_on_a_larger_corpus():
    """A larger corpus, on which the unit, heap and list pools grow past their first sizes."""
    rng = random.Random(5)
    words = {"".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 14))):
             rng.randint(1, 300) for _ in range(3000)}
    units = _units(words)
    expected = Merger(words, units, "likelihood", 2).run(2000, drop_absorbed=True)
    assert run_merges(words, units, "likelihood", 2, 2000, drop_absorbed=True) == expected


def test_progress_bar_follows_the_compiled_loop(monkeypatch):
    """With progress on, the loop runs in a thread (it releases the GIL) and the bar ends at
    the pieces made, dropped absorbed pieces included; the merges are the same as without."""
    rng = random.Random(5)
    words = {"".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 14))):
             rng.randint(1, 300) for _ in range(500)}
    units = _units(words)
    bars = []

    class Bar:
        def __init__(self, total, **_):
            self.total, self.n, self.refreshed = total, 0, 0
            bars.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def refresh(self):
            self.refreshed += 1

    monkeypatch.setattr(merge_kernel, "progress_bar", Bar)
    for drop in (False, True):
        expected = run_merges(words, units, "likelihood", 2, 300, drop_absorbed=drop)
        got = run_merges(words, units, "likelihood", 2, 300, drop_absorbed=drop, progress=True)
        assert got == expected
        assert bars[-1].total == 300 and bars[-1].n == len(got[1]) == 300
        assert bars[-1].refreshed >= 1


def test_no_words_no_merges():
    """No usable word (all too long or outside the alphabet): no merges, as the Python loop."""
    assert run_merges({}, [], "likelihood", 2, 10) == Merger({}, [], "likelihood", 2).run(10)


@pytest.mark.parametrize(
    "name", ["merge_state", "merge_tables", "merge_heap", "merge_priority", "merge_step",
             "merge_kernel"])
def test_modules_load_without_a_writable_cache_folder(monkeypatch, name):
    """No folder numba could cache in (read-only install and home): numba refuses cache=True
    at import; the kernel modules still load (compiled per process instead)."""
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl
    monkeypatch.setattr(impl, "_locator_classes", [])
    monkeypatch.setattr(numba.core.config, "CACHE_LOCATOR_CLASSES", "", raising=False)

    def twice(x):
        return 2 * x

    with pytest.raises(RuntimeError, match="no locator"):
        njit(cache=True)(twice)
    spec = importlib.util.find_spec(f"bertkit.vocab.{name}")
    module = importlib.util.module_from_spec(spec)  # a fresh copy: sys.modules keeps its own
    spec.loader.exec_module(module)
    if name == "merge_priority":
        assert module.xlogx(2.0) == 2.0 * math.log(2.0)  # compiled, not cached
    elif name == "merge_tables":
        assert module._hash(12345, 1023) == merge_tables._hash(12345, 1023)


def test_pmi_score_does_not_overflow_on_billions_of_occurrences():
    """Units seen 4e9 times each: their product passes int64; the score stays count / (ca cb)."""
    ca = cb = 4_000_000_000
    pmi = score(PMI, 1_000_000, False, ca, cb, 0.0, 0.0, 10**10, 0.0)
    assert pmi == pytest.approx(1_000_000 / 1.6e19, rel=1e-12)


def test_watch_progress_returns_the_result_with_and_without_the_bar():
    counter = np.zeros(1, dtype=np.int64)

    def work():
        counter[0] = 7
        return "done"

    assert watch_progress(work, counter, 7, "work", enabled=False) == "done"
    assert watch_progress(work, counter, 7, "work") == "done"


def test_watch_progress_reraises_the_work_error():
    """An error inside the watched work reaches the caller (not lost in the thread)."""
    def fail():
        raise ValueError("inside the loop")

    with pytest.raises(ValueError, match="inside the loop"):
        watch_progress(fail, np.zeros(1, dtype=np.int64), 10, "merging")


def test_warm_up_compiles_the_loop_a_real_run_uses():
    """`vocab train` compiles the loop ahead, while it counts words (`warm_up` in a thread):
    that is only worth it if a real run then finds its specialization compiled (no new
    signature), whatever the criterion."""
    thread = trainer.compile_in_background()
    thread.join()
    compiled = set(merge_kernel._run.signatures)
    assert compiled
    words = {"hello": 5, "help": 3, "yellow": 2, "hell": 4}
    units = sorted({c for w in words for c in w[:1]} | {"##" + c for w in words for c in w[1:]})
    for criterion in ("likelihood", "pmi", "frequency"):
        merge_kernel.run_merges(words, units, criterion, 1, budget=5, drop_absorbed=False)
    assert set(merge_kernel._run.signatures) == compiled
