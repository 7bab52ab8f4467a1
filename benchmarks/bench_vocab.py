"""WordPiece vocabulary training: bertkit (likelihood, frequency, gain) vs `tokenizers`.

Both trainers get the same pre-tokenized input: the words of the training books + WikiText after
BERT's basic tokenizer (counted once by bertkit). `tokenizers`' WordPieceTrainer receives them as
whitespace-separated text (WhitespaceSplit pre-tokenizer, no normalizer) and counts them itself,
in Rust; bertkit times (a) counting the same stream with a Counter and (b) training from the
counts. Runs are interleaved in one process (tokenizers, bertkit likelihood, bertkit frequency,
per size, repeated) and the fastest repeat is kept, because the machine is shared.

Quality on a held-out book (not used for training), per vocabulary: tokens per word, [UNK] rate
(share of word occurrences that become [UNK]) and the unigram log-likelihood per word: token
probabilities are estimated on the training words segmented by the same vocabulary (add-one
smoothing over the vocabulary), and the held-out words, segmented by BertTokenizer with that
vocabulary, are scored with them.

    python benchmarks/bench_vocab.py                 # 8k and 30k, 2 repeats
    python benchmarks/bench_vocab.py --quick         # a few books, small sizes
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bertkit.tokenization import BertTokenizer
from bertkit.tokenization.counting import count_files, segment_words
from bertkit.tokenization.trainer import SPECIAL_TOKENS, TrainerConfig, train_from_counts

REPO = Path(__file__).resolve().parents[1]
HELD_OUT = "austen-pride_and_prejudice.txt"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    p.add_argument("--sizes", type=int, nargs="+", default=[8000, 30522])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--limit-alphabet", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2, help="processes counting the corpus")
    p.add_argument("--criteria", nargs="+", default=["likelihood", "frequency", "gain"],
                   choices=["likelihood", "frequency", "gain"])
    p.add_argument("--quick", action="store_true", help="6 books, sizes 2000 and 4000, 1 repeat")
    return p.parse_args()


def corpus_files(data: Path, quick: bool) -> tuple[list[Path], Path]:
    books = sorted((data / "books").glob("*.txt"))
    held_out = data / "books" / HELD_OUT
    train = [b for b in books if b != held_out]
    if quick:
        train = train[:6]
    return train + [data / "wikitext-2" / "wiki.test.raw"], held_out


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def train_tokenizers(stream: list[str], size: int, args: argparse.Namespace) -> dict[str, int]:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordPieceTrainer(
        vocab_size=size, min_frequency=args.min_frequency, limit_alphabet=args.limit_alphabet,
        special_tokens=list(SPECIAL_TOKENS), show_progress=False,
    )
    tokenizer.train_from_iterator(stream, trainer)
    return tokenizer.get_vocab()


def count_stream(stream: list[str]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for chunk in stream:
        counts.update(chunk.split())
    return counts


def time_all(stream: list[str], counts: Counter[str], args: argparse.Namespace):
    """Interleaved repeats; returns {(size, name): (vocab list, best wall, best cpu)}."""
    best: dict[tuple[int, str], list] = {}
    for repeat in range(args.repeats):
        _, count_wall, count_cpu = timed(lambda: count_stream(stream))
        best.setdefault((0, "count"), [None, math.inf, math.inf])
        _keep_best(best[(0, "count")], None, count_wall, count_cpu)
        for size in args.sizes:
            vocab, wall, cpu = timed(lambda size=size: train_tokenizers(stream, size, args))
            ordered = sorted(vocab, key=vocab.__getitem__)
            _keep_best(best.setdefault((size, "tokenizers"), [None, math.inf, math.inf]),
                       ordered, wall, cpu)
            for criterion in args.criteria:
                config = TrainerConfig(vocab_size=size, criterion=criterion,
                                       min_frequency=args.min_frequency,
                                       limit_alphabet=args.limit_alphabet)
                result, wall, cpu = timed(lambda c=config: train_from_counts(counts, c))
                _keep_best(best.setdefault((size, criterion), [None, math.inf, math.inf]),
                           result.vocab, wall, cpu)
            print(f"repeat {repeat}: size {size} done", flush=True)
    return best


def _keep_best(slot: list, vocab, wall: float, cpu: float) -> None:
    slot[0] = vocab if vocab is not None else slot[0]
    slot[1], slot[2] = min(slot[1], wall), min(slot[2], cpu)


def quality(vocab: list[str], train: Counter[str], held: Counter[str]) -> tuple[float, ...]:
    """(tokens per word, [UNK] rate, unigram log-likelihood per word) on the held-out counts."""
    tokenizer = BertTokenizer({token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    unigram: Counter[str] = Counter()
    for word, pieces in segment_words(tokenizer, train).items():
        for piece in pieces:
            unigram[piece] += train[word]
    total = sum(unigram.values()) + len(vocab)
    log_p = {token: math.log((unigram[token] + 1) / total) for token in vocab}
    pieces = segment_words(tokenizer, held)
    words = sum(held.values())
    tokens = sum(len(pieces[w]) * f for w, f in held.items())
    unk = sum(f for w, f in held.items() if pieces[w] == ["[UNK]"])
    loglik = sum(f * sum(log_p[p] for p in pieces[w]) for w, f in held.items())
    return tokens / words, unk / words, loglik / words


def main() -> None:
    args = parse_args()
    if args.quick:
        args.sizes, args.repeats = [2000, 4000], 1
    train_files, held_out = corpus_files(args.data, args.quick)
    counts, wall, _ = timed(lambda: count_files(train_files, workers=args.workers))
    held = count_files([held_out])
    print(f"training words: {sum(counts.values()):,} ({len(counts):,} distinct) from "
          f"{len(train_files)} files, pre-tokenized in {wall:.1f} s; held-out {held_out.name}: "
          f"{sum(held.values()):,} words")
    stream = [(word + " ") * freq for word, freq in sorted(counts.items())]
    best = time_all(stream, counts, args)
    count_wall, count_cpu = best.pop((0, "count"))[1:]
    print(f"\nbertkit counting the same pre-tokenized stream: {count_wall:.2f} s wall, "
          f"{count_cpu:.2f} s CPU\n")
    print("| vocab | trainer | wall s | CPU s | wall vs tokenizers (train / count+train) "
          "| tokens/word | [UNK] rate | unigram LL/word |")
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        reference = best[(size, "tokenizers")][1]
        for name in [*args.criteria, "tokenizers"]:
            vocab, wall, cpu = best[(size, name)]
            per_word, unk, loglik = quality(vocab, counts, held)
            label = "tokenizers WordPieceTrainer (BPE)" if name == "tokenizers" else \
                f"bertkit {name}"
            ratio = "1" if name == "tokenizers" else \
                f"{wall / reference:.2f}x / {(wall + count_wall) / reference:.2f}x"
            print(f"| {len(vocab)} | {label} | {wall:.2f} | {cpu:.2f} | {ratio} | "
                  f"{per_word:.4f} | {unk:.4%} | {loglik:.3f} |", flush=True)


if __name__ == "__main__":
    main()
