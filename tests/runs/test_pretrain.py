"""`bertkit pretrain` on real text (two book excerpts from ../shared/data), the objectives, the
inspection commands and the refusals of bad input."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.data.chunks import ChunkConfig
from bertkit.data.instances import InstanceConfig
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.data.shards import ShardDataset
from bertkit.heads import BertForPreTraining
from bertkit.io import LOCK_FILE
from bertkit.runs.pretrain import (
    PretrainConfig,
    document_cut,
    ltr_targets,
    make_collate,
    matched_holdout,
    open_shards,
    phase2_config,
    pretrain_train_config,
    run_pretraining,
)
from bertkit.studies.report import read_run_metrics
from bertkit.tokenization import BertTokenizer
from bertkit.training.loop import TrainConfig
from bertkit.training.state import CHECKPOINTS, STATE_FILE, saved_cost
from bertkit.vocab.trainer import TrainerConfig, save_vocab, train_from_texts

SEQ = 64


pytestmark = pytest.mark.usefixtures("one_thread")


# The fixture's vocabulary is learned by the ratio (pmi) criterion, on which the thresholds below
# were calibrated: its many short pieces make 150 steps of MLM learn fast. With the default
# likelihood criterion (mostly whole words over 800 types) held-out MLM loss is ~5.6 at step 150.
# drop_absorbed=False keeps that calibrated vocabulary as it was (the pmi criterion leaves many
# pieces of count 0, which the default now drops).
CRITERION = "pmi"


def make_tokenizer(texts: list[str], out: Path, size: int) -> BertTokenizer:
    config = TrainerConfig(vocab_size=size, criterion=CRITERION, drop_absorbed=False)
    save_vocab(train_from_texts(texts, config), out, True)
    return BertTokenizer.from_pretrained(out)


@pytest.fixture(scope="session")
def corpus(shared_data, tmp_path_factory):
    """Two book excerpts, an 800-token vocabulary learned on them, statically masked shards."""
    root = tmp_path_factory.mktemp("pretrain")
    files = []
    for name in ("carroll-alice.txt", "austen-pride_and_prejudice.txt"):
        text = (shared_data / "books" / name).read_text(encoding="utf-8")[:50_000]
        files.append(root / name)
        files[-1].write_text(text, encoding="utf-8")
    texts = [f.read_text(encoding="utf-8") for f in files]
    tokenizer = make_tokenizer(texts, root / "tok", 800)
    chunk = ChunkConfig(instance=InstanceConfig(max_seq_length=SEQ), dupe_factor=2,
                        max_predictions_per_seq=10)
    prepare(files, tokenizer, root / "shards", PrepareConfig(chunk=chunk, shard_size=400),
            progress=False)
    dynamic = ChunkConfig(instance=InstanceConfig(max_seq_length=SEQ), dupe_factor=1,
                          dynamic_masking=True)
    prepare(files, tokenizer, root / "dynamic", PrepareConfig(chunk=dynamic), progress=False)
    config = {"vocab_size": 800, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": SEQ,
              "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    (root / "config.json").write_text(json.dumps(config))
    return {"root": root, "files": files, "texts": texts, "tok": root / "tok",
            "shards": root / "shards", "dynamic": root / "dynamic", "config": root / "config.json"}


def pretrain(corpus, out, *extra: str) -> int:
    return main(["pretrain", "--data", str(corpus["shards"]), "--output", str(out),
                 "--config", str(corpus["config"]), "--tokenizer", str(corpus["tok"]),
                 "--batch-size", "16", "--lr", "3e-3", "--warmup-ratio", "0.05",
                 "--no-progress", *extra])


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_loss_falls_on_real_text_then_the_model_fills_masks(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert pretrain(corpus, out, "--max-steps", "150", "--log-every", "10",
                    "--eval-every", "75", "--eval-holdout", "64", "--eval-batches", "4") == 0
    logged = records(out)
    first, last = logged[0], logged[-1]
    assert first["step"] == 10 and last["step"] == 150
    assert last["mlm_loss"] < first["mlm_loss"] - 1.0  # ln(800) = 6.7 at the start
    assert last["mlm_acc"] > first["mlm_acc"]
    assert last["eval_mlm_loss"] < 5.0
    assert {"nsp_loss", "nsp_acc", "lr", "grad_norm", "tokens_per_s"} <= set(last)
    model_dir = out / "model"
    assert (model_dir / "vocab.txt").is_file() and (model_dir / "model.safetensors").is_file()
    capsys.readouterr()
    assert main(["fill-mask", str(model_dir), "alice was beginning to [MASK] very tired",
                 "--top-k", "3"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith("[MASK] at token") and len(shown) == 4
    probs = [float(line.split()[-1]) for line in shown[1:]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001
    assert main(["nsp", str(model_dir), "Alice was tired.", "She sat down."]) == 0
    p = float(capsys.readouterr().out.split()[-1])
    assert 0.0 <= p <= 1.0
    assert main(["plot", str(out)]) == 0
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ltr_objective_trains_with_a_causal_mask(corpus, tmp_path, auto_precision, caplog):
    out = tmp_path / "ltr"
    with caplog.at_level(logging.INFO, logger="bertkit.training.hardware"):
        assert pretrain(corpus, out, "--objective", "ltr", "--max-steps", "4", "--log-every", "1",
                        "--eval-holdout", "0") == 0
    assert f"--precision auto: {auto_precision}" in caplog.text  # the run's default, `auto`
    logged = records(out)
    assert len(logged) == 4 and all("nsp_loss" not in r for r in logged)
    assert logged[0]["mlm_loss"] == pytest.approx(np.log(800), abs=0.6)  # every next token


def test_ltr_causal_mask_hides_the_future():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16)
    model = BertForPreTraining(config, causal=True).eval()  # as `new_model` makes ltr's
    ids = torch.randint(5, 50, (2, 10))
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
             "attention_mask": torch.ones_like(ids)}
    changed = ids.clone()
    changed[:, 6] = (ids[:, 6] + 1 - 5) % 45 + 5  # a different token at position 6
    with torch.no_grad():
        a = model(**ltr_targets(batch)).mlm_logits  # (B, T-1, V): prediction of token t+1
        b = model(**ltr_targets({**batch, "input_ids": changed})).mlm_logits
        model.bert.causal = False
        bidi = model(**ltr_targets({**batch, "input_ids": changed}))
    torch.testing.assert_close(a[:, :6], b[:, :6])  # positions before the change: unchanged
    assert not torch.allclose(a[:, 6:], b[:, 6:])
    assert not torch.allclose(bidi.mlm_logits[:, :6], b[:, :6])  # without the mask they see it
    targets = ltr_targets(batch)
    assert torch.equal(targets["masked_lm_ids"], ids[:, 1:])
    assert torch.equal(targets["masked_lm_positions"][0], torch.arange(9))


def test_dynamic_masks_follow_the_stream_position(corpus):
    """Masks are a function of (seed, global position): the same positions give the same masks
    from a fresh collate (nothing to save for resume), other positions give others."""
    tokenizer = BertTokenizer.from_pretrained(corpus["tok"])
    dataset = ShardDataset(corpus["dynamic"])
    items = [dataset[i] for i in range(8)]
    collate = make_collate(dataset, "mlm+nsp", tokenizer, seed=3)
    first = collate(items, range(8))
    later = collate(items, range(100, 108))  # the same examples in another epoch
    assert not torch.equal(first["masked_lm_positions"], later["masked_lm_positions"])
    again = make_collate(dataset, "mlm+nsp", tokenizer, seed=3)
    for key, value in again(items, range(8)).items():
        assert torch.equal(value, first[key]), key
    other_seed = make_collate(dataset, "mlm+nsp", tokenizer, seed=4)(items, range(8))
    assert not torch.equal(other_seed["masked_lm_positions"], first["masked_lm_positions"])


def failing(capsys, argv_tail, corpus, out) -> str:
    capsys.readouterr()
    assert pretrain(corpus, out, *argv_tail) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit: error:") and "\n" not in err
    return err


def test_bad_input_gets_one_clear_line(corpus, tmp_path, capsys):
    out = tmp_path / "bad"
    missing = ["--data", str(tmp_path / "nowhere"), "--max-steps", "1"]
    assert "shard folder not found" in failing(capsys, missing, corpus, out)
    other_vocab = tmp_path / "other"
    make_tokenizer(corpus["texts"], other_vocab, 700)
    err = failing(capsys, ["--tokenizer", str(other_vocab), "--max-steps", "1"], corpus, out)
    assert "prepared with tokenizer" in err
    short = tmp_path / "short.json"
    short.write_text(json.dumps({**json.loads(corpus["config"].read_text()),
                                 "max_position_embeddings": 32}))
    err = failing(capsys, ["--config", str(short), "--max-steps", "1"], corpus, out)
    assert "max_position_embeddings=32" in err
    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps({**json.loads(corpus["config"].read_text()), "vocab_size": 900}))
    err = failing(capsys, ["--config", str(wide), "--max-steps", "1"], corpus, out)
    assert "vocab_size=900" in err
    broken = tmp_path / "broken"
    shutil.copytree(corpus["shards"], broken)
    ids = broken / "shard-00001" / "input_ids.npy"
    ids.write_bytes(ids.read_bytes()[:200])
    err = failing(capsys, ["--data", str(broken), "--max-steps", "1"], corpus, out)
    assert "shard-00001/input_ids.npy" in err and "truncated" in err
    err = failing(capsys, ["--resume", "--max-steps", "1"], corpus, out)
    assert "no checkpoint" in err
    err = failing(capsys, ["--objective", "sop", "--max-steps", "1"], corpus, out)
    assert "prepared for objective 'mlm+nsp'" in err


def test_a_refused_resume_writes_nothing(corpus, tmp_path, capsys):
    """Bare --resume into a new folder has nothing to continue: refused before the folder (and
    its marker, which would make it an earlier run) is made."""
    out = tmp_path / "new"
    assert "nothing to resume" in failing(capsys, ["--resume", "--max-steps", "1"], corpus, out)
    assert not out.exists()


def test_phase2_resumes_only_from_a_saved_checkpoint(tmp_path):
    """A kill during phase 2's first save leaves phase2/checkpoints empty (or a step folder
    without its state): phase 1 is not skipped then, or phase 2 would train a fresh model."""
    cfg = TrainConfig(output_dir=str(tmp_path), max_steps=10, resume="auto")
    step = tmp_path / "phase2" / CHECKPOINTS / "step-4"
    step.mkdir(parents=True)
    assert phase2_config(cfg, tmp_path, 5).resume is False
    (step / STATE_FILE).write_bytes(b"")
    assert phase2_config(cfg, tmp_path, 5).resume == "auto"


def test_phase2_gets_what_phase1_left_of_a_cpu_budget(tmp_path):
    step = tmp_path / CHECKPOINTS / "step-10"
    step.mkdir(parents=True)
    (step / STATE_FILE).write_bytes(b"")
    (step / "summary.json").write_text(json.dumps({"step": 10, "cpu_seconds": 30.0}))
    cfg = TrainConfig(output_dir=str(tmp_path), max_steps=10, stop_at_cpu_seconds=100.0)
    assert phase2_config(cfg, tmp_path, 5).stop_at_cpu_seconds == pytest.approx(70.0)
    spent = dataclasses.replace(cfg, stop_at_cpu_seconds=30.0)
    assert phase2_config(spent, tmp_path, 5) is None  # nothing left: no phase 2 this sitting
    assert phase2_config(dataclasses.replace(cfg, stop_at_cpu_seconds=None), tmp_path,
                         5).stop_at_cpu_seconds is None


def test_phase2_waits_for_phase1_and_the_result_is_the_whole_runs(corpus, tmp_path):
    """A phase 1 stopped by its CPU budget continues in the next sitting; phase 2 starts only
    from a finished phase 1, and the result counts both phases' tokens and seconds."""
    out = tmp_path / "phases"

    def run(stop_at: float | None):
        train = pretrain_train_config(str(out), max_steps=10, batch_size=16, lr=3e-3,
                                      warmup_ratio=0.05, log_every=2, save_every=0,
                                      progress=False, resume="auto", precision="fp32",
                                      stop_at_cpu_seconds=stop_at)
        return run_pretraining(PretrainConfig(
            data=str(corpus["dynamic"]), train=train, config_file=str(corpus["config"]),
            tokenizer=str(corpus["tok"]), objective="mlm", eval_holdout=0,
            phase2_data=str(corpus["dynamic"]), phase2_steps=4))

    first = run(1e-9)  # spent at the first sync point
    assert first.step == 2 and first.output_dir == out
    assert not (out / "phase2").exists()
    whole = run(None)
    assert whole.output_dir == out / "phase2" and whole.step == 4
    phase1 = saved_cost(out)
    phase2 = saved_cost(out / "phase2")
    assert phase1["tokens_seen"] > 0 and phase2["tokens_seen"] > 0
    assert whole.tokens_seen == phase1["tokens_seen"] + phase2["tokens_seen"]
    # (the result's clock is read once more after the last state was saved)
    assert 0 <= whole.cpu_seconds - (phase1["cpu_seconds"] + phase2["cpu_seconds"]) < 0.1


def test_phase1_holds_out_the_text_phase2_is_evaluated_on(corpus, tmp_path):
    """The same corpus at T = 32 then T = 64: phase 2's hold-out (a count of instances: 2,000
    by default on a large corpus, 150 here) covers more text than the same count at 32; phase 1
    holds out those same chunks, so no text phase 2 is evaluated on was trained on in phase 1."""
    # the books as documents of 2,000 characters, a sentence a line (Google's format)
    text = " ".join(" ".join(corpus["texts"]).split())
    docs = tmp_path / "docs.txt"
    docs.write_text("\n\n".join(text[i:i + 2000].replace(". ", ".\n")
                                  for i in range(0, len(text), 2000)) + "\n", encoding="utf-8")
    shards = {}
    for t in (32, SEQ):
        chunk = ChunkConfig(instance=InstanceConfig(max_seq_length=t), dupe_factor=1,
                            dynamic_masking=True)
        shards[t] = tmp_path / f"t{t}"
        prepare([docs], BertTokenizer.from_pretrained(corpus["tok"]), shards[t],
                PrepareConfig(chunk=chunk, chunk_chars=4000, format="google"), progress=False)
    cfg = PretrainConfig(data=str(shards[32]), phase2_data=str(shards[SEQ]), phase2_steps=1,
                         tokenizer=str(corpus["tok"]), config_file=str(corpus["config"]),
                         eval_holdout=150)
    tokenizer = BertTokenizer.from_pretrained(corpus["tok"])
    config = BertConfig.load(corpus["config"])
    first, second = (open_shards(shards[t], tokenizer, config) for t in (32, SEQ))
    starts1, starts2 = first.meta.chunk_starts, second.meta.chunk_starts
    assert len(starts1) == len(starts2) > 10
    k1 = matched_holdout(cfg, config, tokenizer)
    cut2 = document_cut(starts2, len(second), 150)
    assert starts1.index(len(first) - k1) == starts2.index(cut2)  # the same chunks held out
    # the plain rule would have held out fewer chunks at T = 32: the leak this closes
    assert starts1.index(document_cut(starts1, len(first), 150)) > starts2.index(cut2)
    # another corpus (other chunks): the plain rule
    other = dataclasses.replace(cfg, data=str(corpus["dynamic"]))
    assert matched_holdout(other, config, tokenizer) == 150


def test_two_phases_then_continued_pretraining_with_init(corpus, tmp_path):
    out = tmp_path / "phases"
    assert pretrain(corpus, out, "--max-steps", "20", "--log-every", "5", "--eval-holdout", "0",
                    "--phase2-data", str(corpus["dynamic"]), "--phase2-steps", "4") == 0
    assert [r["step"] for r in records(out)] == [5, 10, 15, 20]
    assert [r["step"] for r in records(out / "phase2")] == [4]
    assert [r["step"] for r in read_run_metrics(out)] == [5, 10, 15, 20, 24]
    # both folders' locks given up at the end (io.release_output_dir removes the lock file)
    assert not (out / LOCK_FILE).exists() and not (out / "phase2" / LOCK_FILE).exists()
    # --resume after both phases finished: phase 1 is skipped, phase 2 has nothing left to do.
    assert pretrain(corpus, out, "--max-steps", "20", "--eval-holdout", "0", "--resume",
                    "--phase2-data", str(corpus["dynamic"]), "--phase2-steps", "4") == 0
    # Continued pre-training from the export (no --config: the architecture comes with it).
    cont = tmp_path / "continued"
    assert main(["pretrain", "--data", str(corpus["shards"]), "--output", str(cont),
                 "--init", str(out / "model"), "--batch-size", "16", "--max-steps", "2",
                 "--log-every", "1", "--eval-holdout", "0", "--no-progress"]) == 0
    fresh_loss = np.log(800) + np.log(2)  # an untrained model: uniform MLM + uniform NSP
    assert records(cont)[0]["loss"] < fresh_loss - 1.0


def test_objectives_shape_the_batch(corpus):
    dataset = ShardDataset(corpus["shards"])
    items = [dataset[i] for i in range(6)]
    mask_id = dataset.meta.tokenizer.mask_token_id
    both = make_collate(dataset, "mlm+nsp", None, 0)(items, range(len(items)))
    assert "next_sentence_label" in both and (both["input_ids"] == mask_id).any()
    mlm = make_collate(dataset, "mlm", None, 0)(items, range(len(items)))
    assert "next_sentence_label" not in mlm
    assert torch.equal(mlm["masked_lm_positions"], both["masked_lm_positions"])
    ltr = make_collate(dataset, "ltr", None, 0)(items, range(len(items)))
    assert "causal" not in ltr and "next_sentence_label" not in ltr  # the model is causal
    assert not (ltr["input_ids"] == mask_id).any()  # the original text, restored
    rows = torch.arange(6).unsqueeze(1)
    restored = ltr["input_ids"][rows, both["masked_lm_positions"]]  # (B, P)
    real = both["masked_lm_weights"] > 0
    assert torch.equal(restored[real], both["masked_lm_ids"][real])


def test_held_out_documents_are_never_trained_on():
    """The eval split is cut at a chunk start (a chunk holds every duplicate of its documents),
    the one nearest to the asked hold-out; with no usable start it falls back to the last k."""
    from bertkit.runs.pretrain import document_cut

    starts = [0, 300, 610, 905]  # four chunks of a 1,200-instance data set
    assert document_cut(starts, 1200, 250) == 905  # 295 held out: whole chunks only
    assert document_cut(starts, 1200, 600) == 610
    assert document_cut([0], 1200, 60) is None  # one chunk: nothing clean to cut
    assert document_cut(starts, 1200, 20) is None  # the last chunk is far larger than asked


def test_held_out_accuracy_equals_transformers_from_the_same_weights(corpus):
    """The evaluation path side by side: from the same initial weights, the same training
    batches of the same shards (16 AdamW steps each), bertkit's held-out evaluation (`split_eval`
    + `make_evaluator`, the code `pretrain` runs) and `transformers.BertForPreTraining` scored by
    hand on the very same held-out batches give the same MLM and NSP accuracy and loss."""
    import transformers

    from bertkit.checkpoint import to_hf_state_dict
    from bertkit.runs.pretrain import make_evaluator, split_eval

    tokenizer = BertTokenizer.from_pretrained(corpus["tok"])
    dataset = ShardDataset(corpus["shards"])
    train_set, held_out = split_eval(dataset, 64)
    assert len(held_out) >= 64 and len(train_set) >= 256
    config = BertConfig.from_dict(json.loads(corpus["config"].read_text()))
    torch.manual_seed(0)
    ours = BertForPreTraining(config)
    ref = transformers.BertForPreTraining(transformers.BertConfig.from_dict(config.to_dict()))
    ref.load_state_dict(to_hf_state_dict(ours.state_dict()), strict=False)
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01) for m in (ours, ref)]
    collate = make_collate(dataset, "mlm+nsp", tokenizer, seed=0)
    for step in range(16):
        positions = range(16 * step, 16 * step + 16)
        batch = collate([train_set[i] for i in positions], positions)
        dense = torch.full_like(batch["input_ids"], -100).scatter(  # (B, T) -100 but predicted
            1, batch["masked_lm_positions"].long(),
            torch.where(batch["masked_lm_weights"] > 0, batch["masked_lm_ids"].long(), -100))
        losses = [ours(**batch).loss,
                  ref(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                      attention_mask=batch["attention_mask"], labels=dense,
                      next_sentence_label=batch["next_sentence_label"]).loss]
        for loss, opt in zip(losses, opts):
            loss.backward()
            opt.step()
            opt.zero_grad()
    with torch.no_grad():
        got = make_evaluator(held_out, lambda: make_collate(dataset, "mlm+nsp", tokenizer, 0),
                             16, 4)(ours)
        hits = nsp = 0.0
        eval_collate = make_collate(dataset, "mlm+nsp", tokenizer, 0)
        for start in range(0, 64, 16):
            positions = range(start, start + 16)
            batch = eval_collate([held_out[i] for i in positions], positions)
            out = ref(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                      attention_mask=batch["attention_mask"])
            pos = batch["masked_lm_positions"].long()  # (B, P)
            logits = torch.gather(out.prediction_logits, 1,
                                  pos[..., None].expand(-1, -1, config.vocab_size))  # (B, P, V)
            w = batch["masked_lm_weights"].float()
            hits += ((logits.argmax(-1) == batch["masked_lm_ids"]).float() * w).sum() / w.sum() / 4
            nsp += (out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]
                    ).float().mean() / 4
    assert got["mlm_acc"] == pytest.approx(float(hits), abs=1e-6)
    assert got["nsp_acc"] == pytest.approx(float(nsp), abs=1e-6)
    assert got["mlm_acc"] > 0.05  # trained: above the 1/800 of a uniform guess


def test_several_data_folders_train_as_one_dataset(corpus, tmp_path, capsys):
    """--data A B: the instances of both folders, one after the other (books + a second
    preparation of them with another seed), trained on; other masking is refused."""
    chunk = ChunkConfig(instance=InstanceConfig(max_seq_length=SEQ), dupe_factor=1,
                        max_predictions_per_seq=10, seed=5)
    second = tmp_path / "second"
    prepare(corpus["files"], BertTokenizer.from_pretrained(corpus["tok"]), second,
            PrepareConfig(chunk=chunk, shard_size=300), progress=False)
    both = ShardDataset([corpus["shards"], second])
    one, two = ShardDataset(corpus["shards"]), ShardDataset(second)
    assert len(both) == len(one) + len(two) and both.meta.num_instances == len(both)
    assert np.array_equal(both[len(one)]["input_ids"], two[0]["input_ids"])
    assert np.array_equal(both[len(one) - 1]["input_ids"], one[len(one) - 1]["input_ids"])
    starts = both.meta.chunk_starts
    assert starts[:len(one.meta.chunk_starts)] == one.meta.chunk_starts
    assert starts[-1] == len(one) + two.meta.chunk_starts[-1]
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(corpus["shards"]), str(second), "--output", str(out),
                 "--config", str(corpus["config"]), "--tokenizer", str(corpus["tok"]),
                 "--max-steps", "2", "--batch-size", "8", "--no-progress", "--precision",
                 "fp32"]) == 0
    capsys.readouterr()
    assert main(["pretrain", "--data", str(corpus["shards"]), str(corpus["dynamic"]), "--output",
                 str(tmp_path / "mixed"), "--config", str(corpus["config"]), "--tokenizer",
                 str(corpus["tok"]), "--max-steps", "1", "--no-progress"]) == 1
    assert "dynamic_masking=True" in capsys.readouterr().err
