"""Running a guide's commands as written (tests/docs/test_guide_*.py, the quickstart's).

Every ```bash block of a page runs (and every `$ ` line of a ```console block; a block whose info
string names a file, such as ```csv reviews.csv, is written to that file first), in the page's
order, in a fresh folder laid out like a clone
(`../shared/data` beside it), each command as `bash -c COMMAND` with the interpreter's bin folder
first on PATH. A plain `bertkit ...` command (no pipe, redirection or substitution) runs in this
process through `bertkit.cli.main.main`, its variables and globs expanded as bash would: the
same code, without a Python start-up of several seconds per command. A command is a line with
its `\\` continuations joined, or a line with a heredoc and the lines up to its terminator;
comments and blank lines are dropped. A plain assignment (`M=$(...)`) is evaluated once and
exported to the commands after it. The data are small copies of the real files (the first rows
of each GLUE set, the first articles of SQuAD, the first 40 KB of three books), made in a
temporary folder, never in the repository.

Only sizes are scaled down (budgets, steps, batch sizes, examples), by the (pattern, replacement)
pairs a test passes: a command no pair matches runs exactly as written. `bertkit serve` is started
in the background on a free port, the later commands' `localhost:8080` pointed at it, and it is
stopped when the page ends (or at the next `bertkit serve`).
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import head_lines

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300
ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=(\$\(.*\)|\S*)")  # NAME=$(...) or NAME=WORD alone
HEREDOC = re.compile(r"<<-?\s*'?\"?(\w+)'?\"?")
SERVE = re.compile(r"^bertkit serve\b")
PORT = 8080
SHELL_ONLY = re.compile(r"[|;&<>`]|\$\(")  # what only bash can run


def page_items(markdown: str) -> list[tuple[str, str]]:
    """The page's runnable parts, in order: ("command", COMMAND) from ```bash blocks (every
    command) and ```console blocks (the lines after a `$ ` prompt; the others are output), and
    ("file", NAME) + its body from a block whose info string names a file (```csv reviews.csv)."""
    items: list[tuple[str, str]] = []
    for info, body in re.findall(r"^```([^\n]*)\n(.*?)^```", markdown, flags=re.S | re.M):
        words = info.split()
        if words[:1] == ["bash"]:
            items += [("command", c) for c in block_commands(body)]
        elif words[:1] == ["console"]:
            prompts = re.sub(r"\\\n\s*", " ", body).splitlines()
            items += [("command", line[2:].strip()) for line in prompts if line.startswith("$ ")]
        elif len(words) == 2:
            items.append(("file", f"{words[1]}\n{body}"))
    return items


def bash_blocks(markdown: str) -> list[str]:
    """The bodies of the page's ```bash blocks, in order."""
    return re.findall(r"^```bash\n(.*?)^```", markdown, flags=re.S | re.M)


def block_commands(block: str) -> list[str]:
    """One block's commands: continuations joined, heredocs kept whole, comments dropped."""
    commands: list[str] = []
    lines = re.sub(r"\\\n\s*", " ", block).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        heredoc = HEREDOC.search(line)
        if heredoc:
            body = [line]
            while i < len(lines) and lines[i].strip() != heredoc.group(1):
                body.append(lines[i])
                i += 1
            body.append(heredoc.group(1))
            i += 1
            line = "\n".join(body)
        commands.append(line)
    return commands


def page_commands(page: str | Path) -> list[str]:
    """Every command of a Markdown page (a path relative to the repository, or a Path)."""
    text = (REPO / page).read_text(encoding="utf-8")
    return [body for kind, body in page_items(text) if kind == "command"]


def scaled(command: str, scaling: Sequence[tuple[str, str]]) -> str:
    for pattern, replacement in scaling:
        command = re.sub(pattern, replacement, command, flags=re.M)
    return command


def small_data(shared: Path, root: Path) -> Path:
    """root/shared/data: the first rows, articles and kilobytes of the real data sets."""
    data = root / "shared" / "data"
    for book in ("carroll-alice.txt", "paine-common_sense.txt", "conrad-heart_of_darkness.txt"):
        (data / "books").mkdir(parents=True, exist_ok=True)
        raw = (shared / "books" / book).read_bytes()[:40_000]
        (data / "books" / book).write_bytes(raw)
    (data / "wikitext-2").mkdir()
    raw = (shared / "wikitext-2" / "wiki.test.raw").read_bytes()[:40_000]
    (data / "wikitext-2" / "wiki.test.raw").write_bytes(raw)
    for task, rows in (("SST-2", 48), ("MRPC", 40), ("RTE", 40)):
        for split in ("train", "dev"):
            head_lines(shared / "glue" / task / f"{split}.tsv", data / "glue" / task / f"{split}.tsv",
                       rows)
    squad = json.loads((shared / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    articles = [{**a, "paragraphs": a["paragraphs"][:3]} for a in squad["data"][:4]]
    (data / "squad").mkdir(parents=True)
    (data / "squad" / "dev-v1.1.json").write_text(json.dumps({**squad, "data": articles}),
                                                  encoding="utf-8")
    return data


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Session:
    """A clone-like folder, the environment its commands share, and a running server if any."""

    clone: Path
    env: dict[str, str]
    server: subprocess.Popen | None = None
    port: int = 0
    ran: list[str] = field(default_factory=list)

    def run(self, command: str, shown: str) -> None:
        if self.port:
            command = re.sub(rf"(localhost|127\.0\.0\.1):{PORT}\b", rf"\1:{self.port}", command)
        if SERVE.match(command):
            self.start_server(command)
        elif ASSIGNMENT.fullmatch(command):
            name = command.split("=", 1)[0]
            self.env[name] = self.bash(f"{command} && printf %s \"${name}\"", shown).strip()
        elif command.startswith("bertkit ") and not SHELL_ONLY.search(command):
            self.in_process(command, shown)
        else:
            self.bash(command, shown)
        self.ran.append(command)

    def argv(self, command: str) -> list[str]:
        """bash's word expansion of a simple command: $NAME / ${NAME}, then sorted globs."""
        words = []
        for word in shlex.split(command, comments=True)[1:]:
            word = re.sub(r"\$\{?(\w+)\}?", lambda m: self.env.get(m.group(1), ""), word)
            matches = sorted(glob.glob(word, root_dir=self.clone)) if re.search(r"[*?[]", word) \
                else []
            words += matches or [word]
        return words

    def in_process(self, command: str, shown: str) -> None:
        import torch

        from bertkit.cli.main import main

        out, err, threads, cwd = io.StringIO(), io.StringIO(), torch.get_num_threads(), os.getcwd()
        try:
            os.chdir(self.clone)
            torch.set_num_threads(1)  # tiny inputs gain nothing from threads (conftest.one_thread)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(self.argv(command))
                except SystemExit as done:
                    code = done.code
        finally:
            os.chdir(cwd)
            torch.set_num_threads(threads)
        assert not code, (f"command failed:\n$ {shown}\n(ran in process: {command})\nexit "
                          f"{code}\n{out.getvalue()[-1500:]}\n{err.getvalue()[-3000:]}")

    def bash(self, command: str, shown: str) -> str:
        proc = subprocess.run(["bash", "-c", command], cwd=self.clone, env=self.env,
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, (f"command failed:\n$ {shown}\n(ran: {command})\nexit "
                                      f"{proc.returncode}\n{proc.stdout[-1500:]}\n"
                                      f"{proc.stderr[-3000:]}")
        return proc.stdout

    def start_server(self, command: str) -> None:
        """Starts a `bertkit serve` command on a free port and waits for /health."""
        self.stop_server()
        self.port = free_port()
        command = re.sub(r"--port \d+", "", command).split(" #")[0] + f" --port {self.port}"
        self.server = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.clone,
                                       env=self.env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                pytest.fail(f"$ {command}\nexited {self.server.returncode}:\n"
                            f"{self.server.stdout.read()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health",
                                            timeout=2) as r:
                    assert r.status == 200
                    return
            except OSError:
                time.sleep(0.3)
        pytest.fail(f"$ {command}\nno answer on /health within 120 s")

    def stop_server(self) -> None:
        if self.server is None:
            return
        self.server.send_signal(signal.SIGINT)
        try:
            self.server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.server.kill()
        self.server = None


def new_session(shared_data: Path, tmp_path: Path) -> Session:
    """A fresh clone-like folder under tmp_path with small data beside it (`../shared/data`)."""
    small_data(shared_data, tmp_path)
    clone = tmp_path / "bertkit"
    clone.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("BERTKIT_DATA", None)
    assert shutil.which("bertkit", path=env["PATH"])
    return Session(clone, env)


def run_commands(session: Session, commands: Sequence[str | tuple[str, str]],
                 scaling: Sequence[tuple[str, str]] = ()) -> None:
    """Runs `commands` in order in the session's folder, each scaled by `scaling`; an item
    ("file", "NAME\\nBODY") writes the file NAME instead."""
    try:
        for command in commands:
            if isinstance(command, tuple):
                if command[0] == "file":
                    name, body = command[1].split("\n", 1)
                    (session.clone / name).parent.mkdir(parents=True, exist_ok=True)
                    (session.clone / name).write_text(body, encoding="utf-8")
                    continue
                command = command[1]
            session.run(scaled(command, scaling), command)
    finally:
        session.stop_server()


def run_page(page: str, shared_data: Path, tmp_path: Path,
             scaling: Sequence[tuple[str, str]] = (), made: Sequence[str] = (),
             minimum: int = 3) -> Session:
    """Runs every command of `page` (relative to the repository) in a fresh folder and checks
    that the files in `made` exist afterwards; the page must show at least `minimum` commands."""
    items = page_items((REPO / page).read_text(encoding="utf-8"))
    found = sum(kind == "command" for kind, _ in items)
    assert found >= minimum, f"{page}: {found} commands found"
    session = new_session(shared_data, tmp_path)
    run_commands(session, items, scaling)
    for path in made:
        assert (session.clone / path).exists(), f"{page}: {path} was not written"
    return session
