"""SIGINT/SIGTERM during training (`bertkit.training.signals`): the first asks to stop after the
step, a second interrupts at once, and the previous handlers come back afterwards."""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest

from bertkit.training.signals import StopFlag, signal_guard


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_sets_the_flag_and_a_second_interrupts(sig, caplog):
    with caplog.at_level(logging.WARNING, logger="bertkit.training.signals"):
        with signal_guard() as flag:
            assert not flag.is_set()
            os.kill(os.getpid(), sig)  # delivered to the main thread before kill returns
            assert flag.is_set()
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), sig)
    assert f"received {sig.name}: saving a checkpoint" in caplog.text


def test_the_previous_handlers_are_restored():
    seen = []
    sigint_before = signal.getsignal(signal.SIGINT)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with signal_guard() as flag:
            assert signal.getsignal(signal.SIGTERM) == flag.handler
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM] and not flag.is_set()
        assert signal.getsignal(signal.SIGINT) == sigint_before
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_off_the_main_thread_nothing_is_installed():
    """signal.signal works in the main thread only: a loop run from another thread (a server, a
    notebook worker) still gets a flag, which nothing sets."""
    before = signal.getsignal(signal.SIGTERM)
    result = {}

    def run() -> None:
        with signal_guard() as flag:
            result["flag"] = flag
            result["handler"] = signal.getsignal(signal.SIGTERM)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert isinstance(result["flag"], StopFlag) and not result["flag"].is_set()
    assert result["handler"] == before
