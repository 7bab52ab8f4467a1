"""Pre-training throughput: bertkit vs transformers.BertForPreTraining, one optimizer step each.

Same config, same initial weights, same batch (T=128, 15% of tokens masked: 20 per sequence,
NSP labels), same optimizer (AdamW, lr 1e-4, wd 0.01 on matrices; ours fused, theirs PyTorch's
default foreach), same precision (fp32, or bf16 autocast), gradient clipping at 1.0 for both.
A step = forward + backward + clip + optimizer step + zero-grad, what `bertkit pretrain` does.
bertkit takes Google's sparse `masked_lm_positions` (the vocabulary projection only where a token
is masked); transformers takes dense `labels` (B, T) with -100 elsewhere, its documented API.

Dropout is off by default (`--dropout 0`: the first-step losses of the two then agree, a check
that both compute the same step); `--dropout 0.1` is BERT's pre-training setting, where each
side draws its own masks (bertkit's CPU dropout: `bertkit.model.dropout`).

Runs are interleaved (ours, theirs, ours, ...) in one process so machine noise hits both alike;
the figure is the ratio of median step times (> 1: bertkit is faster).

    .venv/bin/python benchmarks/bench_pretrain.py [--shapes mini,base] [--precisions fp32,bf16]
        [--batch 8] [--seq 128] [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import transformers

from bertkit.config import BertConfig
from bertkit.heads import BertForPreTraining
from bertkit.training.optim import build_optimizer, param_groups

P = 20  # masked positions per sequence at T=128 (Google's max_predictions_per_seq)


def build_pair(preset: str, dropout: float = 0.0):
    torch.manual_seed(0)
    config = BertConfig.preset(preset, hidden_dropout_prob=dropout,
                               attention_probs_dropout_prob=dropout)
    ours = BertForPreTraining(config).train()
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)  # the reference starts from exactly our weights
        ref = transformers.BertForPreTraining.from_pretrained(tmp, attn_implementation="sdpa")
    ref.train()
    opt_ours = build_optimizer(ours, "adamw", 1e-4, 0.01, (0.9, 0.999), 1e-6, torch.device("cpu"))
    opt_ref = torch.optim.AdamW(param_groups(ref, 0.01), lr=1e-4, betas=(0.9, 0.999), eps=1e-6)
    return (ours, opt_ours), (ref, opt_ref), config


def make_batch(config: BertConfig, B: int, T: int):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, config.vocab_size, (B, T), generator=gen)
    positions = torch.stack([torch.randperm(T - 2, generator=gen)[:P].sort().values + 1
                             for _ in range(B)])  # (B, P)
    targets = ids.gather(1, positions)  # (B, P)
    masked = ids.scatter(1, positions, 103)  # [MASK]
    common = {"input_ids": masked, "token_type_ids": (torch.arange(T) >= T // 2).long().expand(B, T),
              "attention_mask": torch.ones_like(ids)}
    nsp = torch.randint(0, 2, (B,), generator=gen)
    ours = {**common, "masked_lm_positions": positions, "masked_lm_ids": targets,
            "masked_lm_weights": torch.ones(B, P), "next_sentence_label": nsp}
    labels = torch.full_like(ids, -100).scatter(1, positions, targets)  # (B, T)
    ref = {**common, "labels": labels, "next_sentence_label": nsp}
    return ours, ref


def make_step(model, optimizer, batch, precision: str):
    def step() -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(**batch).loss
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(shape: str, precision: str, B: int, T: int, repeats: int, compiled: bool = False,
            dropout: float = 0.0) -> dict:
    (ours, opt_o), (ref, opt_r), config = build_pair(shape, dropout)
    batch_o, batch_r = make_batch(config, B, T)
    steps = {"ours": make_step(ours, opt_o, batch_o, precision),
             "ref": make_step(ref, opt_r, batch_r, precision)}
    if compiled:  # a second copy of our model, compiled (as `--compile` does), same weights
        (twin, opt_c), _, _ = build_pair(shape, dropout)
        start = time.perf_counter()
        steps["compiled"] = make_step(torch.compile(twin), opt_c, batch_o, precision)
        steps["compiled"]()
        print(f"  (torch.compile: first step {time.perf_counter() - start:.1f} s)", flush=True)
    first = tuple(step() for step in steps.values())  # also the warm-up (kernels, optimizer state)
    for step in steps.values():
        step()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(repeats):
        for k, step in steps.items():
            times[k].append(timed(step))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"ours_s": med["ours"], "ref_s": med["ref"], "ratio": med["ref"] / med["ours"],
           "first_losses": first[:2]}
    if compiled:
        out.update(compiled_s=med["compiled"], compiled_ratio=med["ref"] / med["compiled"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default="mini,base")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--quick", action="store_true", help="mini only, B=4, 2 repeats")
    ap.add_argument("--compile", action="store_true", help="also bertkit under torch.compile")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="hidden and attention dropout of both models (BERT pre-trains with 0.1)")
    args = ap.parse_args()
    if args.quick:
        args.shapes, args.batch, args.repeats = "mini", 4, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"B={args.batch} T={args.seq} P={P} dropout={args.dropout} threads={torch.get_num_threads()} "
          f"torch={torch.__version__} transformers={transformers.__version__}")
    tokens = args.batch * args.seq
    for shape in args.shapes.split(","):
        for precision in args.precisions.split(","):
            r = compare(shape, precision, args.batch, args.seq, args.repeats, args.compile,
                        args.dropout)
            lo, lr_ = r["first_losses"]
            print(f"{shape:5s} {precision}: bertkit {tokens / r['ours_s']:,.0f} tok/s  "
                  f"transformers {tokens / r['ref_s']:,.0f} tok/s  ratio {r['ratio']:.2f}x  "
                  f"(first-step loss {lo:.4f} vs {lr_:.4f})", flush=True)
            if args.compile:
                print(f"{shape:5s} {precision}: bertkit compiled {tokens / r['compiled_s']:,.0f} "
                      f"tok/s  ratio {r['compiled_ratio']:.2f}x  (vs eager bertkit "
                      f"{r['ours_s'] / r['compiled_s']:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
