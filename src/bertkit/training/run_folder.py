"""The one run-folder claim every run kind makes (pre-training, fine-tuning, a grid, distillation).

A run writes only into a folder that is new, empty or its own earlier run (`bertkit.io`'s rule:
a marker file of the run's settings, written first, and a lock held while it writes). The order
is the same for every kind: look (`check`, before slow work such as reading the data, so that
a refused folder is found first and a failed read writes nothing), then claim (`claimed`: rank
0 writes the marker and takes the lock, every rank waits for it), then release when the run,
its export and its records are written. A run resumed after it finished is answered from its
record (`finished`).

Under torchrun every rank looks, so that each stops on a refused folder by itself, with the
same message, rather than waiting in a collective for a rank that has stopped; rank 0 alone
claims and writes.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.io import check_output_dir, claim_output_dir, release_output_dir
from bertkit.training import distributed
from bertkit.training.state import resolve_resume

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunFolder:
    """One run's output folder: its marker file, the settings a resumed run must match, the
    `--resume` asked for and the inputs it may not be inside of."""

    path: Path
    marker: str
    settings: dict[str, Any]
    resume: bool | str = False
    inputs: Sequence[str | Path] = field(default_factory=tuple)

    def check(self) -> bool:
        """Whether the folder holds an earlier run of these settings that is continued; a
        refused folder is a BertkitError. Writes nothing."""
        return check_output_dir(self.path, self.marker, self.settings, self.resume,
                                inputs=self.inputs)

    def resumes(self) -> bool:
        """`check`, then whether the run continues from a training state: a bare `--resume`
        with no state to continue is refused here, before anything is written."""
        self.check()
        return resolve_resume(self.path, self.resume)

    def finished(self, record: str) -> dict[str, Any] | None:
        """A resumed run whose `record` (e.g. metrics.json) is written finished earlier: its
        settings are checked (the folder claimed and released at once: nothing more to
        write) and the record returned. None when the run has not finished."""
        if not (self.resume and (self.path / record).is_file()):
            return None
        check_output_dir(self.path, self.marker, self.settings, True, inputs=self.inputs)
        distributed.barrier()
        if distributed.is_main():
            claim_output_dir(self.path, self.marker, self.settings, True, inputs=self.inputs)
            release_output_dir(self.path)
        log.info("%s: finished earlier, kept", self.path)
        return json.loads((self.path / record).read_text(encoding="utf-8"))

    @contextlib.contextmanager
    def claimed(self) -> Iterator[None]:
        """Rank 0 claims the folder; every rank waits until it has (before any looks for
        training states in it). The lock is released when the block ends: it is held over
        the whole run, its export and records included, and a long-lived caller (a study, a
        grid) would otherwise keep one lock per folder it ever trained."""
        distributed.barrier()
        if distributed.is_main():
            claim_output_dir(self.path, self.marker, self.settings, self.resume,
                             inputs=self.inputs)
        distributed.barrier()
        try:
            yield
        finally:
            release_output_dir(self.path)
