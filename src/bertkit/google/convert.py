"""Google's BERT checkpoints (google-research/bert, TensorFlow) -> a model folder in HF layout.

A Google release is a folder with `bert_config.json`, `vocab.txt` and a V2 checkpoint
(`bert_model.ckpt.index` + `bert_model.ckpt.data-*`); a run of `run_pretraining.py`,
`run_classifier.py` or `run_squad.py` leaves `model.ckpt-STEP` checkpoints (with optimizer
slots) and a `checkpoint` file naming the latest. The variables keep Google's names; each maps
to HF's name a path component at a time (`bert/encoder/layer_0/attention/self/query/kernel` ->
`bert.encoder.layer.0.attention.self.query.weight`, a dense kernel [in, out] transposed to
PyTorch's [out, in]). The heads present decide the model: `cls/predictions` + `cls/
seq_relationship` -> `BertForPreTraining`; `output_weights`/`output_bias` (run_classifier.py)
-> `BertForSequenceClassification` with as many labels as the weights have rows;
`cls/squad/output_*` (run_squad.py) -> `BertForQuestionAnswering`; none -> `BertModel`.

Everything is checked before anything is written: the config against every tensor's shape,
the vocabulary against the config and the lower-casing, each tensor against its CRC32C. The
folder is then written by the model's own `save_pretrained` (the names of `checkpoint.py`'s
table) and the tokenizer's, into an output folder claimed by `bertkit.io`'s rules.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bertkit.checkpoint import check_vocab, load_into, to_hf_state_dict
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.google.bundle import Bundle, TensorEntry, index_path, skipped_kind
from bertkit.heads import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
)
from bertkit.io import LOCK_FILE, check_output_dir, claim_output_dir
from bertkit.model import BertModel
from bertkit.tokenization.vocab_io import load_vocab
from bertkit.tokenization.wordpiece import BertTokenizer

log = logging.getLogger("bertkit")

GOOGLE_CONFIG = "bert_config.json"
VOCAB = "vocab.txt"
STATE_FILE = "checkpoint"  # TensorFlow's list of a run's checkpoints, the latest first
MARKER = "convert.json"  # the settings of the conversion that wrote a folder
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")

# One path component at a time: what TensorFlow's layers call a parameter -> PyTorch's name.
_COMPONENTS = {"kernel": "weight", "gamma": "weight", "beta": "bias",
               "output_weights": "weight", "output_bias": "bias"}


@dataclass(frozen=True)
class GoogleConversion:
    """What `bertkit convert google` converts, and where to."""

    source: Path  # a release or run folder, or a checkpoint prefix (DIR/model.ckpt-1000)
    output: Path
    lowercase: bool | None = None  # None: from the folder's name, checked against the vocabulary
    config_file: Path | None = None  # default: bert_config.json beside the checkpoint
    vocab_file: Path | None = None  # default: vocab.txt beside the checkpoint
    labels: tuple[str, ...] | None = None  # a classifier's label names, in its output order
    overwrite: bool = False


@dataclass(frozen=True)
class ConversionResult:
    output: Path
    checkpoint: Path  # the prefix read
    architecture: str
    tensors: int  # converted
    lowercase: bool
    lowercase_reason: str
    left_out: dict[str, list[str]] = field(default_factory=dict)  # why -> Google's names


def hf_name(google: str) -> tuple[str, bool]:
    """(HF's name, whether to transpose) of a google-research/bert variable."""
    parts = google.split("/")
    if parts == ["cls", "predictions", "output_bias"]:  # the MLM decoder's bias
        return "cls.predictions.bias", False
    if parts[:2] == ["cls", "squad"]:  # run_squad.py's span head
        parts = ["qa_outputs", *parts[2:]]
    elif len(parts) == 1 and parts[0] in ("output_weights", "output_bias"):  # run_classifier.py's
        parts = ["classifier", parts[0]]
    names: list[str] = []
    for part in parts:
        layer = re.fullmatch(r"layer_(\d+)", part)
        names.extend(["layer", layer.group(1)] if layer else [_COMPONENTS.get(part, part)])
    if parts[-1].endswith("_embeddings"):  # an embedding table is one tensor, not a layer's
        names.append("weight")
    return ".".join(names), parts[-1] == "kernel"


# --- what is converted: the checkpoint, its config and vocabulary -----------------------------

def locate_checkpoint(source: Path) -> Path:
    """The checkpoint prefix `source` names: the prefix itself, or the folder's one checkpoint,
    or the latest in a run folder's `checkpoint` file."""
    if index_path(source).is_file():
        return source
    if source.is_file():
        Bundle(source)  # a V1 checkpoint is refused there, naming what it is
    if not source.is_dir():
        raise BertkitError(f"{source}: no such folder or checkpoint (give the folder holding "
                           "bert_config.json and bert_model.ckpt.index, or a checkpoint prefix)")
    indexes = sorted(p for p in source.glob("*.index") if p.is_file())
    if len(indexes) == 1:
        return indexes[0].with_name(indexes[0].name.removesuffix(".index"))
    if len(indexes) > 1:
        latest = latest_in_state_file(source / STATE_FILE)
        if latest is not None and index_path(source / latest).is_file():
            return source / latest
        names = ", ".join(p.name.removesuffix(".index") for p in indexes[:4])
        raise BertkitError(f"{source}: holds {len(indexes)} checkpoints ({names}"
                           f"{' ...' if len(indexes) > 4 else ''}) and no `checkpoint` file naming "
                           f"the latest; give one as SRC, e.g. {source / indexes[-1].stem}")
    v1 = [p for p in source.iterdir() if p.is_file() and re.search(r"\.ckpt(-\d+)?$", p.name)]
    if v1:
        Bundle(v1[0])  # refused there as V1 (or as not a checkpoint)
    if (source / "config.json").is_file():
        raise BertkitError(f"{source}: already a model folder in HF layout (config.json); "
                           "load it as it is")
    raise BertkitError(f"{source}: no TensorFlow checkpoint here (no *.index file)")


def latest_in_state_file(path: Path) -> str | None:
    """The checkpoint a TensorFlow `checkpoint` file names as the latest (its file name: the
    folder may have moved since the absolute path in it was written)."""
    if not path.is_file():
        return None
    found = re.search(r'^model_checkpoint_path:\s*"([^"]+)"', path.read_text(encoding="utf-8",
                                                                              errors="replace"),
                      re.MULTILINE)
    return Path(found.group(1)).name if found else None


def read_google_config(path: Path) -> BertConfig:
    if not path.is_file():
        raise BertkitError(f"{path}: not found; a checkpoint needs its {GOOGLE_CONFIG} (pass "
                           "--config FILE, e.g. the release's the run started from)")
    return BertConfig.load(path)


def capitalized_tokens(vocab: Mapping[str, int]) -> list[str]:
    """Tokens with an upper-case letter, special tokens ([CLS], [unused0]) aside."""
    return [t for t in vocab if not (t.startswith("[") and t.endswith("]"))
            and any(c.isupper() for c in t)]


def name_says_cased(name: str) -> bool | None:
    """Google's folder names say it: uncased_L-12_H-768_A-12, multi_cased_L-12_H-768_A-12,
    wwm_cased_L-24_H-1024_A-16: True for cased, False for uncased, None when silent."""
    lowered = name.lower()
    if re.search(r"(^|[^a-z])uncased($|[^a-z])", lowered):
        return False
    if re.search(r"(^|[^a-z])cased($|[^a-z])", lowered):
        return True
    return None


def decide_lowercase(given: bool | None, names: list[str], vocab: Mapping[str, int],
                     vocab_path: Path) -> tuple[bool, str]:
    """(lower-case or not, why). The folder's name decides, checked against the vocabulary (an
    uncased vocabulary has no capitals, a cased one has); a disagreement is an error that the
    flag settles; a silent name leaves it to the vocabulary."""
    capitals = capitalized_tokens(vocab)
    sample = ", ".join(repr(t) for t in capitals[:3])
    if given is not None:
        if given and capitals:
            log.warning("--lowercase with %s holding %d tokens with capitals (%s): those tokens "
                        "are never produced", vocab_path, len(capitals), sample)
        return given, "--lowercase" if given else "--no-lowercase"
    said = next(((n, c) for n in names if (c := name_says_cased(n)) is not None), None)
    if said is None:
        if capitals:
            return False, f"{vocab_path.name} has tokens with capitals ({sample})"
        return True, f"{vocab_path.name} has no token with capitals"
    name, cased = said
    if cased and not capitals:
        raise BertkitError(f"{vocab_path}: the folder name {name!r} says cased but the vocabulary "
                           "has no token with capitals (an uncased one); pass --lowercase or "
                           "--no-lowercase to decide")
    if not cased and capitals:
        raise BertkitError(f"{vocab_path}: the folder name {name!r} says uncased but the vocabulary "
                           f"has {len(capitals)} tokens with capitals ({sample}); pass "
                           "--lowercase or --no-lowercase to decide")
    return not cased, f"the folder name {name!r}, and {vocab_path.name} agrees"


# --- which model, and does every tensor fit it ---------------------------------------------------

def choose_model(names: set[str], config: BertConfig, entries: Mapping[str, TensorEntry],
                 labels: tuple[str, ...] | None = None) -> tuple[type[torch.nn.Module], BertConfig]:
    """The model class the checkpoint's heads make (and its config, with a classifier's labels:
    `labels`, else HF's LABEL_0 ... in the order of the weights' rows)."""
    if "cls/squad/output_weights" in names:
        return BertForQuestionAnswering, config
    if "output_weights" in names:
        rows = entries["output_weights"].shape[0]
        if labels is not None and len(labels) != rows:
            raise BertkitError(f"--labels names {len(labels)} labels but the classifier "
                               f"(output_weights) has {rows} outputs")
        label_names = labels or tuple(f"LABEL_{i}" for i in range(rows))
        return BertForSequenceClassification, config.replace(id2label=dict(enumerate(label_names)),
                                                             label2id=None)
    if any(n.startswith("cls/predictions/") for n in names):
        if any(n.startswith("cls/seq_relationship/") for n in names):
            return BertForPreTraining, config
        return BertForMaskedLM, config
    return BertModel, config


def expected_shapes(model_class: type[torch.nn.Module], config: BertConfig) -> dict[str, tuple]:
    """HF's name -> shape of every tensor the model saves, from the model built on the meta
    device (no memory, no initialization work)."""
    with torch.device("meta"):
        model = model_class(config)
    return {k: tuple(v.shape) for k, v in to_hf_state_dict(model.state_dict()).items()}


def plan_tensors(bundle: Bundle, config: BertConfig, config_path: Path,
                 labels: tuple[str, ...] | None = None
                 ) -> tuple[type[torch.nn.Module], BertConfig, dict[str, tuple[str, bool]],
                            dict[str, list[str]]]:
    """(model class, its config, HF name -> (Google name, transpose), what is left out and why).
    Every tensor the model needs must be there in the shape the config gives; a tensor of the
    encoder the model does not have means the config is not this checkpoint's."""
    left_out: dict[str, list[str]] = {}
    weights: dict[str, TensorEntry] = {}
    for name, entry in bundle.entries.items():
        kind = skipped_kind(name)
        if kind is not None:
            left_out.setdefault(kind, []).append(name)
        else:
            weights[name] = entry
    model_class, config = choose_model(set(weights), config, weights, labels)
    if labels is not None and model_class is not BertForSequenceClassification:
        raise BertkitError(f"{bundle.prefix}: --labels given but the checkpoint has no "
                           f"classifier (it converts to {model_class.__name__})")
    shapes = expected_shapes(model_class, config)
    plan: dict[str, tuple[str, bool]] = {}
    for name, entry in sorted(weights.items()):
        hf, transpose = hf_name(name)
        if model_class is BertModel:
            hf = hf.removeprefix("bert.")
        if hf not in shapes:
            if name.startswith("bert/") and not name.startswith("bert/pooler/"):
                raise BertkitError(f"{config_path}: does not describe this checkpoint: it has "
                                   f"{name!r}, which the config's model has not (num_hidden_layers "
                                   f"{config.num_hidden_layers})")
            left_out.setdefault(f"not part of {model_class.__name__}", []).append(name)
            continue
        shape = tuple(reversed(entry.shape)) if transpose else entry.shape
        if shape != shapes[hf]:
            want = tuple(reversed(shapes[hf])) if transpose else shapes[hf]
            raise BertkitError(f"{config_path}: does not describe this checkpoint: {name!r} is "
                               f"{list(entry.shape)} but the config gives {list(want)} "
                               f"({describe(config)})")
        if entry.dtype_name not in FLOAT_DTYPES:
            raise BertkitError(f"{index_path(bundle.prefix)}: {name!r} is {entry.dtype_name}, "
                               "not a floating-point weight")
        plan[hf] = (name, transpose)
    missing = sorted(set(shapes) - set(plan))
    if missing:
        raise BertkitError(f"{bundle.prefix}: has no tensor for {missing[0]} ({len(missing)} "
                           f"missing), which {model_class.__name__} of {config_path.name} "
                           f"({describe(config)}) needs")
    return model_class, config, plan, left_out


def describe(config: BertConfig) -> str:
    return (f"vocab_size {config.vocab_size}, hidden_size {config.hidden_size}, "
            f"intermediate_size {config.intermediate_size}, max_position_embeddings "
            f"{config.max_position_embeddings}, type_vocab_size {config.type_vocab_size}")


def read_tensors(bundle: Bundle, plan: Mapping[str, tuple[str, bool]]) -> dict[str, torch.Tensor]:
    """HF name -> tensor, each read and checked against its CRC32C."""
    state = {}
    for hf, (name, transpose) in plan.items():
        array = bundle.read(name)
        state[hf] = torch.from_numpy(array.T.copy() if transpose else array)
    return state


# --- the conversion ------------------------------------------------------------------------------

def check_output(cfg: GoogleConversion, settings: dict, inputs: list[Path]) -> None:
    """The output folder is new, empty, or an earlier conversion that --overwrite replaces;
    never the source nor a folder holding it."""
    out = cfg.output
    earlier = (out / MARKER).is_file() and any(p.name not in (MARKER, LOCK_FILE)
                                                for p in out.iterdir())
    if earlier and not cfg.overwrite:
        raise BertkitError(f"{out}: holds an earlier conversion; pass --overwrite to replace it "
                           "or choose a new folder")
    check_output_dir(out, MARKER, settings, inputs=inputs, overwrite=cfg.overwrite)


def convert_google(cfg: GoogleConversion) -> ConversionResult:
    """Convert a Google checkpoint (release or run) into an HF-layout model folder."""
    prefix = locate_checkpoint(cfg.source)
    folder = prefix.parent
    config_path = cfg.config_file or folder / GOOGLE_CONFIG
    vocab_path = cfg.vocab_file or folder / VOCAB
    config = read_google_config(config_path)
    if not vocab_path.is_file():
        raise BertkitError(f"{vocab_path}: not found; a checkpoint needs its {VOCAB} (pass "
                           "--vocab FILE)")
    vocab = load_vocab(vocab_path)
    names = [folder.name, vocab_path.parent.name]
    lowercase, why = decide_lowercase(cfg.lowercase, names, vocab, vocab_path)
    tokenizer = BertTokenizer(vocab, do_lower_case=lowercase,
                              model_max_length=config.max_position_embeddings)
    check_vocab(config, tokenizer, vocab_path.parent)
    settings = {"checkpoint": str(prefix), "config": str(config_path), "vocab": str(vocab_path),
                "lowercase": lowercase, "labels": cfg.labels}
    inputs = [folder, config_path.parent, vocab_path.parent]
    check_output(cfg, settings, inputs)
    with Bundle(prefix) as bundle:
        model_class, config, plan, left_out = plan_tensors(bundle, config, config_path, cfg.labels)
        state = read_tensors(bundle, plan)
    # everything is read and checked: only now is the output folder claimed and written
    claim_output_dir(cfg.output, MARKER, settings, inputs=inputs, overwrite=cfg.overwrite)
    model = model_class(config)
    load_into(model, state, str(prefix))
    model.save_pretrained(cfg.output)
    tokenizer.save_pretrained(cfg.output)
    return ConversionResult(cfg.output, prefix, model_class.__name__, len(plan), lowercase, why,
                            left_out)


def summary(result: ConversionResult) -> list[str]:
    """What a conversion did, for the command's output: a line each."""
    case = "on" if result.lowercase else "off"
    lines = [f"wrote {result.output}: {result.architecture} from {result.checkpoint} "
             f"({result.tensors} tensors)",
             f"lower-casing {case} ({result.lowercase_reason})"]
    for why, names in sorted(result.left_out.items()):
        shown = ", ".join(names[:3]) + (f" ... ({len(names)} in all)" if len(names) > 3 else "")
        lines.append(f"left out ({why}): {shown}")
    return lines

