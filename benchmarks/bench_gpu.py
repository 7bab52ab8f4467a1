"""GPU benchmark suite: bertkit vs transformers on one CUDA device, side by side in one process.

0. the real pre-training loop: `bertkit.training.train` (DataLoader with worker processes and
   pinned memory, the collate, autocast, clipping, fused AdamW, statistics kept on the device
   between log lines) over statically masked instances, per step = (time of W + N steps - time
   of W steps) / N, so start-up and the final checkpoint cancel; beside transformers'
   `BertForPreTraining` stepped by a minimal loop on batches already on the device (an upper
   bound for the reference: no data loading at all). Tokens/s, MFU, peak memory.
1. pre-training: one optimizer step (forward + backward + clip + AdamW + zero-grad) of
   `BertForPreTraining`, base and large, bf16 autocast, T = 128 and 512, vs
   `transformers.BertForPreTraining` (SDPA) from the same weights; tokens/s, model FLOPs
   utilisation (MFU) and peak memory. bertkit takes Google's sparse masked positions (15%),
   transformers dense labels: the *model FLOPs* counted for both are the same (6 x encoder
   parameters per token + attention 12·L·H·T per token + the vocabulary projection at the masked
   positions only), so the MFU ratio is the throughput ratio.
2. fine-tuning: `BertForSequenceClassification` (base), batches of 32 with SST-2-like lengths
   (4..66 tokens, max length 128): bertkit with length-grouped batches (`finetune
   --group-by-length`, opt-in) + packed dense layers vs transformers (random batches, dynamic
   padding); examples/s and peak memory.
3. inference: `bertkit.inference.Encoder.encode` (texts -> vectors: tokenization, length
   bucketing, packed forward, bf16) vs transformers' BertModel on pre-tokenized, dynamically
   padded batches of 64 (mean pooling); sentences/s and peak memory.

    python benchmarks/bench_gpu.py                        # on a CUDA machine (~5-10 min on an H100)
    python benchmarks/bench_gpu.py --device cpu --smoke   # the CPU smoke path (tiny shapes)

Peak TFLOP/s for MFU: `--peak-tflops`, else looked up from the device name (dense bf16:
H100/H200 SXM 989, A100 312, L4 121); none: MFU is not printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
import transformers

from bertkit.config import BertConfig
from bertkit.heads import BertForPreTraining, BertForSequenceClassification
from bertkit.training.optim import build_optimizer, param_groups

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def median_time(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    fn()
    fn()  # warm-up: kernel choice, optimizer state, allocator
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed_pair(ours: Callable[[], object], ref: Callable[[], object], device: torch.device,
               repeats: int) -> dict:
    """Each contender alone on the device (its own peak memory), median step times."""
    out = {}
    for name, fn in (("bertkit", ours), ("transformers", ref)):
        reset_peak(device)
        out[name] = {"s": median_time(fn, device, repeats), "peak_gib": peak_gib(device)}
    return out


def pair_models(config: BertConfig, device: torch.device, ours_cls, ref_cls):
    """bertkit's model and transformers' from exactly the same weights, both in train mode."""
    torch.manual_seed(0)
    ours = ours_cls(config)
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)
        ref = ref_cls.from_pretrained(tmp, attn_implementation="sdpa")
    return ours.to(device).train(), ref.to(device).train()


def train_step(model, optimizer, batch_fn: Callable[[], dict], device: torch.device,
               precision: str) -> Callable[[], object]:
    dtype = torch.bfloat16 if precision == "bf16" else None

    def step():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = model(**batch_fn()).loss
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def optimizers(ours, ref, device: torch.device):
    o = build_optimizer(ours, "adamw", 1e-4, 0.01, (0.9, 0.999), 1e-6, device)
    r = torch.optim.AdamW(param_groups(ref, 0.01), lr=1e-4, eps=1e-6,
                          fused=device.type in ("cuda", "cpu"))
    return o, r


def model_flops_per_step(config: BertConfig, B: int, T: int, P: int) -> float:
    """Training FLOPs (forward + backward = 3 x forward) of the useful work of one step."""
    L, H, V, inter = (config.num_hidden_layers, config.hidden_size, config.vocab_size,
                      config.intermediate_size)
    per_layer = 2 * (4 * H * H + 2 * H * inter)  # forward FLOPs per token of the dense layers
    attention = 2 * 2 * T * H  # scores + weighted sum, per token per layer
    head = 2 * (H * H + H * V)  # MLM transform + vocabulary projection, per masked token
    forward = B * T * L * (per_layer + attention) + B * P * head
    return 3.0 * forward


def pretrain_batches(config: BertConfig, B: int, T: int, device: torch.device):
    P = max(1, round(0.15 * T))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, config.vocab_size, (B, T), generator=gen)
    positions = torch.stack([torch.randperm(T - 2, generator=gen)[:P].sort().values + 1
                             for _ in range(B)])  # (B, P)
    targets = ids.gather(1, positions)  # (B, P)
    common = {"input_ids": ids.scatter(1, positions, 103),
              "token_type_ids": (torch.arange(T) >= T // 2).long().expand(B, T).contiguous(),
              "attention_mask": torch.ones_like(ids)}
    nsp = torch.randint(0, 2, (B,), generator=gen)
    ours = {**common, "masked_lm_positions": positions, "masked_lm_ids": targets,
            "masked_lm_weights": torch.ones(B, P), "next_sentence_label": nsp}
    ref = {**common, "labels": torch.full_like(ids, -100).scatter(1, positions, targets),
           "next_sentence_label": nsp}
    move = lambda d: {k: v.to(device) for k, v in d.items()}  # noqa: E731
    return move(ours), move(ref), P


def bench_pretrain(shape: str, T: int, B: int, args, device: torch.device) -> dict:
    config = BertConfig.preset(shape, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                               max_position_embeddings=max(512, T))
    ours, ref = pair_models(config, device, BertForPreTraining, transformers.BertForPreTraining)
    opt_o, opt_r = optimizers(ours, ref, device)
    batch_o, batch_r, P = pretrain_batches(config, B, T, device)
    result = timed_pair(train_step(ours, opt_o, lambda: batch_o, device, args.precision),
                        train_step(ref, opt_r, lambda: batch_r, device, args.precision),
                        device, args.repeats)
    flops = model_flops_per_step(config, B, T, P)
    for r in result.values():
        r["tokens_per_s"] = B * T / r["s"]
        r["mfu"] = flops / r["s"] / (args.peak_tflops * 1e12) if args.peak_tflops else None
    del ours, ref, opt_o, opt_r
    return {"case": f"pretrain {shape} T={T} B={B} {args.precision}", **result,
            "ratio": result["transformers"]["s"] / result["bertkit"]["s"]}


def sst2_like_lengths(n: int, max_len: int, seed: int = 0) -> list[int]:
    """Lengths shaped like SST-2's training sentences (most short, a long tail), [CLS]/[SEP] in."""
    gen = torch.Generator().manual_seed(seed)
    lengths = (torch.exp(2.4 + 0.6 * torch.randn(n, generator=gen)) + 3).long()  # log-normal
    return lengths.clamp(4, min(66, max_len)).tolist()


def finetune_batches(lengths: list[int], B: int, grouped: bool, seed: int = 0):
    """Index batches of B: random, or length-grouped (bertkit.data.collate) like `finetune
    --group-by-length`."""
    from bertkit.training.stream import length_grouped_order

    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(lengths), generator=gen)
    if grouped:
        order = length_grouped_order(order, torch.tensor(lengths), B, gen)
    return [order[i:i + B].tolist() for i in range(0, len(order) - B + 1, B)]


def padded(lengths: list[int], idx: list[int], vocab: int, device: torch.device) -> dict:
    T = max(lengths[i] for i in idx)
    n = torch.tensor([lengths[i] for i in idx])
    mask = (torch.arange(T)[None, :] < n[:, None]).long()  # (B, T)
    ids = torch.randint(1000, vocab, (len(idx), T)) * mask
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def bench_finetune(shape: str, args, device: torch.device) -> dict:
    from bertkit.model import attention_group_cost
    from bertkit.varlen import VarlenLayout

    labels = {"id2label": {0: "neg", 1: "pos"}, "label2id": {"neg": 0, "pos": 1}}
    config = BertConfig.preset(shape, **labels)
    ours, ref = pair_models(config, device, BertForSequenceClassification,
                            transformers.BertForSequenceClassification)
    opt_o, opt_r = optimizers(ours, ref, device)
    B, n_steps = 32, args.finetune_steps
    lengths = sst2_like_lengths(B * n_steps * 4, 128)
    plans = {"bertkit": finetune_batches(lengths, B, grouped=True),
             "transformers": finetune_batches(lengths, B, grouped=False)}
    y = torch.randint(0, 2, (B,), device=device)
    batches = {k: [padded(lengths, idx, config.vocab_size, device) for idx in v[:n_steps]]
               for k, v in plans.items()}

    def layout(b: dict) -> dict:
        """The packed forward's layout, built on the host as the training collate builds it."""
        mask = b["attention_mask"].cpu()
        return {"layout": VarlenLayout.from_mask(mask, attention_group_cost(device)).to(device)}

    def epoch(model, opt, name: str, packed: bool) -> Callable[[], object]:
        extras = [layout(b) if packed else {} for b in batches[name]]
        steps = [train_step(model, opt, lambda b=b, e=e: {**b, "labels": y, **e}, device,
                            args.precision) for b, e in zip(batches[name], extras)]
        return lambda: [s() for s in steps]

    result = timed_pair(epoch(ours, opt_o, "bertkit", True),
                        epoch(ref, opt_r, "transformers", False), device,
                        max(1, args.repeats // 2))
    for r in result.values():
        r["examples_per_s"] = B * n_steps / r["s"]
    return {"case": f"finetune {shape} B=32 max 128 {args.precision}", **result,
            "ratio": result["transformers"]["s"] / result["bertkit"]["s"]}


def bench_inference(shape: str, args, device: torch.device) -> dict:
    from bertkit.inference import Encoder
    from bertkit.model import BertModel
    from bertkit.tokenization import BertTokenizer

    config = BertConfig.preset(shape)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        BertModel(config).save_pretrained(tmp)
        ref = transformers.BertModel.from_pretrained(tmp, attn_implementation="sdpa").to(device)
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(995))]
        tok = BertTokenizer({w: i for i, w in enumerate(words)})
        encoder = Encoder(BertModel.from_pretrained(tmp), tokenizer=tok, device=device,
                          precision=args.precision)
    ref.eval()
    lengths = sst2_like_lengths(args.sentences, 128, seed=1)
    texts = [" ".join(f"w{(7 * i + j) % 990}" for j in range(n - 2))
             for i, n in enumerate(lengths)]
    dtype = torch.bfloat16 if args.precision == "bf16" else None

    def ours():
        encoder.encode(texts, pooling="mean", batch_size=64)

    def theirs():
        with torch.no_grad(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            for i in range(0, len(texts), 64):
                b = padded(lengths, list(range(i, min(i + 64, len(texts)))), config.vocab_size,
                           device)
                h = ref(**b).last_hidden_state  # (B, T, H)
                m = b["attention_mask"].unsqueeze(-1)
                (h * m).sum(1) / m.sum(1)

    result = timed_pair(ours, theirs, device, max(1, args.repeats // 2))
    for r in result.values():
        r["sentences_per_s"] = len(texts) / r["s"]
    return {"case": f"inference {shape} {len(texts)} sentences {args.precision}", **result,
            "ratio": result["transformers"]["s"] / result["bertkit"]["s"]}


def loop_items(config: BertConfig, n: int, T: int, seed: int = 0) -> list[dict]:
    """n statically masked instances of T tokens as `ShardDataset` gives them (numpy)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    P = max(1, round(0.15 * T))
    items = []
    for _ in range(n):
        ids = rng.integers(1000, config.vocab_size, T)
        positions = np.sort(rng.choice(np.arange(1, T - 1), P, replace=False))
        items.append({"input_ids": np.where(np.isin(np.arange(T), positions), 103, ids),
                      "token_type_ids": (np.arange(T) >= T // 2).astype(np.int64),
                      "masked_lm_positions": positions, "masked_lm_ids": ids[positions],
                      "masked_lm_weights": np.ones(P, np.float32),
                      "next_sentence_label": np.asarray(rng.integers(0, 2))})
    return items


def bench_pretrain_loop(shape: str, T: int, B: int, args, device: torch.device) -> dict:
    """Case 0 of the module docstring: the real `train()` against the reference's bare steps."""
    from bertkit.data.collate import collate_pretraining
    from bertkit.training import TrainConfig, train

    config = BertConfig.preset(shape, max_position_embeddings=max(512, T))
    steps = max(2, args.repeats)
    items = loop_items(config, B * 2 * steps, T)
    reset_peak(device)
    with tempfile.TemporaryDirectory() as tmp:
        # the loop times itself (`train_seconds` in each log record, a sync at each): the first
        # `steps` steps warm up (kernel choice, allocator, optimizer state), the next are timed
        torch.manual_seed(0)
        cfg = TrainConfig(output_dir=tmp, max_steps=2 * steps, batch_size=B, lr=1e-4,
                          warmup_steps=1, precision=args.precision, device=str(device),
                          log_every=steps, save_every=0, keep=1, progress=False,
                          loader_workers=args.loader_workers)
        train(BertForPreTraining(config), items, collate_pretraining, cfg)
        seconds = {r["step"]: r["train_seconds"] for r in map(json.loads, open(
            f"{tmp}/metrics.jsonl", encoding="utf-8")) if "train_seconds" in r}
    ours = {"s": (seconds[2 * steps] - seconds[steps]) / steps, "peak_gib": peak_gib(device)}
    ref_model = pair_models(config, device, BertForPreTraining, transformers.BertForPreTraining)[1]
    ref_opt = torch.optim.AdamW(param_groups(ref_model, 0.01), lr=1e-4, eps=1e-6,
                                fused=device.type in ("cuda", "cpu"))
    _, batch_r, P = pretrain_batches(config, B, T, device)
    reset_peak(device)
    ref = {"s": median_time(train_step(ref_model, ref_opt, lambda: batch_r, device,
                                       args.precision), device, args.repeats),
           "peak_gib": peak_gib(device)}
    flops = model_flops_per_step(config, B, T, P)
    for r in (ours, ref):
        r["tokens_per_s"] = B * T / r["s"]
        r["mfu"] = flops / r["s"] / (args.peak_tflops * 1e12) if args.peak_tflops else None
    return {"case": f"train() loop {shape} T={T} B={B} {args.precision}", "bertkit": ours,
            "transformers": ref, "ratio": ref["s"] / ours["s"]}


def show(r: dict) -> None:
    def cell(x: dict) -> str:
        rate = next(f"{x[k]:,.0f} {k.replace('_per_s', '')}/s" for k in
                    ("tokens_per_s", "examples_per_s", "sentences_per_s") if k in x)
        mfu = f", MFU {100 * x['mfu']:.1f}%" if x.get("mfu") else ""
        mem = f", peak {x['peak_gib']:.2f} GiB" if x.get("peak_gib") is not None else ""
        return rate + mfu + mem

    print(f"{r['case']:<44} bertkit {cell(r['bertkit'])} | transformers {cell(r['transformers'])}"
          f" | ratio {r['ratio']:.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--shapes", default="base,large")
    ap.add_argument("--seqs", default="128,512")
    ap.add_argument("--batch", default="128:64,512:16", help="T:B pairs for pre-training")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--finetune-steps", type=int, default=20)
    ap.add_argument("--sentences", type=int, default=4096)
    ap.add_argument("--peak-tflops", type=float, help="the device's dense peak for MFU")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, a few steps (CPU smoke)")
    ap.add_argument("--loader-workers", type=int, default=None,
                    help="DataLoader workers of the train() loop case (default: the loop's)")
    ap.add_argument("--cases", default="loop,step,finetune,inference")
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.smoke:
        args.shapes, args.seqs, args.batch = "tiny", "32,64", "32:4,64:2"
        args.repeats, args.finetune_steps, args.sentences = 2, 2, 64
    if device.type == "cuda" and args.peak_tflops is None and args.precision == "bf16":
        name = torch.cuda.get_device_name(device)
        args.peak_tflops = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    batch = dict(tuple(map(int, x.split(":"))) for x in args.batch.split(","))
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {where}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{args.precision}, peak {args.peak_tflops or 'unknown'} TFLOP/s")
    results = []

    def record(result: dict) -> None:
        """Print the row and rewrite the JSON: a run stopped by its time cap keeps its rows."""
        results.append(result)
        show(result)
        if args.json:
            with open(args.json + ".tmp", "w", encoding="utf-8") as f:
                json.dump({"args": vars(args), "device": where, "results": results}, f, indent=2)
            os.replace(args.json + ".tmp", args.json)

    cases = args.cases.split(",")
    for shape in args.shapes.split(","):
        for T in map(int, args.seqs.split(",")):
            if "loop" in cases:
                record(bench_pretrain_loop(shape, T, batch.get(T, 8), args, device))
            if "step" in cases:
                record(bench_pretrain(shape, T, batch.get(T, 8), args, device))
        if "finetune" in cases:
            record(bench_finetune(shape, args, device))
        if "inference" in cases:
            record(bench_inference(shape, args, device))


if __name__ == "__main__":
    main()
