"""`bertkit prepare` and `vocab train` on a large corpus: throughput per core and peak memory,
beside `tokenizers`' WordPiece trainer on the same files; `prepare --part` over N parts against
one run (the same bytes, the wall time of each part).

    python benchmarks/make_corpus.py --size 100M --output /tmp/corpus-100m
    python benchmarks/bench_scale.py /tmp/corpus-100m --workers 2 --parts 4

Every command runs in its own process; its peak memory is that process tree's largest resident
set (`wait4`'s ru_maxrss). Time it alone: with 2 cores, any other job changes every figure.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bertkit.training.hardware import cpu_info

BERTKIT = [sys.executable, "-m", "bertkit"]
REFERENCE = """
import sys
from tokenizers import BertWordPieceTokenizer
tok = BertWordPieceTokenizer(lowercase=True)
tok.train(sys.argv[2:], vocab_size=int(sys.argv[1]), show_progress=False)
print(tok.get_vocab_size())
"""


def timed(argv: list[str]) -> tuple[float, float]:
    """(seconds, peak GiB of the largest process of the tree) of one command, which must pass."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{err[-2000:]}")
    return seconds, usage.ru_maxrss / 2**20  # KiB -> GiB


HELD_OUT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikitext-2" / "wiki.test.raw"


def held_out(vocab: Path) -> str:
    """Tokens per word and [UNK] rate of WikiText-2 test under a vocabulary."""
    from bertkit.tokenization import BertTokenizer
    from bertkit.vocab.counting import count_files, segmentation_stats

    stats = segmentation_stats(BertTokenizer.from_pretrained(vocab), count_files([HELD_OUT]))
    return f"{stats.tokens_per_word:.4f} tokens/word, [UNK] {stats.unk_rate:.3%}"


def same_shards(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir() if p.is_dir())
    if names != sorted(p.name for p in b.iterdir() if p.is_dir()):
        return False
    return all(filecmp.cmp(f, b / name / f.name, shallow=False)
               for name in names for f in (a / name).iterdir())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path, help="a folder of .txt files (make_corpus.py)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--vocab-size", type=int, default=30522)
    ap.add_argument("--parts", type=int, default=4, help="0: skip the --part comparison")
    ap.add_argument("--skip", default="", help="comma-separated: vocab,reference,prepare")
    ap.add_argument("--tokenizer", type=Path,
                    help="prepare with this vocabulary (with --skip vocab) instead of the one "
                    "trained here")
    ap.add_argument("--max-words", default="",
                    help="comma-separated caps: also train with `vocab train --max-words N` and "
                    "compare each vocabulary with the full counts' (shared pieces, held-out "
                    "tokens/word on WikiText-2 test)")
    args = ap.parse_args()
    files = sorted(str(p) for p in args.corpus.glob("*.txt"))
    size = sum(os.path.getsize(f) for f in files) / 2**20
    cpu = cpu_info()
    flags = " ".join(sorted(f for f in cpu.flags if f.startswith(("avx512_bf16", "amx", "avx2"))))
    print(f"{size:,.0f} MiB in {len(files)} files; CPU {cpu.vendor} ({flags}), "
          f"{os.cpu_count()} cores, --workers {args.workers}", flush=True)
    skip = set(args.skip.split(","))
    with tempfile.TemporaryDirectory(dir=args.corpus.parent) as tmp:
        out = Path(tmp)
        if "vocab" not in skip:
            s, gib = timed([*BERTKIT, "vocab", "train", *files, "--vocab-size",
                            str(args.vocab_size), "--output", str(out / "vocab"), "--workers",
                            str(args.workers), "--no-progress"])
            print(f"vocab train (bertkit): {s:,.0f} s, {size / s:.2f} MiB/s "
                  f"({size / s / args.workers:.2f} per worker), peak {gib:.2f} GiB", flush=True)
        for cap in filter(None, args.max_words.split(",")):
            s, gib = timed([*BERTKIT, "vocab", "train", *files, "--vocab-size",
                            str(args.vocab_size), "--output", str(out / f"vocab-{cap}"),
                            "--workers", str(args.workers), "--max-words", cap, "--no-progress"])
            full = set((out / "vocab" / "vocab.txt").read_text(encoding="utf-8").split("\n"))
            pruned = set((out / f"vocab-{cap}" / "vocab.txt").read_text(encoding="utf-8").split("\n"))
            print(f"vocab train --max-words {cap}: {s:,.0f} s, peak {gib:.2f} GiB; "
                  f"{len(full & pruned) / len(full):.2%} of the full counts' pieces; held-out "
                  f"{held_out(out / f'vocab-{cap}')} vs {held_out(out / 'vocab')} (full)",
                  flush=True)
        if "reference" not in skip:
            s, gib = timed([sys.executable, "-c", REFERENCE, str(args.vocab_size), *files])
            print(f"vocab train (tokenizers' BertWordPieceTokenizer, its own threads): {s:,.0f} s,"
                  f" {size / s:.2f} MiB/s, peak {gib:.2f} GiB", flush=True)
        if "prepare" in skip:
            return
        vocab = args.tokenizer or out / "vocab"
        if not vocab.is_dir():
            raise SystemExit("prepare needs a vocabulary: do not skip vocab, or give --tokenizer")
        common = ["prepare", *files, "--tokenizer", str(vocab), "--format", "wikitext",
                  "--max-seq-length", "128", "--dupe-factor", "1", "--no-progress"]
        one, gib = timed([*BERTKIT, *common, "--output", str(out / "one"), "--workers",
                          str(args.workers)])
        print(f"prepare: {one:,.0f} s, {size / one:.2f} MiB/s ({size / one / args.workers:.2f} "
              f"per worker), peak {gib:.2f} GiB", flush=True)
        if args.parts:
            times = []
            for part in range(args.parts):
                seconds, _ = timed([*BERTKIT, *common, "--output", str(out / f"part{part}"),
                                    "--part", f"{part}/{args.parts}", "--workers",
                                    str(args.workers)])
                times.append(seconds)
            m, gib_m = timed([*BERTKIT, "merge-shards", *(str(out / f"part{p}")
                              for p in range(args.parts)), "--output", str(out / "merged"),
                              "--no-progress"])
            print(f"prepare --part i/{args.parts}: {', '.join(f'{t:,.0f}' for t in times)} s "
                  f"per part (one run: {one:,.0f} s); merge-shards {m:,.0f} s, peak {gib_m:.2f} "
                  f"GiB; merged == one run: {same_shards(out / 'merged', out / 'one')}",
                  flush=True)
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
