"""The `bertkit` command: parses arguments and hands them to one module per subcommand group.

Each module listed in COMMAND_MODULES exposes `register(subparsers)`, which adds its subcommands
and sets `func=handler` on each; a handler takes the parsed `argparse.Namespace` and returns an
exit code (or None for 0).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Mapping

from bertkit import __version__

COMMAND_MODULES = [
    "bertkit.cli.model_cmds",
    "bertkit.cli.tokenize_cmds",
    "bertkit.cli.inference_cmds",
    "bertkit.cli.pretrain_cmds",
    "bertkit.cli.prepare_cmds",
    "bertkit.cli.finetune_cmds",
    "bertkit.cli.distill_cmds",
    "bertkit.cli.data_cmds",
    "bertkit.cli.vocab_cmds",
    "bertkit.cli.ablate_cmds",
    "bertkit.cli.demo_cmds",
    "bertkit.cli.study_cmds",
    "bertkit.cli.serve_cmds",
    "bertkit.cli.convert_cmds",
    "bertkit.cli.quantize_cmds",
]


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default after its help, unless the help already says it or there is
    none to show (None, False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Every bertkit (sub)command's parser: defaults shown in --help."""

    def __init__(self, *args, **kwargs):
        kwargs["formatter_class"] = DefaultsFormatter
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        # argparse prints nothing for an option without help: give it its default at least
        if kwargs.get("help") is None and kwargs.get("default") not in (None, False):
            kwargs["help"] = "(default: %(default)s)"
        return super().add_argument(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="bertkit",
        description="bertkit: train your own BERT or put one to work.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


# The commands that run as several processes under torchrun (prepare with --part: one part
# each); every other one refuses there (copies would do the same work into the same files).
DISTRIBUTED_COMMANDS = ("pretrain", "finetune", "prepare")


def refuse_under_torchrun(command: str, environ: Mapping[str, str]) -> str | None:
    """The one-line refusal for `command` launched as several processes, or None."""
    world = environ.get("WORLD_SIZE", "1")
    if command in DISTRIBUTED_COMMANDS or not world.isdigit() or int(world) <= 1:
        return None
    return (f"`bertkit {command}` runs as one process; launched by torchrun as {world} "
            f"processes it would do the same work {world} times into the same files. Run it "
            "without torchrun (only `bertkit pretrain`, `bertkit finetune` and `bertkit prepare "
            "--part auto` are distributed).")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    refusal = refuse_under_torchrun(args.command, os.environ)
    if refusal is not None:
        if os.environ.get("RANK", "0") == "0":  # one line, not one per process
            print(f"bertkit: error: {refusal}", file=sys.stderr)
        return 1
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if os.environ.get("RANK", "0") == "0":  # torchrun signals every process: one line
            print("bertkit: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, KeyError) as err:
        if args.debug:
            raise
        msg = str(err) if not isinstance(err, KeyError) else f"missing key {err}"
        print(f"bertkit: error: {msg}", file=sys.stderr)
        return 1
