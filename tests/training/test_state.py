"""Training states on disk: their order, atomic writes and `keep`, the resume decision, the
saved cost a resumed sitting starts from."""

from __future__ import annotations

import json

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.training import state as state_mod
from bertkit.training.state import (
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    load_training_state,
    resolve_resume,
    save_training_state,
    saved_cost,
)


def fake_checkpoint(out, step, complete=True):
    path = out / "checkpoints" / f"step-{step}"
    path.mkdir(parents=True)
    if complete:
        (path / "state.pt").write_bytes(b"x")
    return path


def test_checkpoints_are_ordered_by_step_number_and_only_complete_ones_count(tmp_path):
    assert list_checkpoints(tmp_path) == [] and latest_checkpoint(tmp_path) is None
    for step in (10, 2, 9):
        fake_checkpoint(tmp_path, step)
    fake_checkpoint(tmp_path, 30, complete=False)  # a folder without its state.pt
    (tmp_path / "checkpoints" / ".step-40.abc.tmp").mkdir()  # a kill mid-write
    (tmp_path / "checkpoints" / "step-x").mkdir()
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2, 9, 10]  # 10 after 9, not "10" < "9"
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 10)
    assert checkpoint_path(tmp_path, 10) == tmp_path / "checkpoints" / "step-10"


def test_save_keeps_the_last_states_and_cleans_a_killed_write(tmp_path):
    stale = tmp_path / "checkpoints" / ".step-7.abc.tmp"
    stale.mkdir(parents=True)
    for step in (1, 2, 3):
        path = save_training_state(tmp_path, step, {"step": step, "w": torch.full((2,), step)},
                                   keep=2, summary={"loss": 0.5 * step})
        assert path == checkpoint_path(tmp_path, step)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2, 3]
    assert not stale.exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-2", "step-3"]
    loaded = load_training_state(checkpoint_path(tmp_path, 3))
    assert loaded["step"] == 3 and torch.equal(loaded["w"], torch.full((2,), 3))
    summary = json.loads((checkpoint_path(tmp_path, 3) / "summary.json").read_text())
    assert summary == {"step": 3, "loss": 1.5}
    save_training_state(tmp_path, 4, {"step": 4}, keep=0)
    save_training_state(tmp_path, 5, {"step": 5}, keep=0)  # 0 keeps all
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2, 3, 4, 5]


def test_a_write_that_fails_leaves_no_step_folder_and_the_last_state_whole(tmp_path, monkeypatch):
    save_training_state(tmp_path, 1, {"step": 1}, keep=2)

    def disk_full(obj, file):
        file.write_bytes(b"half a stat")  # what a kill or a full disk leaves behind
        raise OSError("No space left on device")

    monkeypatch.setattr(state_mod.torch, "save", disk_full)
    with pytest.raises(BertkitError, match="step-2/state.pt: no space left on the device"):
        save_training_state(tmp_path, 2, {"step": 2}, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-1"]
    assert load_training_state(latest_checkpoint(tmp_path))["step"] == 1


def test_a_damaged_state_is_one_clear_error(tmp_path):
    path = fake_checkpoint(tmp_path, 1)  # state.pt holds b"x"
    with pytest.raises(BertkitError, match="unreadable training state"):
        load_training_state(path)


def test_resolve_resume_starts_continues_or_refuses(tmp_path):
    assert resolve_resume(tmp_path, False) is False  # nothing there: a fresh run
    assert resolve_resume(tmp_path, "auto") is False
    with pytest.raises(BertkitError, match="no checkpoint under"):
        resolve_resume(tmp_path, True)
    fake_checkpoint(tmp_path, 3)
    assert resolve_resume(tmp_path, True) is True
    assert resolve_resume(tmp_path, "auto") is True
    with pytest.raises(BertkitError, match="already holds training checkpoints"):
        resolve_resume(tmp_path, False)
    with pytest.raises(BertkitError, match="resume must be True, False or 'auto'"):
        resolve_resume(tmp_path, "yes")


def test_saved_cost_is_the_latest_states_summary_and_zero_before_any(tmp_path):
    zero = {"train_seconds": 0.0, "cpu_seconds": 0.0, "tokens_seen": 0}
    assert saved_cost(tmp_path) == zero
    save_training_state(tmp_path, 1, {}, keep=0,
                        summary={"train_seconds": 1.5, "cpu_seconds": 3.0, "tokens_seen": 10})
    save_training_state(tmp_path, 2, {}, keep=0,
                        summary={"train_seconds": 2.5, "cpu_seconds": 5.0, "tokens_seen": 20,
                                 "loss": 0.1})
    assert saved_cost(tmp_path) == {"train_seconds": 2.5, "cpu_seconds": 5.0, "tokens_seen": 20}
    save_training_state(tmp_path, 3, {}, keep=0, summary={"tokens_seen": 30})  # an older state
    assert saved_cost(tmp_path) == {**zero, "tokens_seen": 30}
    (checkpoint_path(tmp_path, 3) / "summary.json").unlink()
    assert saved_cost(tmp_path) == zero
