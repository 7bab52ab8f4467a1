"""A disk that fills mid-write, at every kind of write (a text file, a training state, an
export, a shard, the folder lock), in-process and through the command: one error naming the file
and the space left, nothing half-written under the final name nor left as a temporary, and the
same command continues once there is space. The disk is made full by the write calls raising what
a full disk makes each library raise (the texts were taken from a real full filesystem)."""

from __future__ import annotations

import errno
import pathlib
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import SafetensorError

from bertkit import io
from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.data import shards
from bertkit.data.shards import PackedInstances, write_shard
from bertkit.errors import BertkitError
from bertkit.model import BertModel
from bertkit.training import state as state_mod
from bertkit.training.state import latest_checkpoint, load_training_state, save_training_state

TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"
SAFETENSORS_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"
NUMPY_SHORT = "125423 requested and 116672 written"


def enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def assert_one_line_about(err: BertkitError | str, path: Path) -> None:
    text = str(err)
    assert "\n" not in text.strip()
    assert f"{path}: no space left on the device" in text
    assert " free in " in text and "run the same command again" in text


def test_a_text_file_on_a_full_disk_keeps_the_old_one(tmp_path, monkeypatch):
    target = tmp_path / "records.json"
    target.write_text("old\n", encoding="utf-8")
    real = pathlib.Path.write_text

    def full(self, data, *args, **kwargs):
        real(self, data[:10], *args, **kwargs)  # what fitted
        raise enospc()

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    with pytest.raises(BertkitError) as err:
        io.atomic_write_text(target, "x" * 5000)
    assert_one_line_about(err.value, target)
    assert "about 5.0 KB needed" in str(err.value)
    monkeypatch.undo()
    assert files_under(tmp_path) == ["records.json"] and target.read_text() == "old\n"
    io.atomic_write_text(target, "new\n")  # with space again
    assert target.read_text() == "new\n"


def test_a_training_state_on_a_full_disk_leaves_the_last_one_whole(tmp_path, monkeypatch):
    save_training_state(tmp_path, 3, {"w": torch.ones(10)}, keep=2)
    real = torch.save

    def full(obj, path, *args, **kwargs):
        Path(path).write_bytes(b"PK\x03\x04" + bytes(500))  # a zip begun, as torch leaves it
        raise RuntimeError(TORCH_FULL)

    monkeypatch.setattr(state_mod.torch, "save", full)
    with pytest.raises(BertkitError) as err:
        save_training_state(tmp_path, 5, {"w": torch.zeros(1000)}, keep=2)
    target = tmp_path / "checkpoints" / "step-5" / "state.pt"
    assert_one_line_about(err.value, target)
    assert "about 4.0 KB needed" in str(err.value)
    monkeypatch.setattr(state_mod.torch, "save", real)
    assert files_under(tmp_path / "checkpoints") == ["step-3", "step-3/state.pt",
                                                    "step-3/summary.json"]
    assert latest_checkpoint(tmp_path).name == "step-3"
    assert load_training_state(latest_checkpoint(tmp_path))["w"].sum() == 10
    save_training_state(tmp_path, 5, {"w": torch.zeros(1000)}, keep=2)  # space again
    assert latest_checkpoint(tmp_path).name == "step-5"


def test_an_export_on_a_full_disk(tmp_path, monkeypatch):
    import bertkit.checkpoint as checkpoint

    model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32))

    def full(state, path, *args, **kwargs):
        Path(path).write_bytes(bytes(100))
        raise SafetensorError(SAFETENSORS_FULL)

    monkeypatch.setattr(checkpoint, "save_file", full)
    with pytest.raises(BertkitError) as err:
        model.save_pretrained(tmp_path / "model")
    assert_one_line_about(err.value, tmp_path / "model" / "model.safetensors")
    assert "KB needed" in str(err.value)
    assert "model.safetensors" not in " ".join(files_under(tmp_path))  # nor a temporary


def test_a_shard_on_a_full_disk(tmp_path, monkeypatch):
    i32 = np.arange(4, dtype=np.int32)
    packed = PackedInstances(np.arange(20, dtype=np.uint16), i32 + 5, i32, i32, i32.astype(np.uint16),
                             np.ones(4, np.int32), np.zeros(4, np.int8))

    def short(f, array, *args, **kwargs):
        f.write(b"\x93NUMPY")
        raise OSError(NUMPY_SHORT)  # numpy's short write: no errno

    monkeypatch.setattr(shards.np, "save", short)
    with pytest.raises(BertkitError) as err:
        write_shard(tmp_path / "shard-00000", packed)
    assert_one_line_about(err.value, tmp_path / "shard-00000")
    assert files_under(tmp_path) == []


def test_other_errors_pass_through_unchanged(tmp_path):
    with pytest.raises(FileNotFoundError), io.writing(tmp_path / "x"):
        raise FileNotFoundError(errno.ENOENT, "gone")
    with pytest.raises(RuntimeError, match="shape mismatch"), io.writing(tmp_path / "x"):
        raise RuntimeError("shape mismatch")
    assert io.is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert io.is_disk_full(RuntimeError(TORCH_FULL))
    assert not io.is_disk_full(OSError(errno.EACCES, "Permission denied"))


def test_the_folder_lock_on_a_full_disk_is_one_line_and_its_release_never_raises(tmp_path,
                                                                                monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    monkeypatch.setattr(io.os, "write", lambda fd, data: (_ for _ in ()).throw(enospc()))
    with pytest.raises(BertkitError) as err:
        io.lock_output_dir(folder)
    assert_one_line_about(err.value, folder.resolve() / io.LOCK_FILE)
    monkeypatch.undo()

    class ClosingFails:  # a lock file whose last flush meets the full disk at exit
        def __init__(self, f):
            self.f = f

        def fileno(self) -> int:
            return self.f.fileno()

        def close(self) -> None:
            self.f.close()
            raise enospc()

    key = folder.resolve()
    io._held[key] = ClosingFails(io._held[key])
    io._release_all()  # what atexit runs
    assert key not in io._held and not (folder / io.LOCK_FILE).exists()


# --- through the command --------------------------------------------------------------------------

def _corpus(tmp_path: Path, shared_data: Path) -> Path:
    lines = (shared_data / "wikitext-2" / "wiki.test.raw").read_bytes().split(b"\r\n")[:400]
    path = tmp_path / "wiki.raw"
    path.write_bytes(b"\r\n".join(lines))
    return path


def test_prepare_on_a_full_disk_then_resumes_byte_identical(tmp_path, monkeypatch, capsys,
                                                            shared_data, minilm_path):
    corpus = _corpus(tmp_path, shared_data)

    def argv(out: Path, *extra: str) -> list[str]:
        return ["prepare", str(corpus), "--tokenizer", str(minilm_path), "--output", str(out),
                "--max-seq-length", "64", "--dupe-factor", "1", "--shard-size", "100",
                "--chunk-chars", "20000", "--no-progress", *extra]

    real, calls = np.save, [0]

    def full_at_the_second_shard(f, array, *args, **kwargs):
        calls[0] += 1
        if calls[0] > len(shards.ARRAY_NAMES):
            f.write(b"\x93NUMPY")
            raise OSError(NUMPY_SHORT)
        real(f, array, *args, **kwargs)

    out = tmp_path / "out"
    monkeypatch.setattr(shards.np, "save", full_at_the_second_shard)
    assert main(argv(out)) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit: error:") and "Traceback" not in err
    assert_one_line_about(err, out / "shard-00001")
    assert "requested and" not in err
    assert files_under(out) == ["meta.json", "shard-00000",
                                *(f"shard-00000/{n}.npy" for n in sorted(shards.ARRAY_NAMES))]
    monkeypatch.setattr(shards.np, "save", real)
    assert main(argv(out, "--resume")) == 0
    assert main(argv(tmp_path / "clean")) == 0
    clean = {p: (tmp_path / "clean" / p).read_bytes() for p in files_under(tmp_path / "clean")
             if (tmp_path / "clean" / p).is_file()}
    assert {p: (out / p).read_bytes() for p in clean} == clean and len(clean) > 8
    assert files_under(out) == files_under(tmp_path / "clean")


def test_vocab_train_on_a_full_disk_then_runs_again(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"walking talking painter {i} sings.\n" for i in range(200)),
                      encoding="utf-8")
    out = tmp_path / "vocab"
    argv = ["vocab", "train", str(corpus), "--vocab-size", "50", "-o", str(out), "--no-progress"]
    real = pathlib.Path.write_text

    def full(self, data, *args, **kwargs):
        if self.name.startswith(".vocab.txt."):
            raise enospc()
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert_one_line_about(err.strip(), out / "vocab.txt")
    assert "vocab.txt" not in files_under(out) and not any(".tmp" in f for f in files_under(out))
    monkeypatch.undo()
    assert main(argv) == 0
    assert len((out / "vocab.txt").read_text(encoding="utf-8").splitlines()) == 50
