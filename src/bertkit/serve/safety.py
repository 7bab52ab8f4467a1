"""The server's limits: body size, texts per request, tokens per text (413 with a clear message),
and the time a body may take to arrive (408).

A model server is a target: without limits one request with a million texts or a 100 MB body
holds the forward thread (and the memory) for everyone. The body limit is an ASGI middleware so
an oversized body is refused before it is read into memory; so is the body's deadline, because
uvicorn bounds idle connections between requests but not a body that stops short of its
Content-Length.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bertkit.errors import BertkitError


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1_000_000
    max_texts: int = 64  # texts (or records) in one request
    max_tokens: int = 512  # WordPieces per text, [CLS]/[SEP] included, before truncation
    attention_tokens: int = 128  # tokens of a text shown as attention maps / layer vectors
    # seconds a request's whole body may take to arrive (1 MB at 100 KB/s): a client that sends
    # less than its Content-Length would otherwise hold its connection for as long as it waits;
    # a request's headers get as long (`server.header_deadline_protocol`)
    body_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if min(self.max_body_bytes, self.max_texts, self.max_tokens, self.attention_tokens) < 1:
            raise BertkitError("serve limits must all be positive")
        if not self.body_timeout_s > 0:
            raise BertkitError(f"--body-timeout must be > 0 seconds, got {self.body_timeout_s}")


class TooLarge(BertkitError):
    """A request over one of the limits (HTTP 413)."""


def check_count(n: int, limit: int, what: str) -> None:
    if n > limit:
        raise TooLarge(f"{n} {what} in one request; the limit is {limit} (send them in parts)")


def check_tokens(counts: Sequence[int], limit: int, purpose: str = "") -> None:
    for i, n in enumerate(counts):
        if n > limit:
            where = f"text {i}" if len(counts) > 1 else "the text"
            raise TooLarge(f"{where} has {n} tokens; the limit is {limit} per text"
                           f"{' ' + purpose if purpose else ''}")


def truncations(counts: Sequence[int], model_limit: int, allowed: bool) -> list[dict[str, int]]:
    """The texts longer than the model reads, each as {"index", "tokens", "kept"}: what an
    answer says it cut. With `allowed` false (a request's `truncate: false`) such a text is a
    413 instead."""
    cut = [{"index": i, "tokens": n, "kept": model_limit} for i, n in enumerate(counts)
           if n > model_limit]
    if cut and not allowed:
        first = cut[0]
        where = f"text {first['index']}" if len(counts) > 1 else "the text"
        raise TooLarge(f"{where} has {first['tokens']} tokens, more than the {model_limit} this "
                       f"model reads; send \"truncate\": true to use its first {model_limit}")
    return cut


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413: by Content-Length when sent, else
    while the body streams in."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self.refuse(send, int(length) if length.isdigit() else None)
        received = 0
        refused = False

        async def counted_receive():
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                received += len(message.get("body", b""))
                if received > self.limit:  # a body streamed without Content-Length
                    refused = True
                    await self.refuse(send, None)
                    return {"type": "http.disconnect"}  # the app stops reading
            return message

        async def guarded_send(message):
            if not refused:  # after a 413, whatever the app answers is dropped
                await send(message)

        await self.app(scope, counted_receive, guarded_send)

    async def refuse(self, send, length: int | None) -> None:
        size = f"{length} bytes" if length is not None else "the request body"
        body = json.dumps({"detail": f"{size} is over the limit of {self.limit} bytes per "
                           "request"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class BodyTimeout:
    """Answer 408 and close the connection when a request's body has not wholly arrived within
    `seconds` of the app's first read: the deadline covers the whole body, so a client dripping
    a byte at a time gains nothing. Reads after the body (an app waiting for the client to
    disconnect) are not timed."""

    def __init__(self, app, seconds: float):
        self.app, self.seconds = app, seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        deadline: float | None = None
        body_done = False
        timed_out = False

        async def timed_receive():
            nonlocal deadline, body_done, timed_out
            if timed_out:
                return {"type": "http.disconnect"}
            if body_done:
                return await receive()
            if deadline is None:
                deadline = time.monotonic() + self.seconds
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0))
            except asyncio.TimeoutError:
                timed_out = True
                await self.refuse(send)
                return {"type": "http.disconnect"}  # the app stops reading
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def guarded_send(message):
            if not timed_out:  # after a 408, whatever the app answers is dropped
                await send(message)

        await self.app(scope, timed_receive, guarded_send)

    async def refuse(self, send) -> None:
        body = json.dumps({"detail": f"the request body did not arrive within {self.seconds:g} "
                           "s (fewer bytes than its Content-Length?)"}).encode()
        await send({"type": "http.response.start", "status": 408,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
