"""The pre-training budget curve (docs/reports/pretraining.md): when does bertkit's own pre-training
start to pay against the same architecture from random initialization?

One long pre-training run on book text (not task data) is stopped at log-spaced budgets of its
own CPU seconds (`TrainConfig.stop_at_cpu_seconds`; CPU seconds, not wall time, since the study
shares its machine with other work), and the model at each budget is exported and recorded with
its step, tokens and held-out MLM accuracy. The run resumes exactly between sittings (the
loop's resume), so a budget point is the same whatever the sittings were. The lr schedule is
the run's whole horizon (the largest budget): at an early budget the rate has not decayed, the
usual price of reading a curve off one run (Kaplan et al. 2020 do the same).

This module holds the curve's settings, budget labels, data, store, the lock on a sitting, its
run's recipe with the horizon's probe, and `--status`. Taking the points off the run (where it
stops, what a point's record holds, the state kept at each point in `branches/<budget>/` for a
decay branch, `cooldown`) is `curve_points`'. Fine-tuning the exported points beside their
random-init twin, and the curve's report, are `curve_finetune`'s.

Everything lives in one work folder: `study.json` (the `ResultsStore`: settings, the budget
points and the machine each was recorded on), `vocab/`, `shards/`, `run/` (the pre-training
run), `points/<budget>/` (the exports), `branches/<budget>/` (the kept states), and the
fine-tuning's records and runs (`cells*.json`, `cells/`: `curve_finetune`). A lock keeps two
sittings of one part from writing one folder.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.config import BertConfig
from bertkit.data.chunks import ChunkConfig, default_max_predictions
from bertkit.data.instances import InstanceConfig
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text
from bertkit.runs.pretrain import PretrainConfig, pretrain_train_config, run_pretraining
from bertkit.runs.pretrain_recipes import RECIPES, get_recipe
from bertkit.studies import pipeline
from bertkit.studies.pipeline import task_files
from bertkit.studies.report import read_records
from bertkit.studies.results import ResultsStore
from bertkit.studies.runner import hold
from bertkit.tasks import get_task
from bertkit.tokenization import BertTokenizer
from bertkit.training.state import RESUME_AUTO

log = logging.getLogger(__name__)

HOUR = 3600.0
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class CurveSettings:
    """The recipe of the curve's one run and the budgets it is read at. Every field is recorded;
    a sitting with other settings is refused (a new work folder starts another curve)."""

    corpus: tuple[str, ...]  # book text (the shared books/, gutenberg/, WikiText-2)
    vocab_size: int = 8192
    model: str = "mini"  # 4 layers x 256 (Turc et al.'s BERT-Mini shape)
    max_seq_length: int = 128
    objective: str = "mlm"  # RoBERTa / Cramming: NSP costs steps and buys little
    masked_lm_prob: float = 0.15
    dropout: float = 0.0  # Cramming: no dropout while pre-training on a budget
    batch_size: int = 128
    lr: float = 1e-3
    warmup_ratio: float = 0.02
    budgets_hours: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # CPU-hours
    threads: int = 1  # torch threads of the pre-training (CPU seconds count all of them)
    seed: int = 0
    # Continued pre-training (Gururangan et al. 2020): start from this model folder (its
    # vocabulary, shape and weights; an MLM head it lacks starts fresh) instead of random
    # weights, and fine-tune it unchanged as the baseline instead of the random-init twin.
    # `vocab_size`, `model` and `dropout` are then the model's own.
    init: str | None = None
    corpus_format: str = "auto"  # `prepare`'s --format (a task's text: "google", see task_text)
    # The pre-training's precision, fixed for the run (never "auto": a sitting on another CPU
    # class continues with the same arithmetic). bf16 autocast halves a step's CPU seconds where
    # the CPU multiplies bf16 natively (AMX: docs/reports/pretraining.md), so a budget holds twice the
    # tokens; fine-tuning stays fp32 either way.
    precision: str = "fp32"
    # Two phases (the paper's; Li et al. 2022's sequence length warmup): train at
    # `max_seq_length` for all but `phase2_share` of the budget's CPU seconds, then go on at
    # `phase2_seq_length` (a fresh optimizer and schedule: `bertkit pretrain --phase2-data`).
    # A run of one budget only (the recipe table): a point read off a longer run would sit in
    # phase 1.
    phase2_seq_length: int | None = None
    phase2_share: float = 0.1

    def __post_init__(self) -> None:
        if not self.corpus:
            raise BertkitError("the curve needs a corpus (book text)")
        budgets = list(self.budgets_hours)
        if (not budgets or not all(map(math.isfinite, budgets))
                or budgets != sorted(set(budgets)) or budgets[0] <= 0):
            raise BertkitError(f"budgets must be increasing and > 0, got {self.budgets_hours}")
        if self.threads < 1:
            raise BertkitError(f"the study needs at least one thread, got {self.threads}")
        if self.batch_size < 1 or self.vocab_size < 1:
            raise BertkitError(f"--batch-size and --vocab-size must be >= 1, got "
                               f"{self.batch_size} and {self.vocab_size}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise BertkitError(f"--lr must be a finite number > 0, got {self.lr}")
        if self.precision not in PRECISIONS:
            raise BertkitError(f"the curve's precision is one of {', '.join(PRECISIONS)}, "
                               f"got {self.precision!r}")
        if self.phase2_seq_length is not None:
            if len(budgets) != 1:
                raise BertkitError("a second phase needs a run of one budget (a recipe), got "
                                   f"budgets {self.budgets_hours}")
            if self.phase2_seq_length <= self.max_seq_length:
                raise BertkitError(f"phase 2's length ({self.phase2_seq_length}) must exceed "
                                   f"phase 1's ({self.max_seq_length})")
            if not 0 < self.phase2_share < 1:
                raise BertkitError(f"phase 2's share of the budget must be in (0, 1), got "
                                   f"{self.phase2_share}")

    @property
    def horizon_seconds(self) -> float:
        return self.budgets_hours[-1] * HOUR

    @classmethod
    def continued(cls, init: str, corpus: tuple[str, ...], **changes: Any) -> CurveSettings:
        """Continued pre-training of `init` on `corpus` (a task's own text: Gururangan et al.'s
        task-adaptive pre-training): a fine-tuning-sized rate and batch (the model has learned
        already; 1e-3 would undo it), 10% warmup, the model's own dropout, budgets to 2
        CPU-hours. Any field can still be changed."""
        config = BertConfig.load(init)
        return cls(corpus=corpus, init=init, **{
            "vocab_size": config.vocab_size, "model": "init", "lr": 1e-4, "batch_size": 32,
            "warmup_ratio": 0.1, "dropout": config.hidden_dropout_prob,
            "budgets_hours": (0.25, 0.5, 1.0, 2.0), **changes})


def recipe_fields(name: str) -> dict[str, Any]:
    """A named recipe (`pretrain_recipes`) as the curve's settings (the curve masks at batch
    time whatever the recipe says)."""
    return {k: v for k, v in get_recipe(name).settings.items() if k != "dynamic_masking"}


# what can make one curve another (its precision aside): the recipe's settings and the shape
TAG_KEYS = ("max_seq_length", "objective", "masked_lm_prob", "lr", "warmup_ratio", "batch_size",
            "dropout", "model", "vocab_size")


def curve_tag(settings: CurveSettings) -> str:
    """A curve's name beside the curve's own ("": the curve's own recipe): the named recipe it
    is ("small-budget"), else each setting that differs from the curve's own, as key and value
    ("lr0.0005-batch_size64"), so that two curves never share a report."""
    own = CurveSettings(corpus=settings.corpus)
    for name in RECIPES:
        named = dataclasses.replace(own, **recipe_fields(name))
        if name != "paper" and all(getattr(settings, k) == getattr(named, k) for k in TAG_KEYS):
            return name
    return "-".join(f"{k}{getattr(settings, k)}" for k in TAG_KEYS
                    if getattr(settings, k) != getattr(own, k))


def budget_label(hours: float) -> str:
    """A point's name: "0.25h", "1h", "16h"."""
    return f"{hours:g}h"


BRANCH = "+cool"  # a point's decay branch (cooldown.py): "2h+cool"


def point_labels(settings: CurveSettings) -> list[str]:
    """Every point the study can record, in the curve's order: each budget, then its decay
    branch."""
    return [name for h in settings.budgets_hours for name in (budget_label(h),
                                                              budget_label(h) + BRANCH)]


def check_points(settings: CurveSettings, points: Sequence[str] | None,
                 branches: bool = True) -> list[str]:
    """`points` (None: all) checked against the study's point labels, with or without the
    decay branches; the labels they may name."""
    labels = point_labels(settings) if branches else [budget_label(h)
                                                      for h in settings.budgets_hours]
    unknown = sorted(set(points or ()) - set(labels))
    if unknown:
        raise BertkitError(f"no budget {', '.join(unknown)} in this study ({', '.join(labels)})")
    return labels


def sitting(work: Path, part: str) -> AbstractContextManager[None]:
    """One sitting of each part (pre-training, fine-tuning) at a time in a work folder:
    `runner.hold` on a folder of the part's own, which no run inside the sitting takes."""
    return hold(sitting_folder(work, part), f"another {part} sitting of the study in {work}")


def sitting_folder(work: Path, part: str) -> Path:
    return work / f"sitting-{part}"


def open_store(work: Path, settings: CurveSettings) -> ResultsStore:
    return ResultsStore(work / "study.json", dataclasses.asdict(settings), ADDED_LATER)


# CurveSettings fields, at their defaults
ADDED_LATER = {"init": None, "corpus_format": "auto", "precision": "fp32",
               "phase2_seq_length": None, "phase2_share": 0.1}


DOC_LINES = 50


def task_text(task: str, data: Path, work: Path) -> tuple[str, ...]:
    """A task's training texts without their labels, written once into the work folder: the
    corpus of task-adaptive pre-training, in Google's format (read it with corpus_format
    "google": one text a line, as a sentence, a blank line after every `DOC_LINES`, so that
    instances fill up with consecutive texts and the held-out split has chunks to take).
    Dev and test texts are never read, so the fine-tuning's evaluation stays unseen."""
    path = work / "corpus" / f"{task}-train.txt"
    if not path.is_file():
        files, _ = task_files(task, data)
        if "train_file" not in files:
            raise BertkitError(f"{task}: no training file under {data} to take text from")
        examples = get_task(task).read(Path(files["train_file"]))
        lines = [t for e in examples for t in (e.text_a, getattr(e, "text_b", None)) if t]
        path.parent.mkdir(parents=True, exist_ok=True)
        texts = [" ".join(t.split()) for t in lines]
        docs = ["\n".join(texts[i:i + DOC_LINES]) for i in range(0, len(texts), DOC_LINES)]
        atomic_write_text(path, "\n\n".join(docs) + "\n")
    return (str(path),)


def prepare_data(settings: CurveSettings, work: Path, workers: int = 1) -> Path:
    """The vocabulary (learned, or the --init model's) and the dynamic-masking shards (cached;
    a killed preparation resumes)."""
    if settings.init is not None:
        tokenizer = BertTokenizer.from_pretrained(settings.init)
        tokenizer.save_pretrained(work / "vocab")
    else:
        tokenizer = pipeline.learn_vocabulary(settings.corpus, work / "vocab",
                                              settings.vocab_size, workers=workers,
                                              progress=False)
    lengths = {"shards": settings.max_seq_length, PHASE2_SHARDS: settings.phase2_seq_length}
    for name, t in lengths.items():
        if t is None or (work / name / "meta.json").is_file():
            continue
        chunk = ChunkConfig(InstanceConfig(t, objective=settings.objective), dupe_factor=1,
                            masked_lm_prob=settings.masked_lm_prob,
                            max_predictions_per_seq=default_max_predictions(
                                t, settings.masked_lm_prob),
                            dynamic_masking=True, seed=settings.seed + 12345)
        prepare(list(settings.corpus), tokenizer, work / name,
                PrepareConfig(chunk, format=settings.corpus_format), workers=workers,
                resume=True, progress=False)
    return work / "shards"


PHASE2_SHARDS = "shards-phase2"  # the second phase's (a recipe with phase2_seq_length)


def architecture(settings: CurveSettings, vocab_size: int) -> BertConfig:
    if settings.init is not None:
        return BertConfig.load(settings.init)
    return BertConfig.preset(settings.model, vocab_size=vocab_size,
                             max_position_embeddings=max(512, settings.max_seq_length,
                                                         settings.phase2_seq_length or 0),
                             hidden_dropout_prob=settings.dropout,
                             attention_probs_dropout_prob=settings.dropout)


def run_config(settings: CurveSettings, work: Path, run: Path, max_steps: int, *,
               stop_at: float | None = None, log_every: int = 20,
               save_every: int = 200, decay_from: tuple[int, float] | None = None,
               phase2_steps: int = 0, stop_at_step: int | None = None) -> PretrainConfig:
    """The curve's recipe as one pre-training run into `run` (continued when it holds a
    checkpoint, started when it holds none: `--resume auto`), with its second phase when
    `phase2_steps` are given."""
    train = pretrain_train_config(
        str(run), max_steps=max_steps, batch_size=settings.batch_size, lr=settings.lr,
        warmup_ratio=settings.warmup_ratio, seed=settings.seed, precision=settings.precision,
        log_every=log_every, save_every=save_every, keep=1, eval_every=0, progress=False,
        resume=RESUME_AUTO, stop_at_cpu_seconds=stop_at, stop_at_step=stop_at_step,
        decay_from=decay_from)
    shape = ({"init": settings.init} if settings.init is not None else
             {"config_file": str(pipeline.architecture_file(run))})
    phase2 = ({"phase2_data": str(work / PHASE2_SHARDS), "phase2_steps": phase2_steps}
              if phase2_steps else {})
    return PretrainConfig(data=str(work / "shards"), train=train, **shape,
                          tokenizer=str(work / "vocab"), objective=settings.objective,
                          eval_batches=20, **phase2)


def horizon_steps(store: ResultsStore, settings: CurveSettings, work: Path,
                  arch: BertConfig) -> int:
    """The run's max_steps: its horizon (the largest budget) over the CPU seconds a step costs,
    measured once by a short run of the real recipe and stored (a resumed study keeps it)."""
    info = store.pretrain_info("horizon")
    if info is None:
        per_step = probe_cost(settings, work, work / "probe", arch)
        if not per_step > 0:
            raise BertkitError(f"{work}: the probe measured {per_step} CPU-s a step; run the "
                               "study again")
        steps = max(100, int(settings.horizon_seconds / per_step))
        info = {"steps": steps, "cpu_seconds_per_step": round(per_step, 4)}
        store.put_pretrain("horizon", info)
        log.info("horizon: %d steps (%.2f CPU-s a step measured)", steps, per_step)
    return int(info["steps"])


def probe_cost(settings: CurveSettings, work: Path, probe: Path, arch: BertConfig) -> float:
    """The CPU seconds one step of the recipe costs, from a 12-step run into `probe` (removed
    after) on `work`'s shards and vocabulary."""
    shutil.rmtree(probe, ignore_errors=True)
    cfg = run_config(settings, work, probe, max_steps=12, log_every=4, save_every=0)
    if cfg.config_file is not None:  # (with --init, the model's own)
        arch.save(cfg.config_file)
    run_pretraining(cfg)
    # steps 4 to 12 from the log: start-up, the first steps' allocations and the final
    # evaluation and export left out
    cost = {r["step"]: r["cpu_seconds"] for r in read_records(probe / "metrics.jsonl")
            if "cpu_seconds" in r}
    shutil.rmtree(probe, ignore_errors=True)
    if cfg.config_file is not None:
        Path(cfg.config_file).unlink(missing_ok=True)
    return (cost[12] - cost[4]) / 8


def corpus_files(data: Path) -> tuple[str, ...]:
    """The shared book text: books/, gutenberg/ (the two files that are not valid UTF-8 are
    read with replacement by the corpus reader) and WikiText-2's test split."""
    files = sorted(map(str, (data / "books").glob("*.txt")))
    files += sorted(map(str, (data / "gutenberg").glob("*.txt")))
    files += [str(p) for p in [data / "wikitext-2" / "wiki.test.raw"] if p.is_file()]
    if not files:
        raise BertkitError(f"{data}: no books/*.txt, gutenberg/*.txt or wikitext-2 (expected the "
                           "shared data folder)")
    return tuple(files)


def status_lines(store: ResultsStore) -> list[str]:
    """One line per budget point recorded, and the horizon."""
    lines = []
    horizon = store.pretrain_info("horizon")
    if horizon:
        lines.append(f"horizon: {horizon['steps']} steps at {horizon['cpu_seconds_per_step']} "
                     "CPU-s a step" + (f"; reproducing {horizon['reproduces']}: "
                                       f"{', '.join(horizon['point_steps'])} at their recorded "
                                       "steps, any later budget at this machine's CPU seconds"
                                       if "reproduces" in horizon else ""))
    for label, info in store.data["pretrain"].items():
        if label == "horizon":
            continue
        acc = info.get("eval_mlm_acc")
        lines.append(f"{label}: step {info['step']}, {info['tokens_seen'] / 1e6:.1f}M tokens, "
                     f"{info['cpu_seconds'] / HOUR:.2f} CPU-h, held-out MLM accuracy "
                     f"{'-' if acc is None else f'{100 * acc:.1f}%'}")
    return lines
