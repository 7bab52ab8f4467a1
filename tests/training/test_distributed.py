"""Many processes: torchrun with 2 gloo processes on the CPU, against one process.

- every pre-training objective trains under torchrun, and its losses equal one process's at
  the same global batch, step by step (dropout off: the one thing that differs per process);
- a 2-process run killed between checkpoints and resumed with 2 processes is the uninterrupted
  run, dropout and dynamic masks included (every rank's random state is saved);
- a run saved with 2 processes resumes with 1, and the other way round, on the same examples in
  the same order (losses equal with dropout off), saying once what could not carry over;
- CUDA RNG states of more GPUs than this machine has are restored as far as they go;
- the commands that are not distributed refuse torchrun in one line (fine-tuning under torchrun:
  test_finetune_ddp.py);
- restarts: torchrun --max-restarts restarts a killed worker with the same command line
  (`--resume auto`) to the uninterrupted losses; one process stopping with bertkit's error ends
  every process with one line; a group that does not form ends within --join-timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from bertkit.cli.main import main
from bertkit.data.chunks import ChunkConfig
from bertkit.data.instances import InstanceConfig
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.training.state import list_checkpoints, restore_cuda_rng
from bertkit.vocab.trainer import TrainerConfig, save_vocab, train_from_texts

WORKER = Path(__file__).with_name("ddp_worker.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SEQ = 48


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    """Two book excerpts, a 600-token vocabulary, and shards for every objective (static masks
    for mlm+nsp, mlm and ltr; sentence order for sop; dynamic masks for the resume tests)."""
    root = tmp_path_factory.mktemp("ddp")
    sources, texts = [], []
    for name in ("carroll-alice.txt", "austen-pride_and_prejudice.txt"):
        texts.append((shared_data / "books" / name).read_text(encoding="utf-8")[:15_000])
        sources.append(root / name)
        sources[-1].write_text(texts[-1], encoding="utf-8")
    config = TrainerConfig(vocab_size=600, criterion="pmi", drop_absorbed=False)
    save_vocab(train_from_texts(texts, config), root / "tok", True)
    from bertkit.tokenization import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(root / "tok")
    shards = {}
    for name, objective, dynamic in (("mlm+nsp", "mlm+nsp", False), ("sop", "sop", False),
                                     ("dynamic", "mlm+nsp", True)):
        chunk = ChunkConfig(instance=InstanceConfig(max_seq_length=SEQ, objective=objective),
                            dupe_factor=1, max_predictions_per_seq=8, dynamic_masking=dynamic)
        prepare(sources, tokenizer, root / name, PrepareConfig(chunk=chunk), progress=False)
        shards[name] = root / name
    model = {"vocab_size": tokenizer.vocab_size, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": SEQ,
             "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    (root / "config.json").write_text(json.dumps(model))
    return {"root": root, "tok": root / "tok", "config": root / "config.json", **shards}


def torchrun(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def step_losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x)["loss"] for x in lines if "loss" in json.loads(x)]


SHARDS_FOR = {"mlm+nsp": "mlm+nsp", "mlm": "dynamic", "ltr": "mlm+nsp", "sop": "sop"}


@pytest.mark.parametrize("objective", ["mlm", "mlm+nsp", "sop", "ltr"])
def test_every_objective_trains_under_torchrun_as_one_process_does(corpus, tmp_path, objective):
    """2 processes x 2 micro x 1 accumulation == 1 process x 2 micro x 2 (global batch 4):
    the same losses step by step; the objectives without a sentence task build no NSP head
    and no pooler (DDP would stop at step 2 on their missing gradients)."""
    args = ["pretrain", "--data", str(corpus[SHARDS_FOR[objective]]), "--tokenizer",
            str(corpus["tok"]), "--config", str(corpus["config"]), "--objective", objective,
            "--max-steps", "4", "--batch-size", "4", "--micro-batch-size", "2", "--lr", "1e-3",
            "--warmup-steps", "1", "--log-every", "1", "--save-every", "0", "--eval-holdout",
            "0", "--precision", "fp32", "--device", "cpu", "--no-progress"]
    torch.set_num_threads(1)
    assert main([*args, "--output", str(tmp_path / "one")]) == 0
    proc = torchrun("-m", "bertkit", *args, "--output", str(tmp_path / "two"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = step_losses(tmp_path / "one"), step_losses(tmp_path / "two")
    assert len(one) == 4 and two == pytest.approx(one, rel=1e-5)
    with safe_open(tmp_path / "two" / "model" / "model.safetensors", "pt") as f:
        names = set(f.keys())
    has_sentence_head = objective in ("mlm+nsp", "sop")
    assert any("seq_relationship" in n for n in names) == has_sentence_head
    assert any("pooler" in n for n in names) == has_sentence_head


def worker(corpus, out: Path, processes: int, *extra: str) -> subprocess.CompletedProcess:
    args = [str(WORKER), str(corpus["dynamic"]), str(corpus["tok"]), str(out), *extra]
    if processes == 2:
        return torchrun(*args)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env=ENV)


def seen(out: Path) -> dict[int, int]:
    """Stream position -> CRC of the example trained on there, over every rank's record."""
    pairs = {}
    for path in out.glob("seen-rank*.jsonl"):
        for line in path.read_text().splitlines():
            position, crc = json.loads(line)
            assert pairs.setdefault(position, crc) == crc
    return pairs


@pytest.fixture(scope="module")
def full_with_dropout(corpus, tmp_path_factory) -> Path:
    """An uninterrupted 2-process run, dropout on: what every cut and resumed run must equal."""
    out = tmp_path_factory.mktemp("full") / "run"
    full = worker(corpus, out, 2, "--dropout", "0.1")
    assert full.returncode == 0, full.stderr[-3000:]
    return out


def test_killed_two_process_run_resumes_identically(corpus, tmp_path, full_with_dropout):
    """Dropout on, dynamic masks: SIGKILL between the step-3 and step-6 checkpoints, resume
    with 2 processes: steps 4-6 lose exactly what the uninterrupted run lost."""
    # 2 micro-batches per step on each rank: call 8 is in step 4, after the step-3 save
    killed = worker(corpus, tmp_path / "cut", 2, "--dropout", "0.1", "--kill-at", "8")
    assert killed.returncode != 0
    assert [s for s, _ in list_checkpoints(tmp_path / "cut")] == [3]
    resumed = worker(corpus, tmp_path / "cut", 2, "--dropout", "0.1", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected = json.loads((full_with_dropout / "losses-0.json").read_text())
    got = json.loads((tmp_path / "cut" / "losses-3.json").read_text())
    assert got == expected[3:]  # exact: same ranks, same random streams, same reductions
    assert seen(tmp_path / "cut") == seen(full_with_dropout)


def test_torchrun_restarts_a_killed_worker_with_the_same_command_line(corpus, tmp_path,
                                                                      full_with_dropout):
    """`torchrun --max-restarts 1` and `--resume auto`: the first start begins the run, rank 0
    is killed (SIGKILL) in step 4, torchrun starts both processes again with the same command
    line, they join (a store prefix per restart: torch's shared store would hand them the dead
    workers' addresses) and continue from the step-3 state to the uninterrupted losses."""
    out = tmp_path / "restarted"
    args = [str(WORKER), str(corpus["dynamic"]), str(corpus["tok"]), str(out), "--dropout",
            "0.1", "--kill-at", "8", "--resume", "auto"]
    proc = torchrun("--max-restarts", "1", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = json.loads((full_with_dropout / "losses-0.json").read_text())
    assert not (out / "losses-0.json").exists()  # the first start never finished
    assert json.loads((out / "losses-3.json").read_text()) == expected[3:]
    assert seen(out) == seen(full_with_dropout)
    # rank 1, left in a collective with the killed rank 0, ends without a gloo traceback
    assert "Connection closed by peer" not in proc.stderr and bertkit_lines(proc.stderr) == []


def bertkit_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("bertkit: error:")]


def test_one_process_stopping_ends_every_process_with_one_line(corpus, tmp_path):
    """The last rank stops with a BertkitError in step 3 while rank 0 waits for it in the
    gradient all-reduce: both end at once, rank 0 prints the last rank's line, nothing prints
    a gloo traceback ("Connection closed by peer")."""
    proc = worker(corpus, tmp_path / "run", 2, "--fail-at", "5")
    assert proc.returncode != 0
    lines = bertkit_lines(proc.stderr)
    assert lines == ["bertkit: error: bad record in the last rank's batch (call 5) (rank 1)"], \
        proc.stderr[-3000:]
    assert "Connection closed by peer" not in proc.stderr
    assert f'File "{WORKER}"' not in proc.stderr  # torchrun's own summary aside, no traceback


def test_rank_0_refusing_the_folder_ends_the_waiting_rank_too(corpus, tmp_path):
    """`bertkit pretrain` under torchrun into a folder another process writes: rank 0 refuses
    in one line while rank 1 waits for it at a barrier; rank 1 ends at once, silently."""
    out = tmp_path / "busy"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from bertkit.io import lock_output_dir\n"
                               "lock_output_dir(sys.argv[1]); print('locked', flush=True)\n"
                               "time.sleep(120)", str(out)],
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = torchrun("-m", "bertkit", "pretrain", "--data", str(corpus["mlm+nsp"]),
                        "--tokenizer", str(corpus["tok"]), "--config", str(corpus["config"]),
                        "--output", str(out), "--max-steps", "2", "--batch-size", "4",
                        "--eval-holdout", "0", "--device", "cpu", "--no-progress",
                        "--resume", "auto", timeout=60)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert proc.returncode != 0
    lines = bertkit_lines(proc.stderr)
    assert len(lines) == 1 and "another process is writing this folder" in lines[0], \
        proc.stderr[-3000:]
    assert f"pid {holder.pid} on " in lines[0]
    assert "bertkit/cli" not in proc.stderr and "Connection closed by peer" not in proc.stderr


def test_a_process_group_that_does_not_form_ends_in_one_line(corpus, tmp_path):
    """Rank 0 of 2 started alone (its peer never comes): it waits --join-timeout seconds, not
    torch's 30 minutes, and says what to do."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**ENV, "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    proc = subprocess.run([sys.executable, "-m", "bertkit", "pretrain", "--data",
                           str(corpus["mlm+nsp"]), "--output", str(tmp_path / "out"),
                           "--device", "cpu", "--join-timeout", "2"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"bertkit: error: the 2 processes did not all join within 2 s (rank 0 of 2, gloo, "
        f"store 127.0.0.1:{port}; relaunch the job. Under torchrun with several nodes and "
        "--max-restarts, launch with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; on a slow start "
        "raise --join-timeout (docs/reports/scaling.md))"]
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def full_one_process(corpus, tmp_path_factory) -> Path:
    """An uninterrupted 1-process run, dropout off: what both world-size resumes must equal."""
    out = tmp_path_factory.mktemp("full-one") / "run"
    full = worker(corpus, out, 1)
    assert full.returncode == 0, full.stderr[-3000:]
    return out


@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_resume_on_another_world_size_trains_on_the_same_examples(corpus, tmp_path, before,
                                                                  after, full_one_process):
    """Saved with `before` processes at step 3, resumed with `after` at the same global batch:
    the examples at every stream position are the uninterrupted run's, and so are the losses
    (dropout off, masks from the positions); the log says once what was re-derived."""
    # the collate is called per micro-batch: 4 per step alone, 2 per rank with 2 processes;
    # the kill falls in step 4, after the step-3 save
    cut = worker(corpus, tmp_path / "cut", before, "--kill-at", str(14 if before == 1 else 8))
    assert cut.returncode != 0
    assert [s for s, _ in list_checkpoints(tmp_path / "cut")] == [3]
    resumed = worker(corpus, tmp_path / "cut", after, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stderr.count("dropout streams re-derived") == 1
    expected = json.loads((full_one_process / "losses-0.json").read_text())
    got = json.loads((tmp_path / "cut" / "losses-3.json").read_text())
    assert got == pytest.approx(expected[3:], rel=1e-5)
    assert seen(tmp_path / "cut") == seen(full_one_process)


def test_cuda_rng_states_of_more_gpus_than_here_restore_as_far_as_they_go(caplog):
    """A checkpoint from a machine with 4 GPUs (old layout: one state per visible GPU) restored
    on one with 2: the first two are set, a warning says so, no IndexError; one state (the
    current layout: this process's GPU) is set on the current device."""
    states = [torch.full((16,), i, dtype=torch.uint8) for i in range(4)]
    calls = []
    restore_cuda_rng(states, 2, lambda state, index=None: calls.append((int(state[0]), index)))
    assert calls == [(0, 0), (1, 1)]
    assert "4 GPUs, this machine has 2" in caplog.text
    calls.clear()
    restore_cuda_rng(states[3], 1, lambda state, index=None: calls.append((int(state[0]), index)))
    assert calls == [(3, None)]


@pytest.mark.parametrize("argv", [
    ["evaluate", "run", "--task", "sst2", "--data", "d"],
    ["embed", "m", "--input", "t.txt", "--output", "v.npy"],
    ["features", "m", "--input", "t.txt", "--output", "f.jsonl"],
    ["serve", "m"],
    ["vocab", "train", "a.txt", "--output", "o"],
])
def test_commands_that_are_not_distributed_refuse_torchrun_in_one_line(argv, monkeypatch,
                                                                       capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"bertkit: error: `bertkit {argv[0]}` runs as one process")
    assert "\n" not in err and list(tmp_path.iterdir()) == []  # nothing written
    monkeypatch.setenv("RANK", "1")
    assert main(argv) == 1 and capsys.readouterr().err == ""  # one line, from rank 0


def test_evaluate_under_a_real_torchrun_refuses_in_one_line_and_writes_nothing(tmp_path):
    proc = torchrun("-m", "bertkit", "evaluate", str(tmp_path / "m"), "--task", "sst2",
                    "--data", str(tmp_path / "d"), "--output", str(tmp_path / "out"))
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("bertkit: error:")]
    assert len(lines) == 1 and "runs as one process" in lines[0]  # rank 0 alone says it
    # torchrun itself reports the failed workers with its own traceback; none comes from bertkit
    assert "bertkit/cli" not in proc.stderr and not (tmp_path / "out").exists()
