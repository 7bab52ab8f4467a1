"""bertkit as a user installs it: the wheel built from the checkout, installed into a fresh
virtual environment, runs from outside the checkout; docs/guides/install.md runs as written.

No test downloads anything. A fresh venv borrows the heavy dependencies (torch, numpy, ...) from
the environment running the suite, through a `.pth` file naming its site-packages: pip then finds
them installed (`PIP_NO_INDEX=1`: it never looks at an index), and bertkit itself comes from the
wheel, not from the checkout (the borrowed folder's own `.pth` files, among them the editable
install's, are not read: only a venv's own site-packages are). The checkout is copied first, so
that the build writes nothing into it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import bertkit

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "guides" / "install.md"
TIMEOUT = 300
pytestmark = pytest.mark.slow

# The guide's commands that need the network, each with why it cannot run here.
NOT_RUN = {
    'pip install "bertkit @ git+https://github.com/OWNER/bertkit.git@v0.1.0"':
        "pip clones the repository from the network",
    'pip install "bertkit[serve] @ git+https://github.com/OWNER/bertkit.git@v0.1.0"':
        "pip clones the repository from the network",
    "bertkit data download demo":
        "fetches from the internet; tests/data/test_download_demo.py runs it against loopback",
    "wget -q -i demo-urls.txt -P fetched": "fetches from the internet",
    "bertkit data download demo --from fetched":
        "needs the real files that wget fetches; --from runs on loopback fixtures in "
        "tests/data/test_download_demo.py",
}


def checkout_copy(dest: Path) -> Path:
    """What a build reads from the checkout, copied to `dest` (caches and build outputs left)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "src", dest / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    return dest


def borrow_dependencies(venv: str) -> str:
    """The shell commands that make `venv` (made with --without-pip) see this environment's
    packages, pip among them, and give it a `pip` command."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    pth = shlex.quote(f"{venv}/lib/{version}/site-packages/borrowed.pth")
    shim = '#!/bin/sh\nexec "$(dirname "$0")/python" -m pip "$@"\n'
    return (f"echo {shlex.quote(sysconfig.get_paths()['purelib'])} > {pth} && printf "
            f"{shlex.quote(shim)} > {venv}/bin/pip && chmod +x {venv}/bin/pip")


def offline_env(tmp_path: Path, bin_dir: Path) -> dict[str, str]:
    """An environment whose PATH starts at `bin_dir` and holds no other Python environment."""
    outer = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != outer]
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "BERTKIT_DATA")}
    return {**env, "PATH": os.pathsep.join([str(bin_dir), *path]), "PIP_NO_INDEX": "1",
            "PIP_NO_BUILD_ISOLATION": "0",  # pip's spelling of --no-build-isolation
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
            "HF_HUB_OFFLINE": "1"}


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def the_suites_bertkit_is_untouched() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    assert list(site.glob("bertkit-*.dist-info")), "the suite's own bertkit was uninstalled"


def test_the_wheel_installs_into_a_fresh_venv_and_runs_outside_the_checkout(tmp_path):
    src = checkout_copy(tmp_path / "bertkit")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", ".", "-w", str(tmp_path / "dist")], src)
    (wheel,) = (tmp_path / "dist").glob("bertkit-*.whl")
    assert wheel.name.startswith(f"bertkit-{bertkit.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    static = REPO / "src" / "bertkit" / "serve" / "static"
    for page in static.rglob("*"):
        if page.is_file():
            assert f"bertkit/serve/static/{page.relative_to(static).as_posix()}" in names
    assert "bertkit/data/gutenberg_books.tsv" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    run(["bash", "-c", borrow_dependencies(str(venv))], tmp_path)
    env = offline_env(tmp_path, venv / "bin")
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        tmp_path, env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run(["python", "-c", "import bertkit; print(bertkit.__file__)"], elsewhere, env)
    assert Path(where.strip()).is_relative_to(venv), where  # from the wheel, not the checkout
    assert run(["bertkit", "--version"], elsewhere, env).strip() == f"bertkit {bertkit.__version__}"
    assert "demo" in run(["bertkit", "--help"], elsewhere, env)
    # a real command reading the wheel's package data (the demo's book table)
    urls = run(["bertkit", "data", "list", "demo", "--urls"], elsewhere, env).split()
    assert len(urls) == 51 and all(u.startswith("https://") for u in urls)
    the_suites_bertkit_is_untouched()


def guide_commands() -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), re.S | re.M)
    return [line.strip() for block in blocks for line in block.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_the_install_guide_runs_as_written(tmp_path):
    """The page's commands in order, as one shell session (so that `. .venv/bin/activate` holds
    for the commands after it), in a copy of the checkout. The venv it makes is given the
    suite's packages in place of the downloads (`borrow_dependencies`); the commands in NOT_RUN
    need the network and are only checked to be on the page."""
    commands = guide_commands()
    for command in NOT_RUN:
        assert command in commands, f"NOT_RUN names a command the guide no longer shows: {command}"
    ran = [c for c in commands if c not in NOT_RUN]
    assert ran[0] == "python3 -m venv .venv" and len(ran) >= 8, ran
    src = checkout_copy(tmp_path / "bertkit")
    python3 = tmp_path / "bin" / "python3"
    python3.parent.mkdir()
    python3.symlink_to(sys.executable)
    script = ["set -euo pipefail"]
    for command in ran:
        if command == "python3 -m venv .venv":
            command = f"python3 -m venv --without-pip .venv && {borrow_dependencies('.venv')}"
        script.append(f"echo {shlex.quote('$ ' + command)}\n{command}")
    out = run(["bash", "-c", "\n".join(script)], src, offline_env(tmp_path, python3.parent))
    assert f"bertkit {bertkit.__version__}" in out
    assert len((src / "demo-urls.txt").read_text().split()) == 51
    assert (src / ".venv" / "bin" / "bertkit").is_file()
    the_suites_bertkit_is_untouched()
