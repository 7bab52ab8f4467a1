"""docs/guides/data-formats.md runs as written (tests/docs/guide_runner.py)."""

from __future__ import annotations

from tests.docs.guide_runner import run_page

SCALED = []


def test_data_formats_guide_runs(shared_data, minilm_path, tmp_path):
    run_page("docs/guides/data-formats.md", shared_data, tmp_path, SCALED,
             made=["runs/notes", "runs/mixed"])
