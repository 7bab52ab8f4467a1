"""docs/guides/finetune-your-data.md runs as written (tests/docs/guide_runner.py), the SST-2
grid on 16 sentences and one seed per rate, one epoch."""

from __future__ import annotations

from tests.docs.guide_runner import run_page

SCALED = [(r"--output runs/reviews --epochs 3", "--output runs/reviews --epochs 1"),
          (r"--lr 2e-5,5e-5 --seeds 2 --max-train-examples 4000 --epochs 1",
           "--lr 2e-5,5e-5 --seeds 1 --max-train-examples 16 --max-eval-examples 16 --epochs 1")]


def test_finetune_your_data_guide_runs(shared_data, minilm_path, tmp_path):
    run_page("docs/guides/finetune-your-data.md", shared_data, tmp_path, SCALED,
             made=["runs/reviews/metrics.json", "predictions.jsonl", "runs/sst2-custom"])
