"""WordPiece vocabulary training end to end: bertkit vs `tokenizers`' WordPieceTrainer.

Both start from the same raw files and end with a vocabulary: `tokenizers` gets a Tokenizer
with BERT's normalizer and pre-tokenizer (BertNormalizer + BertPreTokenizer, uncased, which is
what BERT's basic tokenizer is) and ``train(files)``, its own Rust pre-tokenization and counting
on all cores included; bertkit runs ``train_from_files(files, workers=2)`` and writes vocab.txt
(counting processes started, pre-tokenization, merges). Same ``min_frequency`` and
``limit_alphabet``. Runs alternate in one process (tokenizers, then each bertkit criterion, per
size, repeated) and the fastest repeat is kept, as the machine is shared.

Quality on a held-out book (not trained on), per vocabulary, by
`bertkit.vocab.counting.vocab_quality` (the same function as `bertkit vocab stats
--held-out`): tokens per word, [UNK] rate and unigram log-likelihood per word (piece
probabilities estimated on the training words segmented by the same vocabulary, add-one
smoothed).

Memory (``--memory``): peak RSS of ``bertkit vocab train`` in a fresh process (workers
included) on half of the books and on all of them, with ``--max-words``.

    python benchmarks/bench_vocab.py                     # 8k and 30,522, default criterion
    python benchmarks/bench_vocab.py --criteria likelihood frequency pmi --repeats 1
    python benchmarks/bench_vocab.py --memory            # peak RSS at two corpus sizes
    python benchmarks/bench_vocab.py --quick             # smoke run: 6 books, sizes 2000/4000
    python benchmarks/bench_vocab.py --cold --sizes 8000 # first run after installing, and after

Cold (``--cold``): ``bertkit vocab train`` in a fresh process whose numba cache is an empty
folder (``NUMBA_CACHE_DIR``, and the source copied where its ``__pycache__`` is empty), so the
merge loop is compiled as on a fresh install; then the same command again, loading it from that
cache (warm); `tokenizers`' trainer timed in this process between them. ``--source DIR`` times
another checkout's ``src`` the same way (an earlier commit, for a before/after).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from bertkit.tokenization import BertTokenizer
from bertkit.vocab.counting import count_files, vocab_quality
from bertkit.vocab.trainer import (
    CRITERIA,
    SPECIAL_TOKENS,
    TrainerConfig,
    save_vocab,
    train_from_files,
)

REPO = Path(__file__).resolve().parents[1]
HELD_OUT = "austen-pride_and_prejudice.txt"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    p.add_argument("--sizes", type=int, nargs="+", default=[8000, 30522])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--limit-alphabet", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2, help="bertkit's counting processes")
    p.add_argument("--criteria", nargs="+", default=["likelihood"], choices=CRITERIA)
    p.add_argument("--memory", action="store_true", help="peak RSS at two corpus sizes instead")
    p.add_argument("--max-words", type=int, default=50000, help="for --memory")
    p.add_argument("--quick", action="store_true", help="6 books, sizes 2000 and 4000, 1 repeat")
    p.add_argument("--cold", action="store_true",
                   help="a fresh process with an empty numba cache, then again warm")
    p.add_argument("--source", type=Path, nargs="+", default=[REPO / "src"],
                   help="for --cold: the src folders to time (default: this checkout's)")
    return p.parse_args()


def corpus_files(data: Path, quick: bool) -> tuple[list[Path], Path]:
    books = sorted((data / "books").glob("*.txt"))
    held_out = data / "books" / HELD_OUT
    train = [b for b in books if b != held_out]
    if quick:
        train = train[:6]
    return train + [data / "wikitext-2" / "wiki.test.raw"], held_out


def train_tokenizers(files: list[Path], size: int, args: argparse.Namespace, out: Path) -> list[str]:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=size, min_frequency=args.min_frequency, limit_alphabet=args.limit_alphabet,
        special_tokens=list(SPECIAL_TOKENS), show_progress=False,
    )
    tokenizer.train([str(f) for f in files], trainer)
    tokenizer.model.save(str(out))  # vocab.txt, as bertkit writes it
    vocab = tokenizer.get_vocab()
    return sorted(vocab, key=vocab.__getitem__)


def train_bertkit(files: list[Path], size: int, criterion: str, args: argparse.Namespace,
                  out: Path) -> list[str]:
    config = TrainerConfig(vocab_size=size, criterion=criterion, min_frequency=args.min_frequency,
                           limit_alphabet=args.limit_alphabet)
    result = train_from_files(files, config, workers=args.workers)
    save_vocab(result, out, do_lower_case=True)
    return result.vocab


def time_all(files: list[Path], args: argparse.Namespace) -> dict[tuple[int, str], list]:
    """Alternating repeats; returns {(size, name): [vocab, best wall s]}."""
    best: dict[tuple[int, str], list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for size in args.sizes:
                runs = [("tokenizers", lambda s=size: train_tokenizers(files, s, args, Path(tmp)))]
                runs += [(c, lambda s=size, c=c: train_bertkit(files, s, c, args, Path(tmp)))
                         for c in args.criteria]
                for name, run in runs:
                    start = time.perf_counter()
                    vocab = run()
                    wall = time.perf_counter() - start
                    slot = best.setdefault((size, name), [vocab, math.inf])
                    slot[1] = min(slot[1], wall)
                    print(f"repeat {repeat}, size {size}, {name}: {wall:.2f} s", flush=True)
    return best


def report(best: dict, files: list[Path], held_out: Path, args: argparse.Namespace) -> None:
    train = count_files(files, workers=args.workers)
    held = count_files([held_out])
    print(f"\ntraining words: {sum(train.values()):,} ({len(train):,} distinct) in {len(files)} "
          f"files; held-out {held_out.name}: {sum(held.values()):,} words\n")
    print(f"| vocab | trainer | wall s (best of {args.repeats}) | wall vs tokenizers | tokens/word "
          "| [UNK] rate | unigram LL/word |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        reference = best[(size, "tokenizers")][1]
        for name in [*args.criteria, "tokenizers"]:
            vocab, wall = best[(size, name)]
            tokenizer = BertTokenizer({token: i for i, token in enumerate(vocab)})
            q = vocab_quality(tokenizer, train, held)
            label = "tokenizers WordPieceTrainer (BPE)" if name == "tokenizers" else \
                f"bertkit {name}, --workers {args.workers}"
            print(f"| {len(vocab)} | {label} | {wall:.2f} | {wall / reference:.2f}x | "
                  f"{q.tokens_per_word:.4f} | {q.unk_rate:.4%} | "
                  f"{q.log_likelihood_per_word:.3f} |", flush=True)


def peak_rss(files: list[Path], args: argparse.Namespace) -> float:
    """Peak RSS (MiB) of `bertkit vocab train` on `files` in a fresh process tree: the largest
    of its processes (the main one or a counting worker)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(Path(sys.executable).parent / "bertkit"), "vocab", "train", *map(str, files),
               "-o", tmp + "/v", "--vocab-size", str(args.sizes[0]), "--workers",
               str(args.workers), "--max-words", str(args.max_words), "--no-progress"]
        probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
                 "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        out = subprocess.run([sys.executable, "-c", probe, *cmd], check=True,
                             capture_output=True, text=True).stdout
    return int(out.split()[-1]) / 1024


def cold_and_warm(files: list[Path], size: int, source: Path, args: argparse.Namespace
                  ) -> tuple[float, float]:
    """Wall seconds of `bertkit vocab train` from `source`, cold then warm (module docstring)."""
    import os
    import shutil

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(source, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        env = {**os.environ, "PYTHONPATH": str(src), "NUMBA_CACHE_DIR": str(Path(tmp) / "numba")}
        walls = []
        for attempt in ("cold", "warm"):
            cmd = [sys.executable, "-m", "bertkit", "vocab", "train", *map(str, files), "-o",
                   f"{tmp}/v-{attempt}", "--vocab-size", str(size), "--workers",
                   str(args.workers), "--min-frequency", str(args.min_frequency),
                   "--limit-alphabet", str(args.limit_alphabet), "--no-progress"]
            start = time.perf_counter()
            subprocess.run(cmd, check=True, env=env, capture_output=True)
            walls.append(time.perf_counter() - start)
    return walls[0], walls[1]


def cold_report(files: list[Path], args: argparse.Namespace) -> None:
    print("| vocab | source | cold s | warm s | tokenizers s | cold vs tokenizers | warm vs tokenizers |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            for source in args.source:
                cold, warm = cold_and_warm(files, size, source, args)
                start = time.perf_counter()
                train_tokenizers(files, size, args, Path(tmp))
                ref = time.perf_counter() - start
                print(f"| {size} | {source} | {cold:.1f} | {warm:.1f} | {ref:.1f} | "
                      f"{cold / ref:.2f}x | {warm / ref:.2f}x |", flush=True)


def main() -> None:
    args = parse_args()
    if args.quick:
        args.sizes, args.repeats = [2000, 4000], 1
    files, held_out = corpus_files(args.data, args.quick)
    if args.memory:
        for part in (files[: len(files) // 2], files):
            size_mb = sum(f.stat().st_size for f in part) / 2**20
            print(f"{len(part)} files, {size_mb:.1f} MB: peak RSS {peak_rss(part, args):.0f} MiB "
                  f"(--max-words {args.max_words}, --workers {args.workers})", flush=True)
        return
    if args.cold:
        cold_report(files, args)
        return
    report(time_all(files, args), files, held_out, args)


if __name__ == "__main__":
    main()
