"""The GPU's own checks: run on a machine with CUDA (gpu_check/gpu_check.sh runs them), skipped
elsewhere. The CPU suite already takes the GPU's branches (BERTKIT_DEVICE_GENERIC); these check
what only a GPU can: the same numbers on the device, no host sync inside a step (CUDA's sync
debug mode raises on one), autocast bf16 training, and the CUDA random state in resume."""

from __future__ import annotations

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.heads import BertForPreTraining
from bertkit.model import BertModel
from bertkit.training import TrainConfig, train
from bertkit.training import loop as loop_module

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run "
                       "gpu_check/gpu_check.sh on a GPU machine)"),
]
VOCAB, T, P = 64, 12, 3


def make_data(n: int = 32) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(7)
    items = []
    for _ in range(n):
        ids = torch.randint(5, VOCAB, (T,), generator=gen)
        positions = torch.tensor([2, 5, 9])
        items.append({"input_ids": ids.index_fill(0, positions, 4),
                      "token_type_ids": (torch.arange(T) >= T // 2).long(),
                      "attention_mask": torch.ones(T, dtype=torch.long),
                      "masked_lm_positions": positions, "masked_lm_ids": ids[positions],
                      "masked_lm_weights": torch.ones(P),
                      "next_sentence_label": torch.tensor(len(items) % 2)})
    return items


def collate(items):
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


def tiny(dropout: float = 0.1) -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=32, hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout))


def test_the_device_forward_equals_the_cpus():
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("mini")).eval()
    ids = torch.randint(5, 1000, (4, 40))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    with torch.no_grad():
        cpu = model(ids, attention_mask=mask).last_hidden_state
        gpu = model.cuda()(ids.cuda(), attention_mask=mask.cuda()).last_hidden_state.cpu()
    real = mask.bool()
    assert (cpu[real] - gpu[real]).abs().max().item() < 1e-3  # TF32 may be on


def test_no_host_sync_inside_a_step(tmp_path, monkeypatch):
    """CUDA's sync debug mode raises on any host-device sync: steps 1-3 of a run that syncs
    every 4 steps run under it."""
    step = loop_module._train_step

    def strict(run, *rest):
        if run.step % 4 == 3:  # the step that ends at a sync point may read back
            return step(run, *rest)
        torch.cuda.set_sync_debug_mode("error")
        try:
            return step(run, *rest)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(loop_module, "_train_step", strict)
    cfg = TrainConfig(output_dir=str(tmp_path), max_steps=8, batch_size=8, lr=1e-3,
                      warmup_steps=1, log_every=4, save_every=0, progress=False,
                      device="cuda", precision="bf16", loader_workers=0)
    result = train(tiny(), make_data(), collate, cfg)
    assert len(result.losses) == 8 and all(x == x for x in result.losses)


def test_resume_on_the_gpu_reproduces_the_losses(tmp_path):
    kw = {"max_steps": 6, "batch_size": 8, "lr": 1e-3, "warmup_steps": 1, "log_every": 1,
          "progress": False, "device": "cuda", "precision": "fp32", "loader_workers": 2}
    full = train(tiny(), make_data(), collate,
                 TrainConfig(output_dir=str(tmp_path / "full"), save_every=0, **kw))
    train(tiny(), make_data(), collate,
          TrainConfig(output_dir=str(tmp_path / "cut"), save_every=3, **{**kw, "max_steps": 6}))
    import shutil

    shutil.rmtree(tmp_path / "cut" / "checkpoints" / "step-6")
    resumed = train(tiny(), make_data(), collate,
                    TrainConfig(output_dir=str(tmp_path / "cut"), resume=True, save_every=3, **kw))
    assert resumed.losses == pytest.approx(full.losses[3:], rel=1e-5)
