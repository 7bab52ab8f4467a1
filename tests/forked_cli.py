"""`python -m bertkit ARGS` for tests that run many commands, without paying Python's and
torch's start-up for each: one server process imports bertkit's modules once (and runs no torch
operation, so no thread pool exists yet), then forks a child per command. The child is what a
fresh `python -m bertkit` would be from there on: its own process, working folder, stdout and
stderr files, exit code, and `atexit` handlers run at its end (the output-folder locks are
released there). A command that outlives its timeout is killed, as `subprocess.run` would.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

SERVER = r"""
import atexit, json, os, sys, traceback
import numpy, safetensors, tokenizers, torch  # noqa: F401  (the start-up every command pays)
import bertkit.cli.main
for name in ("finetune", "inference", "prepare", "pretrain", "vocab", "model", "distill"):
    __import__(f"bertkit.cli.{name}_cmds")
print("ready", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(request["cwd"])
            # the server's stdin carries the requests: a command reading stdin gets nothing,
            # as under `subprocess.run` with no input
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            sys.argv = ["bertkit", *request["argv"]]
            code = bertkit.cli.main.main(request["argv"])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code or 0)
    print(pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


class ForkedCli:
    """One server; `run` may be called from one thread at a time (keep one per thread)."""

    def __init__(self, env: dict[str, str]):
        self._proc = subprocess.Popen([sys.executable, "-c", SERVER], env=env, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._lock = threading.Lock()
        self._pending = b""
        if self._line(120.0) != "ready":
            raise RuntimeError("the forked-CLI server did not start")

    def run(self, argv: list[str], cwd: str | Path | None = None, timeout: float = 120.0
            ) -> subprocess.CompletedProcess:
        """Like `subprocess.run([python, -m, bertkit, *argv], capture_output=True, text=True)`;
        raises subprocess.TimeoutExpired after `timeout` seconds (the command killed)."""
        with self._lock, tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"argv": list(map(str, argv)), "cwd": str(cwd or os.getcwd()),
                       "stdout": str(out), "stderr": str(err)}
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            pid = int(self._line(None))
            try:
                code = int(self._line(timeout))
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                self._line(None)
                raise subprocess.TimeoutExpired(argv, timeout, err.read_text(errors="replace")) from None
            return subprocess.CompletedProcess(argv, code, out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))

    def _line(self, timeout: float | None) -> str:
        """The server's next line, read from its pipe's descriptor (no buffer that `select`
        cannot see); TimeoutError after `timeout` seconds."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._pending:
            if not select.select([fd], [], [], timeout)[0]:
                raise TimeoutError
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("the forked-CLI server stopped")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
