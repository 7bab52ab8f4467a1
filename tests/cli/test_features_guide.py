"""docs/guides/features.md runs as written: its CSV block is written to the file it names, each
`$ ` line of its console blocks runs in bash (with `my-bert` a tiny model), then its Python
blocks run in that folder (the pandas one where pandas is installed)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.model import BertModel
from bertkit.tokenization import BertTokenizer
from tests.helpers import missing
from tests.inference.test_encoder import VOCAB

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guides" / "features.md"
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)


def blocks(kind: str) -> list[tuple[str, str]]:
    """(info after the language, body) of the guide's blocks of `kind`."""
    return [(info.strip(), body) for lang, info, body in BLOCK.findall(GUIDE.read_text())
            if lang == kind]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    folder = tmp_path_factory.mktemp("guide")
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=len(VOCAB), max_position_embeddings=32)
    BertModel(config).save_pretrained(folder / "my-bert")
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}).save_pretrained(folder / "my-bert")
    for name, body in blocks("csv"):
        (folder / name).write_text(body, encoding="utf-8")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    commands = [line[2:] for _, body in blocks("console") for line in body.splitlines()
                if line.startswith("$ ")]
    assert len(commands) >= 2
    for command in commands:
        proc = subprocess.run(["bash", "-c", command + " --no-progress"], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (command, proc.stderr)
    return folder


def run_python(folder: Path, code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_commands_write_the_tables_they_describe(ran):
    assert (ran / "features.parquet").is_file() and (ran / "features.parquet.json").is_file()
    header = (ran / "features.csv").read_text().splitlines()[0].split(",")
    assert header[:2] == ["review_id", "e0"] and len(header) == 1 + 128


def python_block(marker: str) -> str:
    (code,) = [body for _, body in blocks("python") if marker in body]
    return code


def test_reading_with_pyarrow(ran):
    code = python_block("import pyarrow.parquet")
    out = run_python(ran, code)
    assert out.strip() == "['r1', 'r2', 'r3'] (3, 128) mean batch-invariant"


def test_reading_with_pandas(ran):
    assert run_python(ran, python_block("import pandas")).strip() == "(3, 128)"


def test_scikit_learn_block(ran):
    """The frozen pipeline and the fine-tuned classifier, as the guide shows them."""
    out = run_python(ran, python_block("bertkit.sklearn")).splitlines()
    assert out[-2:] == ["(1, 2)", "['neg', 'pos'] (1,)"]
    assert (ran / "runs" / "sklearn").is_dir()


def test_r_block(ran):
    """Base R reads the CSV feature table and joins it to labels on the id."""
    if shutil.which("Rscript") is None:
        missing("Rscript is not installed (Debian: r-base-core; `make setup` installs it)")
    (code,) = [body for _, body in blocks("r") if "read.csv" in body]
    proc = subprocess.run(["Rscript", "-e", code], cwd=ran, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "128", "3"]


def test_r_reticulate_block(ran):
    """R calls bertkit's embedder through reticulate (this test's Python, as RETICULATE_PYTHON)
    and gets a numeric matrix, one row a text, that lm takes."""
    if shutil.which("Rscript") is None:
        missing("Rscript is not installed (Debian: r-base-core; `make setup` installs it)")
    check = subprocess.run(["Rscript", "-e", "library(reticulate)"], capture_output=True, text=True)
    if check.returncode != 0:
        missing("R's reticulate is not installed (Debian: r-cran-reticulate; `make setup` "
                "installs it)")
    (code,) = [body for _, body in blocks("r") if "reticulate" in body]
    env = {**os.environ, "RETICULATE_PYTHON": sys.executable}
    proc = subprocess.run(["Rscript", "-e", code], cwd=ran, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["matrix", "4", "128", "3"]
