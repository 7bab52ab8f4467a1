"""`bertkit data list` and `bertkit data download NAME...`: the paper's data from its sources."""

from __future__ import annotations

import argparse

from bertkit.data.download import DATASETS, download_dataset, resolve


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="list or download the official data sets",
                              description="Download the paper's data sets from their official "
                              "sources (or well-known mirrors), checksummed where known.")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION")
    ls = sub.add_parser("list", help="the data sets `download` knows, with their sources")
    ls.set_defaults(func=run_list)
    dl = sub.add_parser("download", help="download (and unpack) data sets into DEST/NAME")
    dl.add_argument("names", nargs="+", metavar="NAME",
                    help=f"glue (all GLUE tasks) or one of: {', '.join(DATASETS)}")
    dl.add_argument("--dest", default="data", metavar="DIR", help="where to put them (./data)")
    dl.add_argument("--force", action="store_true", help="download again even if complete")
    dl.add_argument("--no-progress", action="store_true", help="no progress bars")
    dl.set_defaults(func=run_download)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def run_list(args: argparse.Namespace) -> int:
    for name, dataset in DATASETS.items():
        print(f"{name:14s} {dataset.description}")
        for remote in dataset.files:
            check = "sha256 checked" if remote.sha256 else "size checked"
            print(f"{'':14s}   {remote.url} ({check})")
    return 0


def run_download(args: argparse.Namespace) -> int:
    for dataset in resolve(args.names):
        folder = download_dataset(dataset, args.dest, progress=not args.no_progress,
                                  force=args.force)
        print(f"{dataset.name}: {folder}")
    return 0
