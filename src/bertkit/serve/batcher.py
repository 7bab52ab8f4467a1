"""Dynamic batching: requests that arrive within a few milliseconds share one forward pass.

Every request becomes a `Job` on one bounded queue (full -> `QueueFull`, which the server answers
with 503 rather than letting the queue grow). One worker task takes the first waiting job, keeps
gathering for up to `max_wait_ms` or until `max_batch` texts are collected, groups the jobs by
their `key` (same model and settings) and runs each group's function once, on a single worker
thread: the event loop never runs a forward pass, and two forwards never compete for the cores.
Jobs whose work cannot be shared (attention maps, predictions) carry a key of their own
(`unbatched_key`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

RunBatch = Callable[[Sequence[Any]], Sequence[Any]]  # payloads -> one result per payload


@dataclass(frozen=True)
class BatchSettings:
    max_batch: int = 64  # texts per forward pass (1 = no dynamic batching)
    max_wait_ms: float = 5.0  # how long the first request waits for company
    max_queue: int = 256  # requests waiting; beyond that: QueueFull (503)

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_queue < 1 or self.max_wait_ms < 0:
            raise ValueError("--max-batch and --max-queue must be >= 1, --max-wait-ms >= 0")


class QueueFull(Exception):
    """The server is at capacity; the client should retry later (HTTP 503)."""


@dataclass
class Job:
    key: Hashable
    run: RunBatch
    payload: Any
    size: int  # texts it carries, counted against max_batch
    future: asyncio.Future = field(repr=False)


@dataclass
class BatchStats:
    batches: int = 0
    jobs: int = 0
    texts: int = 0
    largest: int = 0


_unique = itertools.count()


def unbatched_key() -> tuple[str, int]:
    """A key shared with no other job: the job gets a forward pass of its own."""
    return ("unbatched", next(_unique))


class DynamicBatcher:
    def __init__(self, settings: BatchSettings):
        self.max_batch = settings.max_batch
        self.max_wait = settings.max_wait_ms / 1000
        self.queue: asyncio.Queue[Job] = asyncio.Queue(maxsize=settings.max_queue)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-forward")
        self.stats = BatchStats()
        self._worker: asyncio.Task | None = None
        self._next: Job | None = None  # taken from the queue, but it did not fit the last batch

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        self.executor.shutdown(wait=True, cancel_futures=True)

    async def submit(self, key: Hashable, run: RunBatch, payload: Any, size: int = 1) -> Any:
        """Queue one job and wait for its result; raises `QueueFull` at capacity, and whatever
        `run` raised for its group."""
        self.start()
        job = Job(key, run, payload, size, asyncio.get_running_loop().create_future())
        try:
            self.queue.put_nowait(job)
        except asyncio.QueueFull:
            raise QueueFull(f"the server is busy ({self.queue.maxsize} requests waiting); "
                            "retry shortly") from None
        return await job.future

    async def _gather(self) -> list[Job]:
        """The first waiting job, then whatever arrives within max_wait, up to max_batch texts:
        a job that would go over waits for the next batch (a job larger than max_batch alone
        is its own batch)."""
        jobs = [self._next or await self.queue.get()]
        self._next = None
        size = jobs[0].size
        deadline = time.perf_counter() + self.max_wait
        while size < self.max_batch:
            remaining = deadline - time.perf_counter()
            try:
                job = self.queue.get_nowait() if remaining <= 0 else \
                    await asyncio.wait_for(self.queue.get(), remaining)
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
            if size + job.size > self.max_batch:
                self._next = job
                break
            jobs.append(job)
            size += job.size
        return jobs

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._gather()
            groups: dict[Hashable, list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            for group in groups.values():
                live = [j for j in group if not j.future.done()]  # a client may have gone
                if live:
                    await self._run_group(loop, live)

    async def _run_group(self, loop: asyncio.AbstractEventLoop, jobs: list[Job]) -> None:
        """One forward for the group; if it fails, each job alone, so that one bad request
        gets its own error and the others their results."""
        try:
            results = await loop.run_in_executor(self.executor, jobs[0].run,
                                                 [j.payload for j in jobs])
        except Exception as err:
            if len(jobs) > 1:
                for job in jobs:
                    await self._run_group(loop, [job])
                return
            if not jobs[0].future.done():
                jobs[0].future.set_exception(err)
            return
        self._count(jobs)
        for job, result in zip(jobs, results):
            if not job.future.done():
                job.future.set_result(result)

    def _count(self, jobs: list[Job]) -> None:
        texts = sum(j.size for j in jobs)
        self.stats.batches += 1
        self.stats.jobs += len(jobs)
        self.stats.texts += texts
        self.stats.largest = max(self.stats.largest, texts)
