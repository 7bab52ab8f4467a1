"""Is collation off the critical path? The real pre-training loop with 0, 1, 2 DataLoader workers.

Prepares a few books with dynamic masking (so every batch is masked at collate time, the most
collate work bertkit does), then times `bertkit.training.train` on the same shards with each
number of worker processes: per step = (time of W + N steps - time of W steps) / N, start-up
and the final checkpoint cancelling. Prints the collate time per batch alone for scale, and the
ratio of each setting to 0 workers (the CPU default).

    python benchmarks/bench_loader.py                          # mini, T=128, batch 32
    python benchmarks/bench_loader.py --model tiny --steps 10  # quicker

Time it alone: with 2 cores, a worker process competes with the step's own threads.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from bertkit.config import BertConfig
from bertkit.data.chunks import ChunkConfig
from bertkit.data.instances import InstanceConfig
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.heads import BertForPreTraining
from bertkit.runs.pretrain import make_collate, pretraining_metrics
from bertkit.tokenization import BertTokenizer
from bertkit.training import TrainConfig, train
from bertkit.training.hardware import cpu_info
from bertkit.vocab.trainer import TrainerConfig, save_vocab, train_from_texts

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "books"


def shards(root: Path, books: int) -> tuple[Path, BertTokenizer]:
    files = sorted(DATA.glob("*.txt"))[:books]
    if not files:
        raise SystemExit(f"no books under {DATA}")
    texts = [f.read_text(encoding="utf-8") for f in files]
    save_vocab(train_from_texts(texts, TrainerConfig(vocab_size=8000)), root / "tok", True)
    tokenizer = BertTokenizer.from_pretrained(root / "tok")
    chunk = ChunkConfig(instance=InstanceConfig(max_seq_length=128), dupe_factor=1,
                        dynamic_masking=True)
    prepare(files, tokenizer, root / "shards", PrepareConfig(chunk=chunk), progress=False)
    return root / "shards", tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mini")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--books", type=int, default=6)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--precision", default="fp32")
    args = ap.parse_args()
    cpu = cpu_info()
    flags = " ".join(sorted(f for f in cpu.flags if f.startswith(("avx512_bf16", "amx", "avx2"))))
    print(f"CPU {cpu.vendor} ({flags}), {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}, {args.model} T=128 batch {args.batch} {args.precision}")
    from bertkit.data.shards import ShardDataset

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder, tokenizer = shards(root, args.books)
        dataset = ShardDataset(folder)
        collate = make_collate(dataset, "mlm+nsp", tokenizer, seed=0)
        positions = list(range(args.batch))
        start = time.perf_counter()
        for _ in range(20):
            collate([dataset[i] for i in positions], positions)
        print(f"collate alone: {1000 * (time.perf_counter() - start) / 20:.1f} ms per batch")
        config = BertConfig.preset(args.model, vocab_size=tokenizer.vocab_size)

        def run(workers: int, steps: int, out: str) -> float:
            torch.manual_seed(0)
            cfg = TrainConfig(output_dir=out, max_steps=steps, batch_size=args.batch, lr=1e-4,
                              precision=args.precision, device="cpu", save_every=0,
                              log_every=10, progress=False, loader_workers=workers)
            begin = time.perf_counter()
            train(BertForPreTraining(config), dataset, collate, cfg,
                  step_metrics=pretraining_metrics)
            return time.perf_counter() - begin

        base = None
        for workers in map(int, args.workers.split(",")):
            run(workers, args.warm, str(root / f"w{workers}-0"))
            short = run(workers, args.warm, str(root / f"w{workers}-a"))
            long = run(workers, args.warm + args.steps, str(root / f"w{workers}-b"))
            per_step = (long - short) / args.steps
            base = base or per_step
            print(f"workers {workers}: {1000 * per_step:.0f} ms per step "
                  f"({base / per_step:.2f}x the 0-worker speed)", flush=True)


if __name__ == "__main__":
    main()
