"""File I/O rules shared by every command.

Atomic writes: every artefact that matters goes to a temporary name, then is renamed into place,
so a killed process never leaves a half-written file that looks whole. Output folders: a command
writes only into a folder that is new, empty or its own earlier run (`claim_output_dir`), and
only while no other process writes it (`lock_output_dir`)."""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # POSIX only: on Windows output folders are not locked
    fcntl = None  # type: ignore[assignment]

from tqdm.auto import tqdm

from bertkit.errors import BertkitError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, needed: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path`, on error it is removed.
    A full disk is a BertkitError naming `path` (`writing`); `needed` is its size when known."""
    path = Path(path)
    with writing(path, needed):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            yield Path(tmp)
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would differ from the user's files
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


# --- a full disk: the one rule for every write ----------------------------------------------------

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# What a failed write says where the library that made it drops the errno: torch.save's zip
# writer ("unexpected pos", "file write failed"), numpy's tofile ("N requested and M written"),
# safetensors ("No space left on device" inside its own error type).
_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded|unexpected pos"
                        r"|file write failed|\d+ requested and \d+ written")


def is_disk_full(err: BaseException) -> bool:
    """Whether `err` (or what it was raised from) is a write that found no space left."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _FULL_ERRNOS:
            return True
        if isinstance(seen, Exception) and _FULL_TEXT.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@contextlib.contextmanager
def writing(path: str | os.PathLike, needed: int | None = None) -> Iterator[None]:
    """Write `path` in the block: a full disk (or quota) becomes one BertkitError naming the file,
    the space there was when the write began and, given `needed` (bytes), what the file needs.
    The block's own cleanup runs first, so nothing half-written is left under the final name.
    (The space is taken before the write: after it fails, a file the failed library still holds
    open keeps its blocks until the error is gone.)"""
    folder = _existing_folder(Path(path))
    try:
        free: int | None = shutil.disk_usage(folder).free
    except OSError:
        free = None
    try:
        yield
    except BertkitError:
        raise
    except Exception as err:
        if not is_disk_full(err):
            raise
        raise BertkitError(disk_full_message(Path(path), folder, free, needed)) from err


def _existing_folder(path: Path) -> Path:
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def disk_full_message(path: Path, folder: Path, free: int | None, needed: int | None) -> str:
    space = f"{_size(free)} free in {folder} when it began" if free is not None else \
        f"free space in {folder} unknown"
    need = f", about {_size(needed)} needed" if needed else ""
    return (f"{path}: no space left on the device ({space}{need}); nothing half-written was "
            "kept: free some space and run the same command again (with --resume, where the "
            "command has it, to continue)")


def _size(n: int) -> str:
    """Bytes as a person reads them (decimal units, as `df -H` prints)."""
    if n < 1000:
        return f"{n} bytes"
    power = min(int(math.log10(n)) // 3, 4)
    return f"{n / 1000 ** power:,.1f} {('KB', 'MB', 'GB', 'TB')[power - 1]}"


@contextlib.contextmanager
def updating(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock on `path` (its sibling `NAME.lock`) while the block runs: a read,
    change and rewrite of a file that two processes update (two sittings of one study) then
    never loses the other's change. Blocks until the other is done (its update is short)."""
    if fcntl is None:
        yield
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # as the atomic write would
    with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path, needed=len(text.encode("utf-8"))) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    """`data` as indented JSON (values JSON lacks, such as paths, as their text), atomically."""
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def progress_bar(iterable: Any = None, **kwargs: Any) -> tqdm:
    """A tqdm bar on a terminal; written to a file or a CI log it updates every 30 s instead
    of many times a second (megabytes of carriage-return updates otherwise)."""
    if not sys.stderr.isatty():
        kwargs["mininterval"] = max(30.0, kwargs.get("mininterval", 0.0))
        kwargs["dynamic_ncols"] = False
    return tqdm(iterable, **kwargs)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_text_lines(path: str | os.PathLike) -> list[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file, split on newlines only (a text may hold other
    Unicode line separators); bytes that are not UTF-8 are an error naming the file and line,
    not a codec traceback."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise BertkitError(f"{path}, line {line}: not valid UTF-8 (byte 0x{data[err.start]:02x}); "
                           "save the file as UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [(n, line.rstrip("\r")) for n, line in enumerate(lines, start=1)]


# --- output folders: the one rule every command follows ------------------------------------------

# Settings a resumed run may change: they shape what is shown, not what is computed.
# When states are written and how many are kept change nothing a run computes (mid-run resume
# is exact), so a killed run may continue with another --save-every. The folder's own path is
# not a setting either: a run folder copied or moved elsewhere (another disk, a cluster's scratch
# space) continues where it stopped.
IGNORED_ON_RESUME = ("output_dir", "resume", "progress", "overwrite", "log_every", "tensorboard",
                     "keep", "save_every", "stop_at_cpu_seconds", "stop_at_step")


def read_json_object(path: str | os.PathLike) -> dict[str, Any]:
    """A JSON file that must hold one object (config.json, meta.json, tokenizer_config.json):
    bad UTF-8, bad JSON (with its line) or another JSON value is a BertkitError naming it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise BertkitError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise BertkitError(f"{path}: line {err.lineno}: invalid JSON ({err.msg})") from None
    if not isinstance(data, dict):
        raise BertkitError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def check_not_inside(output: str | os.PathLike, inputs: Sequence[str | os.PathLike]) -> None:
    """Input and output are never the same folder, nor the output a folder holding the input."""
    out = Path(output).resolve()
    for given in inputs:
        src = Path(given).resolve()
        if out == src or out in src.parents:
            raise BertkitError(f"--output {output} is the input {given} (or a folder holding "
                               "it): write to a new folder so the input is never overwritten")


def check_output_outside(output: str | os.PathLike, inputs: Iterable[str | os.PathLike]) -> None:
    """A folder given as a corpus stands for every file under it, so an output folder inside it
    would be read back as input by the next run (its own shards or vocabulary as corpus)."""
    out = Path(output).resolve()
    for given in inputs:
        folder = Path(given)
        if folder.is_dir() and folder.resolve() in out.parents:
            raise BertkitError(f"--output {output} is inside the input folder {given}, whose "
                               "every file is read as corpus; write to a folder outside it")


def check_new_file(path: str | os.PathLike, inputs: Sequence[str | os.PathLike] = ()) -> None:
    """A single-file output (predictions, vectors, an export) never replaces an input or a file
    the user already has."""
    path = Path(path)
    for given in inputs:
        if Path(given).exists() and path.resolve() == Path(given).resolve():
            raise BertkitError(f"--output {path} is an input; choose another file name")
    if path.is_dir():
        raise BertkitError(f"--output {path} is a folder; give a file name")
    if path.exists():
        raise BertkitError(f"--output {path} already exists; choose a new file name (or delete "
                           "it first)")


def claim_output_dir(path: str | os.PathLike, marker: str, settings: dict[str, Any],
                     resume: bool = False, inputs: Sequence[str | os.PathLike] = (),
                     overwrite: bool = False) -> bool:
    """A command writes only into a folder that is new, empty, or its own earlier run of the
    same kind, recognized by `marker` (a JSON file of the run's settings, written first).
    Continuing an earlier run needs `resume` and the same settings; replacing it needs
    `overwrite` (the files the command writes are replaced, nothing else is deleted); an
    attempt that stopped before writing anything but its marker counts as an empty folder.
    `resume="auto"` continues an earlier run of the same settings and starts in a new or empty
    folder. The folder's lock (`lock_output_dir`) is taken before anything is written and held
    until this process ends. Returns True when the folder holds an earlier run that is being
    continued."""
    path = Path(path)
    check_output_dir(path, marker, settings, resume, inputs, overwrite)  # before any write
    path.mkdir(parents=True, exist_ok=True)
    lock_output_dir(path)
    # again under the lock: another process may have claimed the folder since the first look
    resumed = check_output_dir(path, marker, settings, resume, inputs, overwrite)
    if not resumed:
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path / marker, json.dumps(_plain(settings), indent=2) + "\n")
    return resumed


def check_output_dir(path: str | os.PathLike, marker: str, settings: dict[str, Any],
                     resume: bool = False, inputs: Sequence[str | os.PathLike] = (),
                     overwrite: bool = False) -> bool:
    """`claim_output_dir`'s checks alone, writing nothing: a command calls it before slow work
    (reading data) so that a refused folder is found first and a failed read leaves none."""
    path = Path(path)
    check_not_inside(path, inputs)
    if path.exists() and not path.is_dir():
        raise BertkitError(f"{path}: exists and is not a folder; choose a new output folder")
    check_unlocked(path)
    if not (path.is_dir() and any(p.name not in (marker, LOCK_FILE) for p in path.iterdir())):
        return False
    earlier = path / marker
    if not earlier.is_file():
        raise BertkitError(f"{path}: not empty and not a folder this command wrote (no "
                           f"{marker}); choose a new or empty output folder")
    if overwrite:
        return False
    if not resume:
        raise BertkitError(f"{path}: holds an earlier run; pass --resume (or --resume auto) to "
                           "continue it or choose another output folder")
    changed = changed_settings(json.loads(earlier.read_text(encoding="utf-8")), _plain(settings))
    if changed:
        flag = "--resume auto" if resume == "auto" else "--resume"
        raise BertkitError(f"{path}: {flag} with other settings than the earlier run "
                           f"({', '.join(changed)}); use the same settings or a new folder")
    return True


def _plain(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as they read back from JSON (tuples become lists, paths strings)."""
    return json.loads(json.dumps(settings, default=str))


def changed_settings(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the settings that differ (those in IGNORED_ON_RESUME aside)."""
    changed = []
    for key in sorted(set(old) | set(new)):
        if key in IGNORED_ON_RESUME:
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += changed_settings(a, b, f"{prefix}{key}.")
        elif a != b:
            changed.append(f"{prefix}{key}")
    return changed


# --- the writer's lock: one process writes a run folder at a time ---------------------------------

LOCK_FILE = ".bertkit.lock"  # in the folder it locks, so a copied or moved folder has its own
_held: dict[Path, IO[str]] = {}  # this process's locks: folder -> the open lock file


def lock_output_dir(path: str | os.PathLike) -> None:
    """Hold `path`'s lock until this process ends (`fcntl.flock`: the kernel drops it when the
    process exits, killed or not, so a stale lock never blocks a restart); taking it again in
    the same process is a no-op. Another process holding it is a BertkitError naming that
    process: workers of a launcher killed with SIGKILL keep writing (torchrun starts them in
    sessions of their own), and a second run into the same folder would interleave with them."""
    folder = Path(path).resolve()
    if fcntl is None or _holds(folder):
        return
    # a moment's patience: another process may hold it only for a look (`check_unlocked`)
    deadline = time.monotonic() + 2.0
    while True:
        f = open(folder / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 (held until exit)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip()
            f.close()
            if time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise BertkitError(_locked_message(Path(path), holder)) from None
        _held[folder] = f
        if _holds(folder):  # not a file its holder removed while this process opened it
            break
    f.seek(0)
    f.truncate()
    holder = (f"pid {os.getpid()} on {socket.gethostname()} since "
              f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    # written past the text buffer: a write that failed (a full disk) must not stay buffered,
    # to fail again when the file is closed at exit
    with writing(folder / LOCK_FILE):
        os.write(f.fileno(), holder.encode("utf-8"))


@contextlib.contextmanager
def held_output_dir(path: str | os.PathLike) -> Iterator[Path]:
    """`path` (made when new) under this process's lock (`lock_output_dir`) while the block
    writes it; given up after, unless it was held before the block. A command with no run
    marker of its own (a download, a study's folder) claims its folder this way."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    before = fcntl is not None and _holds(folder.resolve())
    try:
        lock_output_dir(folder)
        yield folder
    finally:
        if not before:
            release_output_dir(folder)


def release_output_dir(path: str | os.PathLike) -> None:
    """Give up `path`'s lock before this process ends (a long-lived process that has finished
    writing the folder). The lock file is removed while still held; a process that opened it
    just before finds, once it holds the lock, that the file is gone (`_holds`' check)."""
    folder = Path(path).resolve()
    f = _held.pop(folder, None)
    if f is None:
        return
    with contextlib.suppress(OSError):
        if os.path.samestat(os.fstat(f.fileno()), os.stat(folder / LOCK_FILE)):
            os.unlink(folder / LOCK_FILE)
    with contextlib.suppress(OSError):  # called at exit: never a traceback after the work
        f.close()


def check_unlocked(path: str | os.PathLike) -> None:
    """Refuse `path` while another process holds its lock; takes and leaves nothing. (A shared
    lock for the look: several processes of one run may look at once.)"""
    folder = Path(path)
    if fcntl is None or not (folder / LOCK_FILE).is_file() or _holds(folder.resolve()):
        return
    try:
        f = open(folder / LOCK_FILE, encoding="utf-8")  # noqa: SIM115 (closed below)
    except FileNotFoundError:  # removed by its holder since the look above: nobody holds it
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BertkitError(_locked_message(folder, f.read().strip())) from None
        fcntl.flock(f, fcntl.LOCK_UN)


def _holds(folder: Path) -> bool:
    """Whether this process holds `folder`'s lock, on the lock file now there (a folder deleted
    and made again since has a new one)."""
    f = _held.get(folder)
    if f is None:
        return False
    try:
        if os.path.samestat(os.fstat(f.fileno()), os.stat(folder / LOCK_FILE)):
            return True
    except OSError:
        pass
    with contextlib.suppress(OSError):
        _held.pop(folder).close()
    return False


def _locked_message(folder: Path, holder: str) -> str:
    return (f"{folder}: another process is writing this folder ({holder or 'its lock is held'}); "
            "wait for it to end or stop it (under torchrun stop the workers too: "
            "docs/reports/scaling.md), or choose another output folder")


def _forget_locks() -> None:
    """In a forked child (a DataLoader worker): close the inherited lock files. A flock belongs
    to the open file, which a child shares: one outliving a killed parent for seconds would
    otherwise keep the lock from the restarted run."""
    for f in _held.values():
        with contextlib.suppress(OSError):
            f.close()
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks)


@atexit.register
def _release_all() -> None:
    """Remove the lock files this process holds (the kernel drops the locks themselves)."""
    for folder in list(_held):
        release_output_dir(folder)
