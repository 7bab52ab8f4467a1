"""Fine-tuning stability: bertkit vs a plain `transformers` loop over many seeds, on the small
sets where BERT fine-tuning is known to be unstable (Devlin et al. 2019 section 4.1; Dodge et
al. 2020; Mosbach et al. 2021): STS-B (regression), RTE, MRPC, CoLA.

The same checkpoint (all-MiniLM-L6-v2), the same examples (bertkit's GLUE reader feeds both),
the same recipe: batch 32, max length 128, lr 5e-5 (--lr), AdamW (eps 1e-6, weight decay 0.01 on
matrices only), 10% warmup then linear decay, clipping 1.0, dynamic padding, one shuffled order
per epoch. The reference loop is what HF's run_glue does, written out. Both sides are scored and
checked for collapse by bertkit's task code (`Task.score`, `Task.collapse_reason`), so the
comparison is of the training, not of the metrics. Prints mean, std (n-1), min and the collapse
rate per system, task and epoch count, and a Markdown table.

    python studies/stability.py --tasks stsb,rte,mrpc,cola --seeds 8 --epochs 1,3
    python studies/stability.py --tasks stsb --seeds 4 --train-examples 1000 --quick
    python studies/stability.py ... --store runs.jsonl   # resumable; --report prints its table

The committed stores are docs/records/stability_runs.jsonl and stability_paired.jsonl (the schema:
docs/records/README.md).
    python studies/stability.py --systems transformers-paired ...   # paired with bertkit
    python studies/stability.py --report --paired bertkit,transformers-paired --store ...
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from bertkit.errors import BertkitError
from bertkit.metrics import mean_std
from bertkit.runs.finetune import (
    FinetuneConfig,
    finetune_train_config,
    load_model,
    run_one,
)
from bertkit.studies.checkout import Checkout
from bertkit.studies.runner import RunLog
from bertkit.studies.sidebyside.reference import (
    Recipe,
    encode,
    fit,
    minilm_path,
    predict_sequences,
    reference_library,
)
from bertkit.tasks import get_task
from bertkit.training.stream import epoch_order


def run_bertkit_ungrouped(task_name: str, seed: int, epochs: float, model_dir: str, args) -> dict:
    """bertkit with shuffled (not length-grouped) batches and the padded forward."""
    return run_bertkit(task_name, seed, epochs, model_dir, args, grouped=False)


class _HFHead(torch.nn.Module):
    """A `transformers` classifier behind bertkit's head interface (keyword batch in, `.loss` /
    `.logits` out, `config`, `save_pretrained`), for the hybrid system "bertkit-loop+hf-model"."""

    def __init__(self, hf_model, config):
        super().__init__()
        self.hf, self.config = hf_model, config

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None, **_):
        return self.hf(input_ids=input_ids, token_type_ids=token_type_ids,
                       attention_mask=attention_mask, labels=labels)

    def save_pretrained(self, directory) -> None:
        self.hf.save_pretrained(directory)


def run_bertkit_hf_model_paired(task_name: str, seed: int, epochs: float, model_dir: str,
                                args) -> dict:
    """bertkit's loop training the `transformers` model from bertkit's initial head: paired
    with `bertkit` (same head, same order), only the model under dropout differs."""
    return run_bertkit_hf_model(task_name, seed, epochs, model_dir, args, paired=True)


def run_bertkit_hf_model(task_name: str, seed: int, epochs: float, model_dir: str, args,
                         paired: bool = False) -> dict:
    """bertkit's loop (ungrouped, padded) training the `transformers` model: splits the gap
    between the two systems into the loop's part and the model's part."""
    from bertkit.runs.finetune import load_model, stream_seed

    hf_models = reference_library()

    def load_hf(task, model_dir, labels, cfg=None):
        ours = load_model(task, model_dir, labels, cfg)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(stream_seed(cfg.train.seed, "head"))
            hf = hf_models.AutoModelForSequenceClassification.from_pretrained(
                model_dir, num_labels=ours.config.num_labels,
                **(NO_DROPOUT if args.no_dropout else {}))
        if paired:  # bertkit's own initial head: the run pairs with `bertkit` seed by seed
            from bertkit.checkpoint import to_hf_state_dict

            load_paired(hf, to_hf_state_dict(ours.state_dict()))
        return _HFHead(hf, ours.config)

    return run_bertkit(task_name, seed, epochs, model_dir, args, grouped=False, load=load_hf)


def run_hf_loop_bertkit_model(task_name: str, seed: int, epochs: float, model_dir: str,
                              args) -> dict:
    """The `transformers` loop training bertkit's model (the other half of the split)."""
    return run_transformers(task_name, seed, epochs, model_dir, args, bertkit_model=True)


def run_bertkit_grouped(task_name: str, seed: int, epochs: float, model_dir: str, args) -> dict:
    """bertkit with length-grouped batches and the packed forward (the default before the
    stability study found grouped batches less stable; see docs/reports/results.md)."""
    return run_bertkit(task_name, seed, epochs, model_dir, args, grouped=True)


def _without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Every dropout of a bertkit model set to 0 (`--no-dropout`: the pairing check)."""
    for module in model.modules():
        if hasattr(module, "attn_dropout_p"):
            module.attn_dropout_p = 0.0
        if isinstance(getattr(module, "p", None), float):
            module.p = 0.0
    return model


def run_bertkit(task_name: str, seed: int, epochs: float, model_dir: str, args,
                grouped: bool | None = None, load=None) -> dict:
    """bertkit's `run_one`; `grouped` None = bertkit's defaults, True = length-grouped batches
    and the packed forward, False = random batches and the padded forward; `load`: the model
    (default bertkit's, without dropout under --no-dropout)."""
    out = Path(tempfile.mkdtemp(prefix="bench-stab-")) / "run"
    if load is None and args.no_dropout:
        def load(*a, **k):
            return _without_dropout(load_model(*a, **k))
    try:
        train = finetune_train_config(str(out), lr=args.lr, seed=seed, progress=False)
        metrics = run_one(FinetuneConfig(
            task=task_name, model_dir=model_dir, data_dir=str(args.glue), train=train,
            epochs=epochs, max_seq_length=128, max_train_examples=args.train_examples,
            max_eval_examples=args.dev_examples, predict_test=False,
            regression_bias="zero",  # the reference loop's (Hugging Face's) head init
            **({} if grouped is None else {"group_by_length": grouped, "packed": grouped})),
            load=load)
        return {"score": metrics[get_task(task_name).main_metric],
                "collapsed": bool(metrics.get("collapsed")),
                "reason": metrics.get("collapse_reason")}
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def load_paired(hf_model, state: dict) -> None:
    """Load bertkit's initial weights into a `transformers` model (all but its position ids)."""
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    if unexpected or any("position_ids" not in k for k in missing):
        raise BertkitError(f"pairing: missing {missing}, unexpected {unexpected}")


def run_transformers_paired_b(task_name: str, seed: int, epochs: float, model_dir: str,
                              args) -> dict:
    """`transformers-paired` with other dropout draws (its global stream seeded seed + 10**6):
    the two differ only by dropout's luck, the yardstick for `bertkit - transformers-paired`."""
    return run_transformers(task_name, seed, epochs, model_dir, args, paired=True,
                            dropout_seed=seed + 10**6)


def run_transformers_paired(task_name: str, seed: int, epochs: float, model_dir: str,
                            args) -> dict:
    """The reference model and loop, paired with bertkit's run of the same seed: it starts from
    bertkit's new head (drawn from bertkit's "head" stream) and reads bertkit's data order (the
    "order/<epoch>" permutations, full batches of 32 across epoch ends, bertkit's step count).
    Only the dropout draws (and the implementations under them) differ, so the per-seed
    difference to `bertkit` measures the training, not the luck of the head and the order."""
    return run_transformers(task_name, seed, epochs, model_dir, args, paired=True)


def bertkit_head_state(task_name: str, seed: int, model_dir: str, labels, args) -> dict:
    """bertkit's initial model for (task, seed), head included, under `transformers` names."""
    from bertkit.checkpoint import to_hf_state_dict

    cfg = FinetuneConfig(task=task_name, model_dir=model_dir, data_dir=str(args.glue),
                         train=finetune_train_config(seed=seed))
    ours = load_model(get_task(task_name), model_dir, labels, cfg)
    return to_hf_state_dict(ours.state_dict())


def bertkit_batches(seed: int, n: int, steps: int, batch: int = 32) -> list[list[int]]:
    """The indices bertkit's loop trains on at each step: stream positions [s·B, (s+1)·B) of
    the epochs' orders laid end to end (training.stream.DataOrder.index_at)."""
    epochs = math.ceil(steps * batch / n)
    stream = [i for e in range(epochs) for i in epoch_order(seed, e, n).tolist()]
    return [stream[s * batch:(s + 1) * batch] for s in range(steps)]


def run_transformers(task_name: str, seed: int, epochs: float, model_dir: str, args,
                     bertkit_model: bool = False, paired: bool = False,
                     dropout_seed: int | None = None) -> dict:
    """run_glue's recipe as a plain loop; data read and scored by bertkit's task code."""
    hf = reference_library()
    task = get_task(task_name)
    data = args.glue / task.spec.folder
    train = task.read(data / "train.tsv")
    labels = task.discover_labels(train)
    train = train[: args.train_examples]
    dev = task.read(data / "dev.tsv")[: args.dev_examples]
    torch.manual_seed(seed)
    tok = hf.AutoTokenizer.from_pretrained(model_dir)
    model = hf.AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=1 if task.regression else len(labels),
        **(NO_DROPOUT if args.no_dropout else {}))
    if paired:
        load_paired(model, bertkit_head_state(task_name, seed, model_dir, labels, args))
    if dropout_seed is not None:
        torch.manual_seed(dropout_seed)
    if bertkit_model:  # the same head weights, in bertkit's model
        from bertkit.checkpoint import from_hf_state_dict
        from bertkit.heads import BertForSequenceClassification

        names = ["score"] if task.regression else labels
        ours = BertForSequenceClassification.from_pretrained(model_dir,
                                                             id2label=dict(enumerate(names)))
        ours.load_state_dict(from_hf_state_dict(model.state_dict()))
        model = ours

    enc = encode(tok, train, 128)
    target = [float(e.label) if task.regression else labels.index(str(e.label)) for e in train]
    dtype = torch.float if task.regression else torch.long

    def make_batch(idx):
        batch = tok.pad({k: [enc[k][i] for i in idx] for k in enc}, return_tensors="pt")
        return {**batch, "labels": torch.tensor([target[i] for i in idx], dtype=dtype)}

    # run_glue's recipe: the one reference loop (reference_loop.fit), on bertkit's batches
    # when paired
    recipe = Recipe(lr=args.lr, epochs=epochs, max_seq_length=128, eval_batch_size=64)
    steps = math.ceil(math.ceil(len(train) / recipe.batch_size) * epochs)
    fit(model, make_batch, len(train), recipe, seed,
        batches=bertkit_batches(seed, len(train), steps) if paired else None)
    predictions = predict_sequences(model, tok, task, dev, labels, recipe)
    scores = task.score(dev, predictions)
    reason = task.collapse_reason(dev, predictions)
    return {"score": scores[task.main_metric], "collapsed": reason is not None, "reason": reason}


def summary(runs: list[dict]) -> dict:
    scores = [r["score"] for r in runs]
    mean, std = mean_std(scores)
    return {"n": len(runs), "mean": mean, "std": std, "min": min(scores),
            "collapse_rate": sum(r["collapsed"] for r in runs) / len(runs), "scores": scores}


def run_key(task: str, epochs: float, system: str, seed: int, args) -> str:
    return f"{task}/{epochs:g}/{system}/{seed}/{args.train_examples}/{args.lr:g}/{args.dev_examples}"


def read_store(path: Path | None) -> dict[str, dict]:
    """Finished runs by key: the store lets a long study stop and go on where it stopped."""
    return {r["key"]: r for r in RunLog(path).read()} if path is not None else {}


def table_rows(records: list[dict]) -> list[str]:
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["task"], r["epochs"], r["train_examples"], r["system"]), []).append(r)
    rows = ["| task | train examples | epochs | system | seeds | mean | std | min | collapse rate |",
            "|---|---|---|---|---|---|---|---|---|"]
    for (task, epochs, n_train, system), runs in sorted(groups.items()):
        s = summary(sorted(runs, key=lambda r: r["seed"]))
        rows.append(f"| {task} | {n_train} | {epochs:g} | {system} | {s['n']} | {s['mean']:.3f} | "
                    f"{s['std']:.3f} | {s['min']:.3f} | {s['collapse_rate']:.2f} |")
    return rows


def paired_rows(records: list[dict], first: str, second: str) -> list[str]:
    """Per (task, epochs, examples): the per-seed differences first - second over the seeds both
    ran: their mean, std, standard error and t, beside the unpaired standard error."""
    runs: dict[tuple, dict[str, dict[int, float]]] = {}
    for r in records:
        if r["system"] in (first, second):
            group = runs.setdefault((r["task"], r["epochs"], r["train_examples"]), {})
            group.setdefault(r["system"], {})[r["seed"]] = r["score"]
    rows = [f"| task | train examples | epochs | seeds | mean {first} - {second} | std | SE "
            "(paired) | t | SE (unpaired) |", "|---|---|---|---|---|---|---|---|---|"]
    for (task, epochs, n_train), by_system in sorted(runs.items()):
        a, b = by_system.get(first, {}), by_system.get(second, {})
        seeds = sorted(set(a) & set(b))
        if len(seeds) < 2:
            continue
        diff_mean, diff_std = mean_std([a[s] - b[s] for s in seeds])
        se = diff_std / math.sqrt(len(seeds))
        unpaired = math.sqrt(sum(mean_std([x[s] for s in seeds])[1] ** 2 for x in (a, b))
                             / len(seeds))
        t = diff_mean / se if se > 0 else float("nan")
        rows.append(f"| {task} | {n_train} | {epochs:g} | {len(seeds)} | {diff_mean:+.4f} | "
                    f"{diff_std:.4f} | {se:.4f} | {t:+.2f} | {unpaired:.4f} |")
    return rows


def main(argv: Sequence[str], checkout: Checkout) -> int:
    """studies/stability.py: the command line `argv`, the data beside `checkout`."""
    p = argparse.ArgumentParser(prog="studies/stability.py", description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="stsb,rte,mrpc,cola")
    p.add_argument("--seeds", default="8", help="a count (0..N-1) or a list such as 3,4")
    p.add_argument("--epochs", default="1,3")
    p.add_argument("--systems", default="bertkit,transformers")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--train-examples", type=int, default=2000, help="per task (stated subset)")
    p.add_argument("--dev-examples", type=int, default=None)
    p.add_argument("--glue", type=Path, default=checkout.data / "glue")
    p.add_argument("--quick", action="store_true", help="dev cut to 300 examples")
    p.add_argument("--store", type=Path, default=None,
                   help="JSONL of finished runs: appended to, and runs already in it are skipped")
    p.add_argument("--report", action="store_true", help="only print the table of --store")
    p.add_argument("--paired", default=None, metavar="A,B",
                   help="with --report: the per-seed differences A - B (e.g. "
                        "bertkit,transformers-paired)")
    p.add_argument("--no-dropout", action="store_true",
                   help="every dropout off on both sides (checks that a pairing is exact: "
                        "bertkit and transformers-paired then score the same); stored as "
                        "SYSTEM-nodrop")
    args = p.parse_args(argv)
    if args.quick:
        args.dev_examples = args.dev_examples or 300
    if args.report:
        records = list(read_store(args.store).values())
        print("\n".join(table_rows(records)))
        if args.paired:
            print()
            print("\n".join(paired_rows(records, *args.paired.split(",", 1))))
        return 0
    logging.basicConfig(level=logging.ERROR)
    model_dir = minilm_path()
    seeds = ([int(s) for s in args.seeds.split(",") if s] if "," in args.seeds
             else list(range(int(args.seeds))))
    runners = {"bertkit": run_bertkit, "transformers": run_transformers,
               "bertkit-ungrouped": run_bertkit_ungrouped, "bertkit-grouped": run_bertkit_grouped,
               "bertkit-loop+hf-model": run_bertkit_hf_model,
               "hf-loop+bertkit-model": run_hf_loop_bertkit_model,
               "transformers-paired": run_transformers_paired,
               "transformers-paired-b": run_transformers_paired_b,
               "bertkit-loop+hf-model-paired": run_bertkit_hf_model_paired}
    done = read_store(args.store)
    records = []
    t0 = time.perf_counter()
    for task in args.tasks.split(","):
        for epochs in [float(e) for e in args.epochs.split(",")]:
            for system in args.systems.split(","):
                name = system + ("-nodrop" if args.no_dropout else "")
                for seed in seeds:
                    key = run_key(task, epochs, name, seed, args)
                    if key not in done:
                        run = runners[system](task, seed, epochs, model_dir, args)
                        done[key] = {"key": key, "task": task, "epochs": epochs, "system": name,
                                     "seed": seed, "train_examples": args.train_examples,
                                     "lr": args.lr, **run}
                        if args.store is not None:
                            done[key] = RunLog(args.store).append(done[key])
                    records.append(done[key])
                    print(f"{key}: {done[key]['score']:.4f}"
                          f"{' COLLAPSED' if done[key]['collapsed'] else ''}"
                          f" ({(time.perf_counter() - t0) / 60:.1f} min)", flush=True)
    print("\n".join(table_rows(records)))
    return 0
