"""The quickstart guide's commands (docs/guides/quickstart.md), as written, in two parts.

The page runs through tests/docs/guide_runner.py; only budgets and batch sizes are scaled down,
each listed in SCALED below. The commands run in two parts, each in its own fresh folder and in
the page's order, so that the two test files can run at once (`make test`'s two workers take a
file each); a command goes with the commands whose outputs it reads (STANDALONE below), and the
assignment of `$M` goes with both.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.guide_runner import ASSIGNMENT, new_session, page_commands, run_commands

PAGE = "docs/guides/quickstart.md"

# (pattern, replacement) applied to a command: the budgets of the long commands, and the
# pre-training batches (a step of `mini` at 64 x 128 tokens takes seconds on one thread; the
# smaller batches run the same code).
SCALED = [
    (r"--max-steps 2000 --batch-size 64", "--max-steps 6 --batch-size 16"),
    (r"--recipe small-budget --max-steps 2000$", "--recipe small-budget --max-steps 6 "
                                                 "--batch-size 16"),
    (r"--budget-minutes 10", "--budget-minutes 0.05"),
    (r"--lr 2e-5,3e-5,5e-5 --epochs 2,3 --seeds 3",
     "--lr 2e-5,5e-5 --epochs 1 --seeds 2 --max-train-examples 16 --max-eval-examples 32"),
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

# "pipeline" is the vocabulary -> shards -> pre-training chain, the SST-2 run and what reads
# their folders (evaluate, predict, distill, and serve, which loads runs/sst2 and runs/pt/model);
# "standalone" holds the commands that read only $M and the data: the other fine-tunings,
# embeddings and export, the ablations and the demo.
STANDALONE = re.compile(r"^(printf |bertkit (finetune (mrpc|squad1)|embed|features|similarity|"
                        r"export|ablate|demo)\b)")
PARTS = ("pipeline", "standalone")

# What each part leaves in its folder (checked after its last command).
MADE = {
    "pipeline": ("runs/vocab/vocab.txt", "runs/pt/model/model.safetensors",
                 "runs/sst2/metrics.json"),
    "standalone": ("runs/mrpc", "runs/squad/metrics.json", "vectors.npy", "features.jsonl",
                   "minilm.onnx", "demo-report/REPORT.md"),
}


def part_of(command: str) -> str:
    return "standalone" if STANDALONE.match(command) else "pipeline"


def run_part(part: str, shared_data: Path, minilm_path: Path, tmp_path: Path) -> None:
    """Runs the assignment of `$M` and then the part's commands, in the page's order, in a
    fresh clone-like folder under tmp_path; checks what the part must leave there."""
    commands = page_commands(PAGE)
    assert commands[0].startswith("M=$(") and len(commands) > 20
    rest = [c for c in commands if not ASSIGNMENT.fullmatch(c)]
    assert {part_of(c) for c in rest} == set(PARTS)  # neither part is empty
    session = new_session(shared_data, tmp_path)
    run_commands(session, [c for c in commands if ASSIGNMENT.fullmatch(c) or part_of(c) == part],
                 SCALED)
    assert Path(session.env["M"]) == minilm_path
    for made in MADE[part]:
        assert (session.clone / made).exists(), f"{made} was not written"
