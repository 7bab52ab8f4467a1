"""The student of a distillation (`--student`): what it is, checked against the teacher, and
built as a model folder that the distillation and its baseline both start from.

- `layers:0,2,4`: the teacher's embeddings, those encoder layers (renumbered 0, 1, 2), its pooler
  and its classifier, copied exactly: DistilBERT's initialization (Sanh et al. 2019) applied to a
  fine-tuned model;
- a preset name (`tiny`, `mini`, ...): random initialization from its own stream of the run's
  seed, the teacher's vocabulary, positions and labels;
- a model folder (any hidden size): a pre-trained encoder with its own tokenizer ("pre-trained
  distillation", Turc et al. 2019), used as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from bertkit.checkpoint import check_model_dir
from bertkit.config import PRESETS, BertConfig
from bertkit.errors import BertkitError
from bertkit.model import BertModel
from bertkit.tasks.splits import TASK_KEY
from bertkit.tokenization import BertTokenizer
from bertkit.training.stream import stream_seed


@dataclass(frozen=True)
class StudentSpec:
    kind: str  # "layers" | "preset" | "folder"
    layers: tuple[int, ...] = ()
    name: str = ""  # preset name or folder


def parse_student(spec: str) -> StudentSpec:
    """`layers:0,2,4`, a preset name, or a model folder; anything else is one clear error."""
    if spec.startswith("layers:"):
        try:
            layers = tuple(int(x) for x in spec[len("layers:"):].split(","))
        except ValueError:
            raise BertkitError(f"--student {spec}: expected layers:I,J,... (teacher layer "
                               "numbers from 0)") from None
        if any(i < 0 for i in layers) or list(layers) != sorted(set(layers)):
            raise BertkitError(f"--student {spec}: layer numbers must be >= 0, increasing and "
                               "distinct")
        return StudentSpec("layers", layers)
    if spec in PRESETS:
        return StudentSpec("preset", name=spec)
    if Path(spec).is_dir():
        return StudentSpec("folder", name=spec)
    raise BertkitError(f"--student {spec}: not layers:I,J,..., a preset "
                       f"({', '.join(PRESETS)}) or a model folder")


def student_config(spec: StudentSpec, teacher: BertConfig) -> BertConfig:
    """The student's shape before it is built (its positions, layers, width and heads), with
    the layers it names checked against the teacher's."""
    if spec.kind == "folder":
        return BertConfig.load(check_model_dir(spec.name))
    n = teacher.num_hidden_layers
    if spec.kind == "layers" and max(spec.layers) >= n:
        raise BertkitError(f"--student layers:{','.join(map(str, spec.layers))}: the teacher "
                           f"has {n} layers (0..{n - 1})")
    if spec.kind == "preset":
        return BertConfig.preset(spec.name, **preset_shape(teacher))
    return teacher.replace(num_hidden_layers=len(spec.layers))


def preset_shape(teacher: BertConfig) -> dict:
    """What a preset student takes from the teacher: its vocabulary, positions and labels."""
    return dict(vocab_size=teacher.vocab_size, type_vocab_size=teacher.type_vocab_size,
                max_position_embeddings=teacher.max_position_embeddings,
                pad_token_id=teacher.pad_token_id, id2label=teacher.id2label)


def build_student(teacher: nn.Module, tokenizer: BertTokenizer, spec: StudentSpec, seed: int,
                  folder: Path) -> Path:
    """The student before training, as a model folder (weights and tokenizer) that both the
    distillation and the baseline start from; a pre-trained folder is used as it is."""
    if spec.kind == "folder":
        check_model_dir(spec.name)
        return Path(spec.name)
    config = teacher.config
    extra = {k: v for k, v in config.extra.items() if k != TASK_KEY}  # not fine-tuned yet
    if spec.kind == "layers":
        model = student_from_layers(teacher, spec.layers)
        model.config = model.config.replace(extra=extra)
    else:
        with torch.random.fork_rng(devices=[]):  # the student's own stream of the run's seed
            torch.manual_seed(stream_seed(seed, "student"))
            model = BertModel(BertConfig.preset(spec.name, **preset_shape(config), extra=extra))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def student_from_layers(teacher: nn.Module, layers: tuple[int, ...]) -> nn.Module:
    """The teacher's head class with `layers` of its encoder, renumbered; every other weight
    (embeddings, pooler, classifier) copied as it is."""
    student = type(teacher)(student_config(StudentSpec("layers", layers), teacher.config))
    source = teacher.state_dict()
    state = {}
    for name in student.state_dict():
        parts = name.split(".")
        if parts[:2] == ["bert", "layers"]:
            parts[2] = str(layers[int(parts[2])])
        state[name] = source[".".join(parts)].detach().clone()
    student.load_state_dict(state)
    return student


def student_tokenizer(spec: StudentSpec, folder: Path, teacher_tok: BertTokenizer) -> BertTokenizer:
    """The teacher's tokenizer, unless the student is a pre-trained folder with its own."""
    return BertTokenizer.from_pretrained(folder) if spec.kind == "folder" else teacher_tok
