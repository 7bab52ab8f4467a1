"""The server's limits: body size, texts per request, tokens per text (413 with a clear message).

A model server is a target: without limits one request with a million texts or a 100 MB body
holds the forward thread (and the memory) for everyone. The body limit is an ASGI middleware so
an oversized body is refused before it is read into memory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from bertkit.errors import BertkitError


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1_000_000
    max_texts: int = 64  # texts (or records) in one request
    max_tokens: int = 512  # WordPieces per text, [CLS]/[SEP] included, before truncation
    attention_tokens: int = 128  # tokens of a text shown as attention maps / layer vectors

    def __post_init__(self) -> None:
        if min(self.max_body_bytes, self.max_texts, self.max_tokens, self.attention_tokens) < 1:
            raise BertkitError("serve limits must all be positive")


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
