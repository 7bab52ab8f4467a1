"""Peak memory and speed of `bertkit embed` as the input grows: flat memory is the claim.

For each size (10k, 100k, 1M short lines by default) a fresh process runs `bertkit embed` on a
generated text file into a .npy and reports its peak RSS (`resource.getrusage` of the child)
and texts/s; the ratio of the largest to the second largest peak should be within 1.10. The
memory check does not need a real BERT: by default the model is a tiny random one (2 layers,
H=128) made in the work folder; `--model DIR` measures a real one (texts/s then mean something).
The input is generated into the work folder (default under /tmp), never into the repository.

    python benchmarks/bench_embed_memory.py --sizes 10000,100000,1000000
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import resource, sys, time
from bertkit.cli.main import main
start = time.perf_counter()
code = main(["embed", sys.argv[1], "--input", sys.argv[2], "--output", sys.argv[3], "--no-progress"])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter() - start)
sys.exit(code)
"""

WORDS = "the a cat dog sat on mat and of to in is was hello world paris weather today".split()


def make_model(folder: Path) -> Path:
    import torch

    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.tokenization import BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *"0123456789",
             *[f"##{d}" for d in "0123456789"]]
    torch.manual_seed(0)
    path = folder / "tiny-model"
    config = BertConfig.preset("tiny", vocab_size=len(vocab), max_position_embeddings=64)
    BertModel(config).save_pretrained(path)
    BertTokenizer({token: i for i, token in enumerate(vocab)}).save_pretrained(path)
    return path


def make_input(folder: Path, n: int) -> Path:
    """n short lines (5 to 12 words), the same for a given n."""
    path = folder / f"lines-{n}.txt"
    if not path.exists():
        with open(path, "w", encoding="utf-8") as f:
            for i in range(n):
                k = 5 + i % 8
                f.write(" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(k)) + f" {i}\n")
    return path


def run(model: Path, src: Path, out: Path, threads: int | None) -> tuple[int, float]:
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(model), str(src), str(out)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    kb, seconds = proc.stdout.split()[-2:]
    return int(kb), float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--model", type=Path, help="default: a tiny random model")
    parser.add_argument("--work", type=Path, help="default: a new folder under /tmp")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of each child")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-embed-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    model = args.model or make_model(work)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d')}, model {model}")
    print(f"{'texts':>9} {'peak RSS MB':>12} {'texts/s':>9}")
    peaks = {}
    for n in sizes:
        src = make_input(work, n)
        out = work / f"vectors-{n}.npy"
        out.unlink(missing_ok=True)
        (work / f"vectors-{n}.npy.json").unlink(missing_ok=True)
        kb, seconds = run(model, src, out, args.threads)
        peaks[n] = kb
        print(f"{n:>9} {kb / 1024:>12.1f} {n / seconds:>9.0f}", flush=True)
        out.unlink()
    if len(sizes) >= 2:
        big, prev = sizes[-1], sizes[-2]
        print(f"peak RSS {big} / {prev}: {peaks[big] / peaks[prev]:.3f} (target <= 1.10)")


if __name__ == "__main__":
    main()
