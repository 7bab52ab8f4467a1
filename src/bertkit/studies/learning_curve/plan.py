"""What a learning curve runs: its fixed recipe (`Recipe`), the models beside their random twins
(`Variant`), the labelled subsets (`subset_indices`, `subset_file`) and the runs themselves
(`Run`, `planned_runs`).

Every model is measured beside its twin: the same architecture and vocabulary with random
weights, so that the gap between them is what pre-training bought at each label count. A subset
of N labels is the first N of a seeded shuffle of the training set: the same examples for every
model and approach at a seed, and the subsets of one seed nested (50 within 100 within 300).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.runs.finetune import check_regression_bias
from bertkit.studies import pipeline
from bertkit.studies.label_curve import FROZEN, subset_indices, write_subset
from bertkit.tasks import get_task
from bertkit.tasks.glue import GLUE_TASKS, TextExample
from bertkit.tokenization import BertTokenizer

# frozen-apart (pair tasks): the two texts embedded apart and compared (`frozen.pair_features`)
APPROACHES = ("finetune", "frozen", "frozen-apart")
DEFAULT_APPROACHES = ("finetune", "frozen")
FROZEN_APPROACHES = FROZEN  # (defined with the statistics that set them against fine-tuning)
RANDOM_SUFFIX = "-random"  # a twin's name: its model's name and this
ALL = "all"  # the size that is the whole training set


@dataclass(frozen=True)
class Recipe:
    """The settings every run of a study shares (saved as the work folder's study.json: runs
    recorded under one recipe are never mixed with another's)."""

    task: str
    train_file: str
    dev_file: str
    max_seq_length: int = 128
    dev_examples: int | None = None  # the first N of dev (None: all)
    lr_grid: tuple[float, ...] = (3e-5, 1e-4, 3e-4)
    epochs: float = 3.0
    # Fine-tuning's floor of optimizer steps: 3 epochs of 50 labels at batch 32 are 6 steps,
    # too few for any rate to move a model (Mosbach et al. 2021: few-sample fine-tuning needs
    # more iterations), so a small subset is trained for more epochs
    min_steps: int = 50
    batch_size: int = 32
    selection_seed: int = 100  # the seed whose runs choose each rate, never reported
    # A regression head's starting bias (FinetuneConfig.regression_bias): at the training
    # labels' mean, so that a few dozen steps learn the ranking instead of the offset
    regression_bias: str = "mean"

    def __post_init__(self) -> None:
        if self.task not in GLUE_TASKS:
            raise BertkitError(f"learning-curve runs a GLUE sentence or pair task ({', '.join(GLUE_TASKS)}); "
                               f"got {self.task!r}")
        if self.max_seq_length < 8:
            raise BertkitError(f"--max-seq-length must be >= 8, got {self.max_seq_length}")
        if self.dev_examples is not None and self.dev_examples < 1:
            raise BertkitError(f"--dev-examples must be >= 1, got {self.dev_examples}")
        if not self.lr_grid or any(not (math.isfinite(lr) and lr > 0) for lr in self.lr_grid) \
                or len(set(self.lr_grid)) != len(self.lr_grid):
            raise BertkitError("--lr-grid: one or more distinct rates > 0, got "
                               f"{','.join(f'{lr:g}' for lr in self.lr_grid) or 'none'}")
        check_regression_bias(self.regression_bias)
        if not (math.isfinite(self.epochs) and self.epochs > 0) or self.min_steps < 1:
            raise BertkitError(f"--epochs must be > 0 and --min-steps >= 1, got {self.epochs:g} "
                               f"and {self.min_steps}")

    def epochs_for(self, size: int) -> float:
        """The recipe's epochs, or more where they fall under `min_steps` optimizer steps."""
        per_epoch = math.ceil(size / self.batch_size)
        return max(self.epochs, self.min_steps / per_epoch)

    def settings(self) -> dict[str, Any]:
        return json_ready(dataclasses.asdict(self))


def json_ready(data: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


@dataclass(frozen=True)
class Variant:
    """One model of the curve: a given model, or its random twin (`pretrained` False)."""

    name: str
    path: Path
    model: str  # the given model's name (its twin's too)
    pretrained: bool


@dataclass(frozen=True)
class Run:
    """One measurement: a variant, an approach, a label count and a seed; `lr` for fine-tuning,
    and `selection` for the runs on the selection seed that choose the rate."""

    approach: str
    variant: str
    size: int
    seed: int
    lr: float | None = None
    selection: bool = False

    @property
    def key(self) -> str:
        """The run's name in the records and its claim's folder name."""
        rate = "" if self.lr is None or not self.selection else f"-lr{self.lr:g}"
        return f"{self.approach}-{self.variant}-n{self.size}-s{self.seed}{rate}"


def model_name(spec: str) -> tuple[str, Path]:
    """`--model NAME=PATH` or `--model PATH` as (name, path): a bare path is named after its
    folder, or after the folder above when that one is `model` (an export's layout)."""
    name, sep, path = spec.partition("=")
    if not sep:
        path, name = spec, ""
    folder = Path(path)
    if not name:
        name = folder.resolve().parent.name if folder.name == "model" else folder.name
    return name, folder


def model_variants(models: Sequence[str], work: Path) -> list[Variant]:
    """Every model (checked to be a model folder) and its twin, made once under WORK/twins/."""
    variants: list[Variant] = []
    for spec in models:
        name, path = model_name(spec)
        config = BertConfig.load(path)
        tokenizer = BertTokenizer.from_pretrained(path)
        twin = pipeline.random_init(config, tokenizer, work / "twins" / name, seed=0)
        variants += [Variant(name, path, name, True), Variant(name + RANDOM_SUFFIX, twin, name, False)]
    return variants


def check_names(models: Sequence[str]) -> None:
    """Two models of one name would share records: refused."""
    names = [model_name(m)[0] for m in models]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BertkitError(f"--model: two models named {', '.join(twice)}; name them apart "
                           "with NAME=PATH")
    # a run's name is APPROACH-MODEL-...: "frozen" of a model "apart-x" would read as
    # "frozen-apart" of "x"
    ambiguous = [n for n in names if n.startswith("apart-")]
    if ambiguous:
        raise BertkitError(f"--model: a name starting with 'apart-' ({ambiguous[0]}) would mix "
                           "its runs with another's; name it otherwise with NAME=PATH")


def parse_sizes(text: str) -> tuple[int | str, ...]:
    """--sizes "50,100,all" as (50, 100, "all"): positive, distinct, rising."""
    sizes: list[int | str] = []
    for part in (p.strip() for p in text.split(",")):
        if part == ALL:
            sizes.append(ALL)
        elif part.isdigit() and int(part) > 0:
            sizes.append(int(part))
        else:
            raise BertkitError(f"--sizes {text!r}: {part!r} is not a label count > 0 or {ALL!r}")
    numbers = [s for s in sizes if s != ALL]
    if len(set(sizes)) != len(sizes) or numbers != sorted(numbers) or (ALL in sizes and sizes[-1] != ALL):
        raise BertkitError(f"--sizes {text!r}: distinct label counts, rising, {ALL!r} last")
    return tuple(sizes)


def resolve_sizes(sizes: Sequence[int | str], n_train: int, train_file: str) -> list[int]:
    """The sizes as label counts of this training set; one past it is refused (`all` is it)."""
    over = [s for s in sizes if s != ALL and int(s) > n_train]
    if over:
        raise BertkitError(f"--sizes {over[0]}: {train_file} holds {n_train} training examples "
                           f"(use {ALL!r} for all of them)")
    counts = [n_train if s == ALL else int(s) for s in sizes]
    return sorted(set(counts))


def read_examples(task: str, path: str | Path, limit: int | None = None) -> list[TextExample]:
    examples = get_task(task).read(Path(path))
    if not examples:
        raise BertkitError(f"{path}: no examples")
    return examples[:limit]


def subset_file(recipe: Recipe, examples: Sequence[TextExample], size: int, seed: int,
                folder: Path) -> Path:
    """The subset of `size` at `seed` as a training file, written once under `folder`."""
    path = folder / f"{recipe.task}-n{size}-s{seed}.tsv"
    if not path.is_file():
        write_subset(Path(recipe.train_file), examples, subset_indices(len(examples), size, seed), path)
    return path


def planned_runs(variants: Sequence[Variant], approaches: Sequence[str], sizes: Sequence[int],
                 seeds: int, recipe: Recipe) -> list[Run]:
    """Every run, cheapest first: the frozen features of every variant, then fine-tuning size
    by size (each variant's rate grid on the selection seed, then its reported seeds), so a
    study stopped early has whole rows at the smallest sizes."""
    runs = [Run(a, v.name, n, s) for a in FROZEN_APPROACHES if a in approaches
            for n in sizes for v in variants for s in range(seeds)]
    if "finetune" in approaches:
        for n in sizes:
            for v in variants:
                if len(recipe.lr_grid) > 1:  # (one rate: nothing to choose)
                    runs += [Run("finetune", v.name, n, recipe.selection_seed, lr, selection=True)
                             for lr in recipe.lr_grid]
                runs += [Run("finetune", v.name, n, s) for s in range(seeds)]
    return runs
