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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.studies import pipeline
from bertkit.studies.report import (
    format_mean_std,
    markdown_table,
    plot_bars,
    plot_curves,
    read_jsonl,
    write_markdown,
)
from bertkit.tasks import get_task

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
    vocab_criterion: str = "frequency"  # see pipeline.learn_vocabulary for why not "likelihood"
    max_seq_length: int = 128
    dropout: float = 0.1  # of every variant's architecture, pre-training and fine-tuning alike
    dupe_factor: int = 1
    pretrain: pipeline.PretrainPlan = field(default_factory=lambda: pipeline.PretrainPlan(
        BertConfig.preset("tiny")))  # `config` and `steps` are filled in per variant
    finetune: pipeline.FinetunePlan = field(default_factory=pipeline.FinetunePlan)
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
        keep["pretrain"].pop("config")
        keep["pretrain"].pop("steps")
        return json.loads(json.dumps(keep, default=str))


class ResultsStore:
    """`results.json`: the settings, the pre-training plan and one record per finished cell,
    rewritten atomically after every change (a kill loses at most the cell in progress)."""

    def __init__(self, path: str | Path, settings: dict[str, Any]):
        self.path = Path(path)
        settings = json.loads(json.dumps(settings, default=str))
        if self.path.is_file():
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("settings") != settings:
                changed = sorted(k for k in settings if data.get("settings", {}).get(k) != settings[k])
                raise BertkitError(f"{self.path}: made with other settings ({', '.join(changed)}); "
                                   "use another --output to start a new ablation")
            self.data = data
        else:
            self.data = {"settings": settings, "pretrain": {}, "cells": {}}

    @staticmethod
    def key(variant: str, task: str, seed: int) -> str:
        return f"{variant}/{task}/{seed}"

    def has(self, key: str) -> bool:
        return key in self.data["cells"]

    def put(self, key: str, record: dict[str, Any]) -> None:
        self.data["cells"][key] = record
        self._write()

    def pretrain_info(self, variant: str) -> dict[str, Any] | None:
        return self.data["pretrain"].get(variant)

    def put_pretrain(self, variant: str, info: dict[str, Any]) -> None:
        self.data["pretrain"][variant] = {**self.data["pretrain"].get(variant, {}), **info}
        self._write()

    def scores(self, variant: str, task: str) -> list[float]:
        prefix = f"{variant}/{task}/"
        return [c["score"] for k, c in sorted(self.data["cells"].items()) if k.startswith(prefix)]

    def _write(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=2, default=str) + "\n")


class Progress:
    """Overall progress over every unit of work, logged as `[k/N] what (elapsed, ETA)`."""

    def __init__(self, total: int, done: int = 0):
        self.total, self.done, self.t0, self.started = total, done, time.perf_counter(), done

    def step(self, what: str) -> None:
        elapsed = time.perf_counter() - self.t0
        rate = elapsed / max(1, self.done - self.started)
        eta = f", ETA {rate * (self.total - self.done) / 60:.1f} min" if self.done > self.started else ""
        log.info("[%d/%d] %s (%.1f min elapsed%s)", self.done + 1, self.total, what, elapsed / 60, eta)
        self.done += 1


def run_cells(store: ResultsStore, cells: Sequence[tuple[str, str, int]],
              run_cell: Callable[[str, str, int], dict[str, Any]],
              progress: Progress | None = None) -> None:
    """Run every cell not yet in the store, recording each as soon as it finishes."""
    for variant, task, seed in cells:
        key = store.key(variant, task, seed)
        if store.has(key):
            continue
        if progress is not None:
            progress.step(f"fine-tune {key}")
        store.put(key, {"variant": variant, "task": task, "seed": seed,
                        **run_cell(variant, task, seed)})


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
    todo = [v for v in variants if store.pretrain_info(v) is None]
    seconds = cfg.budget_minutes * 60 / max(1, len(variants))
    done = [store.pretrain_info(v) for v in variants if store.pretrain_info(v) is not None]
    step_s: dict[str, float] = {}
    for v in todo:
        if cfg.study == "objectives" and done:  # a variant added later: the same steps
            store.put_pretrain(v, {k: done[0][k] for k in ("steps", "seconds_per_step",
                                                           "budget_seconds")})
            continue
        base = "mlm+nsp" if cfg.study == "objectives" else v
        if base not in step_s:
            step_s[base] = pipeline.seconds_per_step(_plan(cfg, base, tokenizer.vocab_size, 1),
                                                     shards, tokenizer)
        steps = pipeline.steps_for_budget(seconds, step_s[base])
        store.put_pretrain(v, {"steps": steps, "seconds_per_step": round(step_s[base], 4),
                               "budget_seconds": round(seconds, 1)})
        log.info("pre-training %s: %d steps (%.2f s/step measured, %.0f s budget)", v, steps,
                 step_s[base], seconds)


def _plan(cfg: AblationConfig, variant: str, vocab_size: int, steps: int) -> pipeline.PretrainPlan:
    objective = variant if cfg.study == "objectives" else "mlm+nsp"
    return replace(cfg.pretrain, config=variant_config(cfg, variant, vocab_size),
                   objective=objective, steps=steps)


def build_models(cfg: AblationConfig, store: ResultsStore, progress: Progress) -> dict[str, Path]:
    """Vocabulary, shards, then each variant's model (pre-trained, or random for "none")."""
    out = Path(cfg.output_dir)
    if cfg.tokenizer is not None:
        from bertkit.tokenization import BertTokenizer

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
                                             cfg.pretrain.seed)
            continue
        progress.step(f"pre-train {v}")
        info = store.pretrain_info(v) or {}
        t0 = time.perf_counter()
        fresh = not (out / "pretrain" / v / "model" / "config.json").is_file()
        models[v] = pipeline.pretrain(_plan(cfg, v, tokenizer.vocab_size, info["steps"]),
                                      out / "shards", tok_dir, out / "pretrain" / v,
                                      progress=cfg.progress)
        if fresh:
            store.put_pretrain(v, {"seconds": round(time.perf_counter() - t0, 1),
                                   **last_eval(out / "pretrain" / v)})
    return models


def last_eval(run_dir: Path) -> dict[str, float]:
    """The final held-out metrics of a pre-training run (from its metrics.jsonl)."""
    path = run_dir / "metrics.jsonl"
    records = read_jsonl(path) if path.is_file() else []
    evals = [r for r in records if any(k.startswith("eval_") for k in r)]
    return {k: v for k, v in (evals[-1] if evals else {}).items() if k.startswith("eval_")}


def task_files(task: str, data_root: str | Path, work_dir: Path) -> tuple[dict[str, str], str]:
    """The train and dev files of `task` under `data_root` (../shared/data's `glue/SST-2/` or
    `bertkit data download`'s `glue-sst-2/SST-2/`), and a note for the report. SQuAD v1.1
    without a train file: its dev set is split by article (every 5th article -> test)."""
    root, t = Path(data_root), get_task(task)
    folders = ([root / "squad", root / task, root] if task.startswith("squad") else
               [root / "glue", root / f"glue-{t.spec.folder.lower()}", root])
    for folder in folders:
        train, dev = t.find_file(folder, "train"), t.find_file(folder, "dev")
        if train.is_file() and dev.is_file():
            return {"train": str(train), "dev": str(dev)}, ""
        if task == "squad1" and dev.is_file():
            return split_squad_by_article(dev, work_dir / "squad1-split"), (
                f"SQuAD v1.1 has no train file in {folder}: its dev set ({dev.name}) was split by "
                "article, every 5th article held out as the test set, the rest used to train")
    raise BertkitError(f"{task}: no train/dev files under {root} (looked in "
                       f"{', '.join(str(f) for f in folders)}); fetch them with "
                       f"`bertkit data download` or pass --data DIR")


def split_squad_by_article(dev: Path, out_dir: Path) -> dict[str, str]:
    """Articles 0, 5, 10, ... -> test (written as dev-v1.1.json), the others -> train, so no
    paragraph of a test article is ever seen in training."""
    data = json.loads(dev.read_text(encoding="utf-8"))
    articles = data["data"]
    parts = {"train": [a for i, a in enumerate(articles) if i % 5],
             "dev": [a for i, a in enumerate(articles) if i % 5 == 0]}
    files = {}
    for split, chosen in parts.items():
        path = out_dir / f"{split}-v1.1.json"
        if not path.is_file():
            atomic_write_text(path, json.dumps({"data": chosen, "version": data.get("version")}))
        files[split] = str(path)
    return files


def cells_of(cfg: AblationConfig) -> list[tuple[str, str, int]]:
    return [(v, t, s) for t in cfg.tasks for v in cfg.variant_names for s in range(cfg.seeds)]


def run_ablation(cfg: AblationConfig) -> Path:
    """The whole study, resumable; returns the report `OUTPUT/REPORT.md`."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    store = ResultsStore(out / "results.json", cfg.identity())
    cells = cells_of(cfg)
    files = {t: task_files(t, cfg.data_root, out / "data") for t in cfg.tasks}
    units = (cfg.tokenizer is None) + bool(cfg.pretrained_variants) + len(cfg.pretrained_variants)
    todo = [c for c in cells if not store.has(store.key(*c))]
    progress = Progress(units + len(cells), len(cells) - len(todo))
    models = build_models(cfg, store, progress)

    def run_cell(variant: str, task: str, seed: int) -> dict[str, Any]:
        cell_dir = out / "finetune" / variant / task / f"seed-{seed}"
        plan = cfg.finetune
        if task.startswith("squad"):  # question + context windows need more than 128 tokens
            plan = replace(plan, max_seq_length=SQUAD_MAX_SEQ_LENGTH)
        return pipeline.finetune(models[variant], task, cell_dir, cell_dir, seed, plan,
                                 files[task][0], progress=cfg.progress)

    run_cells(store, cells, run_cell, progress)
    return write_report(cfg, store, {t: note for t, (_, note) in files.items() if note})


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


def write_report(cfg: AblationConfig, store: ResultsStore, notes: dict[str, str]) -> Path:
    """`REPORT.md` (the table, mean ± std over seeds), `ablation.png` and `pretraining.png`."""
    out = Path(cfg.output_dir)
    header = ["variant", "pre-training steps", "held-out MLM acc", *(
        f"{t} ({get_task(t).main_metric})" for t in cfg.tasks)]
    table = markdown_table(header, summary_rows(cfg, store))
    groups = {t: {cfg.all_variants[v]: store.scores(v, t) for v in cfg.variant_names}
              for t in cfg.tasks}
    bars = plot_bars(groups, out / "ablation.png", "dev score (0-100)", scale=1.0,
                     title=f"{cfg.study} ablation, mean ± std over {cfg.seeds} seed(s)")
    runs = {cfg.all_variants[v]: read_jsonl(out / "pretrain" / v / "metrics.jsonl")
            for v in cfg.pretrained_variants if (out / "pretrain" / v / "metrics.jsonl").is_file()}
    curves = plot_curves(runs, [("loss",), ("eval_mlm_acc",)], out / "pretraining.png") if runs else None
    budget = cfg.budget_minutes / max(1, len(cfg.pretrained_variants))
    lines = [f"# Ablation: {cfg.study}", "",
             f"Pre-training: {budget:.1f} min per variant on {len(cfg.corpus)} corpus file(s), "
             f"sequence length {cfg.max_seq_length}, batch {cfg.pretrain.batch_size}, peak lr "
             f"{cfg.pretrain.lr}. Fine-tuning: lr {cfg.finetune.lr}, {cfg.finetune.epochs} epochs, "
             f"batch {cfg.finetune.batch_size}, at most {cfg.finetune.max_train_examples} training "
             f"examples, {cfg.seeds} seed(s); dev scores as mean ± std over seeds.", "", table, ""]
    lines += [f"- {note}" for note in notes.values()]
    if "ltr" in cfg.variant_names:
        lines.append("- LTR & No NSP: its held-out accuracy is next-token accuracy; it is "
                     "fine-tuned with full (bidirectional) attention, unlike the paper, which kept "
                     "the left-only mask at fine-tuning time.")
    lines += [f"![{name}]({png.name})" for name, png in (("ablation", bars), ("curves", curves)) if png]
    path = write_markdown(out / "REPORT.md", "\n".join(lines))
    log.info("ablation table:\n%s\nreport: %s", table, path)
    return path
