"""`bertkit ablate`: the paper's ablations (Devlin et al. 2019, Table 5 and 6) at small scale.

Objectives study: equal-budget small models pre-trained with MLM + NSP (BERT), MLM only
("No NSP"), a left-to-right LM ("LTR & No NSP"), and no pre-training at all, each fine-tuned on
SST-2, MRPC, RTE and SQuAD v1.1 with several seeds. Sizes study: tiny / mini / small pre-trained
for equal time. Every finished (variant, task, seed) cell is written at once, atomically, to
`OUTPUT/results.json`; a killed ablation run again with the same settings continues where it
stopped (finished cells, vocabulary, shards and pre-trained models are reused).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.io import LOCK_FILE, held_output_dir
from bertkit.runs.finetune import FinetuneConfig, finetune_train_config
from bertkit.runs.finetune import run_settings as finetune_settings
from bertkit.runs.pretrain import PretrainConfig, pretrain_train_config
from bertkit.studies import pipeline
from bertkit.studies.report import (
    format_mean_std,
    markdown_table,
    plot_bars,
    plot_curves,
    read_records,
    write_markdown,
)
from bertkit.studies.results import Progress, ResultsStore, calibrate, last_eval, run_cells
from bertkit.tasks import get_task
from bertkit.tokenization import BertTokenizer
from bertkit.vocab.trainer import TrainerConfig

log = logging.getLogger(__name__)

OBJECTIVE_VARIANTS = {"mlm+nsp": "MLM + NSP (BERT)", "mlm": "No NSP", "ltr": "LTR & No NSP",
                      "none": "No pre-training"}
SIZE_VARIANTS = {"tiny": "tiny (2x128)", "mini": "mini (4x256)", "small": "small (4x512)"}
STUDIES = ("objectives", "sizes")
TASKS = ("sst2", "mrpc", "rte", "squad1")
SQUAD_MAX_SEQ_LENGTH = 256


@dataclass(frozen=True)
class AblationConfig:
    """Every setting of an ablation; those that shape results must match to resume."""

    output_dir: str
    corpus: tuple[str, ...]
    data_root: str  # a folder holding glue/ and squad/ (../shared/data) or `bertkit data` sets
    study: str = "objectives"
    variants: tuple[str, ...] | None = None  # None: all of the study's
    tasks: tuple[str, ...] = TASKS
    seeds: int = 3
    budget_minutes: float = 20.0  # pre-training time of the whole study, split among variants
    model: str = "tiny"  # the objectives study's architecture
    tokenizer: str | None = None  # an existing vocabulary; None: learn one from the corpus
    vocab_size: int = 8000
    vocab_criterion: str = TrainerConfig.criterion  # the trainer's default (likelihood)
    max_seq_length: int = 128
    dropout: float = 0.1  # of every variant's architecture, pre-training and fine-tuning alike
    dupe_factor: int = 1
    # The recipes; data, folders, steps and seeds are filled in per variant and cell.
    pretrain: PretrainConfig = field(default_factory=lambda: PretrainConfig(
        data="", train=pretrain_train_config(batch_size=32, lr=1e-3, warmup_ratio=0.1)))
    finetune: FinetuneConfig = field(default_factory=lambda: FinetuneConfig(
        "", "", "", train=finetune_train_config(lr=1e-3), max_seq_length=128,
        max_train_examples=2000,
        regression_bias="zero"))  # as the recorded ablations were run (a regression task's head)
    progress: bool = True

    def __post_init__(self) -> None:
        if self.study not in STUDIES:
            raise BertkitError(f"unknown study {self.study!r}; choose one of {', '.join(STUDIES)}")
        unknown = [v for v in self.variant_names if v not in self.all_variants]
        if unknown:
            raise BertkitError(f"unknown variant(s) {unknown} for the {self.study} study; choose "
                               f"from {', '.join(self.all_variants)}")
        if self.seeds < 1 or self.budget_minutes <= 0:
            raise BertkitError("--seeds must be >= 1 and --budget-minutes > 0")
        for task in self.tasks:
            get_task(task)  # an unknown name is refused here, before any work
        if not self.corpus and self.pretrained_variants:
            raise BertkitError("no pre-training corpus given")

    @property
    def all_variants(self) -> dict[str, str]:
        return OBJECTIVE_VARIANTS if self.study == "objectives" else SIZE_VARIANTS

    @property
    def variant_names(self) -> tuple[str, ...]:
        return self.variants or tuple(self.all_variants)

    @property
    def pretrained_variants(self) -> tuple[str, ...]:
        return tuple(v for v in self.variant_names if v != "none")

    def identity(self) -> dict[str, Any]:
        """The settings that shape the results (tasks, seeds and variants may grow on resume)."""
        keep = asdict(self)
        for name in ("output_dir", "variants", "tasks", "seeds", "progress"):
            keep.pop(name)
        # the fine-tuning recipe as a fine-tuning run records it (a setting added later left out
        # at the value it had), whichever tasks the study grows to
        keep["finetune"] = finetune_settings(self.finetune, regression=True)
        for recipe in (keep["pretrain"], keep["finetune"]):
            recipe["train"].pop("progress")
        return json.loads(json.dumps(keep, default=str))


def variant_config(cfg: AblationConfig, variant: str, vocab_size: int) -> BertConfig:
    size = variant if cfg.study == "sizes" else cfg.model
    return BertConfig.preset(size, vocab_size=vocab_size, max_position_embeddings=512,
                             hidden_dropout_prob=cfg.dropout,
                             attention_probs_dropout_prob=cfg.dropout)


def plan_pretraining(cfg: AblationConfig, store: ResultsStore, shards: Path, tokenizer) -> None:
    """Fix each variant's step budget once (stored, so a resumed run keeps it). Objectives:
    one calibration and the same steps for all (the paper's equal-steps comparison); sizes:
    each size calibrated for the same wall time."""
    variants = cfg.pretrained_variants
    seconds = cfg.budget_minutes * 60 / max(1, len(variants))
    for v in variants:
        base = "mlm+nsp" if cfg.study == "objectives" else v
        done = [store.pretrain_info(w) for w in variants if store.pretrain_info(w) is not None]
        if cfg.study == "objectives" and done and store.pretrain_info(v) is None:
            store.put_pretrain(v, {k: done[0][k] for k in ("steps", "seconds_per_step",
                                                           "budget_seconds")})
            continue
        recipe, config = _recipe(cfg, base), variant_config(cfg, base, tokenizer.vocab_size)
        calibrate(store, v, seconds, lambda budget, r=recipe, c=config: pipeline.seconds_per_step(
            r, c, shards, tokenizer, budget=budget))


def _recipe(cfg: AblationConfig, variant: str) -> PretrainConfig:
    objective = variant if cfg.study == "objectives" else "mlm+nsp"
    return replace(cfg.pretrain, objective=objective)


def build_models(cfg: AblationConfig, store: ResultsStore, progress: Progress) -> dict[str, Path]:
    """Vocabulary, shards, then each variant's model (pre-trained, or random for "none")."""
    out = Path(cfg.output_dir)
    if cfg.tokenizer is not None:
        tok_dir, tokenizer = Path(cfg.tokenizer), BertTokenizer.from_pretrained(cfg.tokenizer)
    else:
        progress.step(f"vocabulary ({cfg.vocab_size} WordPieces)")
        tok_dir = out / "vocab"
        tokenizer = pipeline.learn_vocabulary(cfg.corpus, tok_dir, cfg.vocab_size,
                                              cfg.vocab_criterion, progress=cfg.progress)
    models: dict[str, Path] = {}
    if cfg.pretrained_variants:
        progress.step("pre-training data")
        shards = pipeline.prepare_shards(cfg.corpus, tokenizer, out / "shards", cfg.max_seq_length,
                                         cfg.dupe_factor, progress=cfg.progress)
        plan_pretraining(cfg, store, shards, tokenizer)
    for v in cfg.variant_names:
        if v == "none":
            config = variant_config(cfg, cfg.model, tokenizer.vocab_size)
            models[v] = pipeline.random_init(config, tokenizer, out / "pretrain" / "none" / "model",
                                             cfg.pretrain.train.seed)
            continue
        progress.step(f"pre-train {v}")
        info = store.pretrain_info(v) or {}
        t0 = time.perf_counter()
        fresh = not (out / "pretrain" / v / "model" / "config.json").is_file()
        models[v] = pipeline.pretrain_model(
            _recipe(cfg, v), variant_config(cfg, v, tokenizer.vocab_size), info["steps"],
            out / "shards", tok_dir, out / "pretrain" / v)
        if fresh:
            store.put_pretrain(v, {"seconds": round(time.perf_counter() - t0, 1),
                                   **last_eval(out / "pretrain" / v)})
    return models


def cells_of(cfg: AblationConfig) -> list[tuple[str, str, int]]:
    return [(v, t, s) for t in cfg.tasks for v in cfg.variant_names for s in range(cfg.seeds)]


def run_ablation(cfg: AblationConfig) -> Path:
    """The whole study, resumable; returns the report `OUTPUT/REPORT.md`."""
    out = Path(cfg.output_dir)
    others = out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir())
    if others and not (out / "results.json").is_file():
        raise BertkitError(f"{out}: not empty and not an ablation folder (no results.json); "
                           "choose a new or empty --output")
    with held_output_dir(out):  # a second ablation into the folder would run the same cells
        return _run_ablation(cfg, out)


def _run_ablation(cfg: AblationConfig, out: Path) -> Path:
    store = ResultsStore(out / "results.json", cfg.identity())
    cells = cells_of(cfg)
    files = {t: pipeline.task_files(t, cfg.data_root) for t in cfg.tasks}
    units = (cfg.tokenizer is None) + bool(cfg.pretrained_variants) + len(cfg.pretrained_variants)
    todo = [c for c in cells if not store.has(store.key(*c))]
    progress = Progress(units + len(cells), len(cells) - len(todo))
    models = build_models(cfg, store, progress)

    def run_cell(variant: str, task: str, seed: int) -> dict[str, Any]:
        cell_dir = out / "finetune" / variant / task / f"seed-{seed}"
        recipe = replace(cfg.finetune, **files[task][0])
        if task.startswith("squad"):  # question + context windows need more than 128 tokens
            recipe = replace(recipe, max_seq_length=SQUAD_MAX_SEQ_LENGTH)
        return pipeline.finetune_cell(recipe, models[variant], task, cell_dir, seed)

    run_cells(store, cells, run_cell, progress)
    return write_ablation_report(cfg, store, {t: note for t, (_, note) in files.items() if note})


def summary_rows(cfg: AblationConfig, store: ResultsStore) -> list[list[str]]:
    """One row per variant: name, pre-training steps, held-out MLM accuracy, then each task's
    mean ± std over seeds (0-100)."""
    rows = []
    for v in cfg.variant_names:
        info = store.pretrain_info(v) or {}
        mlm = info.get("eval_mlm_acc")
        rows.append([cfg.all_variants[v], info.get("steps", 0),
                     f"{100 * mlm:.1f}" if mlm is not None else "—",
                     *(format_mean_std(store.scores(v, t), scale=1.0) for t in cfg.tasks)])
    return rows


def write_ablation_report(cfg: AblationConfig, store: ResultsStore, notes: dict[str, str]) -> Path:
    """`REPORT.md` (the table, mean ± std over seeds), `ablation.png` and `pretraining.png`."""
    out = Path(cfg.output_dir)
    header = ["variant", "pre-training steps", "held-out MLM acc", *(
        f"{t} ({get_task(t).main_metric})" for t in cfg.tasks)]
    table = markdown_table(header, summary_rows(cfg, store))
    groups = {t: {cfg.all_variants[v]: store.scores(v, t) for v in cfg.variant_names}
              for t in cfg.tasks}
    bars = plot_bars(groups, out / "ablation.png", "dev score (0-100)", scale=1.0,
                     title=f"{cfg.study} ablation, mean ± std over {cfg.seeds} seed(s)")
    runs = {cfg.all_variants[v]: read_records(out / "pretrain" / v / "metrics.jsonl")
            for v in cfg.pretrained_variants if (out / "pretrain" / v / "metrics.jsonl").is_file()}
    curves = plot_curves(runs, [("loss",), ("eval_mlm_acc",)], out / "pretraining.png") if runs else None
    budget = cfg.budget_minutes / max(1, len(cfg.pretrained_variants))
    lines = [f"# Ablation: {cfg.study}", "",
             f"Pre-training: {budget:.1f} min per variant on {len(cfg.corpus)} corpus file(s), "
             f"sequence length {cfg.max_seq_length}, batch {cfg.pretrain.train.batch_size}, peak lr "
             f"{cfg.pretrain.train.lr}. Fine-tuning: lr {cfg.finetune.train.lr}, "
             f"{cfg.finetune.epochs} epochs, batch {cfg.finetune.train.batch_size}, at most "
             f"{cfg.finetune.max_train_examples} training examples, {cfg.seeds} seed(s); dev "
             "scores as mean ± std over seeds.", "", table, ""]
    lines += [f"- {note}" for note in notes.values()]
    if "ltr" in cfg.variant_names:
        lines.append("- LTR & No NSP: its held-out accuracy is next-token accuracy; it is "
                     "fine-tuned with full (bidirectional) attention, unlike the paper, which kept "
                     "the left-only mask at fine-tuning time.")
    lines += [f"![{name}]({png.name})" for name, png in (("ablation", bars), ("curves", curves)) if png]
    path = write_markdown(out / "REPORT.md", "\n".join(lines))
    log.info("ablation table:\n%s\nreport: %s", table, path)
    return path
