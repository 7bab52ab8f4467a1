"""`bertkit serve`: the HTTP API and the explorer page over one or more model folders."""

from __future__ import annotations

import argparse
import importlib.util
import os

from bertkit.errors import BertkitError
from bertkit.serve.batcher import BatchSettings
from bertkit.serve.safety import Limits

BATCH_DEFAULTS, LIMIT_DEFAULTS = BatchSettings(), Limits()  # the defaults, defined once in the library


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve", help="HTTP API + BERT explorer page for model folders",
        description="Serve base and fine-tuned BERT models over HTTP (JSON API, OpenAPI docs at "
        "/docs) with the explorer page at /. Needs the serve extra: pip install 'bertkit[serve]'.")
    p.add_argument("models", nargs="+", metavar="MODEL_DIR",
                   help="HF-layout model folders: a base encoder and/or `bertkit finetune` models")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind; anything but loopback is reachable by others")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--max-batch", type=int, default=BATCH_DEFAULTS.max_batch,
                   help="texts per forward pass (1 = no dynamic batching)")
    p.add_argument("--max-wait-ms", type=float, default=BATCH_DEFAULTS.max_wait_ms,
                   help="how long a request waits for others to share its forward pass")
    p.add_argument("--max-queue", type=int, default=BATCH_DEFAULTS.max_queue,
                   help="requests waiting at most; more are answered 503")
    p.add_argument("--max-texts", type=int, default=LIMIT_DEFAULTS.max_texts,
                   help="texts (or records) per request")
    p.add_argument("--max-tokens", type=int, default=LIMIT_DEFAULTS.max_tokens,
                   help="WordPieces per text")
    p.add_argument("--max-body-bytes", type=int, default=LIMIT_DEFAULTS.max_body_bytes)
    p.add_argument("--body-timeout", type=float, default=LIMIT_DEFAULTS.body_timeout_s,
                   metavar="SECONDS", help="seconds a request's headers, and then its body, "
                   "may each take to arrive; late headers close the connection, a late body is "
                   "answered 408 and its connection closed")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise BertkitError(f"bertkit serve needs {' and '.join(missing)}: "
                           "pip install 'bertkit[serve]'")
    # oneDNN caches one kernel per GEMM shape (1,024 by default); length-bucketed batches of many
    # sizes keep adding shapes, so a server's memory grew all through a load test. A small cache
    # keeps it flat at no measured cost (docs/reports/benchmarks.md has both measurements). Read by
    # oneDNN when it first runs a kernel, so set before any model does; the user's value wins.
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "8")
    # imported here: FastAPI and uvicorn are an optional extra, the rest of the CLI works without
    from bertkit.serve.server import ServeConfig, run

    cfg = ServeConfig(tuple(args.models), args.host, args.port,
                      Limits(args.max_body_bytes, args.max_texts, args.max_tokens,
                             min(LIMIT_DEFAULTS.attention_tokens, args.max_tokens),
                             args.body_timeout),
                      BatchSettings(args.max_batch, args.max_wait_ms, args.max_queue),
                      args.threads)
    run(cfg)
    return 0
