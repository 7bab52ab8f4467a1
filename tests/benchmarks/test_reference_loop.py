"""The reference loop's own checkpointing (benchmarks/reference_loop.py): a full-size reference
run takes hours, so a killed one continues from its last state, to the same model."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from reference_loop import Checkpointing, Recipe, _fit  # noqa: E402

X = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
Y = (X.sum(1) > 0).long()


class Tiny(nn.Module):
    """Dropout in the forward pass, so that a resume must restore the global stream too."""

    def __init__(self):
        super().__init__()
        self.layer, self.drop = nn.Linear(6, 2), nn.Dropout(0.3)

    def forward(self, x, labels):
        return SimpleNamespace(loss=nn.functional.cross_entropy(self.layer(self.drop(x)), labels))


def make_batch(idx):
    return {"x": X[idx], "labels": Y[idx]}


def trained(checkpoint=None):
    torch.manual_seed(1)
    model = Tiny()
    resumed = _fit(model, make_batch, len(X), Recipe(lr=1e-2, epochs=3, batch_size=8), 7,
                   checkpoint)
    return model, resumed


class Killed(BaseException):
    pass


def test_a_killed_reference_run_resumes_to_the_same_model(tmp_path, monkeypatch):
    whole, resumed = trained()  # 5 steps an epoch, 15 in all
    assert not resumed
    saves, save = [], Checkpointing.save

    def killed_at_step_7(self, step, *rest):
        saves.append(step)
        save(self, step, *rest)
        if step == 7:
            raise Killed

    monkeypatch.setattr(Checkpointing, "save", killed_at_step_7)
    state = Checkpointing(tmp_path / "reference.pt", every=7)
    with pytest.raises(Killed):
        trained(state)
    monkeypatch.undo()
    again, resumed = trained(state)
    assert saves == [7] and resumed
    for name, tensor in whole.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], tensor, rtol=0, atol=0)


def test_the_state_is_kept_every_epoch_by_default(tmp_path, monkeypatch):
    saves = []
    monkeypatch.setattr(Checkpointing, "save", lambda self, step, *rest: saves.append(step))
    trained(Checkpointing(tmp_path / "reference.pt"))
    assert saves == [5, 10]  # the last step is the finished run's, not a state to resume
