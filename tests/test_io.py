"""bertkit.io: the progress watcher of GIL-free work."""

import numpy as np
import pytest

from bertkit.io import watch_progress


def test_watch_progress_returns_the_result_with_and_without_the_bar():
    counter = np.zeros(1, dtype=np.int64)

    def work():
        counter[0] = 7
        return "done"

    assert watch_progress(work, counter, 7, "work", enabled=False) == "done"
    assert watch_progress(work, counter, 7, "work") == "done"


def test_watch_progress_reraises_the_work_error():
    """An error inside the watched work reaches the caller (not lost in the thread)."""
    def fail():
        raise ValueError("inside the loop")

    with pytest.raises(ValueError, match="inside the loop"):
        watch_progress(fail, np.zeros(1, dtype=np.int64), 10, "merging")
