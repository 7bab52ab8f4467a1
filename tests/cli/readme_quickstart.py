"""Running the README's quickstart as written (tests/cli/test_readme_quickstart*.py).

Every line of the ```bash block under "## Quickstart" runs in a folder laid out like a clone
(`../shared/data` beside it), as `bash -c LINE` with `.venv/bin` first on PATH and `$M` set by the
block's own first line. The data are small copies of the real files (the first rows of each GLUE
set, the first articles of SQuAD, the first 40 KB of three books), made in a temporary folder,
never in the repository. Only budgets and batch sizes are scaled down, each listed in SCALED
below; a line that the table does not name runs exactly as written. `bertkit serve` is started,
asked for /health and stopped.

The block runs in two parts, each in its own fresh folder and in the block's order, so that the
two test files can run at once (`make test`'s two workers take a file each); a line goes with
the lines whose outputs it reads (STANDALONE below).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import head_lines

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300

# (pattern, replacement) applied to a command line: the budgets of the long commands, and the
# pre-training batches (a step of `mini` at 64 x 128 tokens takes seconds on one thread; the
# smaller batches run the same code).
SCALED = [
    (r"--max-steps 2000 --batch-size 64", "--max-steps 6 --batch-size 16"),
    (r"--recipe small-budget --max-steps 2000$", "--recipe small-budget --max-steps 6 "
                                                 "--batch-size 16"),
    (r"--budget-minutes 10", "--budget-minutes 0.05"),
    (r"--lr 2e-5,3e-5,5e-5 --epochs 2,3 --seeds 3",
     "--lr 2e-5,5e-5 --epochs 1 --seeds 2 --max-train-examples 16"),
    # MiniLM fine-tuning on the CPU: a few steps show each command works end to end (SQuAD's
    # 384-token windows were most of this test's time)
    (r"^(bertkit finetune (?:sst2|squad1) .*)$", r"\1 --max-train-examples 16 --epochs 1"),
    (r"^(bertkit finetune squad1 .*)$", r"\1 --max-eval-examples 16"),
    (r"^(bertkit distill .*?)(\s+#.*)?$", r"\1 --max-train-examples 16 --epochs 1 --speed-texts 8 "
                                          r"--speed-repeats 1"),
    (r"^(bertkit ablate .*)$", r"\1 --seeds 1 --max-train-examples 16 --max-eval-examples 16 "
                               r"--epochs 1 --budget-minutes 0.05 --vocab-size 300 --no-progress "
                               r"--pretrain-batch-size 8"),
    (r"^(bertkit demo .*?)(\s+#.*)?$", r"\1 --budget-minutes 0.05 --vocab-size 300 --seeds 1 "
                                       r"--train-examples 16 --dev-examples 16 --epochs 1 "
                                       r"--pretrain-mb 0.05 --no-reference --no-progress"),
]

# The block's lines by part: "pipeline" is the vocabulary -> shards -> pre-training chain, the
# SST-2 run and what reads their folders (evaluate, predict, distill, and serve, which loads
# runs/sst2 and runs/pt/model); "standalone" holds the lines that read only $M and the data:
# the other fine-tunings, embeddings and export, the ablations and the demo. A line is in
# "standalone" when STANDALONE matches it, else in "pipeline".
STANDALONE = re.compile(r"^(printf |bertkit (finetune (mrpc|squad1)|embed|features|similarity|"
                        r"export|ablate|demo)\b)")
PARTS = ("pipeline", "standalone")

# What each part leaves in its folder (checked after its last line).
MADE = {
    "pipeline": ("runs/vocab/vocab.txt", "runs/pt/model/model.safetensors",
                 "runs/sst2/metrics.json"),
    "standalone": ("runs/mrpc", "runs/squad/metrics.json", "vectors.npy", "features.jsonl",
                   "minilm.onnx", "demo-report/REPORT.md"),
}


def quickstart_lines(readme: str) -> list[str]:
    """The commands of the quickstart block: continuations joined, comments and blanks dropped."""
    section = readme.split("## Quickstart", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def part_of(line: str) -> str:
    return "standalone" if STANDALONE.match(line) else "pipeline"


def scaled(line: str) -> str:
    for pattern, replacement in SCALED:
        line = re.sub(pattern, replacement, line)
    return line


def small_data(shared: Path, root: Path) -> None:
    """root/shared/data: the first rows, articles and kilobytes of the real data sets."""
    data = root / "shared" / "data"
    for book in ("carroll-alice.txt", "paine-common_sense.txt", "conrad-heart_of_darkness.txt"):
        (data / "books").mkdir(parents=True, exist_ok=True)
        raw = (shared / "books" / book).read_bytes()[:40_000]
        (data / "books" / book).write_bytes(raw)
    for task, rows in (("SST-2", 48), ("MRPC", 40), ("RTE", 40)):
        for split in ("train", "dev"):
            head_lines(shared / "glue" / task / f"{split}.tsv", data / "glue" / task / f"{split}.tsv",
                       rows)
    squad = json.loads((shared / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    articles = [{**a, "paragraphs": a["paragraphs"][:3]} for a in squad["data"][:4]]
    (data / "squad").mkdir(parents=True)
    (data / "squad" / "dev-v1.1.json").write_text(json.dumps({**squad, "data": articles}),
                                                  encoding="utf-8")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_server(line: str, cwd: Path, env: dict) -> None:
    """Starts a `bertkit serve` line on a free port, waits for /health, stops it."""
    port = free_port()
    line = re.sub(r"--port \d+", f"--port {port}", line)
    proc = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"$ {line}\nexited {proc.returncode}:\n{proc.stdout.read()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert r.status == 200
                    return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"$ {line}\nno answer on /health within 120 s")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_part(part: str, shared_data: Path, minilm_path: Path, tmp_path: Path) -> None:
    """Runs the block's first line (`M=...`) and then the part's lines, in the block's order,
    in a fresh clone-like folder under tmp_path; checks what the part must leave there."""
    lines = quickstart_lines((REPO / "README.md").read_text(encoding="utf-8"))
    assert lines[0].startswith("M=$(") and len(lines) > 20
    assert {part_of(line) for line in lines[1:]} == set(PARTS)  # neither part is empty
    small_data(shared_data, tmp_path)
    clone = tmp_path / "bertkit"
    clone.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("BERTKIT_DATA", None)
    env["M"] = subprocess.run(["bash", "-c", f"{lines[0]} && echo $M"], cwd=clone, env=env,
                              capture_output=True, text=True, check=True).stdout.strip()
    assert Path(env["M"]) == minilm_path
    assert shutil.which("bertkit", path=env["PATH"])
    for line in lines[1:]:
        if part_of(line) != part:
            continue
        command = scaled(line)
        if command.startswith("bertkit serve"):
            run_server(command, clone, env)
            continue
        proc = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, (f"README line failed:\n$ {line}\n(ran: {command})\nexit "
                                      f"{proc.returncode}\n{proc.stderr[-3000:]}")
    for made in MADE[part]:
        assert (clone / made).exists(), f"{made} was not written"
