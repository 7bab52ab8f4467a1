"""Model folders for the server tests, built once per session (~15 s):

- MiniLM itself (a base encoder without MLM/NSP heads);
- `sst2`: a tiny BERT (2 layers x 32, MiniLM's vocabulary) fine-tuned on 256 real SST-2
  sentences through `bertkit finetune` (a real fine-tuned folder: task, labels, tokenizer; a tiny
  model because fine-tuning MiniLM itself costs ~10x the time on a shared 2-core machine);
- `mlm`: a tiny BERT with MLM + NSP heads, and tiny NER / SQuAD / SWAG models whose heads are
  random, saved in the fine-tuned-folder layout by the library's `save_release` (their answers
  are noise; the tests check the plumbing and the arithmetic, not the quality).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.heads import HEAD_CLASSES, BertForPreTraining
from bertkit.model import BertModel
from bertkit.tasks import get_task
from bertkit.tasks.splits import save_release
from bertkit.tokenization import BertTokenizer

pytest.importorskip("fastapi", reason="bertkit serve needs the serve extra (pip install -e '.[test]')")


def tiny_config(vocab_size: int, **changes) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                      **changes)


def tiny_task_model(root: Path, tokenizer: BertTokenizer, task_name: str,
                    labels: list[str] | None) -> Path:
    """A random tiny model with `task_name`'s head, saved as `bertkit finetune` saves one."""
    task = get_task(task_name)
    changes = {"id2label": dict(enumerate(labels))} if labels else {}
    torch.manual_seed(0)
    model = HEAD_CLASSES[task.head](tiny_config(tokenizer.vocab_size, **changes))
    out = root / task_name
    save_release(task, model, tokenizer, out, {})
    return out


@pytest.fixture(scope="session")
def sst2_model(tmp_path_factory, minilm_path, shared_data) -> Path:
    root = tmp_path_factory.mktemp("serve")
    tokenizer = BertTokenizer.from_pretrained(minilm_path)
    torch.manual_seed(0)
    BertModel(tiny_config(tokenizer.vocab_size)).save_pretrained(root / "tiny")
    tokenizer.save_pretrained(root / "tiny")
    before = torch.get_num_threads()
    code = main(["finetune", "sst2", "--model", str(root / "tiny"), "--output", str(root / "sst2"),
                 "--data", str(shared_data / "glue"), "--max-train-examples", "256",
                 "--max-eval-examples", "32", "--batch-size", "32", "--epochs", "1",
                 "--lr", "1e-3", "--max-seq-length", "64", "--no-test-predictions",
                 "--no-progress"])
    torch.set_num_threads(before)
    assert code == 0
    return root / "sst2"


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, minilm_path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("serve-tiny")
    tokenizer = BertTokenizer.from_pretrained(minilm_path)
    torch.manual_seed(0)
    mlm = root / "mlm"
    BertForPreTraining(tiny_config(tokenizer.vocab_size)).save_pretrained(mlm)
    tokenizer.save_pretrained(mlm)
    ner_labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    return {"mlm": mlm, "ner": tiny_task_model(root, tokenizer, "conll2003", ner_labels),
            "squad": tiny_task_model(root, tokenizer, "squad1", None),
            "swag": tiny_task_model(root, tokenizer, "swag", None)}
