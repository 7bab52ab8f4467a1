"""`bertkit data download NAME`: the official sources of the paper's data, fetched safely.

Every URL lives in the one table `DATASETS`. A download streams to a temporary file beside its
target (hashing as it goes), is checked against the SHA-256 where the table knows it, and only
then is renamed into place, so a killed download never leaves a file that looks whole. Zip
archives are unpacked member by member into a temporary folder first (refusing members that
would land outside it) and moved into place when complete. A finished data set gets a
`.complete` marker; downloading it again is a no-op.

`demo` is what `bertkit demo` reads: the book corpus (`books/`, 50 Project Gutenberg books from
their GITenberg mirrors, pinned by commit, each source checked by its size and Git blob id and
its stripped text by SHA-256, so that it is byte-identical to ../shared/data/books) and SST-2
(`glue-sst-2/`). Where there is no network, one line says which files to fetch by hand and how
`--from FOLDER` checks and places them.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.gutenberg import RAW_GITHUB, Book, git_blob_id, load_books, strip_boilerplate
from bertkit.errors import BertkitError
from bertkit.io import atomic_path, atomic_write_text, held_output_dir, progress_bar

log = logging.getLogger(__name__)

COMPLETE = ".complete"
INCOMPLETE = ".incomplete"  # a book corpus being fetched: the demo refuses to train on part of it
DEFAULT_DEST = Path("data")  # where `bertkit data download` writes, and where the demo looks last
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


class Unreachable(BertkitError):
    """The source could not be reached at all (no network, no route, refused, timed out)."""

    def __init__(self, message: str, reason: object) -> None:
        super().__init__(message)
        self.reason = reason


@contextlib.contextmanager
def _network_errors(url: str, dest: Path) -> Iterator[None]:
    """The ways a download fails, each as one line naming `url`."""
    try:
        yield
    except urllib.error.HTTPError as err:
        raise BertkitError(f"{url}: HTTP {err.code} {err.reason}") from err
    except http.client.IncompleteRead as err:
        raise BertkitError(f"{url}: connection closed early ({len(err.partial)} bytes of the "
                           "last block); run the download again") from err
    except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
        reason = getattr(err, "reason", err)
        raise Unreachable(f"{url}: cannot download ({reason}); check the network or fetch the "
                          f"file by hand into {dest}", reason) from err


def fetch(url: str, dest: str | os.PathLike, sha256: str | None = None, progress: bool = True,
          timeout: float = 60.0) -> Path:
    """Stream `url` to `dest` atomically; verify the SHA-256 when given. Returns `dest`."""
    dest = Path(dest)
    digest = hashlib.sha256()
    with _network_errors(url, dest):
        with urllib.request.urlopen(url, timeout=timeout) as response, atomic_path(dest) as tmp:
            total = response.headers.get("Content-Length")
            expected = int(total) if total and total.isdigit() else None
            received = _copy(response, tmp, digest, expected, dest.name, progress)
            if expected is not None and received != expected:
                raise BertkitError(f"{url}: connection closed after {received} of {expected} bytes")
            _check_digest(url, digest.hexdigest(), sha256)
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
                     force: bool = False, source_dir: str | os.PathLike | None = None) -> Path:
    """Fetch (and unpack) every file of `dataset` into `root/NAME`; returns that folder. With
    `source_dir`, each file is read from there (named as the last part of its URL) instead."""
    folder = Path(root) / dataset.name
    marker = folder / COMPLETE
    if marker.is_file() and not force:
        log.info("%s: already downloaded (%s)", dataset.name, folder)
        return folder
    # one download into a folder at a time: two would unpack over each other's files
    with held_output_dir(folder):
        _download_into(dataset, folder, marker, progress, force, source_dir)
    return folder


def _download_into(dataset: Dataset, folder: Path, marker: Path, progress: bool, force: bool,
                   source_dir: str | os.PathLike | None) -> None:
    for remote in dataset.files:
        target = folder / remote.path
        if not target.is_file() or force or (remote.sha256 and sha256_of(target) != remote.sha256):
            fetch(_source_url(remote.url, source_dir), target, remote.sha256, progress)
        if remote.unpack:
            tops = unpack_zip(target, folder)
            log.info("%s: unpacked %s", target, ", ".join(p.name for p in tops))
            target.unlink()
    atomic_write_text(marker, json.dumps({"name": dataset.name,
                                          "files": [f.url for f in dataset.files]}) + "\n")
    log.info("%s: ready in %s", dataset.name, folder)


def _source_url(url: str, source_dir: str | os.PathLike | None) -> str:
    """`url`, or the file of the same name in `source_dir` (fetched by hand) as a file: URL."""
    if source_dir is None:
        return url
    local = Path(source_dir).resolve() / url.rsplit("/", 1)[-1]
    if not local.is_file():
        raise BertkitError(f"{local}: not found; fetch {url} into {source_dir}")
    return local.as_uri()


# --- the book corpus and the demo's data ------------------------------------------------------


@dataclass(frozen=True)
class BookCorpus:
    """Project Gutenberg books stripped of their boilerplate, one file each in `root/books`."""

    books: tuple[Book, ...]
    base_url: str = RAW_GITHUB  # a mirror laid out as REPO/COMMIT/PATH
    name: str = "books"
    description: str = ("the demo's book corpus: 50 Project Gutenberg books (GITenberg mirrors "
                        "pinned by commit, boilerplate stripped as in ../shared/data/books)")

    def urls(self) -> list[str]:
        return [book.url(self.base_url) for book in self.books]


def download_books(corpus: BookCorpus, root: str | os.PathLike, progress: bool = True,
                   force: bool = False, source_dir: str | os.PathLike | None = None,
                   timeout: float = 60.0) -> Path:
    """Fetch, check and strip every book of `corpus` into `root/books`; returns that folder.

    A book already there with the recorded SHA-256 is kept; one that differs is refused (it
    is not ours to replace) unless `force`. A source that is not the recorded file, or a
    stripped text that is not the recorded text, is refused before anything is written."""
    folder = Path(root) / corpus.name
    marker, unfinished = folder / COMPLETE, folder / INCOMPLETE
    if marker.is_file() and not force:
        log.info("%s: already downloaded (%s)", corpus.name, folder)
        return folder
    with progress_bar(corpus.books, desc=corpus.name, unit="book", disable=not progress) as books:
        for book in books:
            target = folder / book.file
            if target.is_file() and sha256_of(target) == book.sha256:
                continue
            if target.is_file() and not force:
                raise BertkitError(f"{target}: exists and is not {book.file} as recorded (SHA-256 "
                                   "differs); move it away, or pass --force to replace it")
            url = _source_url(book.url(corpus.base_url), source_dir)
            text = _checked_book(book, url, _get(url, target, timeout))
            folder.mkdir(parents=True, exist_ok=True)
            unfinished.touch()  # from the first book written until the last
            atomic_write_text(target, text)
    atomic_write_text(marker, json.dumps({"name": corpus.name, "files": corpus.urls()}) + "\n")
    unfinished.unlink(missing_ok=True)
    log.info("%s: ready in %s", corpus.name, folder)
    return folder


def _get(url: str, dest: Path, timeout: float) -> bytes:
    """The whole body of `url` (a book: at most a few MB, held in memory so that nothing is
    written before it is checked)."""
    with _network_errors(url, dest), urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def _checked_book(book: Book, url: str, raw: bytes) -> str:
    blob = git_blob_id(raw)
    if len(raw) != book.source_bytes or not blob.startswith(book.source_blob):
        raise BertkitError(f"{url}: checksum mismatch (got {len(raw)} bytes, Git blob {blob[:12]}; "
                           f"expected {book.source_bytes} bytes, blob {book.source_blob}); "
                           "nothing was kept")
    text = strip_boilerplate(raw, book.encoding, url)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if digest != book.sha256:
        raise BertkitError(f"{url}: checksum mismatch of the stripped text (SHA-256 {digest}, "
                           f"expected {book.sha256}); nothing was kept")
    return text


@dataclass(frozen=True)
class DemoData:
    """What `bertkit demo` reads: the book corpus and SST-2."""

    books: BookCorpus
    sst2: Dataset

    def urls(self) -> list[str]:
        return self.books.urls() + [f.url for f in self.sst2.files]


def demo_data() -> DemoData:
    return DemoData(BookCorpus(load_books()), DATASETS["glue-sst-2"])


def offline_line(demo: DemoData, root: str | os.PathLike, reason: object) -> str:
    """What to fetch by hand, and how to place it, when the demo's sources cannot be reached."""
    sst2 = ", ".join(f.url for f in demo.sst2.files)
    return (f"cannot reach the demo's data ({reason}); on a machine with a network, fetch the "
            f"{len(demo.urls())} files `bertkit data list demo --urls` prints ({sst2} and the "
            f"books under {demo.books.base_url}/GITenberg/) into one folder, then run `bertkit "
            f"data download demo --from FOLDER --dest {root}` here: it checks them and writes "
            f"{Path(root) / demo.books.name} and {Path(root) / demo.sst2.name}")


def demo_missing(root: str | os.PathLike, corpus_given: bool = False) -> str | None:
    """Why `root` cannot feed `bertkit demo` (no books, an unfinished download), or None."""
    books = Path(root) / "books"
    if (books / INCOMPLETE).exists():
        return (f"{books}: its download did not finish; run `bertkit data download demo "
                f"--dest {root}` again")
    if not corpus_given and not any(books.glob("*.txt")):
        return (f"{books}: no books to pre-train on; run `bertkit data download demo --dest "
                f"{root}` (the demo's books and SST-2) or pass --corpus FILE...")
    return None


def download(names: Sequence[str], root: str | os.PathLike = DEFAULT_DEST, progress: bool = True,
             force: bool = False, source_dir: str | os.PathLike | None = None,
             demo: DemoData | None = None) -> list[tuple[str, Path]]:
    """Fetch the data sets `names` (see `resolve`) into `root`; returns (name, folder) pairs.
    For `demo`, a source that cannot be reached ends with `offline_line`."""
    demo = demo or demo_data()
    done = []
    try:
        for item in resolve(names, demo):
            if isinstance(item, BookCorpus):
                folder = download_books(item, root, progress, force, source_dir)
            else:
                folder = download_dataset(item, root, progress, force, source_dir)
            done.append((item.name, folder))
    except Unreachable as err:
        if "demo" in names:
            raise BertkitError(offline_line(demo, root, err.reason)) from err
        raise
    return done


def resolve(names: Sequence[str], demo: DemoData | None = None) -> list[Dataset | BookCorpus]:
    """The table entries for `names` ("glue" = every GLUE task, "demo" = the book corpus and
    SST-2, "books" = the book corpus); unknown names are refused."""
    chosen: list[Dataset | BookCorpus] = []
    for name in names:
        if name == "glue":
            chosen += [d for key, d in DATASETS.items() if key.startswith("glue-")]
        elif name in ("demo", "books"):
            demo = demo or demo_data()
            chosen += [demo.books, demo.sst2] if name == "demo" else [demo.books]
        elif name in DATASETS:
            chosen.append(DATASETS[name])
        else:
            raise BertkitError(f"unknown data set {name!r}; choose from demo, books, glue, "
                               f"{', '.join(DATASETS)}")
    return chosen
