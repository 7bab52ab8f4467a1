"""The process that tests/training/test_distributed.py starts, alone or as torchrun's workers.

    python ddp_worker.py SHARDS TOKENIZER OUT --steps 6 [--save-every 3] [--kill-at N]
        [--fail-at N] [--dropout 0.1] [--resume [auto]]

Pre-trains a tiny BERT (mlm+nsp) on prepared shards through the real loop and the real collate,
and records, per rank, every example it trains on as (stream position, CRC of its token ids) in
OUT/seen-rank<R>.jsonl. `--kill-at N`: rank 0 SIGKILLs itself in its N-th collate call (torchrun
then stops the other rank), as a crash between two checkpoints; only in torchrun's first start, so
that a restart (--max-restarts) runs through. `--fail-at N`: the last rank stops with a
BertkitError in its N-th collate call, and every process ends as `bertkit pretrain` ends it
(`distributed.stop_together`). Rank 0 writes the step losses of this call to
OUT/losses-<first step>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

from bertkit.config import BertConfig
from bertkit.data.shards import ShardDataset
from bertkit.errors import BertkitError
from bertkit.heads import BertForPreTraining
from bertkit.runs.pretrain import make_collate, pretraining_metrics
from bertkit.tokenization import BertTokenizer
from bertkit.training import TrainConfig, distributed, train
from bertkit.training.signals import terminate_as_interrupt


class RecordingCollate:
    """Wraps the pre-training collate: records what it sees, and can crash on cue."""

    wants_positions = True

    def __init__(self, collate, log: Path, kill_at: int | None, fail_at: int | None = None):
        self.collate, self.log, self.kill_at, self.calls = collate, log, kill_at, 0
        self.fail_at = fail_at
        self.first_start = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"

    def __call__(self, items, positions):
        self.calls += 1
        if (self.kill_at is not None and self.calls == self.kill_at and distributed.rank() == 0
                and self.first_start):
            os.kill(os.getpid(), signal.SIGKILL)
        if (self.fail_at is not None and self.calls == self.fail_at
                and distributed.rank() == distributed.world_size() - 1):
            raise BertkitError(f"bad record in the last rank's batch (call {self.calls})")
        with open(self.log, "a", encoding="utf-8") as f:
            for p, item in zip(positions, items):
                crc = zlib.crc32(np.ascontiguousarray(item["input_ids"], dtype=np.int64).tobytes())
                f.write(json.dumps([int(p), crc]) + "\n")
        return self.collate(items, positions)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shards")
    parser.add_argument("tokenizer")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--save-every", type=int, default=3)
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--fail-at", type=int)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--resume", nargs="?", const=True, default=False, choices=["auto"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    distributed.setup(os.environ)
    tokenizer = BertTokenizer.from_pretrained(args.tokenizer)
    dataset = ShardDataset(args.shards)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                        hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
    torch.manual_seed(0)
    model = BertForPreTraining(config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    collate = RecordingCollate(make_collate(dataset, "mlm+nsp", tokenizer, seed=11),
                               out / f"seen-rank{distributed.rank()}.jsonl", args.kill_at,
                               args.fail_at)
    cfg = TrainConfig(output_dir=str(out), max_steps=args.steps, batch_size=8, micro_batch_size=2,
                      lr=1e-3, warmup_steps=1, save_every=args.save_every, keep=0,
                      log_every=1, progress=False, precision="fp32", device="cpu",
                      resume=args.resume, seed=5)
    try:
        with terminate_as_interrupt():
            result = train(model, dataset, collate, cfg, step_metrics=pretraining_metrics)
        if distributed.rank() == 0:
            first = result.step - len(result.losses)
            (out / f"losses-{first}.json").write_text(json.dumps(result.losses))
    except (BertkitError, RuntimeError, KeyboardInterrupt) as err:  # as `run_pretrain` ends
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        line = distributed.stop_together(err)
        if line is not None:
            print(f"bertkit: error: {line}", file=sys.stderr)
        sys.exit(1)
    finally:  # a process group left at exit aborts the interpreter (gloo's threads)
        distributed.teardown()


if __name__ == "__main__":
    main()
