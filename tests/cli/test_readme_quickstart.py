"""The README's quickstart runs as written, in order, on a fresh checkout: the pipeline part
(vocabulary -> shards -> pre-training, the SST-2 run, what reads their folders, serve). The
other lines run in test_readme_quickstart_standalone.py; the machinery and the split are in
tests/cli/readme_quickstart.py."""

from __future__ import annotations

from tests.cli.readme_quickstart import run_part


def test_readme_quickstart_pipeline_runs_as_written(shared_data, minilm_path, tmp_path):
    run_part("pipeline", shared_data, minilm_path, tmp_path)
