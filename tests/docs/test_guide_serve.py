"""docs/guides/serve.md runs as written (tests/docs/guide_runner.py): the server
started, every request answered."""

from __future__ import annotations

from tests.docs.guide_runner import run_page

SCALED = []


def test_serve_guide_runs(shared_data, minilm_path, tmp_path):
    run_page("docs/guides/serve.md", shared_data, tmp_path, SCALED,
             made=[])
