"""The quickstart guide runs as written, in order, on a fresh checkout: the pipeline part
(vocabulary -> shards -> pre-training, the SST-2 run, what reads their folders, serve). The
other commands run in test_quickstart_standalone.py; the split is in tests/docs/quickstart.py."""

from __future__ import annotations

from tests.docs.quickstart import run_part


def test_quickstart_pipeline_runs_as_written(shared_data, minilm_path, tmp_path):
    run_part("pipeline", shared_data, minilm_path, tmp_path)
