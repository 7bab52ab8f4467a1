"""docs/guides/distill.md runs as written (tests/docs/guide_runner.py), on 16 training sentences."""

from __future__ import annotations

from tests.docs.guide_runner import run_page

SCALED = [(r"^(bertkit finetune \w+ .*)$",
           r"\1 --max-train-examples 16 --max-eval-examples 16 --epochs 1"),
          (r"^(bertkit distill .*)$", r"\1 --max-train-examples 16 --max-eval-examples 16 --epochs 1 "
                                    r"--speed-texts 8 --speed-repeats 1")]


def test_distill_guide_runs(shared_data, minilm_path, tmp_path):
    run_page("docs/guides/distill.md", shared_data, tmp_path, SCALED,
             made=["runs/sst2-3layers/metrics.json", "runs/sst2-tiny/metrics.json"])
