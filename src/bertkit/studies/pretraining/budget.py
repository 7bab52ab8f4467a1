"""The pre-training budget study of docs/reports/ablations.md (finding 3): does a few CPU-minutes of MLM
pre-training beat random initialisation on SST-2? Not a speed benchmark: a plain loop over the
library's shards, collate, model and metrics, so that each knob can be turned by hand.

    # data: the demo's vocabulary and shards (`bertkit demo` makes them), or your own
    python studies/pretrain_budget.py pretrain --vocab demo-report/work/vocab \\
        --shards demo-report/work/shards --out study/tiny-2000 --steps 2000 --lr 1e-3
    python studies/pretrain_budget.py random --vocab demo-report/work/vocab --out study/random
    python studies/pretrain_budget.py finetune study/random study/tiny-2000 \\
        --data ../shared/data/glue --lr 1e-3 --seeds 5

Run with OMP_NUM_THREADS=1 for tiny models (two runs side by side on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import Subset

from bertkit.config import BertConfig
from bertkit.heads import BertForPreTraining
from bertkit.runs.finetune import FinetuneConfig, finetune_train_config
from bertkit.runs.pretrain import make_collate, make_evaluator, open_shards
from bertkit.studies import pipeline
from bertkit.studies.checkout import Checkout
from bertkit.tokenization import BertTokenizer
from bertkit.training.optim import lr_at, param_groups, resolve_warmup

HOLDOUT = 1000  # the last instances, never trained on


def config_for(args, vocab_size: int) -> BertConfig:
    return BertConfig.preset(args.model, vocab_size=vocab_size, max_position_embeddings=512,
                             hidden_dropout_prob=args.dropout,
                             attention_probs_dropout_prob=args.dropout)


def pretrain(args) -> None:
    tok = BertTokenizer.from_pretrained(args.vocab)
    config = config_for(args, tok.vocab_size)
    data = open_shards(args.shards, tok, config)
    collate = make_collate(data, args.objective, tok, seed=0)
    n = len(data)
    held = Subset(data, range(n - HOLDOUT, n))  # the same masks every time (static shards)
    evaluate = make_evaluator(held, lambda: make_collate(data, args.objective, tok, seed=0), 50, 20)
    torch.manual_seed(0)
    model = BertForPreTraining(config).train()
    opt = torch.optim.AdamW(param_groups(model, 0.01), lr=args.lr, eps=1e-6)
    warm = resolve_warmup(args.steps, 0, 0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(  # the library's curve, as a factor of the peak
        opt, lambda s: lr_at(s, peak_lr=1.0, warmup_steps=warm, max_steps=args.steps))
    order = torch.randperm(n - HOLDOUT, generator=torch.Generator().manual_seed(0)).tolist()
    out, log, t0 = Path(args.out), [], time.perf_counter()
    for step in range(1, args.steps + 1):
        idx = [order[(step * args.batch + j) % len(order)] for j in range(args.batch)]
        model(**collate([data[i] for i in idx])).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            with torch.no_grad():
                metrics = {k: round(v, 4) for k, v in evaluate(model).items()}
            model.train()
            log.append({"step": step, "seconds": round(time.perf_counter() - t0), **metrics})
            print(json.dumps(log[-1]), flush=True)
        if args.save_every and step % args.save_every == 0 and step < args.steps:
            save(model, tok, out.with_name(f"{out.name}-{step}"), log)
    save(model, tok, out, log)


def save(model, tok, out: Path, log: list) -> None:
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "study_log.json").write_text(json.dumps(log, indent=1))


def random(args) -> None:
    tok = BertTokenizer.from_pretrained(args.vocab)
    pipeline.random_init(config_for(args, tok.vocab_size), tok, args.out, seed=0)


def finetune(args) -> None:
    sst2 = Path(args.data) / "SST-2"
    plan = FinetuneConfig("sst2", "", "", train=finetune_train_config(lr=args.lr, progress=False),
                          epochs=args.epochs, max_seq_length=128, max_train_examples=args.train,
                          train_file=str(sst2 / "train.tsv"), dev_file=str(sst2 / "dev.tsv"))
    for model in args.models:
        scores = []
        for seed in range(args.seeds):
            work = Path(args.work) / f"{Path(model).name}-lr{args.lr}-n{args.train}-seed{seed}"
            scores.append(pipeline.finetune_cell(plan, model, "sst2", work, seed)["score"])
        spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
        print(f"{model}: lr {args.lr}, {args.train} examples, {args.epochs:g} epochs: "
              f"{', '.join(f'{s:.1f}' for s in scores)} = {statistics.mean(scores):.1f} ± {spread:.1f}",
              flush=True)


def main(argv: Sequence[str], checkout: Checkout) -> int:
    """studies/pretrain_budget.py: the command line `argv`; the data beside `checkout`."""
    p = argparse.ArgumentParser(prog="studies/pretrain_budget.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("pretrain", "random"):
        s = sub.add_parser(name)
        s.add_argument("--vocab", required=True)
        s.add_argument("--out", required=True)
        s.add_argument("--model", default="tiny")
        s.add_argument("--dropout", type=float, default=0.1)
    pre = sub.choices["pretrain"]
    pre.add_argument("--shards", required=True)
    pre.add_argument("--objective", default="mlm+nsp", choices=("mlm+nsp", "mlm"))
    pre.add_argument("--steps", type=int, default=2000)
    pre.add_argument("--batch", type=int, default=32)
    pre.add_argument("--lr", type=float, default=1e-3)
    pre.add_argument("--eval-every", type=int, default=250)
    pre.add_argument("--save-every", type=int, default=0, help="also keep OUT-STEP snapshots")
    ft = sub.add_parser("finetune")
    ft.add_argument("models", nargs="+")
    ft.add_argument("--data", default=str(checkout.data / "glue"))
    ft.add_argument("--work", default=str(checkout.root.parent / "bertkit-studies" / "pretrain-budget"),
                    help="the fine-tuning cells' folders (default: %(default)s)")
    ft.add_argument("--lr", type=float, default=1e-3)
    ft.add_argument("--seeds", type=int, default=5)
    ft.add_argument("--train", type=int, default=2000)
    ft.add_argument("--epochs", type=float, default=3.0)
    args = p.parse_args(argv)
    {"pretrain": pretrain, "random": random, "finetune": finetune}[args.cmd](args)
    return 0
