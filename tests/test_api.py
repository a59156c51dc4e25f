"""The Python API's choice of schedule in a multi-batch build (no GPU needed for the choice)."""

import pytest

from mkc.api import batch_dir
from mkc.errors import MkcError
from mkc.pipeline import Options, StageLog, compile_model


def test_batch_dir_picks_the_schedule_or_lists_what_exists(tmp_path):
    out = compile_model("tiny-qwen2", tmp_path / "b", Options(batches=(1, 3), max_seq_len=16, stop_after="schedule"),
                        StageLog(quiet=True))
    assert batch_dir(out, 3) == out / "b3"
    with pytest.raises(MkcError, match="batch sizes 1, 3"):
        batch_dir(out, 8)
    with pytest.raises(MkcError, match="no compiled batch sizes"):
        batch_dir(tmp_path, 1)
