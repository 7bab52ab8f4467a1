"""Restarts by a launcher: one command line for a fresh start and a restart (`--resume auto`), a
run folder moved elsewhere, and the lock that keeps a second writer out of a folder.

A launcher that restarts a job (torchrun --max-restarts, a Slurm requeue) repeats the command
line it was given; here the "restart" is the same `bertkit pretrain` line run again after the
run was cut as a kill leaves it (the last checkpoint gone, or no checkpoint at all, no export).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.chunks import ChunkConfig
from bertkit.data.instances import InstanceConfig
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.errors import BertkitError
from bertkit.io import LOCK_FILE, lock_output_dir, release_output_dir
from bertkit.tokenization import BertTokenizer
from bertkit.training import distributed
from bertkit.training.loop import TrainConfig
from bertkit.training.signals import terminate_as_interrupt
from bertkit.training.state import list_checkpoints, resolve_resume
from bertkit.vocab.trainer import TrainerConfig, save_vocab, train_from_texts

SEQ = 48


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    """Two book excerpts, a 400-token vocabulary, static shards, a tiny model with dropout on (so
    that an exact resume needs the random state back, not only the weights)."""
    root = tmp_path_factory.mktemp("restarts")
    files = []
    for name in ("carroll-alice.txt", "austen-pride_and_prejudice.txt"):
        files.append(root / name)
        files[-1].write_text((shared_data / "books" / name).read_text(encoding="utf-8")[:8_000],
                             encoding="utf-8")
    texts = [f.read_text(encoding="utf-8") for f in files]
    config = TrainerConfig(vocab_size=400, criterion="pmi", drop_absorbed=False)
    save_vocab(train_from_texts(texts, config), root / "tok", True)
    tokenizer = BertTokenizer.from_pretrained(root / "tok")
    chunk = ChunkConfig(instance=InstanceConfig(max_seq_length=SEQ), dupe_factor=1,
                        max_predictions_per_seq=8)
    prepare(files, tokenizer, root / "shards", PrepareConfig(chunk=chunk), progress=False)
    model = {"vocab_size": tokenizer.vocab_size, "hidden_size": 32, "num_hidden_layers": 1,
             "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": SEQ,
             "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
    (root / "config.json").write_text(json.dumps(model))
    return root


def command(corpus: Path, out: Path, *extra: str) -> list[str]:
    """One `bertkit pretrain` line: 4 steps, a state every 2."""
    return ["pretrain", "--data", str(corpus / "shards"), "--tokenizer", str(corpus / "tok"),
            "--config", str(corpus / "config.json"), "--output", str(out), "--max-steps", "4",
            "--batch-size", "4", "--lr", "1e-3", "--warmup-steps", "1", "--log-every", "1",
            "--save-every", "2", "--keep", "0", "--eval-holdout", "0", "--precision", "fp32",
            "--device", "cpu", "--no-progress", *extra]


def losses(out: Path) -> list[float]:
    records = map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
    return [r["loss"] for r in records if "loss" in r]


def cut(out: Path, keep_steps: int) -> None:
    """The folder as a kill leaves it: states after `keep_steps` never written, no export."""
    for step, path in list_checkpoints(out):
        if step > keep_steps:
            shutil.rmtree(path)
    shutil.rmtree(out / "model")


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    lines = [x for x in err.splitlines() if x.startswith("bertkit: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_one_command_line_starts_and_continues_a_killed_run(corpus, tmp_path, capsys, caplog):
    """`--resume auto`, run twice: the first start trains from scratch, the restart after a
    kill continues from the last state (or starts again when there was none), and the losses
    are the uninterrupted run's, exactly (dropout on: the random state comes back too)."""
    caplog.set_level(logging.INFO)
    out = tmp_path / "run"
    line = command(corpus, out, "--resume", "auto")
    assert main(line) == 0  # a new folder: starts
    uninterrupted = losses(out)
    assert len(uninterrupted) == 4
    cut(out, keep_steps=2)
    caplog.clear()
    assert main(line) == 0  # the restart: continues from step 2
    assert f"resumed from {out / 'checkpoints' / 'step-2'}" in caplog.text
    assert losses(out) == uninterrupted
    assert [s for s, _ in list_checkpoints(out)] == [2, 4] and (out / "model").is_dir()
    cut(out, keep_steps=0)  # killed before its first state: the restart starts again
    caplog.clear()
    assert main(line) == 0
    assert "resumed from" not in caplog.text
    assert losses(out) == uninterrupted
    # a folder of another run (other settings) is refused, in one line, as with --resume
    assert main(command(corpus, out, "--resume", "auto", "--seed", "1")) == 1
    assert "--resume auto with other settings than the earlier run (train.seed)" in \
        one_error(capsys)
    # the explicit forms keep their meaning: --resume must continue, no flag must start
    assert main(command(corpus, tmp_path / "new", "--resume")) == 1
    assert "nothing to resume" in one_error(capsys)
    assert main(command(corpus, out)) == 1
    assert "holds an earlier run; pass --resume" in one_error(capsys)


def test_resume_is_true_false_or_auto():
    with pytest.raises(BertkitError, match="resume must be True, False or 'auto'"):
        TrainConfig(output_dir="x", resume="yes")
    with pytest.raises(SystemExit):  # argparse: "invalid choice: 'Auto' (choose from 'auto')"
        main(["pretrain", "--data", "d", "--output", "o", "--resume", "Auto"])


def test_resolve_resume_decides_from_the_folder(tmp_path):
    assert resolve_resume(tmp_path / "new", "auto") is False
    assert resolve_resume(tmp_path / "new", False) is False
    with pytest.raises(BertkitError, match="nothing to resume"):
        resolve_resume(tmp_path / "new", True)
    state = tmp_path / "run" / "checkpoints" / "step-3"
    state.mkdir(parents=True)
    (state / "state.pt").write_bytes(b"")
    assert resolve_resume(tmp_path / "run", "auto") is True
    assert resolve_resume(tmp_path / "run", True) is True
    with pytest.raises(BertkitError, match="already holds training checkpoints"):
        resolve_resume(tmp_path / "run", False)


def test_a_run_folder_copied_elsewhere_resumes(corpus, tmp_path):
    """The folder's own path is not a setting: a run cut at step 2, copied to another path (as
    to a cluster's scratch space), continues there to the uninterrupted run's losses."""
    first = tmp_path / "here"
    assert main(command(corpus, first)) == 0
    uninterrupted = losses(first)
    cut(first, keep_steps=2)
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(first, moved)
    assert main(command(corpus, moved, "--resume")) == 0
    assert losses(moved) == uninterrupted
    assert [s for s, _ in list_checkpoints(first)] == [2]  # the original is left as it was


HOLD = """
import sys, time
from bertkit.io import lock_output_dir
lock_output_dir(sys.argv[1])
print("locked", flush=True)
time.sleep(120)
"""


def test_a_second_writer_is_refused_until_the_first_process_ends(corpus, tmp_path, capsys):
    """A folder another process writes (here a child that holds its lock, as the workers of a
    launcher killed with SIGKILL do) is refused in one line naming that process, before
    anything is written; once that process is killed the same command runs."""
    out = tmp_path / "run"
    assert main(command(corpus, out, "--max-steps", "2")) == 0
    release_output_dir(out)  # this process is done with it
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert child.stdout.readline().strip() == "locked"
        before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
        capsys.readouterr()
        assert main(command(corpus, out, "--max-steps", "2", "--resume", "auto")) == 1
        line = one_error(capsys)
        assert "another process is writing this folder" in line
        assert f"pid {child.pid} on " in line
        assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    # the kernel dropped the lock with the process: the restart goes ahead
    assert main(command(corpus, out, "--max-steps", "2", "--resume", "auto")) == 0


def test_the_lock_is_taken_once_per_process_and_released(tmp_path):
    lock_output_dir(tmp_path)
    lock_output_dir(tmp_path)  # again in the same process: a no-op
    holder = (tmp_path / LOCK_FILE).read_text()
    assert holder.startswith(f"pid {os.getpid()} on ")
    probe = subprocess.run([sys.executable, "-c", HOLD, str(tmp_path)], capture_output=True,
                           text=True, timeout=60)
    assert probe.returncode != 0 and "another process is writing" in probe.stderr
    release_output_dir(tmp_path)
    assert not (tmp_path / LOCK_FILE).exists()


def test_one_process_has_no_one_to_stop_with():
    """Outside torchrun `stop_together` raises the error again, for the CLI to print as ever."""
    with pytest.raises(BertkitError, match="bad"):
        distributed.stop_together(BertkitError("bad"))
    with pytest.raises(KeyboardInterrupt):
        distributed.stop_together(KeyboardInterrupt())


def test_sigterm_outside_training_raises_an_interrupt_then_the_handler_comes_back():
    """Under torchrun a SIGTERM (a peer ended) would end the process without a word; inside
    `terminate_as_interrupt` it is a KeyboardInterrupt the CLI turns into its one line."""
    before = signal.getsignal(signal.SIGTERM)
    with terminate_as_interrupt():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)  # delivered before kill returns
    assert signal.getsignal(signal.SIGTERM) is before


FORK = """
import os, sys, time
from bertkit.io import lock_output_dir
lock_output_dir(sys.argv[1])
child = os.fork()
if child == 0:  # a DataLoader worker, outliving its killed parent for a while
    os.close(1)
    os.close(2)
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
os._exit(0)  # the parent dies without a word, as under SIGKILL
"""


def test_a_forked_child_does_not_keep_its_dead_parents_lock(tmp_path):
    """A flock belongs to the open file, which a forked child (a DataLoader worker) shares;
    the child drops it, so the restarted run gets the lock while the old worker still lives."""
    proc = subprocess.run([sys.executable, "-c", FORK, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "OMP_NUM_THREADS": "1"})
    child = int(proc.stdout.strip())
    try:
        lock_output_dir(tmp_path)  # the child is alive, and holds no lock
        release_output_dir(tmp_path)
    finally:
        os.kill(child, signal.SIGKILL)
