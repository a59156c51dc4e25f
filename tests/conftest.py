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
