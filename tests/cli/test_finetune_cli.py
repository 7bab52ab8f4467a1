"""`bertkit finetune / evaluate / predict` end to end: a tiny model, a few dozen examples per
task, through the CLI; outputs checked for the task's metrics, predictions and HF layout."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.tasks import get_task

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, minilm_path) -> Path:
    """A randomly initialized 1-layer BERT with MiniLM's uncased vocabulary."""
    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.tokenization.wordpiece import BertTokenizer

    path = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(path)
    BertTokenizer.from_pretrained(minilm_path).save_pretrained(path)
    return path


def write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")


def synthetic_glue(root: Path) -> Path:
    """QQP and MNLI in their GLUE layouts (the real files are not in ../shared/data)."""
    words = ["a cat sat", "the dog ran", "it rains", "we sing", "birds fly", "fish swim"]
    qqp = [[str(i), str(2 * i), str(2 * i + 1), words[i % 6], words[(i + 1) % 6], str(i % 2)]
           for i in range(20)]
    for split in ("train", "dev"):
        write_tsv(root / "QQP" / f"{split}.tsv",
                  ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], qqp)
    labels = ["entailment", "neutral", "contradiction"]
    mnli = [[str(i), "fiction", words[i % 6], words[(i + 2) % 6], labels[i % 3], labels[i % 3]]
            for i in range(20)]
    header = ["index", "genre", "sentence1", "sentence2", "label1", "gold_label"]
    for split in ("train", "dev_matched", "dev_mismatched"):
        write_tsv(root / "MNLI" / f"{split}.tsv", header, mnli)
    return root


def task_args(name: str, data: Path, tmp: Path) -> tuple[list[str], list[str]]:
    """(finetune arguments, metric names expected in metrics.json) for each task."""
    glue = data / "glue"
    table = {
        "cola": (["--data", glue], ["mcc", "accuracy"]),
        "sst2": (["--data", glue], ["accuracy"]),
        "mrpc": (["--data", glue], ["f1", "accuracy"]),
        "stsb": (["--data", glue], ["pearson", "spearman"]),
        "rte": (["--data", glue], ["accuracy"]),
        "wnli": (["--data", glue], ["accuracy"]),
        "qnli": (["--data", glue, "--train-file", glue / "QNLI" / "dev.tsv"], ["accuracy"]),
        "qqp": (["--data", synthetic_glue(tmp / "glue")], ["accuracy", "f1"]),
        "mnli": (["--data", synthetic_glue(tmp / "glue")], ["accuracy", "accuracy_mismatched"]),
        "squad1": (["--data", data / "squad", "--train-file", data / "squad" / "dev-v1.1.json",
                    "--max-seq-length", "96", "--doc-stride", "48"], ["exact_match", "f1"]),
        "squad2": (["--data", data / "squad", "--split-dev", "0.5", "--max-seq-length", "96",
                    "--doc-stride", "48"],
                   ["exact_match", "f1", "has_ans_f1", "no_ans_f1", "null_threshold"]),
        "conll2003": (["--data", data / "conll2003"], ["precision", "recall", "f1"]),
        "swag": (["--data", data / "swag", "--train-file", data / "swag" / "val_sample_11rows.csv",
                  "--dev-file", data / "swag" / "val_sample_11rows.csv"], ["accuracy"]),
    }
    args, metrics = table[name]
    return [str(a) for a in args], metrics


PREDICT_INPUT = {
    "squad1": {"question": "Who sat?", "context": "A cat sat on the mat."},
    "squad2": {"question": "Who sat?", "context": "A cat sat on the mat."},
    "conll2003": {"text": "EU rejects German call"},
    "swag": {"context": "He opens the door.", "start": "He", "endings": ["walks in.", "flies.",
                                                                          "sings.", "sleeps."]},
}

TASKS = ["cola", "sst2", "mrpc", "stsb", "rte", "wnli", "qnli", "qqp", "mnli", "squad1",
         "squad2", "conll2003", "swag"]


def finetune(tiny_model: Path, out: Path, task: str, args: list[str], n: int = 24) -> dict:
    code = main(["finetune", task, "--model", str(tiny_model), "--output", str(out), *args,
                 "--max-train-examples", str(n), "--max-eval-examples", "16", "--batch-size", "8",
                 "--epochs", "1", "--no-progress", *([] if "--lr" in args else ["--lr", "1e-4"])])
    assert code == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("task", TASKS)
def test_finetune_evaluate_predict(task, tiny_model, shared_data, tmp_path, capsys):
    args, metric_names = task_args(task, shared_data, tmp_path)
    out = tmp_path / "run"
    metrics = finetune(tiny_model, out, task, args, n=8 if task.startswith("squad") else 24)
    assert metrics["task"] == task and metrics["steps"] >= 1
    for name in metric_names:
        assert isinstance(metrics[name], float), name
    if task == "squad2":  # no train file: half of dev's 35 articles train, and it says so
        assert "first 18 of the 35 articles" in metrics["data_note"]
    config = json.loads((out / "config.json").read_text())
    assert config["bertkit_task"] == task
    if task not in ("squad1", "squad2", "swag"):
        assert set(config["label2id"]) == set(config["id2label"].values())
    assert (out / "model.safetensors").is_file() and (out / "vocab.txt").is_file()
    assert any(p.name.startswith("predictions") for p in out.iterdir())
    capsys.readouterr()

    pair = {"pair": "the dog ran"} if getattr(get_task(task), "takes_pairs", False) else {}
    record = PREDICT_INPUT.get(task, {"text": "a cat sat", **pair})
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "x1", **record}) + "\n")
    assert main(["predict", str(out), "--input", str(tmp_path / "in.jsonl"), "--no-progress",
                 "--output", str(tmp_path / "out.jsonl")]) == 0
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["id"] == "x1"
    if task in ("sst2", "mnli", "swag"):  # --scores: every label's (ending's) probability
        assert main(["predict", str(out), "--input", str(tmp_path / "in.jsonl"), "--scores",
                     "--no-progress"]) == 0
        scored = json.loads(capsys.readouterr().out)
        probs = scored.get("probabilities") or list(scored["scores"].values())
        assert len(probs) == (4 if task == "swag" else len(config["label2id"]))
        assert sum(probs) == pytest.approx(1.0, abs=1e-4) and min(probs) > 0
        if task != "swag":
            assert max(scored["scores"], key=scored["scores"].get) == scored["label"]
    if task == "swag":  # the command line takes a SWAG item too: context, start, four endings
        endings = PREDICT_INPUT["swag"]["endings"]
        assert main(["predict", str(out), "--text", "He opens the door.", "--start", "He",
                     *(x for e in endings for x in ("--ending", e)), "--no-progress"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["ending"] == endings[answer["choice"]]


def test_glue_outputs_and_transformers_loads_the_model(tiny_model, shared_data, tmp_path,
                                                       capsys):
    out = tmp_path / "sst2"
    finetune(tiny_model, out, "sst2", ["--data", str(shared_data / "glue")])
    submission = (out / "SST-2.tsv").read_text().splitlines()
    # --max-eval-examples cuts dev only: a submission file labels every test sentence
    test_rows = (shared_data / "glue" / "SST-2" / "test.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == len(test_rows)
    assert all(line.split("\t")[1] in ("0", "1") for line in submission[1:])
    capsys.readouterr()
    assert main(["evaluate", str(out), "--data", str(shared_data / "glue"),
                 "--max-eval-examples", "20", "--no-progress"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["examples"] == 20 and 0.0 <= result["accuracy"] <= 1.0
    # NaN weights score no accuracy: an error, not 50% with exit 0
    from safetensors.torch import load_file, save_file

    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    state = load_file(damaged / "model.safetensors")
    state["classifier.weight"] = torch.full_like(state["classifier.weight"], float("nan"))
    save_file(state, damaged / "model.safetensors")
    assert main(["evaluate", str(damaged), "--data", str(shared_data / "glue"),
                 "--max-eval-examples", "20", "--no-progress"]) == 1
    assert "outputs are not finite" in capsys.readouterr().err

    from transformers import AutoModelForSequenceClassification

    hf = AutoModelForSequenceClassification.from_pretrained(out)
    assert hf.config.id2label == {0: "0", 1: "1"}
    from bertkit.heads import BertForSequenceClassification

    ours = BertForSequenceClassification.from_pretrained(out)
    ids = torch.tensor([[2, 1037, 4937, 3]])
    torch.testing.assert_close(hf(input_ids=ids).logits, ours(ids).logits, atol=1e-5, rtol=1e-4)


def test_custom_regression_and_text_predict(tiny_model, tmp_path, capsys):
    rows = "".join(json.dumps({"s": f"text number {i}", "y": i / 10}) + "\n" for i in range(20))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text(rows)
    (tmp_path / "data" / "dev.jsonl").write_text(rows)
    out = tmp_path / "run"
    metrics = finetune(tiny_model, out, "custom", ["--data", str(tmp_path / "data"),
                                                   "--text-column", "s", "--label-column", "y",
                                                   "--regression"])
    assert "pearson" in metrics and "spearman" in metrics
    capsys.readouterr()
    assert main(["predict", str(out), "--text", "some text", "--no-progress"]) == 0
    assert isinstance(json.loads(capsys.readouterr().out)["score"], float)

    # a file is answered a window at a time: the windows change no answer and no order (the
    # scores within float rounding: a window's batches pad to other lengths)
    from bertkit.inference.finetuned import predict_examples, predict_windows, task_of
    from bertkit.tasks import FeatureSettings
    from bertkit.tasks.inputs import iter_input, read_input, scan_input

    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"line {i} of the file\n" for i in range(7)))
    task = task_of(out, None)
    settings = FeatureSettings(max_seq_length=32)
    whole = predict_examples(out, task, read_input(task, texts), settings)
    windows = list(predict_windows(out, task, iter_input(task, texts), settings, window=3))
    assert [len(w) for w in windows] == [3, 3, 1]
    streamed = [r for w in windows for r in w]
    assert [(r["id"], r["text"]) for r in streamed] == [(r["id"], r["text"]) for r in whole]
    assert [r["id"] for r in streamed] == [str(i) for i in range(7)]
    assert [r["score"] for r in streamed] == pytest.approx([r["score"] for r in whole], rel=1e-5)
    assert scan_input(task, texts) == 7
    assert main(["predict", str(out), "--input", str(texts), "--output",
                 str(tmp_path / "texts.jsonl"), "--no-progress"]) == 0
    written = [json.loads(line) for line in (tmp_path / "texts.jsonl").read_text().splitlines()]
    assert [r["id"] for r in written] == [r["id"] for r in whole]
    assert [r["score"] for r in written] == pytest.approx([r["score"] for r in whole], rel=1e-5)

    # an id given twice would make two answers that cannot be told apart: refused, nothing written
    twice = tmp_path / "twice.jsonl"
    twice.write_text("".join(json.dumps({"id": i, "text": "a text"}) + "\n" for i in "abca"))
    capsys.readouterr()
    assert main(["predict", str(out), "--input", str(twice), "--output",
                 str(tmp_path / "twice-out.jsonl"), "--no-progress"]) == 1
    assert f"{twice}:4: id 'a' was given before, at {twice}:1" in capsys.readouterr().err
    assert not (tmp_path / "twice-out.jsonl").exists()


def test_grid_selects_on_dev_and_resumes(tiny_model, shared_data, tmp_path, capsys):
    out = tmp_path / "grid"
    args = ["--data", str(shared_data / "glue"), "--lr", "1e-4,1e-5", "--seeds", "2"]
    summary = finetune(tiny_model, out, "rte", args, n=16)
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["lr0.0001-ep1-seed0", "lr0.0001-ep1-seed1", "lr1e-05-ep1-seed0",
                    "lr1e-05-ep1-seed1"]
    grid = summary["grid"]
    assert [(g["lr"], g["n"]) for g in grid] == [(1e-4, 2), (1e-5, 2)]
    best = max(grid, key=lambda g: g["mean"])
    assert summary["selected"]["lr"] == best["lr"]
    assert all({"mean", "median", "std", "collapsed_runs"} <= set(g) for g in grid)
    assert (out / "model.safetensors").is_file()
    before = (out / "runs" / runs[0] / "metrics.json").stat().st_mtime_ns
    again = finetune(tiny_model, out, "rte", [*args, "--resume"], n=16)
    assert (out / "runs" / runs[0] / "metrics.json").stat().st_mtime_ns == before
    assert again["grid"] == grid


def test_rerun_needs_resume(tiny_model, shared_data, tmp_path, capsys):
    out = tmp_path / "run"
    first = finetune(tiny_model, out, "wnli", ["--data", str(shared_data / "glue")], n=16)
    code = main(["finetune", "wnli", "--model", str(tiny_model), "--output", str(out), "--data",
                 str(shared_data / "glue"), "--max-train-examples", "16", "--batch-size", "8",
                 "--epochs", "1", "--no-progress"])
    assert code == 1 and "pass --resume" in capsys.readouterr().err
    again = finetune(tiny_model, out, "wnli", ["--data", str(shared_data / "glue"), "--resume"],
                     n=16)
    assert again["steps"] == first["steps"] and again["accuracy"] == first["accuracy"]


def test_frozen_encoder_and_bilstm_tagger(tiny_model, shared_data, tmp_path, capsys):
    from safetensors.torch import load_file

    out = tmp_path / "frozen"
    finetune(tiny_model, out, "mrpc", ["--data", str(shared_data / "glue"), "--freeze-encoder"])
    before, after = load_file(tiny_model / "model.safetensors"), load_file(out / "model.safetensors")
    key = "encoder.layer.0.output.dense.weight"
    torch.testing.assert_close(after[f"bert.{key}"], before[key])  # encoder untouched
    out = tmp_path / "lstm"
    metrics = finetune(tiny_model, out, "conll2003", ["--data", str(shared_data / "conll2003"),
                                                      "--freeze-encoder", "--features",
                                                      "concat-last-4"])
    assert "f1" in metrics
    config = json.loads((out / "config.json").read_text())
    assert config["bertkit_head"] == "FeatureTagger"
    capsys.readouterr()
    assert main(["evaluate", str(out), "--data", str(shared_data / "conll2003"),
                 "--max-eval-examples", "10", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 10


def test_bad_input_is_one_line_error(tiny_model, tmp_path, capsys):
    write_tsv(tmp_path / "RTE" / "train.tsv", ["index", "sentence1", "sentence2", "label"],
              [["0", "a", "b", "entailment"], ["1", "only"]])
    code = main(["finetune", "rte", "--model", str(tiny_model), "--data", str(tmp_path),
                 "--output", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err
    assert "train.tsv:3: expected 4 tab-separated columns" in err


@pytest.mark.parametrize("flags, packed, grouped", [
    ([], True, False), (["--no-packing"], False, False), (["--group-by-length"], True, True),
    (["--no-packing", "--group-by-length"], False, True)])
def test_packing_and_length_grouping_are_separate_options(flags, packed, grouped, tmp_path):
    """--no-packing only turns off the packed forward; length-grouped batches are opt-in
    (--group-by-length), as grouped batches are not i.i.d. (issue 19)."""
    from bertkit.cli.finetune_cmds import finetune_config
    from bertkit.cli.main import build_parser

    args = build_parser().parse_args(["finetune", "sst2", "--model", "m", "--data", "d",
                                      "--output", str(tmp_path / "out"), *flags])
    cfg = finetune_config(args)[0]
    assert (cfg.packed, cfg.group_by_length) == (packed, grouped)



class Killed(BaseException):
    """A kill the CLI cannot catch, right after a state was written."""


def test_a_run_killed_inside_an_epoch_resumes_from_save_every_to_the_same_model(
        tiny_model, shared_data, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from bertkit.training import loop

    glue = ["--data", str(shared_data / "glue")]
    whole = finetune(tiny_model, tmp_path / "whole", "wnli", glue, n=32)  # 4 steps, one epoch
    saved, steps, save, step = [], [], loop._save, loop._train_step

    def killed_after_step_2(run, config, metrics):
        saved.append(run.step)
        path = save(run, config, metrics)
        if run.step == 2:
            raise Killed
        return path

    monkeypatch.setattr(loop, "_save", killed_after_step_2)
    with pytest.raises(Killed):
        finetune(tiny_model, tmp_path / "cut", "wnli", [*glue, "--save-every", "2"], n=32)
    assert saved == [2]  # without --save-every an epoch's only state is its end (step 4)
    monkeypatch.setattr(loop, "_save", save)
    monkeypatch.setattr(loop, "_train_step", lambda run, *a: steps.append(run.step) or step(run, *a))
    # another --save-every on resume is allowed: it changes when states are written, nothing else
    again = finetune(tiny_model, tmp_path / "cut", "wnli", [*glue, "--resume", "--save-every", "3"],
                     n=32)
    assert steps == [2, 3]  # steps 3 and 4 only (run.step counts the steps done before)
    assert again["steps"] == whole["steps"] == 4
    assert again["final_loss"] == whole["final_loss"] and again["accuracy"] == whole["accuracy"]
    for name, tensor in load_file(tmp_path / "whole" / "model.safetensors").items():
        torch.testing.assert_close(load_file(tmp_path / "cut" / "model.safetensors")[name],
                                   tensor, rtol=0, atol=0)


def test_bare_resume_continues_or_is_refused_and_auto_starts(tiny_model, shared_data, tmp_path,
                                                             capsys):
    """docs/reports/scaling.md's table: bare --resume into a new folder (or one whose run saved no
    checkpoint) has nothing to continue and is refused in one line, writing nothing; `--resume
    auto` starts there."""
    glue = ["--data", str(shared_data / "glue")]
    new = tmp_path / "new"
    code = main(["finetune", "wnli", "--model", str(tiny_model), "--output", str(new), *glue,
                 "--max-train-examples", "16", "--epochs", "1", "--no-progress", "--resume"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "nothing to resume" in err and "\n" not in err
    assert not new.exists()  # refused before anything was written
    started = finetune(tiny_model, new, "wnli", [*glue, "--resume", "auto"], n=16)
    assert started["steps"] >= 1 and (new / "model.safetensors").is_file()


def _lock_taken_by_another_process(folder: Path) -> bool:
    """Whether a separate process can take `folder`'s run lock (io.lock_output_dir's flock)."""
    import subprocess
    import sys

    probe = ("import fcntl, sys\nf = open(sys.argv[1], 'a+')\n"
             "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except BlockingIOError:\n    sys.exit(1)\n")
    return subprocess.run([sys.executable, "-c", probe, str(folder / ".bertkit.lock")],
                          check=False).returncode == 0


def test_the_run_folder_lock_is_held_to_the_end_then_released(tiny_model, shared_data, tmp_path,
                                                              monkeypatch):
    """A long-lived process (a study, a grid) keeps no lock per folder it trained: after run_one
    returns another process can take the folder; until metrics.json is written it cannot."""
    from bertkit.runs import finetune as ft

    out = tmp_path / "run"
    write_json = ft.atomic_write_json
    held = []

    def checked_write(path, record):
        held.append(not _lock_taken_by_another_process(out))
        write_json(path, record)

    monkeypatch.setattr(ft, "atomic_write_json", checked_write)
    finetune(tiny_model, out, "wnli", ["--data", str(shared_data / "glue")], n=16)
    assert held == [True]  # metrics.json was written under the lock
    assert _lock_taken_by_another_process(out)


def test_a_failure_under_torchrun_stops_together_in_one_line(tiny_model, shared_data, tmp_path,
                                                             monkeypatch, capsys):
    """finetune shares pretrain's failure handling (cli.common.run_together): under torchrun a
    refusal goes through distributed.stop_together, which prints rank 0's one line; and it takes
    --join-timeout. (The process group itself is faked; test_finetune_ddp runs the real one.)"""
    from bertkit.training import distributed

    joined, stopped = {}, []
    monkeypatch.setattr(distributed, "setup", lambda environ, **kw: joined.update(kw))
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(distributed, "is_main", lambda: True)
    monkeypatch.setattr(distributed, "teardown", lambda: None)

    def stop_together(err):
        stopped.append(err)
        return f"{err} (said once)"

    monkeypatch.setattr(distributed, "stop_together", stop_together)
    out = tmp_path / "run"
    sigterm = signal.getsignal(signal.SIGTERM)  # a stopping rank ignores it from then on
    try:
        code = main(["finetune", "wnli", "--model", str(tiny_model), "--output", str(out),
                     "--data", str(shared_data / "glue"), "--epochs", "1", "--no-progress",
                     "--resume", "--join-timeout", "7"])
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    err = capsys.readouterr().err.strip()
    assert code == 1 and joined["join_timeout"] == 7.0
    assert len(stopped) == 1 and "nothing to resume" in str(stopped[0]), err
    assert err == f"bertkit: error: {stopped[0]} (said once)"


def test_a_resumed_grid_starts_the_runs_it_had_not_reached(tiny_model, shared_data, tmp_path,
                                                            capsys):
    """Killed after its first run, a grid resumed with bare --resume keeps that run and starts
    the next (each run of a resumed grid continues or starts, as `--resume auto`)."""
    out = tmp_path / "grid"
    args = ["--data", str(shared_data / "glue"), "--seeds", "2"]
    first = finetune(tiny_model, out, "wnli", args, n=16)
    shutil.rmtree(out / "runs" / "lr0.0001-ep1-seed1")  # as if killed before it began
    (out / "metrics.json").unlink()
    again = finetune(tiny_model, out, "wnli", [*args, "--resume"], n=16)
    assert again["grid"] == first["grid"]
    fresh = tmp_path / "fresh"  # bare --resume into a new folder: nothing to continue
    code = main(["finetune", "wnli", "--model", str(tiny_model), "--output", str(fresh), *args,
                 "--resume", "--max-train-examples", "16", "--epochs", "1", "--no-progress"])
    assert code == 1 and "holds no earlier grid" in capsys.readouterr().err
    assert not fresh.exists()


def test_a_regression_head_starts_at_the_labels_mean_unless_told_zero(tiny_model, shared_data,
                                                                    tmp_path):
    """STS-B's scores average about 2.7; from Hugging Face's zero bias a short run spends its
    steps moving the output there (its predictions then barely vary). With the default
    `--regression-bias mean` the head starts at the training labels' mean; at an lr too small
    to move it, the exported bias is that mean, and with `zero` it stays at 0."""
    from safetensors.torch import load_file

    from bertkit.tasks import get_task

    args, _ = task_args("stsb", shared_data, tmp_path)
    rows = (shared_data / "glue" / "STS-B" / "train.tsv").read_text(encoding="utf-8")
    scores = [float(line.split("\t")[-1]) for line in rows.splitlines()[1:25]]
    mean = sum(scores) / len(scores)
    assert get_task("stsb").regression and abs(mean) > 1  # a bias of 0 would be far from it
    for bias, expected in (("mean", mean), ("zero", 0.0)):
        out = tmp_path / bias
        metrics = finetune(tiny_model, out, "stsb", [*args, "--regression-bias", bias,
                                                     "--lr", "1e-9"])
        assert metrics["steps"] >= 1
        state = load_file(out / "model.safetensors")
        assert state["classifier.bias"].item() == pytest.approx(expected, abs=1e-4)
        settings = json.loads((out / "finetune_config.json").read_text())
        # (zero, the start of runs made before the setting, is left out: those runs resume)
        assert settings.get("regression_bias", "zero") == bias
        assert ("regression_bias" in settings) == (bias == "mean")
    with pytest.raises(SystemExit):
        main(["finetune", "stsb", "--model", str(tiny_model), "--regression-bias", "median"])


def test_runs_made_before_the_regression_bias_resume():
    """finetune_config.json written before `regression_bias` existed has no such key: a
    classification run resumes with any value (it touches no classifier), a regression run with
    the start it had (zero); the new default start is a change there."""
    from bertkit.io import changed_settings
    from bertkit.runs.finetune import FinetuneConfig, run_settings

    for task, regression in (("sst2", False), ("stsb", True)):
        earlier = run_settings(FinetuneConfig(task, "m", "d", regression_bias="zero"), regression)
        assert "regression_bias" not in earlier
        now = run_settings(FinetuneConfig(task, "m", "d"), regression)
        assert changed_settings(earlier, now) == ([] if not regression else ["regression_bias"])
