"""Fine-tuning under torchrun: 2 gloo processes on the CPU against one process.

A tiny random BERT (made here, dropout off: each rank draws its own dropout masks, the one thing
that may differ between world sizes) fine-tuned on a small custom CSV at global batch 8, micro
batch 4 (one process: 2 accumulation steps; two: one each, on the same examples):

- the step losses, the evaluations during training and the final dev metrics equal one
  process's within rel 1e-5, and the exported weights within 1e-5. Here they are equal bit for
  bit (each micro-batch's gradient scaled by 1/2 is exact, and gloo's sum of two terms rounds
  once, as autograd's accumulation does); the tolerance leaves room for a reduction in another
  order (more processes, NCCL's rings and trees, other kernels), a few fp32 roundings (6e-8
  relative each) per step over 40 steps, far below 1e-5;
- one output folder, written by rank 0 alone: the same files as one process's run, nothing else
  beside it, and one metrics record printed;
- a folder it must not write is refused by every rank before any collective, nothing written;
- `--resume auto` (the one command line of a restarted launch) starts, then keeps a finished run;
- a grid (several --lr) under torchrun refuses in one line, from rank 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.io import LOCK_FILE
from bertkit.model import BertModel
from bertkit.tokenization import BertTokenizer

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
GOOD = ["good", "great", "fine", "nice", "lovely"]
BAD = ["bad", "awful", "poor", "dull", "grim"]
FILLER = ["the", "film", "was", "a", "plot", "and", "cast", "very"]


@pytest.fixture(scope="module")
def task_files(tmp_path_factory) -> dict[str, Path]:
    """A 1-layer random BERT with its own small vocabulary, and a sentiment CSV (32 train, 16
    dev rows) that such a model can start to learn in a few steps."""
    root = tmp_path_factory.mktemp("ft-ddp")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *GOOD, *BAD, *FILLER]
    model_dir = root / "model"
    BertTokenizer({t: i for i, t in enumerate(vocab)}).save_pretrained(model_dir)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    BertModel(config).save_pretrained(model_dir)
    data = root / "data"
    data.mkdir()
    for split, n in (("train", 32), ("dev", 16)):
        rows = ["text,label"]
        for i in range(n):  # 1-3 words of one sentiment, a filler word in some
            words = GOOD if i % 2 else BAD
            text = [words[(i + k) % len(words)] for k in range(1 + i % 3)]
            if i % 4 == 1:
                text.insert(1, FILLER[i % len(FILLER)])
            rows.append(f"{' '.join(text)},{'pos' if i % 2 else 'neg'}")
        (data / f"{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return {"model": model_dir, "data": data}


def finetune_args(files: dict[str, Path], out: Path) -> list[str]:
    return ["finetune", "custom", "--model", str(files["model"]), "--data", str(files["data"]),
            "--output", str(out), "--batch-size", "8", "--micro-batch-size", "4",
            "--epochs", "10", "--lr", "2e-3", "--max-seq-length", "16", "--log-every", "1",
            "--eval-every", "10", "--precision", "fp32", "--device", "cpu",
            "--loader-workers", "0", "--no-progress"]


def torchrun(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "-m", "bertkit", *args],
                          capture_output=True, text=True, timeout=120, env=ENV)


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def files_in(run: Path) -> set[str]:
    return {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()}


def test_two_processes_fine_tune_as_one_does_into_one_folder(task_files, tmp_path):
    torch.set_num_threads(1)
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(finetune_args(task_files, one)) == 0
    proc = torchrun(*finetune_args(task_files, two))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr

    # the losses of every step, and rank 0's dev evaluations every 10 steps
    losses = [[r["loss"] for r in records(run) if "loss" in r] for run in (one, two)]
    assert len(losses[0]) == 40 and losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert losses[0][-1] < 0.6  # it learned (from ln 2): a frozen run would compare equal too
    evals = [[(r["step"], r["eval_accuracy"]) for r in records(run) if "eval_accuracy" in r]
             for run in (one, two)]
    assert [s for s, _ in evals[0]] == [10, 20, 30, 40] and evals[1] == evals[0]

    # the final dev metrics, the exported model and the predictions
    m1, m2 = (json.loads((run / "metrics.json").read_text()) for run in (one, two))
    assert m1.keys() == m2.keys() and {"accuracy", "f1", "final_loss"} <= m1.keys()
    for key, value in m1.items():
        if key in ("train_seconds", "train_cpu_seconds"):  # the run's cost, not its outcome
            assert value > 0 and m2[key] > 0, key
        elif isinstance(value, float):
            assert m2[key] == pytest.approx(value, rel=1e-5), key
        else:
            assert m2[key] == value, key
    w1, w2 = (load_file(run / "model.safetensors") for run in (one, two))
    assert w1.keys() == w2.keys()
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=1e-5, atol=1e-5)
    assert (two / "config.json").read_text() == (one / "config.json").read_text()

    # one folder, rank 0's: the same files as one process writes, nothing per rank, no
    # training states left (a finished run keeps its release), and one record printed
    assert files_in(two) - {LOCK_FILE} == files_in(one) - {LOCK_FILE}  # one's: still held
    assert not (two / "checkpoints").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]
    assert json.loads(proc.stdout)["accuracy"] == m2["accuracy"]


def test_every_rank_stops_by_itself_on_a_folder_it_must_not_write(task_files, tmp_path):
    """A user's folder: each rank refuses it with bertkit's line before any collective (no
    rank is left in a barrier to die of a closed connection, no traceback) and nothing is
    written. (One line per rank for now: the CLI prints each rank's error.)"""
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep")
    proc = torchrun(*finetune_args(task_files, user))
    assert proc.returncode != 0
    lines = {ln for ln in proc.stderr.splitlines() if ln.startswith("bertkit: error:")}
    assert len(lines) == 1 and "not a folder this command wrote" in lines.pop()
    assert "[rank" not in proc.stderr and "Connection closed" not in proc.stderr
    assert [p.name for p in user.iterdir()] == ["notes.txt"]


def test_resume_auto_is_one_command_line_for_a_fresh_start_and_a_repeat(task_files, tmp_path,
                                                                        capsys):
    """What a launcher that restarts a job repeats (torchrun --max-restarts, a requeue): the
    first start trains, the repeat after the end keeps the finished run, and a folder of another
    run (other settings) is still refused."""
    argv = [*finetune_args(task_files, tmp_path / "run"), "--resume", "auto"]
    argv[argv.index("--epochs") + 1] = "1"
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    written = (tmp_path / "run" / "model.safetensors").stat().st_mtime_ns
    assert main(argv) == 0 and json.loads(capsys.readouterr().out) == first
    assert (tmp_path / "run" / "model.safetensors").stat().st_mtime_ns == written
    argv[argv.index("--lr") + 1] = "1e-3"
    assert main(argv) == 1
    assert "other settings than the earlier run (train.lr)" in capsys.readouterr().err


def test_a_grid_under_torchrun_refuses_in_one_line_from_rank_0(task_files, tmp_path,
                                                               monkeypatch, capsys):
    argv = finetune_args(task_files, tmp_path / "out")
    argv[argv.index("--lr") + 1] = "1e-3,2e-3"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit: error: a grid") and "\n" not in err
    monkeypatch.setenv("RANK", "1")
    assert main(argv) == 1 and capsys.readouterr().err == ""
    assert list(tmp_path.iterdir()) == []
