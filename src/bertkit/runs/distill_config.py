"""A distillation run's settings (`DistillConfig`, saved beside the run as distill_config.json)
and what it reads (`Transfer`); the run itself is `bertkit.runs.distill`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bertkit.data.corpus import FORMATS as CORPUS_FORMATS
from bertkit.errors import BertkitError
from bertkit.runs.distill_student import parse_student
from bertkit.runs.finetune import FinetuneConfig
from bertkit.tasks.splits import Split

UNLABELLED_FORMATS = ("lines", *CORPUS_FORMATS)  # lines: what `predict` reads; else `prepare`'s


@dataclass(frozen=True)
class DistillConfig:
    """One distillation run (saved beside it as distill_config.json). `finetune` holds what a
    fine-tuning run of the student would use: the task, data, featurization and the loop's
    recipe, output folder included (its `model_dir` is the teacher, whose tokenizer reads the
    data for the teacher)."""

    teacher_dir: str
    student: str  # "layers:0,2,4" | a preset name | a model folder
    finetune: FinetuneConfig
    temperature: float = 2.0
    alpha: float = 0.5  # weight of the soft (teacher) loss; 1 - alpha on the hard labels
    unlabelled: str | None = None  # texts only the teacher labels
    unlabelled_format: str = "lines"  # "lines": what `predict` reads; else a `prepare` format
    baseline: bool = False  # also fine-tune the same student without the teacher
    speed_texts: int = 512  # dev texts timed through the predict path (0: no timing)
    speed_repeats: int = 3  # timed passes per model; the fastest counts
    hidden_weight: float = 0.0  # TinyBERT's hidden-state transfer, this much of it (0: off)
    attention_weight: float = 0.0  # MiniLM's attention transfer, this much of it (0: off)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise BertkitError(f"--temperature must be a finite number > 0, got {self.temperature}")
        if not 0.0 <= self.alpha <= 1.0:
            raise BertkitError(f"--alpha must be between 0 and 1, got {self.alpha}")
        if self.unlabelled_format not in UNLABELLED_FORMATS:
            raise BertkitError(f"--unlabelled-format must be one of "
                               f"{', '.join(UNLABELLED_FORMATS)}, got {self.unlabelled_format!r}")
        if self.speed_texts < 0 or self.speed_repeats < 1:
            raise BertkitError(f"--speed-texts must be >= 0 and --speed-repeats >= 1, got "
                               f"{self.speed_texts} and {self.speed_repeats}")
        for flag, weight in self.layer_weights.items():
            if not (math.isfinite(weight) and weight >= 0):
                raise BertkitError(f"{flag} must be a finite number >= 0, got {weight}")
            if weight and parse_student(self.student).kind == "folder":
                raise BertkitError(f"{flag} compares the two models token by token, so the "
                                   "student must read the teacher's tokens: layers:I,J,... or "
                                   "a preset, not a model folder with a tokenizer of its own")
        parse_student(self.student)

    @property
    def output_dir(self) -> str:
        return self.finetune.output_dir

    @property
    def layer_weights(self) -> dict[str, float]:
        """The intermediate layers' transfer terms (`LayerTransfer`), by option."""
        return {"--hidden-weight": self.hidden_weight, "--attention-weight": self.attention_weight}


@dataclass
class Transfer:
    """Everything the run reads, featurized for the student (and the teacher where its
    tokenizer differs)."""

    student_train: list[dict[str, Any]]  # labelled + unlabelled, in that order
    teacher_train: list[dict[str, Any]]
    student_dev: list[Split]
    teacher_dev: list[Split]
    labelled: int  # examples read from the task's training set
    unlabelled: int  # texts only the teacher labels (--unlabelled)
    labels: list[str] | None
    note: str | None = None  # how the data was split (--split-dev), said in the records
