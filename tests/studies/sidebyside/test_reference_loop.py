"""The reference loop's own checkpointing (bertkit.studies.sidebyside.reference): a full-size reference
run takes hours, so a killed one continues from its last state, to the same model."""

import os
import signal
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bertkit.studies.sidebyside.reference import Checkpointing, Recipe, fit

X = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
Y = (X.sum(1) > 0).long()


class Tiny(nn.Module):
    """Dropout in the forward pass, so that a resume must restore the global stream too."""

    def __init__(self):
        super().__init__()
        self.layer, self.drop = nn.Linear(6, 2), nn.Dropout(0.3)

    def forward(self, x, labels):
        return SimpleNamespace(loss=nn.functional.cross_entropy(self.layer(self.drop(x)), labels))


RECIPE = Recipe(lr=1e-2, epochs=3, batch_size=8)


def trained(checkpoint=None, recipe=RECIPE, signal_at=None):
    """The model, and the steps it was trained in this call (one batch each)."""
    torch.manual_seed(1)
    model, batches = Tiny(), []

    def make_batch(idx):
        batches.append(idx)
        if len(batches) == signal_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return {"x": X[idx], "labels": Y[idx]}

    fit(model, make_batch, len(X), recipe, 7, checkpoint)
    return model, len(batches)


class Killed(BaseException):
    pass


def test_a_killed_reference_run_resumes_to_the_same_model(tmp_path, monkeypatch):
    whole, steps = trained()
    assert steps == 15  # 5 an epoch
    saves, save = [], Checkpointing.save

    def killed_at_step_7(self, run, step, *rest):
        saves.append(step)
        save(self, run, step, *rest)
        if step == 7:
            raise Killed

    monkeypatch.setattr(Checkpointing, "save", killed_at_step_7)
    state = Checkpointing(tmp_path / "reference.pt", every=7)
    with pytest.raises(Killed):
        trained(state)
    monkeypatch.undo()
    assert state.step() == 7 and Checkpointing(tmp_path / "none.pt").step() == 0
    assert state.progress() == (7, 15)  # what the study's --status shows
    assert Checkpointing(tmp_path / "none.pt").progress() == (0, None)
    again, steps = trained(state)
    assert saves == [7] and steps == 8  # the 8 steps after the state, not all 15 again
    for name, tensor in whole.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], tensor, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="state of another run"):
        trained(state, Recipe(lr=2e-2, epochs=3, batch_size=8))


def test_the_state_is_kept_every_epoch_by_default(tmp_path, monkeypatch):
    saves = []
    monkeypatch.setattr(Checkpointing, "save", lambda self, run, step, *rest: saves.append(step))
    trained(Checkpointing(tmp_path / "reference.pt"))
    assert saves == [5, 10]  # the last step is the finished run's, not a state to resume


def test_sigterm_saves_at_the_end_of_the_step_and_the_run_resumes(tmp_path):
    whole, _ = trained()
    state = Checkpointing(tmp_path / "reference.pt", every=100)  # no state before the signal
    with pytest.raises(KeyboardInterrupt, match="stopped at step 4"):
        trained(state, signal_at=4)
    again, steps = trained(state)
    assert steps == 11
    for name, tensor in whole.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], tensor, rtol=0, atol=0)


def test_given_batches_replace_the_shuffled_order():
    """The stability study's pairing: step s trains on exactly the indices it is given."""
    torch.manual_seed(1)
    model, seen = Tiny(), []
    plan = [[0, 1, 2, 3, 4, 5, 6, 7], [39, 38, 37, 36, 35, 34, 33, 32]] * 5
    recipe = Recipe(lr=1e-2, epochs=2, batch_size=8)  # 40 examples: 5 steps an epoch, 10 in all

    def make_batch(idx):
        seen.append(list(idx))
        return {"x": X[idx], "labels": Y[idx]}

    fit(model, make_batch, len(X), recipe, 7, batches=plan)
    assert seen == plan


def test_a_resumed_runs_seconds_are_summed_over_its_sittings(tmp_path):
    """The reference loop keeps its training seconds in its state, as bertkit's loop does: a
    run stopped and resumed returns the seconds of both sittings."""
    state = Checkpointing(tmp_path / "reference.pt", every=100)
    with pytest.raises(KeyboardInterrupt):
        trained(state, signal_at=4)
    first = torch.load(state.path, weights_only=False)["cost"]
    assert first["train_s"] > 0 and first["train_cpu_s"] > 0
    torch.manual_seed(1)
    model = Tiny()
    cost = fit(model, lambda idx: {"x": X[idx], "labels": Y[idx]}, len(X), RECIPE, 7, state)
    assert cost["train_s"] > first["train_s"] and cost["train_cpu_s"] > first["train_cpu_s"]
    data = torch.load(state.path, weights_only=False)
    del data["cost"]  # a state saved before the loop counted its seconds
    torch.save(data, state.path)
    assert fit(Tiny(), lambda idx: {"x": X[idx], "labels": Y[idx]}, len(X), RECIPE, 7,
               state) is None


def test_without_transformers_a_reference_run_is_one_line(monkeypatch):
    """`transformers` is the reference, not a dependency of bertkit: its absence is said."""
    from bertkit.errors import BertkitError
    from bertkit.studies.sidebyside.reference import train_sequence_classifier

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers: ImportError
    with pytest.raises(BertkitError, match="the reference loop needs `transformers`"):
        train_sequence_classifier("unused", None, [], None, RECIPE, 0)
