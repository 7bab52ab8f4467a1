"""The demo's settings (`DemoConfig`), its texts and model names, and the scale it runs at: the
defaults that depend on the machine (model size, pre-training batch and data) are chosen here,
once, from the device the demo trains on, and every one of them can be overridden."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from bertkit.data.chunks import ChunkConfig
from bertkit.data.instances import InstanceConfig
from bertkit.data.prepare import PrepareConfig
from bertkit.errors import BertkitError
from bertkit.training.hardware import choose_device
from bertkit.training.loop import TrainConfig
from bertkit.vocab.trainer import TrainerConfig

log = logging.getLogger(__name__)

SENTENCE_MONEY = "I deposited money at the bank"
SENTENCE_RIVER = "we sat on the bank of the river"
SENTENCE_MONEY_2 = "she opened an account at the bank downtown"
NSP_A = "The door opened, and a tall man in a dark coat came into the room."
NSP_REAL = "He took off his hat and looked slowly around him."
NSP_RANDOM = "The annual export of cotton doubled in the following ten years."
VARIANTS = {"pretrained": "pre-trained (MLM + NSP)", "random": "random initialisation"}
# The same comparison for a BERT pre-trained at scale (all-MiniLM-L6-v2), for context.
REFERENCE = {"minilm": "all-MiniLM-L6-v2 (pre-trained at scale)",
             "minilm-random": "MiniLM architecture, random init"}
NAMES = {**VARIANTS, **REFERENCE}


CURVE_SIZES = (50, 200)  # the learning curve's default label counts, fixed before measuring


@dataclass(frozen=True)
class Scale:
    """The machine-dependent defaults of the demo's pre-training."""

    model: str  # architecture preset
    pretrain_batch_size: int
    pretrain_mb: float  # MB of the corpus turned into instances (more than the corpus: all of it)
    dupe_factor: int  # Google's duplicates with different masks (more passes need more masks)
    why: str


# CPU: a few minutes on 2 cores leave `tiny` on the unigram plateau (docs/reports/ablations.md) but keep
# the whole demo short. CUDA: `mini` (4 x 256), the budget curve's model, whose measured curve
# (docs/reports/pretraining.md) pays on three of four tasks, SST-2's subset among them, at 88M tokens
# (annealed, with fine-tuning dropout 0.1, most clearly at 105M): the demo's minutes must buy
# more than that (about 6,500 steps of 128 x 128 tokens in 7 minutes: 16 steps a second, which a
# GPU should far exceed for a 5.5M-weight model); so every book, with 5 masks per document for
# the passes.
# The demo's duration and the CUDA sizing: docs/reports/benchmarks.md, "Measurements behind code choices".
SCALES = {
    "cpu": Scale("tiny", 32, 20.0, 1, "a CPU: tiny model, batch 32, the first 20 MB of the corpus"),
    "cuda": Scale("mini", 128, 1000.0, 5, "a CUDA GPU: mini model, batch 128, the whole corpus "
                  "with dupe factor 5"),
}


@dataclass(frozen=True)
class DemoConfig:
    """Every setting of the demo (`bertkit demo`, `make demo`). None = the device's default
    (`SCALES`), filled in by `choose_scale` before anything runs."""

    data: Path  # folder holding books/ and glue/SST-2 (../shared/data)
    corpus: tuple[str, ...] | None = None  # pre-training text (default: DATA/books/*.txt)
    output: Path = Path("demo-report")
    device: str = "auto"  # auto: CUDA when there is one, else the CPU
    budget_minutes: float = 7.0  # pre-training time
    model: str | None = None  # architecture preset (CPU: tiny, 2 layers x 128; CUDA: mini)
    max_seq_length: int = 128
    dropout: float = 0.1  # of the architecture, pre-training and fine-tuning alike
    pretrain_lr: float = 1e-3
    pretrain_batch_size: int | None = None  # CPU: 32; CUDA: 128
    vocab_size: int = 8000
    vocab_criterion: str = TrainerConfig.criterion  # the trainer's default (likelihood)
    pretrain_mb: float | None = None  # MB of the corpus turned into instances (CPU: 20; CUDA: all)
    dupe_factor: int | None = None  # CPU: 1; CUDA: 5
    seeds: int = 3  # fine-tuning seeds per model
    train_examples: int = 2000  # SST-2 training subset
    dev_examples: int | None = None  # SST-2 dev subset (None: all 872)
    # Each model's fine-tuning recipe: an lr grid selected on dev (see demo_finetune) and epochs.
    # Our pair: 1e-3 for both, chosen by a measured sweep (docs/reports/ablations.md, finding 3: at 3e-4
    # random init collapses, 3e-3 is worse for both). The MiniLM pair: MiniLM's own recipe (1e-4,
    # 1 epoch); its random-init copy collapses to the majority class at 1 epoch whatever the lr
    # and at 1e-3, so it gets its own, chosen by a measured sweep (docs/reports/ablations.md, finding 4).
    finetune_lr: tuple[float, ...] = (1e-3,)
    epochs: float = 3.0
    skip_probe: bool = False  # skip the MiniLM opening section
    no_reference: bool = False  # skip the MiniLM pre-trained vs random-init reference pair
    reference_lr: tuple[float, ...] = (1e-4,)
    reference_epochs: float = 1.0
    reference_random_lr: tuple[float, ...] = (3e-4,)
    reference_random_epochs: float = 3.0
    # The small learning curve (step 5): label counts below `train_examples` (which is the
    # curve's last point), fixed before anything was measured; seeds a cell; fine-tuning's floor
    # of optimizer steps at those counts
    curve_sizes: tuple[int, ...] | None = None  # None: those of CURVE_SIZES under train_examples
    curve_seeds: int = 3
    curve_min_steps: int = 30
    no_curve: bool = False
    no_progress: bool = False
    # the pre-training study's records (`bertkit study pretrain-curve --report docs/reports`, the fp32
    # curve and the bf16 one): the report puts the measured budget curves beside this run's one
    # point; missing files are omitted
    curve_records: tuple[Path, ...] = (Path("docs/reports/pretrain_curve.json"),
                                       Path("docs/reports/pretrain_curve_bf16.json"))

    def __post_init__(self) -> None:
        if self.budget_minutes <= 0 or self.seeds < 1 or self.train_examples < 1:
            raise BertkitError("--budget-minutes must be > 0, --seeds and --train-examples >= 1")
        if min(self.epochs, self.reference_epochs, self.reference_random_epochs) <= 0:
            raise BertkitError("--epochs, --reference-epochs and --reference-random-epochs "
                               "must be > 0")
        sizes = self.curve_sizes or ()
        if (any(n < 1 for n in sizes) or list(sizes) != sorted(set(sizes))
                or (sizes and sizes[-1] >= self.train_examples)):
            raise BertkitError(f"--curve-sizes: distinct label counts, rising, under --train-examples "
                               f"({self.train_examples}, the curve's last point); got "
                               f"{' '.join(map(str, sizes)) or 'none'}")
        if self.curve_seeds < 1 or self.curve_min_steps < 1:
            raise BertkitError("--curve-seeds and --curve-min-steps must be >= 1")
        if self.dev_examples is not None and self.dev_examples < 1:
            raise BertkitError(f"--dev-examples must be >= 1, got {self.dev_examples}")
        if self.pretrain_mb is not None and self.pretrain_mb <= 0:
            raise BertkitError(f"--pretrain-mb must be > 0, got {self.pretrain_mb}")
        # Settings whose rules live in the config that uses them: checked here, before any work.
        _check_with("--max-seq-length", lambda: InstanceConfig(max_seq_length=self.max_seq_length))
        _check_with("--vocab-size", lambda: TrainerConfig(vocab_size=self.vocab_size,
                                                          criterion=self.vocab_criterion))
        _check_with("--pretrain-lr", lambda: TrainConfig("", lr=self.pretrain_lr))
        if self.pretrain_batch_size is not None:
            _check_with("--pretrain-batch-size",
                        lambda: TrainConfig("", batch_size=self.pretrain_batch_size))
        if self.dupe_factor is not None:
            _check_with("--dupe-factor", lambda: PrepareConfig(
                ChunkConfig(InstanceConfig(), dupe_factor=self.dupe_factor)))
        if not 0 <= self.dropout < 1:
            raise BertkitError(f"--dropout must be in [0, 1), got {self.dropout}")
        for name in ("finetune_lr", "reference_lr", "reference_random_lr"):
            grid = getattr(self, name)
            if not grid or any(lr <= 0 for lr in grid) or len(set(grid)) != len(grid):
                raise BertkitError(f"--{name.replace('_', '-')}: one or more distinct rates > 0, "
                                   f"got {' '.join(map(str, grid)) or 'none'}")

    @property
    def curve_counts(self) -> tuple[int, ...]:
        """The learning curve's label counts below `train_examples` (its last point)."""
        if self.curve_sizes is not None:
            return self.curve_sizes
        return tuple(n for n in CURVE_SIZES if n < self.train_examples)

    def lr_grid(self, variant: str) -> tuple[float, ...]:
        """The fine-tuning lr grid of one model of the comparison."""
        return {"minilm": self.reference_lr,
                "minilm-random": self.reference_random_lr}.get(variant, self.finetune_lr)

    def epochs_of(self, variant: str) -> float:
        """The fine-tuning epochs of one model of the comparison."""
        return {"minilm": self.reference_epochs,
                "minilm-random": self.reference_random_epochs}.get(variant, self.epochs)


def _check_with(flag: str, build) -> None:
    """Build the config that owns a setting's rule; its error is reported under the demo's flag."""
    try:
        build()
    except BertkitError as err:
        raise BertkitError(f"{flag}: {err}") from err


def choose_scale(args: DemoConfig, cuda_available: bool) -> tuple[DemoConfig, str]:
    """`args` with its device resolved and every unset machine-dependent setting taken from
    that device's `Scale`; and a line saying what was chosen and why (for the log and report)."""
    device = choose_device(cuda_available)[0] if args.device == "auto" else args.device
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if kind == "cuda" and not cuda_available:
        raise BertkitError(f"--device {device}: CUDA is not available on this machine")
    scale = SCALES[kind]
    chosen = {"model": scale.model, "pretrain_batch_size": scale.pretrain_batch_size,
              "pretrain_mb": scale.pretrain_mb, "dupe_factor": scale.dupe_factor}
    set_by_user = {k for k in chosen if getattr(args, k) is not None}
    resolved = dataclasses.replace(args, device=device,
                                   **{k: v for k, v in chosen.items() if k not in set_by_user})
    line = (f"scale: device {device} ({args.device if args.device != 'auto' else 'auto'}) -> "
            f"defaults for {scale.why}")
    if set_by_user:
        line += "; overridden: " + ", ".join(f"--{k.replace('_', '-')} {getattr(args, k)}"
                                             for k in sorted(set_by_user))
    return resolved, line


def scale_for_machine(args: DemoConfig) -> tuple[DemoConfig, str]:
    """`choose_scale` for this machine (logged)."""
    resolved, line = choose_scale(args, torch.cuda.is_available())
    log.info("%s", line)
    return resolved, line

