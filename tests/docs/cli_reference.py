"""docs/reference/cli.md, made from the `bertkit` command's own parser: every command's --help.

    .venv/bin/python -m tests.docs.cli_reference          # rewrite docs/reference/cli.md

tests/docs/test_cli_reference.py fails when the page is not what this writes, so a changed
option cannot leave the reference behind.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reference" / "cli.md"
WIDTH = "100"  # argparse wraps help to $COLUMNS: fixed, so the page does not depend on a terminal

HEADER = """# Command-line reference

Every `bertkit` command and its options, as `--help` prints them (defaults shown after each
option). Errors are one line on stderr with a non-zero exit code; `bertkit --debug COMMAND ...`
shows the traceback. This page is generated from the parser (`python -m tests.docs.cli_reference`
rewrites it; the test suite fails when it is out of date).
"""


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command words, parser) for `parser` and every subcommand below it, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from subcommands(sub, (*path, name))


def render() -> str:
    os.environ["COLUMNS"] = WIDTH
    from bertkit.cli.main import build_parser

    parser = build_parser()
    parser.prog = "bertkit"
    entries = list(subcommands(parser))
    lines = [HEADER, "## Commands", ""]
    for path, sub in entries[1:]:
        anchor = "-".join(path)
        summary = (sub.description or "").strip().splitlines()[0] if sub.description else ""
        lines.append(f"- [`bertkit {' '.join(path)}`](#bertkit-{anchor})"
                     + (f": {summary}" if summary else ""))
    for path, sub in entries:
        title = " ".join(("bertkit", *path))
        lines += ["", f"## {title}", "", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render(), encoding="utf-8")
    print(PAGE.relative_to(REPO), file=sys.stderr)


if __name__ == "__main__":
    main()
