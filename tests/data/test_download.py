"""`bertkit data download`: tested against a local HTTP server on 127.0.0.1, never the network."""

from __future__ import annotations

import hashlib
import http.server
import io
import threading
import zipfile
from functools import partial
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data import download
from bertkit.data.download import Dataset, RemoteFile, download_dataset, fetch, resolve, unpack_zip
from bertkit.errors import BertkitError

BODY = b"the quick brown fox\tjumps\n" * 5000  # 130 kB: several streaming chunks


def _zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.requests.append(self.path)
        if self.path == "/truncated":
            # Promise 1000 bytes, send 10, hang up: a dropped connection mid-download.
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture()
def server(tmp_path):
    """Serve tmp_path/www on 127.0.0.1 (a free port) from a thread; yields (base_url, www, log)."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "data.txt").write_bytes(BODY)
    (www / "TASK.zip").write_bytes(_zip_bytes({"TASK/train.tsv": b"a\tb\n", "TASK/dev.tsv": b"c\n"}))
    (www / "evil.zip").write_bytes(_zip_bytes({"../escape.txt": b"x"}))
    (www / "notzip.zip").write_bytes(b"this is not a zip")
    log: list[str] = []
    handler = partial(type("H", (_Handler,), {"requests": log}), directory=str(www))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", www, log
    httpd.shutdown()
    httpd.server_close()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_fetch_streams_and_checks_the_checksum(server, tmp_path):
    base, _, _ = server
    out = tmp_path / "out"
    good = hashlib.sha256(BODY).hexdigest()
    assert fetch(f"{base}/data.txt", out / "data.txt", sha256=good, progress=False).read_bytes() == BODY
    with pytest.raises(BertkitError, match="SHA-256 mismatch"):
        fetch(f"{base}/data.txt", out / "bad.txt", sha256="0" * 64, progress=False)
    assert not (out / "bad.txt").exists() and _leftovers(out) == []


def test_fetch_errors_leave_nothing_behind(server, tmp_path):
    base, _, _ = server
    out = tmp_path / "out"
    with pytest.raises(BertkitError, match="HTTP 404"):
        fetch(f"{base}/missing.txt", out / "missing.txt", progress=False)
    with pytest.raises(BertkitError, match="closed"):
        fetch(f"{base}/truncated", out / "truncated", progress=False)
    with pytest.raises(BertkitError, match="cannot download"):
        fetch("http://127.0.0.1:9/nothing", out / "refused", progress=False, timeout=5)
    assert sorted(p.name for p in out.iterdir()) == []


def test_unpack_refuses_zip_slip_and_garbage(server, tmp_path):
    _, www, _ = server
    dest = tmp_path / "dest"
    with pytest.raises(BertkitError, match="outside"):
        unpack_zip(www / "evil.zip", dest)
    with pytest.raises(BertkitError, match="not a valid zip"):
        unpack_zip(www / "notzip.zip", dest)
    assert not (tmp_path / "escape.txt").exists() and list(dest.iterdir()) == []


def test_download_dataset_unpacks_marks_complete_and_skips_reruns(server, tmp_path):
    base, _, log = server
    ds = Dataset("toy", "a toy set", (
        RemoteFile(f"{base}/TASK.zip", "TASK.zip", unpack=True),
        RemoteFile(f"{base}/data.txt", "raw/data.txt", hashlib.sha256(BODY).hexdigest())))
    folder = download_dataset(ds, tmp_path / "data", progress=False)
    assert (folder / "TASK" / "train.tsv").read_bytes() == b"a\tb\n"
    assert (folder / "raw" / "data.txt").read_bytes() == BODY
    assert not (folder / "TASK.zip").exists() and (folder / download.COMPLETE).is_file()
    n = len(log)
    assert download_dataset(ds, tmp_path / "data", progress=False) == folder
    assert len(log) == n  # complete: nothing fetched again
    download_dataset(ds, tmp_path / "data", progress=False, force=True)
    assert len(log) == n + 2


def test_a_failed_file_leaves_the_set_incomplete_then_resumes(server, tmp_path):
    base, www, _ = server
    ds = Dataset("toy", "", (RemoteFile(f"{base}/data.txt", "data.txt"),
                             RemoteFile(f"{base}/later.txt", "later.txt")))
    with pytest.raises(BertkitError, match="404"):
        download_dataset(ds, tmp_path, progress=False)
    assert (tmp_path / "toy" / "data.txt").is_file()
    assert not (tmp_path / "toy" / download.COMPLETE).exists()
    (www / "later.txt").write_text("now here")
    download_dataset(ds, tmp_path, progress=False)
    assert (tmp_path / "toy" / "later.txt").read_text() == "now here"


def test_table_and_resolve():
    names = [d.name for d in resolve(["glue", "squad1"])]
    assert "glue-sst-2" in names and "glue-mrpc" in names and names[-1] == "squad1"
    for dataset in download.DATASETS.values():
        assert dataset.files and all(f.url.startswith("https://") for f in dataset.files)
    with pytest.raises(BertkitError, match="unknown data set 'nope'"):
        resolve(["nope"])


def test_cli_download_and_list(server, tmp_path, monkeypatch, capsys):
    base, _, _ = server
    monkeypatch.setitem(download.DATASETS, "toy",
                        Dataset("toy", "toy", (RemoteFile(f"{base}/data.txt", "data.txt"),)))
    assert main(["data", "download", "toy", "--dest", str(tmp_path), "--no-progress"]) == 0
    assert (tmp_path / "toy" / "data.txt").read_bytes() == BODY
    assert main(["data", "download", "nope", "--dest", str(tmp_path)]) == 1
    assert "unknown data set" in capsys.readouterr().err
    assert main(["data", "list"]) == 0
    assert "rajpurkar.github.io" in capsys.readouterr().out
