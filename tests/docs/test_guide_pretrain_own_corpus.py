"""docs/guides/pretrain-own-corpus.md runs as written (tests/docs/guide_runner.py), at a few
steps and tiny batches."""

from __future__ import annotations

from tests.docs.guide_runner import run_page

SCALED = [(r"--vocab-size 8000", "--vocab-size 1000"),
          (r"--max-steps 20000", "--max-steps 4 --batch-size 8"),
          (r"--batch-size 32 --warmup-ratio 0.1 --max-steps 2000",
           "--batch-size 4 --warmup-ratio 0.1 --max-steps 2"),
          (r"^(bertkit finetune \w+ .*)$",
           r"\1 --max-train-examples 16 --max-eval-examples 16 --epochs 1")]


def test_pretrain_own_corpus_guide_runs(shared_data, minilm_path, tmp_path):
    run_page("docs/guides/pretrain-own-corpus.md", shared_data, tmp_path, SCALED,
             made=["runs/my-bert/model/model.safetensors", "runs/my-bert-sst2/metrics.json",
                   "runs/minilm-books/model/model.safetensors", "runs/minilm-books-sst2/metrics.json"])
