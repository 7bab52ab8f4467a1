"""The `bertkit` command: parses arguments and hands them to one module per subcommand group.

Each module listed in COMMAND_MODULES exposes `register(subparsers)`, which adds its subcommands
and sets `func=handler` on each; a handler takes the parsed `argparse.Namespace` and returns an
exit code (or None for 0).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMAND_MODULES = [
    "bertkit.cli.model_cmds",
    "bertkit.cli.tokenize_cmds",
    "bertkit.cli.inference_cmds",
    "bertkit.cli.pretrain_cmds",
    "bertkit.cli.prepare_cmds",
    "bertkit.cli.finetune_cmds",
    "bertkit.cli.data_cmds",
    "bertkit.cli.vocab_cmds",
    "bertkit.cli.ablate_cmds",
    "bertkit.cli.demo_cmds",
    "bertkit.cli.serve_cmds",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertkit",
        description="bertkit: train your own BERT or put one to work.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("bertkit: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, KeyError) as err:
        if args.debug:
            raise
        msg = str(err) if not isinstance(err, KeyError) else f"missing key {err}"
        print(f"bertkit: error: {msg}", file=sys.stderr)
        return 1
