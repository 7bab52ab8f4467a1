"""The quickstart guide runs as written, in order, on a fresh checkout: the commands that read
only $M and the data (the MRPC grid, SQuAD, embeddings and export, the ablations, the demo).
A file of its own so that `make test`'s two workers run it beside the pipeline part
(test_quickstart.py); the split is in tests/docs/quickstart.py."""

from __future__ import annotations

from tests.docs.quickstart import run_part


def test_quickstart_standalone_commands_run_as_written(shared_data, minilm_path, tmp_path):
    run_part("standalone", shared_data, minilm_path, tmp_path)
