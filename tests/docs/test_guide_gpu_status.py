"""docs/guides/gpu-status.md shows the GPU check's two forms only. The dry run is what
tests/gpu_check/test_gpu_check.py runs (every part at toy size on the CPU, minutes: not run a
second time here); the other form needs a GPU, so this test checks it is the same script and
folder argument, and that the script exists."""

from __future__ import annotations

from tests.docs.guide_runner import REPO, page_commands


def test_gpu_status_guide_shows_the_checks_forms():
    commands = [c.split("#")[0].strip() for c in page_commands("docs/guides/gpu-status.md")]
    assert commands == ["bash gpu_check/gpu_check.sh gpu-report",
                        "bash gpu_check/gpu_check.sh --dry-run gpu-report"]
    assert (REPO / "gpu_check" / "gpu_check.sh").is_file()
    dry_run_test = (REPO / "tests" / "gpu_check" / "test_gpu_check.py").read_text(encoding="utf-8")
    assert '"--dry-run"' in dry_run_test
