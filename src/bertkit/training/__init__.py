"""The one training loop (pre-training and fine-tuning), its optimizers and DDP plumbing."""

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
