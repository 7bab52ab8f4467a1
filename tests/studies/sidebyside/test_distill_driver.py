"""studies/distill.sh's workers: started together on one WORK, they train the teacher
once and share the runs, each run done by one of them (bertkit replaced by a stub that records
its calls)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[3] / "studies" / "distill.sh"

# A stand-in for bertkit: records "COMMAND OUTPUT" and, after a moment's work, leaves the file
# that marks the run finished (a teacher's metrics.json, a student's results.json).
STUB = r"""#!/usr/bin/env bash
set -eu
command=$1
while [ $# -gt 0 ]; do [ "$1" = --output ] && output=$2; shift; done
echo "$command $output" >> "$CALLS"
sleep 0.2
mkdir -p "$output"
if [ "$command" = finetune ]; then echo {} > "$output/metrics.json"
else echo {} > "$output/results.json"; fi
"""


@pytest.fixture
def stub(tmp_path):
    if shutil.which("flock") is None:
        pytest.skip("flock(1) is not installed (util-linux)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bertkit").write_text(STUB)
    (bin_dir / "python").write_text("#!/usr/bin/env bash\necho /minilm\n")  # MiniLM's folder
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir / "bertkit"


def start(stub, work, calls, **env):
    return subprocess.Popen(
        ["bash", str(SCRIPT), str(work), "mrpc"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "BERTKIT": str(stub), "CALLS": str(calls),
             "BERTKIT_DATA": str(work.parent), **env})


def test_two_workers_share_the_runs_and_train_the_teacher_once(stub, tmp_path):
    work, calls = tmp_path / "work", tmp_path / "calls"
    workers = [start(stub, work, calls, PRECISION="bf16") for _ in range(2)]
    for w in workers:
        out, _ = w.communicate(timeout=60)
        assert w.returncode == 0, out
    done = calls.read_text().splitlines()
    students = [f"distill {work}/mrpc/{name}-seed{seed}"
                for seed in range(3) for name in ("layers024", "layers03", "tiny")]
    assert sorted(done) == sorted([f"finetune {work}/mrpc/teacher", *students])  # each once
    assert done[0] == f"finetune {work}/mrpc/teacher"  # no student before its teacher
    assert (work / "precision").read_text() == "bf16\n"  # not taken for an older fp32 WORK


def test_a_second_start_skips_what_is_finished_and_keeps_the_precision(stub, tmp_path):
    work, calls = tmp_path / "work", tmp_path / "calls"
    first = start(stub, work, calls, PRECISION="bf16", SEEDS="0")
    assert first.wait(timeout=60) == 0
    assert len(calls.read_text().splitlines()) == 4  # the teacher and seed 0's three students
    second = start(stub, work, calls, PRECISION="bf16", SEEDS="0 1")
    assert second.wait(timeout=60) == 0
    assert len(calls.read_text().splitlines()) == 7  # seed 1's three only
    other = start(stub, work, calls, PRECISION="fp32")
    out, _ = other.communicate(timeout=60)
    assert other.returncode == 2 and "holds bf16 runs" in out
