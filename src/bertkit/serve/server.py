"""Start the server: load the model folders, build the app, run it under uvicorn."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from dataclasses import dataclass, field

import h11
import torch
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from bertkit.errors import BertkitError
from bertkit.serve.app import create_app
from bertkit.serve.batcher import BatchSettings
from bertkit.serve.models import load_models
from bertkit.serve.safety import Limits

log = logging.getLogger("bertkit")


@dataclass(frozen=True)
class ServeConfig:
    model_dirs: tuple[str, ...]
    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 8080
    limits: Limits = field(default_factory=Limits)
    batching: BatchSettings = field(default_factory=BatchSettings)
    threads: int | None = None  # torch intra-op threads; None = torch's default

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise BertkitError(f"--port must be in 0..65535, got {self.port}")
        if self.threads is not None and self.threads < 1:
            raise BertkitError(f"--threads must be >= 1, got {self.threads}")


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run(cfg: ServeConfig) -> None:
    """Load every model (errors before the port is opened), then serve until interrupted."""
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    models = load_models(list(cfg.model_dirs))
    app = create_app(models, cfg.limits, cfg.batching)
    if not is_loopback(cfg.host):
        log.warning("serving on %s: reachable from other machines; there is no authentication",
                    cfg.host)
    log.info("bertkit serve: %s at http://%s:%d/ (explorer), API docs at /docs",
             ", ".join(models), cfg.host, cfg.port)
    uvicorn.Server(uvicorn_config(app, cfg.host, cfg.port, cfg.limits)).run()


def uvicorn_config(app, host: str, port: int, limits: Limits) -> uvicorn.Config:
    """uvicorn's settings for the app, its HTTP protocol bounding the wait for headers."""
    return uvicorn.Config(app, host=host, port=port, log_level="warning",
                          http=header_deadline_protocol(limits.body_timeout_s))


def header_deadline_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline on each request's headers: from the connection's
    start, or the end of the answer before, a request's headers must be complete within
    `seconds`, else the connection is closed. uvicorn's own keep-alive timer stops at the first
    byte that arrives, so a client sending a header a byte at a time (or half a request line)
    would hold its connection for as long as it liked; the body has its own deadline
    (`safety.BodyTimeout`)."""

    class HeaderDeadline(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._start_deadline()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the headers are in
                self._stop_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._start_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_deadline()
            super().connection_lost(exc)

        def _start_deadline(self) -> None:
            self._stop_deadline()
            self._deadline = self.loop.call_later(seconds, self._headers_late)

        def _stop_deadline(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _headers_late(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline
