"""Pre-training side by side: bertkit's `pretrain` vs a plain `transformers.BertForPreTraining`
loop, from the same initial weights, on the same shards, scored on the same held-out instances.

bertkit runs `training.pretrain.run_pretraining` (the code `bertkit pretrain` runs: its loop,
its data order, its held-out split and evaluator). The reference is the loop HF's run_mlm-style
scripts write: `BertForPreTraining` with the weights bertkit starts from (the same seed, copied
through `checkpoint.to_hf_state_dict`), torch's fused AdamW (decay on matrices only),
`get_linear_schedule_with_warmup`, clipping 1.0, random batches of bertkit's training part of the
shards, masked by bertkit's collate (dense MLM labels, -100 elsewhere). Both are evaluated at the
same steps by bertkit's `make_evaluator` on the held-out part `split_eval` cut (whole documents,
none trained on), with the same fixed masks. Dropout is on (0.1) on both sides, so the two runs
are two draws of the same computation: the accuracies agree within the run-to-run noise, not
bit for bit (`tests/training/test_pretrain.py` checks the bit-level agreement without dropout).

    python benchmarks/pretrain_side_by_side.py                    # mini, 300 steps, 12 books
    python benchmarks/pretrain_side_by_side.py --steps 20 --books 4 --chars 60000 --eval-every 10  # smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bertkit.checkpoint import to_hf_state_dict
from bertkit.config import BertConfig
from bertkit.data.chunks import ChunkConfig
from bertkit.data.instances import InstanceConfig
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.data.shards import ShardDataset
from bertkit.heads import BertForPreTraining, PreTrainingOutput
from bertkit.runs.pretrain import (
    PretrainConfig,
    make_collate,
    make_evaluator,
    pretrain_train_config,
    run_pretraining,
    split_eval,
)
from bertkit.tokenization import BertTokenizer
from bertkit.vocab.trainer import TrainerConfig, save_vocab, train_from_texts

REPO = Path(__file__).resolve().parents[1]
BOOKS = REPO.parent / "shared" / "data" / "books"
EVAL_SEED = 2**31 - 1  # the fixed masks of bertkit's evaluator (training.pretrain.run_phase)


class _HFPretraining(torch.nn.Module):
    """`transformers.BertForPreTraining` behind bertkit's pre-training interface (the masked
    positions' logits and the two losses), so `make_evaluator` scores it as it scores bertkit."""

    def __init__(self, hf_model):
        super().__init__()
        self.hf = hf_model

    def forward(self, input_ids, token_type_ids, attention_mask, masked_lm_positions,
                masked_lm_ids, masked_lm_weights, next_sentence_label, **_):
        out = self.hf(input_ids=input_ids, token_type_ids=token_type_ids,
                      attention_mask=attention_mask)
        pos = masked_lm_positions.long()  # (B, P)
        V = out.prediction_logits.shape[-1]
        logits = torch.gather(out.prediction_logits, 1, pos[..., None].expand(-1, -1, V))  # (B, P, V)
        w = masked_lm_weights.float()  # (B, P)
        per = F.cross_entropy(logits.transpose(1, 2), masked_lm_ids.long(), reduction="none")
        mlm_loss = (per * w).sum() / w.sum().clamp(min=1)
        nsp_loss = F.cross_entropy(out.seq_relationship_logits, next_sentence_label.long())
        return PreTrainingOutput(mlm_loss + nsp_loss, logits, out.seq_relationship_logits,
                                 mlm_loss, nsp_loss)


def dense_labels(batch: dict) -> torch.Tensor:
    """bertkit's (positions, ids, weights) as HF's dense MLM labels (B, T), -100 where unmasked."""
    return torch.full_like(batch["input_ids"], -100).scatter(
        1, batch["masked_lm_positions"].long(),
        torch.where(batch["masked_lm_weights"] > 0, batch["masked_lm_ids"].long(), -100))


def read_books(args, work: Path) -> list[Path]:
    books = sorted(p for p in BOOKS.glob("*.txt"))[: args.books]
    if not books:
        raise SystemExit(f"no books under {BOOKS}")
    files = []
    for book in books:  # the first --chars of each book, as UTF-8 (two books are not)
        text = book.read_bytes().decode("utf-8", errors="replace")[: args.chars]
        files.append(work / book.name)
        files[-1].write_text(text, encoding="utf-8")
    return files


def make_tokenizer(files: list[Path], size: int, out: Path) -> Path:
    """A WordPiece vocabulary learned on the same books (bertkit's default trainer): a small
    vocabulary keeps the reference's dense MLM head affordable on a CPU."""
    texts = [f.read_text(encoding="utf-8") for f in files]
    save_vocab(train_from_texts(texts, TrainerConfig(vocab_size=size)), out, True)
    return out


def make_shards(args, work: Path, files: list[Path], tokenizer) -> Path:
    chunk = ChunkConfig(instance=InstanceConfig(max_seq_length=args.seq), dupe_factor=1)
    prepare(files, tokenizer, work / "shards", PrepareConfig(chunk=chunk, chunk_chars=args.chars),
            progress=False)
    return work / "shards"


def run_bertkit(args, shards: Path, tok_dir: str, work: Path) -> tuple[list[dict], float]:
    train = pretrain_train_config(str(work / "bertkit"), max_steps=args.steps, batch_size=args.batch,
                                  lr=args.lr, warmup_ratio=0.1, eval_every=args.eval_every,
                                  save_every=0, seed=args.seed, progress=False, precision="fp32",
                                  log_every=args.eval_every)
    cfg = PretrainConfig(data=str(shards), train=train, model=args.model, tokenizer=tok_dir,
                         eval_holdout=args.holdout, eval_batches=args.eval_batches)
    start = time.perf_counter()
    run_pretraining(cfg)
    seconds = time.perf_counter() - start
    lines = (work / "bertkit" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    return [{"step": r["step"], **{k[5:]: r[k] for k in r if k.startswith("eval_")}}
            for r in records if "eval_mlm_acc" in r], seconds


def run_reference(args, shards: Path, tokenizer, config: BertConfig) -> tuple[list[dict], float]:
    import transformers
    from transformers.optimization import get_linear_schedule_with_warmup

    torch.manual_seed(args.seed)  # bertkit's build_model: the initial weights from the seed
    ours = BertForPreTraining(config)
    ref = transformers.BertForPreTraining(transformers.BertConfig.from_dict(config.to_dict()))
    ref.load_state_dict(to_hf_state_dict(ours.state_dict()), strict=False)
    del ours
    dataset = ShardDataset(shards)
    train_set, held_out = split_eval(dataset, args.holdout)
    evaluate = make_evaluator(held_out, lambda: make_collate(dataset, "mlm+nsp", tokenizer,
                                                             EVAL_SEED),
                              args.batch, args.eval_batches)
    collate = make_collate(dataset, "mlm+nsp", tokenizer, seed=args.seed + 1)
    decay = [p for n, p in ref.named_parameters() if p.ndim >= 2 and not n.endswith("bias")]
    rest = [p for n, p in ref.named_parameters() if p.ndim < 2 or n.endswith("bias")]
    recipe = pretrain_train_config()  # bertkit's recipe (Adam's eps 1e-6, Google's; HF's is 1e-8)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=args.lr,
                            betas=tuple(recipe.adam_betas), eps=recipe.adam_eps, fused=True)
    sched = get_linear_schedule_with_warmup(opt, round(0.1 * args.steps), args.steps)
    gen = torch.Generator().manual_seed(args.seed)
    per_epoch = len(train_set) // args.batch
    wrapped, records = _HFPretraining(ref), []
    start = time.perf_counter()
    ref.train()
    for step in range(args.steps):
        if step % per_epoch == 0:
            order = torch.randperm(len(train_set), generator=gen).tolist()
        k = step % per_epoch
        batch = collate([train_set[i] for i in order[k * args.batch:(k + 1) * args.batch]])
        out = ref(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                  attention_mask=batch["attention_mask"], labels=dense_labels(batch),
                  next_sentence_label=batch["next_sentence_label"])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % args.eval_every == 0:
            ref.eval()
            with torch.no_grad():
                records.append({"step": step + 1, **evaluate(wrapped)})
            ref.train()
    return records, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mini", help="bertkit preset (mini: 4 layers, 256 hidden)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--books", type=int, default=12)
    p.add_argument("--chars", type=int, default=200_000, help="characters read from each book")
    p.add_argument("--holdout", type=int, default=0, help="default: the last chunk of the shards")
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="pretrain-sbs-") as tmp:
        work = Path(tmp)
        files = read_books(args, work)
        tok_dir = str(make_tokenizer(files, args.vocab_size, work / "tok"))
        tokenizer = BertTokenizer.from_pretrained(tok_dir)
        shards = make_shards(args, work, files, tokenizer)
        dataset = ShardDataset(shards)
        n = len(dataset)
        if not args.holdout:  # the last chunk: whole documents, none trained on
            starts = [x for x in dataset.meta.chunk_starts if x > 0]
            if not starts:
                raise SystemExit("the shards are one chunk: give more --books or --chars")
            args.holdout = n - starts[-1]
        config = BertConfig.preset(args.model, vocab_size=tokenizer.vocab_size,
                                   max_position_embeddings=max(512, args.seq))
        ours, ours_s = run_bertkit(args, shards, tok_dir, work)
        ref, ref_s = run_reference(args, shards, tokenizer, config)
    print(f"{args.model}, vocab {args.vocab_size}, {n} instances (T={args.seq}) from "
          f"{args.books} books, batch "
          f"{args.batch}, lr {args.lr:g}, {args.steps} steps, seed {args.seed}, held out "
          f"~{args.holdout} (whole documents), {args.eval_batches} eval batches")
    print("| step | MLM acc bertkit | MLM acc transformers | NSP acc bertkit | NSP acc transformers "
          "| MLM loss bertkit | MLM loss transformers |")
    print("|---|---|---|---|---|---|---|")
    for a, b in zip(ours, ref):
        print(f"| {a['step']} | {a['mlm_acc']:.4f} | {b['mlm_acc']:.4f} | {a['nsp_acc']:.4f} | "
              f"{b['nsp_acc']:.4f} | {a['mlm_loss']:.3f} | {b['mlm_loss']:.3f} |")
    print(f"wall: bertkit {ours_s:.0f} s (with its evaluations and final save), transformers "
          f"{ref_s:.0f} s: {ref_s / ours_s:.2f}x" if math.isfinite(ours_s) else "")


if __name__ == "__main__":
    main()
