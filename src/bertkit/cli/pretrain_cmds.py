"""`bertkit pretrain`, `bertkit plot`, `bertkit fill-mask`, `bertkit nsp`."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

import torch

from bertkit.errors import BertkitError

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    _register_pretrain(sub)
    p = sub.add_parser("plot", help="draw loss and accuracy curves of a run to PNG",
                       description="Read RUN_DIR/metrics.jsonl (and RUN_DIR/phase2/metrics.jsonl) "
                       "and draw training/eval loss and accuracy curves (needs matplotlib: "
                       "pip install 'bertkit[plot]').")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--output", type=Path, help="PNG path (default RUN_DIR/curves.png)")
    p.set_defaults(func=run_plot)
    p = sub.add_parser("fill-mask", help="top-k predictions for each [MASK] in a text",
                       description="Show what a pre-trained model predicts at each [MASK].")
    p.add_argument("model", type=Path, metavar="MODEL_DIR")
    p.add_argument("text", help='text with one or more "[MASK]"')
    p.add_argument("--top-k", type=int, default=5)
    p.set_defaults(func=run_fill_mask)
    p = sub.add_parser("nsp", help="probability that B follows A (next-sentence prediction)",
                       description="Print the IsNext probability of the sentence pair (A, B).")
    p.add_argument("model", type=Path, metavar="MODEL_DIR")
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.set_defaults(func=run_nsp)


def _register_pretrain(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pretrain", help="pre-train (or continue pre-training) BERT on prepared shards",
        description="Pre-train BertForPreTraining on shards from `bertkit prepare`, with the "
        "paper's recipe by default (AdamW, lr 1e-4, 10k warmup steps then linear decay, weight "
        "decay 0.01, clipping 1.0). Under `torchrun --nproc_per_node N -m bertkit pretrain ...` "
        "it runs DDP; --batch-size stays the global batch.")
    p.add_argument("--data", required=True, help="shard folder from `bertkit prepare`")
    p.add_argument("--output", required=True, help="run folder (checkpoints, metrics, model/)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", help="preset: tiny|mini|small|medium|base|large (default mini)")
    which.add_argument("--config", dest="config_file", help="a config.json for the architecture")
    which.add_argument("--init", help="continue from a checkpoint directory (HF layout)")
    p.add_argument("--tokenizer", help="tokenizer dir (vocab check, dynamic masking, export); "
                   "default: the --init dir when it has vocab.txt")
    p.add_argument("--objective", default="mlm+nsp", choices=("mlm+nsp", "mlm", "ltr", "sop"))
    p.add_argument("--max-steps", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=256, help="global examples per step")
    p.add_argument("--micro-batch-size", type=int, help="per forward per process "
                   "(gradient accumulation = batch / (micro x processes))")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=10_000)
    p.add_argument("--warmup-ratio", type=float, help="fraction of --max-steps (overrides steps)")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--optimizer", default="adamw", choices=("adamw", "lamb"))
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=0, help="0 = only at the end")
    p.add_argument("--save-every", type=int, default=1000, help="0 = only at the end")
    p.add_argument("--keep", type=int, default=2, help="training states kept (0 = all)")
    p.add_argument("--device", default="auto")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--tensorboard", action="store_true",
                   help="also log to OUTPUT/tensorboard (needs: pip install tensorboard)")
    p.add_argument("--eval-data", help="held-out shard folder (default: hold out the last "
                   "--eval-holdout instances of --data)")
    p.add_argument("--eval-holdout", type=int, help="default min(2000, 5%% of the data)")
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--phase2-data", help="phase-2 shards (the paper: length 512)")
    p.add_argument("--phase2-steps", type=int, default=0)
    p.set_defaults(func=run_pretrain)


def _warmup(args: argparse.Namespace) -> int:
    """The paper's 10k warmup is for 1M steps; a short run would never reach the peak lr."""
    if args.warmup_ratio is None and args.warmup_steps >= args.max_steps:
        capped = args.max_steps // 10
        log.warning("--warmup-steps %d >= --max-steps %d: using %d warmup steps (10%%)",
                    args.warmup_steps, args.max_steps, capped)
        return capped
    return args.warmup_steps


def run_pretrain(args: argparse.Namespace) -> int:
    from bertkit.training import TrainConfig, distributed
    from bertkit.training.pretrain import PretrainConfig, run_pretraining

    distributed.setup(os.environ)
    if not distributed.is_main():
        logging.getLogger().setLevel(logging.WARNING)  # rank 0 alone reports progress
    try:
        train_cfg = TrainConfig(
            output_dir=args.output, max_steps=args.max_steps, batch_size=args.batch_size,
            micro_batch_size=args.micro_batch_size, lr=args.lr, warmup_steps=_warmup(args),
            warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay,
            optimizer=args.optimizer, max_grad_norm=args.max_grad_norm,
            precision=args.precision, seed=args.seed, log_every=args.log_every,
            eval_every=args.eval_every, save_every=args.save_every, keep=args.keep,
            device=args.device, compile=args.compile, resume=args.resume,
            progress=args.progress, tensorboard=args.tensorboard)
        cfg = PretrainConfig(
            data=args.data, train=train_cfg, model=args.model, config_file=args.config_file,
            init=args.init, tokenizer=args.tokenizer, objective=args.objective,
            eval_data=args.eval_data, eval_holdout=args.eval_holdout,
            eval_batches=args.eval_batches, phase2_data=args.phase2_data,
            phase2_steps=args.phase2_steps)
        result = run_pretraining(cfg)
        if distributed.is_main():
            shown = {k: round(v, 4) for k, v in result.metrics.items() if isinstance(v, float)}
            print(json.dumps({"step": result.step, **shown}))
            print(f"model exported to {Path(args.output) / 'model'}")
    finally:
        distributed.teardown()
    return 0


def read_metrics(run_dir: Path) -> list[dict]:
    """metrics.jsonl of a run (phase 2 appended with its steps shifted after phase 1's)."""
    files = [run_dir / "metrics.jsonl", run_dir / "phase2" / "metrics.jsonl"]
    if not files[0].is_file():
        raise BertkitError(f"{files[0]}: not found (is {run_dir} a training run folder?)")
    records: list[dict] = []
    for path in files:
        if not path.is_file():
            continue
        offset = records[-1]["step"] if records else 0
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise BertkitError(f"{path}:{n}: not a JSON line ({err.msg})") from err
            records.append({**record, "step": record["step"] + offset})
    return records


def run_plot(args: argparse.Namespace) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise BertkitError("bertkit plot needs matplotlib: pip install 'bertkit[plot]'") from err
    records = read_metrics(args.run_dir)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, keys, title in ((ax_loss, ("loss", "mlm_loss", "nsp_loss", "eval_loss",
                                       "eval_mlm_loss"), "loss"),
                            (ax_acc, ("mlm_acc", "nsp_acc", "eval_mlm_acc", "eval_nsp_acc"),
                             "accuracy")):
        for key in keys:
            points = [(r["step"], r[key]) for r in records if key in r]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, label=key, marker="o" if key.startswith("eval") else None)
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.legend()
        ax.grid(alpha=0.3)
    out = args.output or args.run_dir / "curves.png"
    from bertkit.io import atomic_path

    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    print(out)
    return 0


def run_fill_mask(args: argparse.Namespace) -> int:
    from bertkit.heads import BertForMaskedLM
    from bertkit.tokenization import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(args.model)
    model = BertForMaskedLM.from_pretrained(args.model)
    enc = tokenizer.encode(args.text, max_length=model.config.max_position_embeddings)
    where = [i for i, t in enumerate(enc.input_ids) if t == tokenizer.mask_token_id]
    if not where:
        raise BertkitError(f'no [MASK] in the text: {args.text!r} (write "[MASK]" where a word '
                           "should be predicted)")
    ids = torch.tensor([enc.input_ids])
    with torch.no_grad():
        logits = model(ids, torch.tensor([enc.token_type_ids])).logits[0]  # (T, V)
    for i in where:
        probs = logits[i].float().softmax(-1)
        top = probs.topk(min(args.top_k, probs.numel()))
        print(f"[MASK] at token {i}:")
        for p, t in zip(top.values.tolist(), top.indices.tolist()):
            print(f"  {tokenizer.convert_ids_to_tokens([t])[0]:<20} {p:.4f}")
    return 0


def run_nsp(args: argparse.Namespace) -> int:
    from bertkit.heads import BertForPreTraining
    from bertkit.tokenization import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(args.model)
    model = BertForPreTraining.from_pretrained(args.model)
    enc = tokenizer.encode(args.a, pair=args.b, max_length=model.config.max_position_embeddings)
    with torch.no_grad():
        out = model(torch.tensor([enc.input_ids]), torch.tensor([enc.token_type_ids]))
    is_next = float(out.nsp_logits[0].float().softmax(-1)[0])  # label 0 = IsNext
    print(f"IsNext probability: {is_next:.4f}")
    return 0
