"""Step 5 of the demo: a small learning curve. Does the demo's own pre-training pay with few
labels, where pre-training should matter most?

Our pre-trained model, its random-init twin and all-MiniLM-L6-v2, each at a few label counts
fixed before anything is measured (`DemoConfig.curve_counts`, then the demo's own subset), with
frozen features (mean-pooled vectors into logistic regression, regularized by cross-validation
on the labels alone) beside fine-tuning (each model's recipe and selected rate from step 4,
with a floor of optimizer steps so that a small subset trains at all). A subset of N is the
first N of a seeded shuffle of the demo's training subset; at the demo's own subset the
fine-tuning cells are step 4's. Frozen cells are cheap (the vectors are computed once); the
fine-tuning cells are few (`curve_seeds` a size).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bertkit.runs.finetune import FinetuneConfig, finetune_train_config
from bertkit.studies import frozen, pipeline
from bertkit.studies.demo import finetune as demo_finetune
from bertkit.studies.demo.config import NAMES, DemoConfig
from bertkit.studies.label_curve import Cell, collect_cells, gain, subset_indices, write_subset
from bertkit.studies.results import ResultsStore, run_cells
from bertkit.tasks import get_task

TASK = demo_finetune.TASK
CURVE_MODELS = ("pretrained", "random", "minilm")  # ours, its twin, and a BERT pre-trained at scale
PREFIX = "curve"


def curve_variant(approach: str, variant: str, size: int) -> str:
    """The results-store name of one curve cell's runs."""
    return f"{PREFIX}-{approach}-{variant}-n{size}"


def sizes(args: DemoConfig) -> list[int]:
    return [*args.curve_counts, args.train_examples]


def curve_section(args: DemoConfig, store: ResultsStore, models: Mapping[str, Path],
                  files: Mapping[str, Any], work: Path) -> None:
    """The frozen cells of every curve model at every size, then the fine-tuning cells below
    the demo's own subset, each recorded as soon as it ends (a resumed demo skips them)."""
    task = get_task(TASK)
    train = task.read(Path(files["train_file"]))[:args.train_examples]
    dev = task.read(Path(files["dev_file"]))[:args.dev_examples]
    variants = [v for v in CURVE_MODELS if v in models]
    caches: dict[str, tuple[frozen.FeatureCache, frozen.FeatureCache]] = {}

    def frozen_cell(name: str, _task: str, seed: int) -> dict[str, Any]:
        variant, size = parse(name)
        if variant not in caches:
            encoder = frozen.frozen_encoder(models[variant], args.max_seq_length)
            folder = work / "curve" / "features" / variant
            caches[variant] = (frozen.FeatureCache(encoder, train, folder / "train.npz"),
                               frozen.FeatureCache(encoder, dev, folder / "dev.npz"))
        record = frozen.frozen_run(TASK, *caches[variant], subset_indices(len(train), size, seed), seed)
        print(f"  {NAMES[variant]:<40} {size:>5} labels, frozen, seed {seed}: {record['score']:.1f}",
              flush=True)
        return record

    def finetune_cell(name: str, _task: str, seed: int) -> dict[str, Any]:
        variant, size = parse(name)
        subset = write_subset(Path(files["train_file"]), train, subset_indices(len(train), size, seed),
                              work / "curve" / "subsets" / f"n{size}-s{seed}.tsv")
        recipe = FinetuneConfig(TASK, "", "", train=finetune_train_config(
            lr=demo_finetune.selected_lr(store, args, variant), device=args.device, progress=False),
            epochs=epochs_for(args, variant, size), max_seq_length=args.max_seq_length,
            max_eval_examples=args.dev_examples, train_file=str(subset),
            dev_file=files["dev_file"], predict_test=False)
        record = pipeline.finetune_cell(recipe, models[variant], TASK,
                                        work / "curve" / "finetune" / f"{name}-s{seed}", seed)
        print(f"  {NAMES[variant]:<40} {size:>5} labels, fine-tuned, seed {seed}: "
              f"{record['score']:.1f}", flush=True)
        return {k: record[k] for k in ("score", "seconds", "lr", "epochs", "steps") if k in record} | {
            "collapsed": bool(record.get("collapsed"))}

    run_cells(store, [(curve_variant("frozen", v, n), TASK, s) for n in sizes(args) for v in variants
                      for s in range(args.curve_seeds)], frozen_cell)
    run_cells(store, [(curve_variant("finetune", v, n), TASK, s) for n in args.curve_counts
                      for v in variants for s in range(args.curve_seeds)], finetune_cell)


def parse(name: str) -> tuple[str, int]:
    """(variant, size) of a curve cell's store name."""
    body, _, size = name.rpartition("-n")
    return body.split("-", 2)[2], int(size)


def epochs_for(args: DemoConfig, variant: str, size: int) -> float:
    """The model's epochs from step 4, or more where they fall under `curve_min_steps`
    optimizer steps (3 epochs of 50 labels at batch 32 are 6 steps, too few to move a model)."""
    return max(args.epochs_of(variant), args.curve_min_steps / math.ceil(size / 32))


def curve_cells(store: ResultsStore, args: DemoConfig) -> dict[tuple[str, str, int], Cell]:
    """Every recorded cell of the curve, step 4's fine-tuning at the demo's subset among them."""
    records = []
    for key, cell in store.data["cells"].items():
        name, _, seed = key.rpartition(f"/{TASK}/")
        if name.startswith(PREFIX + "-"):
            variant, size = parse(name)
            records.append({**cell, "variant": variant, "approach": name.split("-")[1],
                            "size": size, "seed": int(seed)})
        elif name in CURVE_MODELS:  # (step 4's: the first `train_examples` sentences)
            records.append({**cell, "variant": name, "approach": "finetune",
                            "size": args.train_examples, "seed": int(seed)})
    return collect_cells(records)


def pays(cells: Mapping[tuple[str, str, int], Cell], approach: str, size: int) -> bool | None:
    """Whether our pre-training beats its twin by more than 2 standard errors (None: unmeasured)."""
    pre, rnd = cells.get(("pretrained", approach, size)), cells.get(("random", approach, size))
    if pre is None or rnd is None or len(pre.scores) < 2 or len(rnd.scores) < 2:
        return None
    g, se = gain(pre, rnd)
    return g > 2 * se


def verdict(cells: Mapping[tuple[str, str, int], Cell], counts: Sequence[int]) -> str:
    """The report's lead: where our own pre-training pays with few labels, and where not."""
    said, paid = [], False
    for approach, what in (("frozen", "frozen features"), ("finetune", "fine-tuned")):
        found = {n: pays(cells, approach, n) for n in counts}
        yes = [n for n, p in found.items() if p]
        no = [n for n, p in found.items() if p is False]
        paid = paid or bool(yes)
        if yes or no:
            said.append(f"{what}: pays at {join(yes)} labels{collapsed_twin(cells, approach, yes)}"
                        + (f", not at {join(no)}" if no else "")
                        if yes else f"{what}: does not pay at {join(no)} labels")
    if not said:
        return "The learning curve has no measured cells yet."
    lead = ("Own pre-training pays with few labels (a gain over random init beyond 2 standard "
            "errors) in part of the curve" if paid else
            "Own pre-training does not pay at any label count measured (no gain over random init "
            "beyond 2 standard errors)")
    return f"{lead}: {'; '.join(said)}."


def collapsed_twin(cells: Mapping[tuple[str, str, int], Cell], approach: str,
                   counts: Sequence[int]) -> str:
    """Where a gain is over a twin whose seeds collapsed to one class, that is said: the
    pre-trained model beat a model that learned nothing there, not a working one."""
    notes = []
    for n in counts:
        twin = cells.get(("random", approach, n))
        if twin is not None and twin.collapsed:
            notes.append(f"{twin.collapsed} of the twin's {len(twin.scores)} seeds at {n:,}")
    return f" (over a twin that collapsed to one class: {'; '.join(notes)})" if notes else ""


def join(counts: Sequence[int]) -> str:
    return ", ".join(f"{n:,}" for n in counts)
