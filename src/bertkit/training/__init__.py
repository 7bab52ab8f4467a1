"""The machinery every run kind trains with: the one loop (`loop`) and its parts — the data order
(`stream`), optimizers and the learning-rate schedule (`optim`), step statistics (`stats`), the
device and precision (`hardware`), training states and resume (`state`, `runtime`), signals,
torchrun/DDP (`distributed`), packed batches (`packing`) and the one run-folder claim
(`run_folder`). The run kinds built on it (pretrain, finetune, grid, distill) are `bertkit.runs`."""

from bertkit.training.config import TrainConfig
from bertkit.training.loop import TrainingInterrupted, TrainResult, train
from bertkit.training.optim import Lamb, build_optimizer, lr_at, param_groups

__all__ = [
    "Lamb",
    "TrainConfig",
    "TrainResult",
    "TrainingInterrupted",
    "build_optimizer",
    "lr_at",
    "param_groups",
    "train",
]
