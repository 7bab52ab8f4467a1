"""docs/guides/int8.md runs as written (tests/docs/guide_runner.py): a variant made from the
guide's texts, embedded at int8 and at fp32, its sidecar naming the precision and the drift."""

from __future__ import annotations

import json

from tests.docs.guide_runner import run_page


def test_int8_guide_runs(shared_data, minilm_path, tmp_path):
    run_page("docs/guides/int8.md", shared_data, tmp_path, [],
             made=["minilm-int8/int8.json", "vectors.npy", "vectors-fp32.npy"])
    work = next(p.parent for p in tmp_path.rglob("vectors.npy.json"))
    assert json.loads((work / "vectors.npy.json").read_text())["precision"] == "int8"
    assert json.loads((work / "vectors-fp32.npy.json").read_text())["precision"] == "fp32"
