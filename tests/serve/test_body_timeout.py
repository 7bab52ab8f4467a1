"""A real server on a loopback port and a raw socket: a body shorter than its Content-Length is
answered 408 and its connection closed within the configured bound, not held for as long as the
client waits; so is a connection whose headers never end; complete requests before and after
are answered as usual."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from bertkit.serve.app import create_app
from bertkit.serve.models import load_models
from bertkit.serve.safety import Limits
from bertkit.serve.server import uvicorn_config

BOUND = 1.0  # seconds


@pytest.fixture(scope="module")
def port(tiny_models) -> Iterator[int]:
    app = create_app(load_models([tiny_models["mlm"]]), Limits(body_timeout_s=BOUND))
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", 0, Limits(body_timeout_s=BOUND)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the test server did not start"
        time.sleep(0.05)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    thread.join(timeout=10)


def exchange(port: int, request: bytes, wait: float = 10.0) -> tuple[bytes, float, bool]:
    """Send `request`, read until the server closes (or `wait` passes): (what came back, seconds
    to the first byte of the answer, whether the server closed the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        start = time.monotonic()
        sock.sendall(request)
        data, first, closed = b"", None, False
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    closed = True
                    break
                first = first if first is not None else time.monotonic() - start
                data += chunk
        except TimeoutError:
            pass
        return data, first if first is not None else float("inf"), closed


def post(path: str, body: bytes, length: int | None = None) -> bytes:
    """A POST of `body` saying it is `length` bytes; a complete one asks for the connection to
    be closed after the answer (so that `exchange` reads to the end)."""
    close = "Connection: close\r\n" if length is None else ""
    length = len(body) if length is None else length
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"{close}Content-Length: {length}\r\n\r\n").encode() + body


def test_a_body_shorter_than_its_content_length_is_answered_408_within_the_bound(port):
    data, seconds, closed = exchange(port, post("/tokenize", b'{"text": "', length=100))
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
    assert BOUND * 0.8 <= seconds < BOUND + 2.0
    assert closed  # the connection is given up, not kept for the rest of the body
    detail = json.loads(data.split(b"\r\n\r\n", 1)[1])["detail"]
    assert "did not arrive within 1 s" in detail


@pytest.mark.parametrize("start", [b"", b"POST /tokenize HT", b"GET / HTTP/1.1\r\nHost: loc"])
def test_a_connection_whose_headers_do_not_end_is_closed_within_the_bound(port, start):
    data, _, closed = exchange(port, start, wait=BOUND + 5.0)
    assert closed and data == b""


def test_headers_sent_a_byte_at_a_time_meet_one_deadline(port):
    request = post("/tokenize", b"{}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        start = time.monotonic()
        with pytest.raises(OSError):  # a byte every 0.2 s: each in time, the headers not
            for i in range(len(request)):
                sock.sendall(request[i:i + 1])
                time.sleep(0.2)
                sock.settimeout(0.01)
                try:
                    if sock.recv(65536) == b"":
                        raise ConnectionResetError("closed by the server")
                except TimeoutError:
                    pass
        assert time.monotonic() - start < BOUND + 2.0


def test_complete_requests_are_answered_before_and_after(port):
    body = json.dumps({"text": "a short text"}).encode()
    for _ in range(2):
        data, seconds, _ = exchange(port, post("/tokenize", body))
        assert data.startswith(b"HTTP/1.1 200"), data[:200]
        assert seconds < BOUND
        assert json.loads(data.split(b"\r\n\r\n", 1)[1])["tokens"][0] == "[CLS]"
        exchange(port, post("/tokenize", b"{", length=50))  # a short one between them


def test_a_body_sent_in_slow_pieces_meets_one_deadline_for_the_whole(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(post("/tokenize", b"{", length=40))
        answer = b""
        for _ in range(8):  # a byte every 0.4 s: each piece in time, the whole not
            time.sleep(0.4)
            try:
                sock.sendall(b" ")
            except OSError:
                break
            sock.settimeout(0.01)
            try:
                answer += sock.recv(65536)
            except TimeoutError:
                pass
            if answer:
                break
        sock.settimeout(10)
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert time.monotonic() - start < BOUND + 2.0


def test_the_bound_is_checked():
    with pytest.raises(ValueError, match="body-timeout"):
        Limits(body_timeout_s=0)
