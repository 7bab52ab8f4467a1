"""WordPiece vocabulary learning by likelihood, the criterion of Schuster & Nakajima (2012).

Start from characters, in word-initial form (``a``) and continuation form (``##a``), and keep
adding the merge of two adjacent units ``a b`` that most increases the unigram log-likelihood
of the training words, ``sum_u c_u log(c_u / N)`` over the current segmentation (each distinct
word weighted by its frequency). ``criterion="likelihood"`` (the default) scores a pair by that
exact increase (:func:`likelihood_gain`). Two other criteria run through the same code:

* ``"pmi"``: ``count(a b) / (count(a) * count(b))``, the textbook short-hand for WordPiece.
  It is a pointwise mutual information: it favours pairs that are rare but always together, so
  common words stay split.
* ``"frequency"``: ``count(a b)`` alone, which is BPE (what ``tokenizers``' WordPieceTrainer
  does).

The criteria's history and measurements are in docs/reports/benchmarks.md ("WordPiece vocabulary trainer").

Words that WordPiece would turn into ``[UNK]`` whole (longer than 100 characters, or holding a
character outside the alphabet) are left out of learning: no piece learned from them could
ever be used.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.data.documents import DEFAULT_FIELDS, Fields
from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.tokenization.vocab_io import SPECIAL_TOKENS
from bertkit.vocab.counting import count_files, count_words, expand_inputs
from bertkit.vocab.merges import PREFIX

logger = logging.getLogger(__name__)

CRITERIA = ("likelihood", "pmi", "frequency")
# BertTokenizer (like Google's) maps a word longer than this many characters to [UNK] whole.
MAX_WORD_CHARS = 100


@dataclass(frozen=True)
class TrainerConfig:
    """Settings of one vocabulary-learning run (validated once, here).

    `vocab_size` counts everything (special, reserved, character and learned tokens);
    `limit_alphabet` counts characters, each of which may give two units (``a`` and ``##a``);
    `min_frequency` is the smallest pair count that may be merged. With `drop_absorbed`
    (the default) a learned piece whose every occurrence was merged into longer pieces
    ("perhap" once "perhaps" exists) is left out and the merges go on until `vocab_size`
    entries of positive count exist: such a piece has probability 0 under the unigram model
    and is rarely used by the tokenizer (what dropping them does: docs/reports/benchmarks.md).
    """

    vocab_size: int = 30522
    criterion: str = "likelihood"
    min_frequency: int = 2
    limit_alphabet: int = 1000
    reserved: int = 0
    do_lower_case: bool = True
    drop_absorbed: bool = True
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
class VocabResult:
    """The learned vocabulary (in file order) and how it came about."""

    vocab: list[str]
    merges: list[tuple[str, str]] = field(default_factory=list)  # every merge, in order
    pieces: list[str] = field(default_factory=list)  # the new vocabulary entries, in order
    alphabet: list[str] = field(default_factory=list)  # kept characters, most frequent first
    stopped_early: bool = False
    skipped_words: int = 0  # distinct words WordPiece maps to [UNK] (rare char or too long)
    word_counts: Mapping[str, int] = field(default_factory=dict, repr=False)  # what it learned from


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


def train_from_counts(
    word_counts: Mapping[str, int], config: TrainerConfig, progress: bool = False
) -> VocabResult:
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
    merges, pieces = _merge(usable, units, config, budget, progress)
    result = VocabResult(head + units + pieces, merges, pieces, alphabet, len(pieces) < budget,
                         skipped, words)
    if result.stopped_early:
        logger.warning(
            "stopped early: no pair left with frequency >= %d; final vocabulary size %d "
            "(requested %d)", config.min_frequency, len(result.vocab), config.vocab_size,
        )
    return result


def _merge(words: dict[str, int], units: list[str], config: TrainerConfig, budget: int,
           progress: bool) -> tuple[list[tuple[str, str]], list[str]]:
    """The merges: by the loop compiled with numba (the same merges as `merges.Merger`, faster:
    docs/reports/benchmarks.md), or by `merges.Merger` itself where numba is not installed or does
    not load (one log line). numba is imported here only, so nothing else depends on it."""
    try:
        from bertkit.vocab.merge_kernel import run_merges
    except ImportError as err:
        from bertkit.vocab.merges import Merger

        logger.warning("numba is not available (%s): the merge loop runs in Python, the same "
                       "merges, about 5x slower", err)
        merger = Merger(words, units, config.criterion, config.min_frequency)
        return merger.run(budget, progress=progress, drop_absorbed=config.drop_absorbed)
    logger.info("merging: %d new pieces to learn (the first run after installing compiles the "
                "merge loop, about 20 s; later runs load it from numba's cache)", budget)
    return run_merges(words, units, config.criterion, config.min_frequency, budget,
                      drop_absorbed=config.drop_absorbed, progress=progress)


def compile_in_background() -> threading.Thread | None:
    """Start compiling the merge loop in a thread (`merge_kernel.warm_up`; nothing where numba
    is missing). The first run after installing spends tens of seconds compiling it; started
    before the words are counted, that work overlaps the counting (on other processes with
    `workers`). A later `run_merges` waits for it under numba's compiler lock; a failure here
    is left to that call to report."""
    try:
        from bertkit.vocab.merge_kernel import warm_up
    except ImportError:
        return None

    def compile_quietly() -> None:
        try:
            warm_up()
        except Exception as err:  # noqa: BLE001 (the real run compiles again and reports)
            logger.debug("compiling the merge loop ahead failed: %s", err)

    thread = threading.Thread(target=compile_quietly, name="compile merge loop", daemon=True)
    thread.start()
    return thread


def train_from_texts(
    texts: Iterable[str], config: TrainerConfig, progress: bool = False
) -> VocabResult:
    """Learn a vocabulary from an iterable of raw strings (pre-tokenized here, streaming)."""
    from bertkit.io import progress_bar

    texts = progress_bar(texts, desc="counting words", unit=" texts", disable=not progress)
    return train_from_counts(count_words(texts, config.do_lower_case), config, progress)


def train_from_files(
    patterns: Sequence[str | os.PathLike],
    config: TrainerConfig,
    workers: int = 1,
    progress: bool = False,
    max_words: int | None = None,
    fields: Fields = DEFAULT_FIELDS,
) -> VocabResult:
    """Learn a vocabulary from corpus files (globs and folders allowed, compressed too; the
    record formats' text in `fields`), counting on `workers` processes, with at most
    `max_words` distinct words held (None: no cap)."""
    paths = expand_inputs(patterns)
    compile_in_background()
    counts = count_files(paths, config.do_lower_case, workers=workers, progress=progress,
                         max_words=max_words, fields=fields)
    if not counts:
        named = ", ".join(map(str, paths[:3])) + (f" and {len(paths) - 3} more" * (len(paths) > 3))
        raise BertkitError(f"the corpus is empty: no words in {named}")
    return train_from_counts(counts, config, progress)


def save_vocab(result: VocabResult, out_dir: str | os.PathLike, do_lower_case: bool) -> Path:
    """Write ``vocab.txt`` and ``tokenizer_config.json`` (atomically) so that
    ``BertTokenizer.from_pretrained(out_dir)`` works at once. Returns the vocab path."""
    out = Path(out_dir)
    config = {"do_lower_case": do_lower_case, "tokenizer_class": "BertTokenizer",
              "model_max_length": 512}
    atomic_write_text(out / "vocab.txt", "".join(token + "\n" for token in result.vocab))
    atomic_write_text(out / "tokenizer_config.json", json.dumps(config, indent=2) + "\n")
    return out / "vocab.txt"
