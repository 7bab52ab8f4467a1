"""The training loop: exact resume after SIGKILL, SIGTERM save, accumulation, bad states.

Run as a script (`python test_loop.py MODE OUT ...`) this file is also the child process the
tests kill, and the worker `torchrun` starts for the DDP test
(`test_ddp_two_gloo_processes_match_one_process`, below).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import BertForPreTraining
from bertkit.training import TrainConfig, TrainingInterrupted, train
from bertkit.training.state import list_checkpoints

VOCAB, T, P = 64, 12, 3


pytestmark = pytest.mark.usefixtures("one_thread")


def make_model(dropout: float = 0.1) -> BertForPreTraining:
    torch.manual_seed(1234)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return BertForPreTraining(config)


def make_data(n: int = 40) -> list[dict[str, torch.Tensor]]:
    """Synthetic statically-masked instances under Google's feature names."""
    gen = torch.Generator().manual_seed(7)
    items = []
    for i in range(n):
        ids = torch.randint(5, VOCAB, (T,), generator=gen)
        positions = torch.tensor([2, 5, 9])
        items.append({
            "input_ids": ids.index_fill(0, positions, 4),  # 4 plays [MASK]
            "token_type_ids": (torch.arange(T) >= T // 2).long(),
            "attention_mask": torch.ones(T, dtype=torch.long),
            "masked_lm_positions": positions,
            "masked_lm_ids": ids[positions],
            "masked_lm_weights": torch.ones(P),
            "next_sentence_label": torch.tensor(i % 2),
        })
    return items


def collate(items):
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


class KillingCollate:
    """Collates, and kills its own process (like an OOM killer) on the n-th call."""

    def __init__(self, kill_at: int, sig: int) -> None:
        self.calls, self.kill_at, self.sig = 0, kill_at, sig

    def __call__(self, items):
        self.calls += 1
        if self.calls == self.kill_at:
            os.kill(os.getpid(), self.sig)
        return collate(items)


def config(out, **kw) -> TrainConfig:
    """fp32 unless a test asks otherwise: the comparisons' tolerances are fp32's, and `auto`
    picks bf16 on CPUs with native bf16."""
    base = {"output_dir": str(out), "max_steps": 8, "batch_size": 8, "micro_batch_size": 4,
            "lr": 3e-3, "warmup_steps": 2, "log_every": 1, "save_every": 3, "progress": False,
            "precision": "fp32"}
    return TrainConfig(**{**base, **kw})


def data_loss(model) -> float:
    """The loss on all the training data in eval mode: "it trains" whatever the batch order
    (the per-step losses come from different batches and need not fall in 4 steps)."""
    model.eval()
    with torch.no_grad():
        loss = float(model(**collate(make_data())).loss)
    model.train()
    return loss


def logged_losses(out) -> dict[int, float]:
    lines = Path(out, "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


def test_sigkill_then_resume_reproduces_the_uninterrupted_losses(tmp_path):
    full = train(make_model(), make_data(), collate, config(tmp_path / "full"))
    assert len(full.losses) == 8
    killed = tmp_path / "killed"
    # 2 micro-batches per step: call 9 is the first of step 5, after the step-3 save.
    threads = str(torch.get_num_threads())  # the same reduction order as this process
    proc = subprocess.run([sys.executable, __file__, "kill", str(killed), "9", threads],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert [s for s, _ in list_checkpoints(killed)] == [3]
    assert sorted(logged_losses(killed)) == [1, 2, 3, 4]  # step 4 ran after the save
    resumed = train(make_model(), make_data(), collate, config(killed, resume=True))
    assert resumed.step == 8 and len(resumed.losses) == 5
    assert resumed.losses == full.losses[3:]  # exact, fp32 on CPU
    assert logged_losses(killed) == logged_losses(tmp_path / "full")
    assert [s for s, _ in list_checkpoints(killed)] == [6, 8]  # keep=2


def test_sigterm_saves_a_checkpoint_then_stops(tmp_path):
    with pytest.raises(TrainingInterrupted, match="step 2"):
        train(make_model(), make_data(), KillingCollate(3, signal.SIGTERM),
              config(tmp_path, save_every=0))
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored


def test_checkpoints_every_n_steps_and_once_at_the_end(tmp_path, caplog):
    caplog.set_level("INFO", logger="bertkit.training.loop")
    result = train(make_model(), make_data(), collate,
                   config(tmp_path, max_steps=4, save_every=2, keep=0))
    saves = [r for r in caplog.records if r.getMessage().startswith("saved training state")]
    assert len(saves) == 2  # steps 2 and 4; the end-of-run save is not repeated
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 4]
    assert result.checkpoint == tmp_path / "checkpoints" / "step-4"
    summary = json.loads((result.checkpoint / "summary.json").read_text())
    assert summary["step"] == 4 and summary["loss"] == pytest.approx(result.losses[-1])


def test_accumulation_matches_one_big_batch(tmp_path):
    model_a, model_b, start = make_model(0.0), make_model(0.0), make_model(0.0)
    a = train(model_a, make_data(), collate, config(tmp_path / "a", max_steps=3))
    b = train(model_b, make_data(), collate,
              config(tmp_path / "b", max_steps=3, micro_batch_size=None))
    assert a.losses == pytest.approx(b.losses, rel=1e-5)
    for (name, pa), pb in zip(model_a.named_parameters(), model_b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-6, msg=name)
    assert any(not torch.equal(pa, p0) for pa, p0 in zip(model_a.parameters(),
                                                         start.parameters()))  # it trained


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains(tmp_path, precision):
    model = make_model(0.0)
    before = data_loss(model)
    result = train(model, make_data(), collate,
                   config(tmp_path, max_steps=4, precision=precision, save_every=0))
    assert all(torch.isfinite(torch.tensor(result.losses)))
    assert data_loss(model) < before
    state = torch.load(result.checkpoint / "state.pt", weights_only=True)
    assert (state["scaler"] is not None) == (precision == "fp16")  # GradScaler only for fp16


def test_lamb_trains_through_the_loop(tmp_path):
    model = make_model(0.0)
    before = data_loss(model)
    train(model, make_data(), collate,
          config(tmp_path, max_steps=4, optimizer="lamb", lr=1e-2, save_every=0))
    assert data_loss(model) < before


class NaNAfter(torch.nn.Module):
    """Wraps a model; its loss becomes NaN from the n-th forward on."""

    def __init__(self, inner, n):
        super().__init__()
        self.inner, self.n, self.calls = inner, n, 0

    def forward(self, **batch):
        self.calls += 1
        out = self.inner(**batch)
        if self.calls >= self.n:
            out.loss = out.loss * float("nan")
        return out


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    with pytest.raises(BertkitError, match=r"non-finite loss .* step 3.*step-2"):
        train(NaNAfter(make_model(), 5), make_data(), collate, config(tmp_path, save_every=1))
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1, 2]


def test_resume_without_checkpoint_and_reuse_of_a_run_dir_are_refused(tmp_path):
    with pytest.raises(BertkitError, match="no checkpoint"):
        train(make_model(), make_data(), collate, config(tmp_path, resume=True))
    train(make_model(), make_data(), collate, config(tmp_path, max_steps=1))
    with pytest.raises(BertkitError, match="already holds training checkpoints"):
        train(make_model(), make_data(), collate, config(tmp_path, max_steps=1))
    with pytest.raises(BertkitError, match="micro-batch size 3"):
        train(make_model(), make_data(), collate, config(tmp_path / "x", micro_batch_size=3))


def test_eval_and_step_metrics_are_logged(tmp_path):
    def evaluate(model):
        assert not model.training
        return {"score": 0.5}

    def step_metrics(batch, out):
        return {"nsp_acc": float((out.nsp_logits.argmax(-1) == batch["next_sentence_label"])
                                 .float().mean())}

    result = train(make_model(), make_data(), collate,
                   config(tmp_path, max_steps=4, eval_every=2, log_every=2, tensorboard=True),
                   evaluate=evaluate, step_metrics=step_metrics)
    records = [json.loads(x) for x in Path(tmp_path, "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4]
    assert all(r["eval_score"] == 0.5 and 0 <= r["nsp_acc"] <= 1 for r in records)
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "tokens_seen"} <= set(records[-1])
    assert records[-1]["tokens_seen"] == 4 * 8 * T
    assert result.metrics["eval_score"] == 0.5
    has_tb = importlib.util.find_spec("tensorboard") is not None
    assert Path(tmp_path, "tensorboard").is_dir() == has_tb  # optional: a warning without it


def test_ddp_two_gloo_processes_match_one_process(tmp_path):
    """torchrun, 2 processes x 2 micro x 2 accumulation == 1 process x 2 micro x 4."""
    single = train(make_model(0.0), make_data(), collate,
                   config(tmp_path / "one", max_steps=4, micro_batch_size=2, save_every=0))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         __file__, "ddp", str(tmp_path / "two")],
        capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = json.loads(Path(tmp_path, "two", "losses.json").read_text())
    assert ddp == pytest.approx(single.losses, rel=1e-5)
    assert [s for s, _ in list_checkpoints(tmp_path / "two")] == [4]  # rank 0 alone saved


def test_length_grouped_order_resumes_exactly(tmp_path):
    """With lengths (fine-tuning's grouped batches) the order is still a function of (seed,
    epoch): stopped at step 5 (SIGTERM, in the second epoch of 36 examples) and resumed, the
    losses are the uninterrupted run's; and the batches do follow the lengths."""
    lengths = [i % 9 for i in range(36)]
    full = train(make_model(), make_data(36), collate, config(tmp_path / "full"), lengths=lengths)
    with pytest.raises(TrainingInterrupted, match="step 5"):
        train(make_model(), make_data(36), KillingCollate(9, signal.SIGTERM),
              config(tmp_path / "cut"), lengths=lengths)
    resumed = train(make_model(), make_data(36), collate, config(tmp_path / "cut", resume=True),
                    lengths=lengths)
    assert resumed.losses == full.losses[5:]
    seen = []
    train(make_model(), make_data(36), lambda items: seen.append(items) or collate(items),
          config(tmp_path / "order", max_steps=4, micro_batch_size=8), lengths=lengths)
    first = [int(it["input_ids"].sum()) for it in seen[0]]
    index = {int(it["input_ids"].sum()): i for i, it in enumerate(make_data(36))}
    batch_lengths = [lengths[index[x]] for x in first]
    assert max(batch_lengths) - min(batch_lengths) <= 3  # random batches of 8 span ~8


@pytest.mark.slow
def test_compiled_training_gives_the_eager_losses(tmp_path):
    """--compile (torch.compile, inductor on the CPU): the same losses as eager, step by step,
    within 1e-4 relative (fused kernels reorder float sums); dropout off so both see one function."""
    pytest.importorskip("torch._inductor")
    kw = {"max_steps": 3, "micro_batch_size": 8, "save_every": 0, "precision": "fp32"}
    eager = train(make_model(0.0), make_data(), collate, config(tmp_path / "eager", **kw))
    torch._dynamo.reset()
    compiled = train(make_model(0.0), make_data(), collate,
                     config(tmp_path / "compiled", compile=True, **kw))
    assert compiled.losses == pytest.approx(eager.losses, rel=1e-4)
    assert eager.losses[0] != eager.losses[-1]  # it trained: the comparison is not of constants


# Tensor methods that copy a value to the host: on a GPU each waits for everything queued.
HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy")


class HostReads(TorchFunctionMode):
    """Records each host read of a tensor, with the number of steps begun when it happened;
    reads inside the DataLoader are left out (the data order and the collate work on host
    tensors by design, in worker processes on a GPU machine)."""

    def __init__(self, steps: list):
        super().__init__()
        self.steps, self.reads = steps, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in HOST_READS and not _in_data_loader():
            self.reads.append((len(self.steps), func.__name__))
        return func(*args, **(kwargs or {}))


def _in_data_loader() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if f"torch{os.sep}utils{os.sep}data" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def test_no_host_sync_inside_a_step_between_sync_points(tmp_path, monkeypatch):
    """On the branches a GPU takes (BERTKIT_DEVICE_GENERIC), steps 1-3 and 5-7 of a run that
    logs every 4 steps read nothing back from a tensor, from the forward pass to the optimizer;
    steps 4 and 8 read their statistics once (one all-reduce, one read)."""
    from bertkit.switches import DEVICE_GENERIC
    from bertkit.training import loop

    monkeypatch.setenv(DEVICE_GENERIC, "1")
    steps: list = []
    step = loop._train_step
    monkeypatch.setattr(loop, "_train_step", lambda *a: steps.append(1) or step(*a))
    reads = HostReads(steps)
    with reads:
        result = train(make_model(), make_data(), collate,
                       config(tmp_path, max_steps=8, log_every=4, save_every=0))
    assert len(result.losses) == 8
    per_step = Counter(s for s, _ in reads.reads)
    assert all(per_step[s] == 0 for s in (1, 2, 3, 5, 6, 7)), reads.reads
    assert per_step[4] == 1 and reads.reads.count((4, "tolist")) == 1  # the sync point's read


def test_packed_fine_tuning_steps_read_nothing_back_either(tmp_path, monkeypatch):
    """Fine-tuning's packed forward on the GPU branches: the layout of the real tokens comes
    from the collate (built on the host from the batch's mask), so steps between sync points
    still read nothing back; the losses equal the padded forward's."""
    from bertkit.heads import BertForSequenceClassification
    from bertkit.switches import DEVICE_GENERIC
    from bertkit.training import loop
    from bertkit.training.packing import packed_batch
    from bertkit.varlen import GROUP_COST

    monkeypatch.setenv(DEVICE_GENERIC, "1")
    gen = torch.Generator().manual_seed(3)
    data = [{"input_ids": torch.randint(5, VOCAB, (int(n),), generator=gen), "labels": i % 2}
            for i, n in enumerate(torch.randint(3, T, (32,), generator=gen))]

    def pad(items):
        L = max(len(it["input_ids"]) for it in items)
        ids = torch.zeros(len(items), L, dtype=torch.long)
        for b, it in enumerate(items):
            ids[b, :len(it["input_ids"])] = it["input_ids"]
        return {"input_ids": ids, "attention_mask": (ids > 0).long(),
                "labels": torch.tensor([it["labels"] for it in items])}

    def model():
        torch.manual_seed(1)
        return BertForSequenceClassification(BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, id2label={0: "a", 1: "b"}))

    steps: list = []
    step = loop._train_step
    monkeypatch.setattr(loop, "_train_step", lambda *a: steps.append(1) or step(*a))
    reads = HostReads(steps)
    kw = {"max_steps": 8, "log_every": 4, "save_every": 0}
    with reads:
        packed = train(model(), data, lambda items: packed_batch(pad, float("inf"), items),
                       config(tmp_path / "packed", **kw))
    per_step = Counter(s for s, _ in reads.reads)
    assert all(per_step[s] == 0 for s in (1, 2, 3, 5, 6, 7)), reads.reads
    padded = train(model(), data, pad, config(tmp_path / "padded", **kw))
    assert packed.losses == pytest.approx(padded.losses, rel=1e-4)
    # the collate cuts the layout by the cost it is given (the CPU's GROUP_COST or a device's
    # infinite one): free cuts give one group per distinct length, infinite cost one group
    lengths = {len(it["input_ids"]) for it in data[:8]}
    assert len(packed_batch(pad, 0.0, data[:8])["layout"].groups) == len(lengths) > 1
    assert len(packed_batch(pad, float("inf"), data[:8])["layout"].groups) == 1
    cpu_cut = packed_batch(pad, GROUP_COST, data[:8])["layout"].groups  # the CPU's cut:
    assert cpu_cut[0].first == 0 and cpu_cut[-1].last == 8  # every sequence, in order
    assert all(a.last == b.first for a, b in zip(cpu_cut, cpu_cut[1:]))


def _child(mode: str, out: str, *rest: str) -> None:
    """The killed child (mode kill) and the torchrun worker (mode ddp)."""
    if mode == "kill":
        torch.set_num_threads(int(rest[1]))
        train(make_model(), make_data(), KillingCollate(int(rest[0]), signal.SIGKILL),
              config(out))
    elif mode == "ddp":
        from bertkit.training import distributed

        distributed.setup(os.environ)
        result = train(make_model(0.0), make_data(), collate,
                       config(out, max_steps=4, micro_batch_size=2, save_every=0))
        if distributed.rank() == 0:
            Path(out, "losses.json").write_text(json.dumps(result.losses))
        distributed.teardown()


if __name__ == "__main__":
    _child(*sys.argv[1:])
