"""bertkit: a complete, fast and faithful BERT toolkit.

The public API: the configuration, the model and its heads, the tokenizer, the fast encoder for
embeddings and features, the fine-tuning tasks and the one training loop.
"""

from typing import TYPE_CHECKING

# The public names are imported on first use (PEP 562), so a process that needs only a light
# part of the package (e.g. the vocabulary trainer's counting workers) does not import torch.
_HOMES = {
    "BertConfig": "bertkit.config",
    "BertkitError": "bertkit.errors",
    "BertForMaskedLM": "bertkit.heads",
    "BertForMultipleChoice": "bertkit.heads",
    "BertForPreTraining": "bertkit.heads",
    "BertForQuestionAnswering": "bertkit.heads",
    "BertForSequenceClassification": "bertkit.heads",
    "BertForTokenClassification": "bertkit.heads",
    "Encoder": "bertkit.inference",
    "BertModel": "bertkit.model",
    "get_task": "bertkit.tasks",
    "BertTokenizer": "bertkit.tokenization",
    "TrainConfig": "bertkit.training",
    "train": "bertkit.training",
}

if TYPE_CHECKING:
    from bertkit.config import BertConfig
    from bertkit.errors import BertkitError
    from bertkit.heads import (
        BertForMaskedLM,
        BertForMultipleChoice,
        BertForPreTraining,
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
    )
    from bertkit.inference import Encoder
    from bertkit.model import BertModel
    from bertkit.tasks import get_task
    from bertkit.tokenization import BertTokenizer
    from bertkit.training import TrainConfig, train


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"  # the one definition: pyproject.toml reads it, `bertkit --version` prints it

__all__ = [
    "BertConfig",
    "BertForMaskedLM",
    "BertForMultipleChoice",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertTokenizer",
    "BertkitError",
    "Encoder",
    "TrainConfig",
    "get_task",
    "train",
    "__version__",
]
