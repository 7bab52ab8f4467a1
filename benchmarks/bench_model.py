"""Forward throughput of bertkit's BertModel vs transformers.BertModel, same weights, same inputs.

BERT-base shape (or --model NAME), random weights, B=32, T=128, CPU, fp32 and bf16 autocast.
Runs are interleaved (ours, ref, ours, ref, ...) in one process so machine noise hits both alike;
the figure is the ratio of median times (> 1.0: bertkit is faster).

    .venv/bin/python benchmarks/bench_model.py [--model base] [--batch 32] [--seq 128] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import transformers

from bertkit.config import BertConfig
from bertkit.model import BertModel


def build_pair(preset: str):
    torch.manual_seed(0)
    config = BertConfig.preset(preset)
    ours = BertModel(config).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)  # the reference gets exactly our weights
        ref = transformers.BertModel.from_pretrained(tmp, attn_implementation="sdpa").eval()
    return ours, ref, config


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(ours, ref, inputs, precision: str, repeats: int) -> dict:
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def run_ours():
        with torch.inference_mode(), autocast:
            return ours(**inputs).last_hidden_state

    def run_ref():
        with torch.inference_mode(), autocast:
            return ref(**inputs).last_hidden_state

    diff = (run_ours().float() - run_ref().float()).abs().max().item()
    for _ in range(2):  # warm-up: oneDNN kernel selection, allocator
        run_ours(), run_ref()
    t_ours, t_ref = [], []
    for _ in range(repeats):
        t_ours.append(timed(run_ours))
        t_ref.append(timed(run_ref))
    mo, mr = statistics.median(t_ours), statistics.median(t_ref)
    return {"precision": precision, "ours_s": mo, "ref_s": mr, "ratio": mr / mo, "max_abs_diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="base")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--precisions", default="fp32,bf16")
    args = ap.parse_args()
    ours, ref, config = build_pair(args.model)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, config.vocab_size, (args.batch, args.seq), generator=gen)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    tokens = args.batch * args.seq
    print(f"model={args.model} B={args.batch} T={args.seq} threads={torch.get_num_threads()} "
          f"torch={torch.__version__} transformers={transformers.__version__}")
    for precision in args.precisions.split(","):
        r = compare(ours, ref, inputs, precision, args.repeats)
        print(f"{precision}: bertkit {tokens / r['ours_s']:,.0f} tok/s  transformers "
              f"{tokens / r['ref_s']:,.0f} tok/s  ratio {r['ratio']:.2f}x  "
              f"max|diff| {r['max_abs_diff']:.1e}")


if __name__ == "__main__":
    main()
