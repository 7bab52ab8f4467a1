"""bertkit: a complete, fast and faithful BERT toolkit.

The public API: the configuration, the model and its heads, the tokenizer, the fast encoder for
embeddings and features, the fine-tuning tasks and the one training loop.
"""

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

__version__ = "0.1.0"

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
