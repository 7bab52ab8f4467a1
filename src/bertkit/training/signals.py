"""SIGINT/SIGTERM during training: the first signal asks the loop to save at the end of the step
and stop (`StopFlag`), a second interrupts at once."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)


class StopFlag:
    """Set by the first SIGINT/SIGTERM; the loop saves at the end of the step and stops.
    A second signal interrupts at once."""

    def __init__(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def handler(self, signum: int, frame: Any) -> None:
        if self._set:
            raise KeyboardInterrupt
        self._set = True
        log.warning("received %s: saving a checkpoint at the end of this step",
                    signal.Signals(signum).name)


@contextlib.contextmanager
def signal_guard() -> Iterator[StopFlag]:
    """Install the StopFlag handler for SIGINT and SIGTERM (main thread only), then restore."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {sig: signal.signal(sig, flag.handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as SIGINT does (main thread only), then restore. Under
    torchrun a process whose peer ended gets SIGTERM, which by default ends it without a word;
    as an exception it can still say why the run stopped (`distributed.stop_together`). Inside
    training `signal_guard`'s handler takes over: save, then stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
