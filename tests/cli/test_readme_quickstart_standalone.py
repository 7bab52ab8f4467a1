"""The README's quickstart runs as written, in order, on a fresh checkout: the lines that read
only $M and the data (the MRPC grid, SQuAD, embeddings and export, the ablations, the demo).
A file of its own so that `make test`'s two workers run it beside the pipeline part
(test_readme_quickstart.py); the machinery and the split are in tests/cli/readme_quickstart.py."""

from __future__ import annotations

from tests.cli.readme_quickstart import run_part


def test_readme_quickstart_standalone_lines_run_as_written(shared_data, minilm_path, tmp_path):
    run_part("standalone", shared_data, minilm_path, tmp_path)
