"""`bertkit data download NAME`: the official sources of the paper's data, fetched safely.

Every URL lives in the one table `DATASETS`. A download streams to a temporary file beside its
target (hashing as it goes), is checked against the SHA-256 where the table knows it, and only
then is renamed into place, so a killed download never leaves a file that looks whole. Zip
archives are unpacked member by member into a temporary folder first (refusing members that
would land outside it) and moved into place when complete. A finished data set gets a
`.complete` marker; downloading it again is a no-op.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.io import atomic_path, atomic_write_text, progress_bar

log = logging.getLogger(__name__)

COMPLETE = ".complete"
_CHUNK = 1 << 16
_GLUE = "https://dl.fbaipublicfiles.com/glue/data"
_SQUAD = "https://rajpurkar.github.io/SQuAD-explorer/dataset"
_CONLL = ("https://raw.githubusercontent.com/davidsbatista/NER-datasets/"
          "dcb6c7439a7de43abc2448bad5b1d81a47f26c0d/CONLL2003")
_SWAG = "https://raw.githubusercontent.com/rowanz/swagaf/master/data"
_WIKITEXT = "https://wikitext.smerity.com"


@dataclass(frozen=True)
class RemoteFile:
    """One file of a data set: where it is, where it goes, and (when known) its SHA-256."""

    url: str
    path: str  # relative to the data set's folder
    sha256: str | None = None
    unpack: bool = False  # a zip archive: extract its members into the data set's folder


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    files: tuple[RemoteFile, ...]


def _glue(task: str, archive: str | None = None) -> Dataset:
    # The archives hold a folder named after the task (SST-2/train.tsv ...), the layout that
    # `bertkit finetune --data DIR/glue/SST-2` and download_glue_data.py use.
    return Dataset(f"glue-{task.lower()}", f"GLUE {task} (train/dev/test TSV)",
                   (RemoteFile(f"{_GLUE}/{archive or task}.zip", f"{task}.zip", unpack=True),))


# Checksums are given where a byte-identical copy was verified (../shared/data/*/SOURCE.md);
# the others are checked for completeness only (Content-Length).
DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset("wikitext-103", "WikiText-103 raw (Merity et al. 2016), pre-training text",
            (RemoteFile(f"{_WIKITEXT}/wikitext-103-raw-v1.zip", "wikitext-103-raw-v1.zip",
                        unpack=True),)),
    Dataset("wikitext-2", "WikiText-2 raw, a small pre-training / LM-evaluation text",
            (RemoteFile(f"{_WIKITEXT}/wikitext-2-raw-v1.zip", "wikitext-2-raw-v1.zip",
                        unpack=True),)),
    *(_glue(t) for t in ("CoLA", "SST-2", "MRPC", "STS-B", "MNLI", "QNLI", "RTE", "WNLI")),
    _glue("QQP", "QQP-clean"),
    Dataset("squad1", "SQuAD v1.1 train + dev (official JSON)", (
        RemoteFile(f"{_SQUAD}/train-v1.1.json", "train-v1.1.json"),
        RemoteFile(f"{_SQUAD}/dev-v1.1.json", "dev-v1.1.json",
                   "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"))),
    Dataset("squad2", "SQuAD v2.0 train + dev (official JSON)", (
        RemoteFile(f"{_SQUAD}/train-v2.0.json", "train-v2.0.json"),
        RemoteFile(f"{_SQUAD}/dev-v2.0.json", "dev-v2.0.json"))),
    Dataset("conll2003", "CoNLL-2003 English NER, IOB2 (mirror: davidsbatista/NER-datasets)", (
        RemoteFile(f"{_CONLL}/train.txt", "train.txt",
                   "c99b26852dabf57ca9d30a0e892b84544cc8962003151e14a71077c55dc66db5"),
        RemoteFile(f"{_CONLL}/valid.txt", "valid.txt",
                   "f1f6469322876887de1d04acd43c59b02f59d5b02acf42c027132fa1bf349cb2"),
        RemoteFile(f"{_CONLL}/test.txt", "test.txt",
                   "82e0c72d262f86ad3e78b15c5d980bbf87cb205aa4bf6d2d97643f463f8d7ff7"))),
    Dataset("swag", "SWAG train / val / test CSV (rowanz/swagaf)", tuple(
        RemoteFile(f"{_SWAG}/{split}.csv", f"{split}.csv") for split in ("train", "val", "test"))),
)}


def fetch(url: str, dest: str | os.PathLike, sha256: str | None = None, progress: bool = True,
          timeout: float = 60.0) -> Path:
    """Stream `url` to `dest` atomically; verify the SHA-256 when given. Returns `dest`."""
    dest = Path(dest)
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, atomic_path(dest) as tmp:
            total = response.headers.get("Content-Length")
            expected = int(total) if total and total.isdigit() else None
            received = _copy(response, tmp, digest, expected, dest.name, progress)
            if expected is not None and received != expected:
                raise BertkitError(f"{url}: connection closed after {received} of {expected} bytes")
            _check_digest(url, digest.hexdigest(), sha256)
    except urllib.error.HTTPError as err:
        raise BertkitError(f"{url}: HTTP {err.code} {err.reason}") from err
    except http.client.IncompleteRead as err:
        raise BertkitError(f"{url}: connection closed early ({len(err.partial)} bytes of the "
                           "last block); run the download again") from err
    except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
        reason = getattr(err, "reason", err)
        raise BertkitError(f"{url}: cannot download ({reason}); check the network or fetch the "
                           f"file by hand into {dest}") from err
    return dest


def _copy(response, tmp: Path, digest, total: int | None, label: str, progress: bool) -> int:
    received = 0
    with open(tmp, "wb") as out, progress_bar(total=total, unit="B", unit_scale=True, desc=label,
                                      disable=not progress, mininterval=0.5) as bar:
        while chunk := response.read(_CHUNK):
            out.write(chunk)
            digest.update(chunk)
            received += len(chunk)
            bar.update(len(chunk))
    return received


def _check_digest(what: str, actual: str, expected: str | None) -> None:
    if expected is not None and actual != expected.lower():
        raise BertkitError(f"{what}: SHA-256 mismatch (got {actual}, expected {expected}); "
                           "the file was not kept")


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def unpack_zip(archive: str | os.PathLike, dest_dir: str | os.PathLike) -> list[Path]:
    """Extract a zip into `dest_dir` (via a temporary folder beside it); returns the top-level
    entries created. Members with absolute paths or `..` are refused (no zip-slip)."""
    archive, dest_dir = Path(archive), Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest_dir))
    try:
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                parts = Path(member).parts
                if Path(member).is_absolute() or ".." in parts:
                    raise BertkitError(f"{archive}: member {member!r} points outside the archive")
            zf.extractall(staging)
        tops = []
        for entry in sorted(staging.iterdir()):
            target = dest_dir / entry.name
            if target.exists():
                shutil.rmtree(target) if target.is_dir() else target.unlink()
            os.replace(entry, target)
            tops.append(target)
        return tops
    except zipfile.BadZipFile as err:
        raise BertkitError(f"{archive}: not a valid zip archive ({err})") from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def download_dataset(dataset: Dataset, root: str | os.PathLike, progress: bool = True,
                     force: bool = False) -> Path:
    """Fetch (and unpack) every file of `dataset` into `root/NAME`; returns that folder."""
    folder = Path(root) / dataset.name
    marker = folder / COMPLETE
    if marker.is_file() and not force:
        log.info("%s: already downloaded (%s)", dataset.name, folder)
        return folder
    for remote in dataset.files:
        target = folder / remote.path
        if not target.is_file() or force or (remote.sha256 and sha256_of(target) != remote.sha256):
            fetch(remote.url, target, remote.sha256, progress)
        if remote.unpack:
            tops = unpack_zip(target, folder)
            log.info("%s: unpacked %s", target, ", ".join(p.name for p in tops))
            target.unlink()
    atomic_write_text(marker, json.dumps({"name": dataset.name,
                                          "files": [f.url for f in dataset.files]}) + "\n")
    log.info("%s: ready in %s", dataset.name, folder)
    return folder


def resolve(names: Sequence[str]) -> list[Dataset]:
    """The table entries for `names` ("glue" = every GLUE task); unknown names are refused."""
    chosen: list[Dataset] = []
    for name in names:
        if name == "glue":
            chosen += [d for key, d in DATASETS.items() if key.startswith("glue-")]
        elif name in DATASETS:
            chosen.append(DATASETS[name])
        else:
            raise BertkitError(f"unknown data set {name!r}; choose from glue, "
                               f"{', '.join(DATASETS)}")
    return chosen
