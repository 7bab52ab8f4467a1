"""Start the server: load the model folders, build the app, run it under uvicorn."""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field

import torch
import uvicorn

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
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning")
