"""Shared test setup: mkc importable from a plain checkout, and captures cached per session."""

import functools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@functools.lru_cache(maxsize=None)
def _capture(model: str, batch: int, max_seq_len: int):
    from mkc.capture import capture

    return capture(model, batch, max_seq_len)


@pytest.fixture(scope="session")
def captured():
    """captured(model, batch, max_seq_len) -> Graph, each capture done once per test session."""
    return _capture


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny eager steps run fastest on one thread, and do not stall when other jobs share the cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
