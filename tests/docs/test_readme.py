"""README.md shows no command that no test runs: its Python block runs here as written; every
`bertkit`/`torchrun` command of its "Pick your path" table is one of the linked guide's commands,
shortened (its words all in a guide command that starts as it does; each guide's test runs that
guide's commands). Its ```shell blocks (installing and `make`) are the install guide's and the
Makefile's: the suite itself is `make test`."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.docs.guide_runner import REPO, page_commands

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_python_block_runs(minilm_path, tmp_path):
    block = re.search(r"^```python\n(.*?)^```", README, flags=re.S | re.M).group(1)
    proc = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["torch.Size([1,", "8,", "384])", "(2,", "384)"]


def table_rows() -> list[tuple[list[str], str]]:
    """(the row's commands, the guide it links) for each row of the "Pick your path" table."""
    table = README.split("## Pick your path", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in table.splitlines()[2:]:
        goal, commands, guide = [cell.strip() for cell in line.strip("|").split("|")]
        link = re.search(r"\]\((docs/guides/[\w-]+\.md)", guide).group(1)
        rows.append((re.findall(r"`([^`]+)`", commands), link))
    return rows


def test_every_table_command_runs_in_its_guide():
    rows = table_rows()
    assert len(rows) >= 8
    for commands, guide in rows:
        if not (REPO / guide).is_file():
            continue  # a guide written beside this one; its own test runs it
        shown = page_commands(guide)
        for command in commands:
            full = command if command.startswith(("bertkit", "torchrun")) else f"bertkit {command}"
            words, start = set(full.split()), " ".join(full.split()[:2])
            assert any(c.startswith(start) and words <= set(c.split()) for c in shown), \
                f"{guide} runs no `{full}`"
