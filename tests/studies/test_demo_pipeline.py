"""`make demo` end to end at a tiny scale: every step runs and the report holds every section
(the accuracy claim itself needs the full budget; docs/reports/ablations.md has the measured numbers)."""

from __future__ import annotations

import json

import pytest

from bertkit.cli.main import main
from bertkit.inference.pretraining import fill_mask, is_next_probability, load_pretraining_model
from bertkit.studies.demo import run as demo


def test_pretraining_files_takes_the_first_megabytes(tmp_path):
    files = []
    for i in range(4):
        path = tmp_path / f"{i}.txt"
        path.write_text("x" * 400_000)
        files.append(str(path))
    assert demo.pretraining_files(files, 1.0) == files[:3]  # 0.4 + 0.4 + 0.4 >= 1 MB
    assert demo.pretraining_files(files, 0.0) == files[:1]  # never none
    assert demo.pretraining_files(files, 100.0) == files


def test_missing_data_says_what_to_pass(tmp_path, capsys):
    assert main(["demo", "--data", str(tmp_path), "--output", str(tmp_path / "r"),
                 "--skip-probe"]) == 1
    err = capsys.readouterr().err
    assert "bertkit data download demo" in err and "--corpus" in err
    book = tmp_path / "book.txt"
    book.write_text("Some text.\n")
    assert main(["demo", "--data", str(tmp_path), "--corpus", str(book), "--output",
                 str(tmp_path / "r"), "--skip-probe"]) == 1
    assert "bertkit data download demo" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_runs_end_to_end_at_tiny_scale(shared_data, tmp_path, capsys):
    books = shared_data / "books"
    out = tmp_path / "report"
    args = ["demo", "--data", str(shared_data), "--output", str(out), "--corpus",
            str(books / "paine-common_sense.txt"), str(books / "carroll-alice.txt"),
            "--model", "tiny", "--vocab-size", "1000", "--max-seq-length", "64",
            "--budget-minutes", "0.1", "--seeds", "1", "--train-examples", "32",
            "--dev-examples", "32", "--epochs", "1", "--finetune-lr", "1e-3", "3e-3",
            "--no-reference", "--no-progress"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "scale: device cpu (auto)" in printed  # this machine has no GPU
    assert '"bank" in' in printed or "skipped: the MiniLM checkpoint" in printed
    assert printed.count("P(IsNext) =") == 2 and "dev accuracy" in printed
    report = (out / "REPORT.md").read_text()
    # What pre-training learned comes first, then the probe, then the downstream comparison.
    headings = ["## 1. What pre-training learned at this budget",
                "### Held-out MLM / NSP during pre-training",
                "### Fill-mask and next-sentence prediction",
                "## 2. What pre-training at scale gives: one word, two senses",
                "## 3. SST-2 dev accuracy", "### Learning-rate selection (seed 0, dev)",
                "| random initialisation |", "## 4. With few labels: a small learning curve"]
    assert all(h in report for h in headings)
    assert [report.index(h) for h in headings] == sorted(report.index(h) for h in headings)
    assert "| step | held-out MLM loss | MLM accuracy | NSP accuracy |" in report
    assert "| embeddings |" in report or "checkpoint is missing" in report  # the "bank" probe
    assert report.count("[MASK]") >= len(demo.FILL_MASK)
    assert report.startswith("# bertkit demo report\n\n- **With few labels**: Own pre-training")
    for png in ("pretraining.png", "sst2.png", "learning_curve.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    results = json.loads((out / "work" / "results.json").read_text())
    grid = [f"{v}@lr{lr}/sst2/0" for v in ("pretrained", "random") for lr in ("0.001", "0.003")]
    # the learning curve: at 32 labels (the subset; none of its default counts is under it) the
    # frozen cells only, fine-tuning's being step 4's
    curve = [f"curve-frozen-{v}-n32/sst2/{s}" for v in ("pretrained", "random") for s in range(3)]
    assert sorted(results["cells"]) == sorted(grid + curve + ["pretrained/sst2/0", "random/sst2/0"])
    # The fill-mask helper: 5 guesses per [MASK], probabilities descending and in (0, 1].
    model, tok = load_pretraining_model(out / "work" / "pretrain" / "model", "mlm", "nsp")
    guesses = fill_mask(model, tok, "the [MASK] was [MASK] .")
    assert [pos for pos, _ in guesses] == [2, 4] and all(len(g) == 5 for _, g in guesses)
    probs = [p for _, p in guesses[0][1]]
    assert probs == sorted(probs, reverse=True) and 0 < probs[0] <= 1
    assert 0.0 <= is_next_probability(model, tok, "a b c.", "d e f.") <= 1.0
