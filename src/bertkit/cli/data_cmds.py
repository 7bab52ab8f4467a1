"""`bertkit data list` and `bertkit data download NAME...`: the paper's data from its sources."""

from __future__ import annotations

import argparse

from bertkit.data.download import DATASETS, DEFAULT_DEST, BookCorpus, download, resolve

NAMES = f"demo (the book corpus and SST-2, what `bertkit demo` reads), books, glue (all GLUE tasks) " \
        f"or one of: {', '.join(DATASETS)}"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="list or download the official data sets",
                              description="Download the paper's data sets from their official "
                              "sources (or well-known mirrors), checksummed where known.")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION")
    ls = sub.add_parser("list", help="the data sets `download` knows, with their sources")
    ls.add_argument("names", nargs="*", metavar="NAME", help=f"only these: {NAMES}")
    ls.add_argument("--urls", action="store_true",
                    help="only the URLs, one a line (to fetch them elsewhere, e.g. `wget -i`)")
    ls.set_defaults(func=run_list)
    dl = sub.add_parser("download", help="download (and unpack) data sets into DEST/NAME")
    dl.add_argument("names", nargs="+", metavar="NAME", help=NAMES)
    dl.add_argument("--dest", default=str(DEFAULT_DEST), metavar="DIR",
                    help=f"where to put them (default: ./{DEFAULT_DEST}, where `bertkit demo` "
                    "looks when there is no ../shared/data)")
    dl.add_argument("--from", dest="source_dir", default=None, metavar="FOLDER",
                    help="read the files from FOLDER, fetched there by hand (`bertkit data list "
                    "NAME --urls`), instead of the network; they are checked the same way")
    dl.add_argument("--force", action="store_true", help="download again even if complete")
    dl.add_argument("--no-progress", action="store_true", help="no progress bars")
    dl.set_defaults(func=run_download)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def run_list(args: argparse.Namespace) -> int:
    items = resolve(args.names) if args.names else [*resolve(["books"]), *DATASETS.values()]
    for item in items:
        urls = item.urls() if isinstance(item, BookCorpus) else [f.url for f in item.files]
        if args.urls:
            print("\n".join(urls))
            continue
        print(f"{item.name:14s} {item.description}")
        if isinstance(item, BookCorpus):
            print(f"{'':14s}   {len(urls)} files under {item.base_url}/GITenberg/ (size, Git blob "
                  f"and stripped SHA-256 checked; `bertkit data list {item.name} --urls`)")
            continue
        for remote in item.files:
            check = "sha256 checked" if remote.sha256 else "size checked"
            print(f"{'':14s}   {remote.url} ({check})")
    return 0


def run_download(args: argparse.Namespace) -> int:
    for name, folder in download(args.names, args.dest, progress=not args.no_progress,
                                 force=args.force, source_dir=args.source_dir):
        print(f"{name}: {folder}")
    return 0
