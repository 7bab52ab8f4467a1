"""Where the studies run from a checkout keep their files. The scripts in the checkout's
studies/ folder say where the checkout is (their folder's parent); the package never derives a
path from where it is installed."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import BertkitError


@dataclass(frozen=True)
class Checkout:
    """A checkout's places, each relative to its root."""

    root: Path

    @property
    def records(self) -> Path:
        """The committed records (docs/records/README.md: one schema, `runner.RunLog`)."""
        return self.root / "docs" / "records"

    @property
    def reports(self) -> Path:
        """The reports whose tables the studies write (docs/reports/)."""
        return self.root / "docs" / "reports"

    @property
    def work(self) -> Path:
        """Resumable states of runs not yet recorded (git-ignored)."""
        return self.root / "studies" / ".study"

    @property
    def data(self) -> Path:
        """The data folder beside the checkout (books, GLUE, CoNLL-2003, SQuAD)."""
        return self.root.parent / "shared" / "data"

    def script(self, name: str) -> Path:
        """A study's entry point, for the child processes a study starts."""
        return self.root / "studies" / name


def run_script(main: Callable[[Sequence[str], Checkout], int | None], script: str) -> None:
    """A study script's whole body: `main` with the command line and the checkout the script
    sits in (its folder's parent); a BertkitError is one line and exit status 2, no traceback."""
    path = Path(script).resolve()
    try:
        code = main(sys.argv[1:], Checkout(path.parents[1]))
    except BertkitError as err:
        print(f"{path.name}: error: {err}", file=sys.stderr)
        code = 2
    raise SystemExit(code or 0)
