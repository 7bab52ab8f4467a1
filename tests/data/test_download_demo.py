"""`bertkit data download demo` and the demo finding what it fetched: against a local HTTP server
on 127.0.0.1 serving fixture files made here, never the network."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import threading
import zipfile
from functools import partial
from pathlib import Path

import pytest

from bertkit.cli.demo_cmds import demo_data_root
from bertkit.cli.main import main
from bertkit.data import download
from bertkit.data.download import BookCorpus, Dataset, DemoData, RemoteFile
from bertkit.data.gutenberg import Book, load_books, strip_boilerplate
from bertkit.errors import BertkitError
from bertkit.studies.demo.run import DemoConfig, find_inputs

# A Project Gutenberg file as the mirrors hold it: a BOM, CRLF line ends, the header and its
# START marker wrapped onto a second line, a volunteer credit, the closing "End of" line, the
# END marker and the licence after it.
RAW_ONE = ("\ufeffThe Project Gutenberg EBook of One, by Someone\r\n\r\nLicence words.\r\n\r\n"
           "*** START OF THIS PROJECT GUTENBERG EBOOK ONE, A VERY LONG TITLE THAT\r\n"
           "WRAPS ***\r\n\r\n\r\n\r\nProduced by A Volunteer.\r\n\r\n\r\n"
           "CHAPTER I   \r\n\r\nIt was a bright cold day in April.\r\nThe clocks struck.\r\n\r\n\r\n"
           "The end.\r\n\r\nEnd of the Project Gutenberg EBook of One, by Someone\r\n\r\n"
           "*** END OF THIS PROJECT GUTENBERG EBOOK ONE ***\r\n\r\nMore licence.\r\n").encode()
ONE = "CHAPTER I\n\nIt was a bright cold day in April.\nThe clocks struck.\n\n\nThe end.\n"
RAW_TWO = ("*** START OF THE PROJECT GUTENBERG EBOOK TWO ***\n\nThe \u00e6ther, \u00a3 and \u00bd.\n"
           "*** END OF THE PROJECT GUTENBERG EBOOK TWO ***\n").encode("latin-1")
TWO = "The \u00e6ther, \u00a3 and \u00bd.\n"
SST2 = {"SST-2/train.tsv": b"sentence\tlabel\ngood\t1\n", "SST-2/dev.tsv": b"sentence\tlabel\nbad\t0\n"}


def _book(file: str, pg_id: int, path: str, encoding: str, raw: bytes, text: str) -> Book:
    blob = hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest()  # as `git hash-object`
    return Book(file, pg_id, f"GITenberg/Book_{pg_id}", f"{pg_id:040d}", path, encoding, len(raw),
                blob[:12], hashlib.sha256(text.encode()).hexdigest())


BOOKS = (_book("a-one.txt", 1, "1-0.txt", "utf-8", RAW_ONE, ONE),
         _book("b-two.txt", 2, "2-8.txt", "latin-1", RAW_TWO, TWO))


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.requests.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture()
def server(tmp_path):
    """tmp_path/www served on 127.0.0.1 from a thread, laid out as the mirrors are (books as
    REPO/COMMIT/PATH, SST-2.zip); yields (demo data pointing there, www, the requests)."""
    www = tmp_path / "www"
    for book, raw in zip(BOOKS, (RAW_ONE, RAW_TWO)):
        path = www / book.repo / book.commit / book.path
        path.parent.mkdir(parents=True)
        path.write_bytes(raw)
    (www / "SST-2.zip").write_bytes(_zip(SST2))
    log: list[str] = []
    handler = partial(type("H", (_Quiet,), {"requests": log}), directory=str(www))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield _demo(base), www, log
    httpd.shutdown()
    httpd.server_close()


def _demo(base: str, books: tuple[Book, ...] = BOOKS) -> DemoData:
    return DemoData(BookCorpus(books, base_url=base),
                    Dataset("glue-sst-2", "SST-2", (RemoteFile(f"{base}/SST-2.zip", "SST-2.zip",
                                                               unpack=True),)))


def _clone(tmp_path: Path, monkeypatch) -> Path:
    """A working directory like a fresh clone's: no ../shared/data beside it, no $BERTKIT_DATA."""
    clone = tmp_path / "clone"
    clone.mkdir()
    monkeypatch.chdir(clone)
    monkeypatch.delenv("BERTKIT_DATA", raising=False)
    assert not (clone.parent / "shared").exists()
    return clone


def test_the_fetched_corpus_is_stripped_and_where_the_demo_looks(server, tmp_path, monkeypatch):
    demo, _, log = server
    clone = _clone(tmp_path, monkeypatch)
    done = download.download(["demo"], demo=demo, progress=False)  # into ./data, the default
    assert done == [("books", Path("data/books")), ("glue-sst-2", Path("data/glue-sst-2"))]
    books = clone / "data" / "books"
    assert (books / "a-one.txt").read_text(encoding="utf-8") == ONE
    assert (books / "b-two.txt").read_text(encoding="utf-8") == TWO
    assert sorted(p.name for p in books.iterdir()) == [".complete", "a-one.txt", "b-two.txt"]

    root = demo_data_root(None)  # what `bertkit demo` with no --data uses here
    assert root == Path("data")
    corpus, files = find_inputs(DemoConfig(root))
    assert corpus == ["data/books/a-one.txt", "data/books/b-two.txt"]
    assert Path(files["train_file"]).read_bytes() == SST2["SST-2/train.tsv"]

    n = len(log)
    download.download(["demo"], demo=demo, progress=False)
    assert len(log) == n  # complete: nothing fetched again


def test_the_shared_folder_comes_before_the_download_folder(tmp_path, monkeypatch):
    clone = _clone(tmp_path, monkeypatch)
    (clone / "data" / "books").mkdir(parents=True)
    (clone / "data" / "books" / "x.txt").write_text("text\n")
    assert demo_data_root(None) == Path("data")
    (tmp_path / "shared" / "data" / "books").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "books" / "y.txt").write_text("text\n")
    assert demo_data_root(None) == Path("../shared/data")
    assert demo_data_root(clone / "data") == clone / "data"  # --data first


def test_strip_boilerplate_reproduces_the_shared_books_rule():
    assert strip_boilerplate(RAW_ONE) == ONE
    assert strip_boilerplate(RAW_TWO, "latin-1") == TWO
    with pytest.raises(BertkitError, match="one `\\*\\*\\* START"):
        strip_boilerplate(b"no markers here\n", name="x.txt")


@pytest.mark.parametrize("what", ["source", "stripped text"])
def test_a_checksum_mismatch_is_refused_in_one_line_leaving_nothing(server, tmp_path, what):
    demo, www, _ = server
    one = BOOKS[0]
    if what == "source":  # the same size, one byte changed: a corrupt or substituted file
        served = www / one.repo / one.commit / one.path
        served.write_bytes(RAW_ONE.replace(b"April", b"Apric"))
    else:  # the source as recorded, but the text it strips to is not the recorded one
        demo = _demo(demo.books.base_url, (Book(**{**one.__dict__, "sha256": "0" * 64}), BOOKS[1]))
    root = tmp_path / "data"
    with pytest.raises(BertkitError, match="checksum mismatch") as err:
        download.download(["demo"], root, demo=demo, progress=False)
    assert "\n" not in str(err.value) and "nothing was kept" in str(err.value)
    assert not root.exists()


def test_a_book_that_is_not_ours_is_never_replaced(server, tmp_path):
    demo, _, _ = server
    mine = tmp_path / "data" / "books" / "a-one.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("my own notes\n")
    with pytest.raises(BertkitError, match="--force"):
        download.download(["demo"], tmp_path / "data", demo=demo, progress=False)
    assert mine.read_text() == "my own notes\n"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_network_says_in_one_line_what_to_fetch_and_where(tmp_path, monkeypatch):
    offline = _demo(f"http://127.0.0.1:{_closed_port()}")
    root = tmp_path / "data"
    with pytest.raises(BertkitError) as err:
        download.download(["demo"], root, demo=offline, progress=False)
    line = str(err.value)
    assert "\n" not in line and line.startswith("cannot reach the demo's data")
    for needed in (offline.sst2.files[0].url, f"{offline.books.base_url}/GITenberg/",
                   "`bertkit data list demo --urls`", f"--from FOLDER --dest {root}",
                   str(root / "books"), str(root / "glue-sst-2")):
        assert needed in line
    assert not root.exists()

    # ... and the route it names: the files fetched by hand into one folder, read with --from
    by_hand = tmp_path / "fetched"
    by_hand.mkdir()
    (by_hand / "1-0.txt").write_bytes(RAW_ONE)
    (by_hand / "2-8.txt").write_bytes(RAW_TWO)
    (by_hand / "SST-2.zip").write_bytes(_zip(SST2))
    download.download(["demo"], root, demo=offline, progress=False, source_dir=by_hand)
    assert (root / "books" / "a-one.txt").read_text(encoding="utf-8") == ONE
    assert (root / "glue-sst-2" / "SST-2" / "dev.tsv").is_file()


def test_the_demo_without_data_says_to_download_it(tmp_path, monkeypatch, capsys):
    clone = _clone(tmp_path, monkeypatch)
    assert main(["demo"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "`bertkit data download demo`" in err
    (clone / "data" / "books").mkdir(parents=True)
    (clone / "data" / "books" / download.INCOMPLETE).touch()  # a download that was killed
    (clone / "data" / "books" / "a-one.txt").write_text(ONE)
    assert main(["demo"]) == 1
    err = capsys.readouterr().err.strip()
    assert "did not finish" in err and "bertkit data download demo --dest data" in err


def test_cli_lists_the_demo_urls(capsys):
    assert main(["data", "list", "demo", "--urls"]) == 0
    urls = capsys.readouterr().out.split()
    assert len(urls) == 51 and urls[-1] == "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"


def test_the_book_table_pins_every_source(shared_data):
    books = load_books()
    assert len(books) == 50 and len({b.file for b in books}) == 50
    assert len({Path(b.path).name for b in books}) == 50  # --from finds each by its name
    for book in books:
        assert book.url().startswith("https://raw.githubusercontent.com/GITenberg/")
        assert len(book.commit) == 40 and str(book.pg_id) in book.repo
        # the stripped text recorded is the shared corpus, byte for byte
        shared = (shared_data / "books" / book.file).read_bytes()
        assert hashlib.sha256(shared).hexdigest() == book.sha256, book.file
