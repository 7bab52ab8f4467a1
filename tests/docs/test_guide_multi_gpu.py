"""docs/guides/multi-gpu.md runs as written (tests/docs/guide_runner.py), the torchrun
pre-training for 2 steps on 2 CPU processes."""

from __future__ import annotations

from tests.docs.guide_runner import run_page

SCALED = [(r"--max-steps 100 --batch-size 32", "--max-steps 2 --batch-size 4")]


def test_multi_gpu_guide_runs(shared_data, minilm_path, tmp_path):
    run_page("docs/guides/multi-gpu.md", shared_data, tmp_path, SCALED,
             made=["shards", "array-shards", "runs/ddp/model/model.safetensors"])
