"""`bertkit distill` end to end through the CLI: a tiny teacher made here, a student from two of
its layers, the results printed and saved, the student used by `bertkit predict`, and the
output-folder rules and bad input answered with one line."""

from __future__ import annotations

import json

import pytest

from bertkit.cli.main import main
from bertkit.heads import BertForQuestionAnswering
from bertkit.io import LOCK_FILE
from bertkit.serve.models import load_model
from tests.runs.test_distill import make_teacher, write_squad, write_sst2

pytestmark = pytest.mark.usefixtures("one_thread")


def test_distill_prints_and_saves_results_and_predict_uses_the_student(tmp_path, capsys):
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    out = tmp_path / "student"
    args = ["distill", str(teacher), "--student", "layers:0,2", "--data", str(data), "--output",
            str(out), "--epochs", "1", "--batch-size", "8", "--lr", "1e-3", "--precision", "fp32",
            "--speed-texts", "8", "--speed-repeats", "1", "--no-progress"]
    assert main(args) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert printed == json.loads((out / "results.json").read_text())
    assert printed["task"] == "sst2" and printed["student_layers"] == 2  # from config.json
    assert printed["speed"]["texts"] == 8 and "texts/s" in captured.err
    assert "accuracy: teacher" in captured.err

    assert main(["predict", str(out), "--text", "the film was good", "--scores"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["label"] in ("0", "1") and set(record["scores"]) == {"0", "1"}
    served = load_model(out, "small")  # what `bertkit serve` loads
    assert served.task.name == "sst2" and served.config.num_hidden_layers == 2

    assert main(args) == 1  # an earlier run: --resume or another folder
    assert "pass --resume" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0  # finished: kept, the same results
    assert json.loads(capsys.readouterr().out) == printed


@pytest.mark.parametrize("bad, message", [
    (["--student", "layers:0,9"], "the teacher has 3 layers"),
    (["--student", "enormous"], "not layers:I,J"),
    (["--student", "tiny", "--alpha", "1.5"], "--alpha must be between 0 and 1"),
    (["--student", "tiny", "--task", "conll2003"], "has another head"),
    (["--student", "tiny", "--temperature", "0"], "--temperature must be"),
    (["--student", "tiny", "--unlabelled-format", "text"], "without --unlabelled"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, bad, message):
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    out = tmp_path / "out"
    code = main(["distill", str(teacher), "--data", str(data), "--output", str(out), *bad,
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("bertkit: error:") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_output_is_never_the_teacher(tmp_path, capsys):
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    before = [p.name for p in teacher.iterdir()]
    code = main(["distill", str(teacher), "--student", "tiny", "--data", str(data), "--output",
                 str(teacher), "--no-progress"])
    assert code == 1 and "is the input" in capsys.readouterr().err
    assert sorted(p.name for p in teacher.iterdir()) == sorted(before)


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as done:
        main(["distill", "--help"])
    text = capsys.readouterr().out
    assert done.value.code == 0 and "%%" not in text and "(default: None)" not in text
    assert "--temperature TEMPERATURE" in text and "(default: 2.0)" in text
    assert "layers:I,J" in text and "--baseline" in text


def test_bare_resume_is_refused_with_nothing_to_resume_and_auto_starts(tmp_path, capsys):
    """The --resume of the other training commands (cli.common.add_resume): bare, into a new
    folder, it has nothing to continue and is refused in one line, writing nothing; `--resume
    auto` starts there, and again finds the finished run kept."""
    data, teacher = write_sst2(tmp_path / "glue"), make_teacher(tmp_path)
    out = tmp_path / "out"
    args = ["distill", str(teacher), "--student", "layers:0,2", "--data", str(data), "--output",
            str(out), "--epochs", "1", "--batch-size", "8", "--precision", "fp32",
            "--no-progress"]
    assert main([*args, "--resume"]) == 1
    err = capsys.readouterr().err.strip()
    assert "nothing to resume" in err and "\n" not in err
    assert not out.exists()
    assert main([*args, "--resume", "auto"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert not (out / LOCK_FILE).exists()  # the run folder's lock given up at the end
    assert main([*args, "--resume", "auto"]) == 0
    assert json.loads(capsys.readouterr().out) == first


def test_span_qa_from_a_dev_file_alone_with_split_dev(tmp_path, capsys):
    data = write_squad(tmp_path / "squad")
    (data / "train-v1.1.json").unlink()  # as in ../shared/data/squad: dev only
    teacher = make_teacher(tmp_path, "squad1", BertForQuestionAnswering, labels=None)
    out = tmp_path / "student"
    assert main(["distill", str(teacher), "--student", "layers:1", "--data", str(data),
                 "--output", str(out), "--split-dev", "0.5", "--max-seq-length", "32",
                 "--epochs", "1", "--batch-size", "4", "--precision", "fp32", "--speed-texts",
                 "0", "--no-progress"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert results["task"] == "squad1" and results["metric"] == "f1"
    assert results["transfer"]["labelled"] == 6  # questions: the first half of the 12 articles
    # the records say how the data was split, as finetune's metrics.json does
    assert "trained on the first 6 of the 12 articles" in results["data_note"]
    assert results["student_metrics"]["data_note"] == results["data_note"]
