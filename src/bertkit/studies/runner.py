"""What every long study shares (docs/reports/studies.md): the machine a record was made on, the run log
(one JSON line per finished run), the lock that keeps one process on a job or a sitting, and
the scheduler that keeps N jobs going as child processes.

The studies built on it: the pre-training curve (`studies.curve`: two sittings, each under
`hold`), the results study (`studies.sidebyside.results` and `full`: jobs run side by side by
`run_jobs`, recorded in a `RunLog`), the stability study and the distillation table
(`studies.sidebyside.stability`, `distill_table`: a `RunLog` each). The committed logs and their
one schema: docs/records/README.md. A study decides what its jobs are and what a record holds;
this module decides how records are kept, how a job is claimed and how jobs are kept going.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from bertkit.errors import BertkitError
from bertkit.io import LOCK_FILE, check_unlocked, lock_output_dir, release_output_dir
from bertkit.training.hardware import cpu_info

# The CPU flags that decide a CPU's speed class and what `--precision auto` picks on it.
SPEED_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2")


def machine() -> dict[str, Any]:
    """The machine a record was made on: CPU model, the flags that decide speed and precision,
    cores, torch."""
    import torch

    cpu = cpu_info()
    return {"cpu": cpu.model or platform.processor(),
            "flags": sorted(f for f in SPEED_FLAGS if f in cpu.flags),
            "cores": os.cpu_count(), "torch": torch.__version__}


def machine_name(record: dict[str, Any] | None = None) -> str:
    """One line for a table: "Intel(R) Xeon(R) Processor (avx2, avx512_bf16, avx512f)"."""
    m = (record or {}).get("machine") or machine()
    return f"{m['cpu']} ({', '.join(m['flags']) or 'no AVX2'})"


class RunLog:
    """A study's finished runs, one JSON object a line, appended as each run ends; a run in the
    log is not run again, so a stopped study goes on where it stopped.

    Every record gets the `date` and the `machine` it was made on (unless the study set them).
    One append is one `write` to a file opened with O_APPEND, so the children of a study may
    append side by side. A line cut by a kill is skipped with its file and line said (its run
    runs again), never read as a run; the next append starts a line of its own after it."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        records = []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                print(f"{self.path}:{number}: not a JSON record (a line cut by a kill?), "
                      "skipped: its run is run again", file=sys.stderr)
                continue
            records.append(record)
        return records

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        record = {**record}
        record.setdefault("date", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        record.setdefault("machine", machine())
        line = (json.dumps(record) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a line cut by a kill
                line = b"\n" + line
            os.write(fd, line)
        finally:
            os.close(fd)
        return record


class Busy(BertkitError):
    """Another process holds the job or sitting (`hold`)."""


@contextmanager
def hold(folder: str | os.PathLike, what: str) -> Iterator[None]:
    """One process at a time on `folder` (a job's state, a sitting's marker): the run-folder
    lock (`io.lock_output_dir`: the kernel drops it when its process dies, so a stale lock never
    blocks a restart), held while the block runs. Held elsewhere: `Busy` (a BertkitError)
    naming `what` and the holder. The folder may be deleted inside the block (a job recorded):
    a process waiting for it makes it again and takes it; an empty folder goes at the end."""
    folder = Path(folder)
    for _ in range(3):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            lock_output_dir(folder)
            break
        except FileNotFoundError:  # its last holder removed the folder meanwhile (recorded)
            continue
        except BertkitError as err:
            raise Busy(f"{what} is running in another process ({err})") from None
    else:
        raise Busy(f"{what}: {folder} was removed three times while this process took it")
    try:
        yield
    finally:
        release_output_dir(folder)
        with contextlib.suppress(OSError):  # nothing left in it (a job recorded or not begun)
            folder.rmdir()


def busy(folder: str | os.PathLike) -> bool:
    """Whether another process holds `folder` now (takes nothing; for a status or a scheduler)."""
    try:
        check_unlocked(folder)
    except BertkitError:
        return True
    return False


def try_hold(held: contextlib.ExitStack, claim: contextlib.AbstractContextManager[None]
             ) -> Busy | None:
    """Enter `claim` (a `hold`) into `held`, so that it is released with the stack; the `Busy`
    it raised when another process holds it (None when taken): for a caller that passes over
    what another process runs instead of stopping."""
    try:
        held.enter_context(claim)
    except Busy as err:
        return err
    return None


def holder(folder: str | os.PathLike) -> str:
    """Who holds `folder` (its lock file's line: "pid N on HOST since T"), for a status."""
    try:
        return (Path(folder) / LOCK_FILE).read_text(encoding="utf-8").strip() or "held"
    except OSError:
        return "held"


class Job(Protocol):
    @property
    def name(self) -> str: ...


def run_jobs(plan: Callable[[], tuple[Sequence[Job], int]], command: Callable[[Job], list[str]],
             *, workers: int, folder: Callable[[Job], Path], log_file: Callable[[Job], Path],
             env: dict[str, str] | None = None, cwd: Path | None = None,
             poll: float = 5.0) -> list[Job]:
    """Keep `workers` jobs going, each `command(job)` as a child process, until the plan is
    empty. `plan()` is asked again whenever a job ends (so it is never stale): the jobs that can
    run now, in priority order, and how many wait on others. A job whose `folder(job)` another
    process holds (a study started twice, or children of a stopped one still running) takes a
    worker's place all the same. A job that fails is not started again in this call (its log
    says why); returns those."""
    running: dict[Job, subprocess.Popen] = {}
    failed: list[Job] = []
    while True:
        for job, proc in list(running.items()):
            if proc.poll() is not None:
                del running[job]
                if proc.returncode:
                    failed.append(job)
                status = "done" if proc.returncode == 0 else f"FAILED rc={proc.returncode}"
                print(f"{time.strftime('%H:%M:%S')} {job.name}: {status}", flush=True)
        ready, waiting = plan()
        ready = [j for j in ready if j not in running and j not in failed]
        elsewhere = [j for j in ready if busy(folder(j))]
        ready = [j for j in ready if j not in elsewhere]
        if not ready and not running and not elsewhere:
            if failed:
                print(f"study: {len(failed)} run(s) failed, see " +
                      ", ".join(str(log_file(j)) for j in failed), flush=True)
            print(f"study: nothing left to run ({waiting} runs wait on runs that failed)"
                  if waiting else "study: complete", flush=True)
            return failed
        while ready and len(running) + len(elsewhere) < workers:
            job = ready.pop(0)
            log_file(job).parent.mkdir(parents=True, exist_ok=True)
            with log_file(job).open("a") as log:
                running[job] = subprocess.Popen(command(job), stdout=log,
                                                stderr=subprocess.STDOUT, cwd=cwd,
                                                env={**os.environ, **(env or {})})
            print(f"{time.strftime('%H:%M:%S')} {job.name}: started", flush=True)
        time.sleep(poll)
