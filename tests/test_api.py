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


def _no_gpu(vendor: str) -> bool:
    from mkc.backend import BackendUnavailableError, for_target
    from mkc.target import TARGETS

    target = next(t for t in TARGETS.values() if t.vendor == vendor)
    try:
        for_target(target).check_runtime()
    except BackendUnavailableError:
        return True
    return False


@pytest.mark.parametrize("target, needle", [("mi300x", "AMD GPU"), ("h200", "NVIDIA GPU")])
def test_compile_without_the_targets_gpu_fails_fast_and_clearly(tmp_path, target, needle):
    """No capture (tens of seconds, GBs) happens before the API knows no kernel of this vendor can run."""
    import time

    import mkc
    from mkc.backend import BackendUnavailableError
    from mkc.target import get_target

    if not _no_gpu(get_target(target).vendor):
        pytest.skip(f"a GPU for {target} is visible here")
    t0 = time.perf_counter()
    with pytest.raises(BackendUnavailableError, match=needle) as err:
        mkc.compile("qwen3-0.6b", target=target, out=tmp_path / "never")
    assert time.perf_counter() - t0 < 5.0
    assert not (tmp_path / "never").exists()
    assert err.value.exit_code == 2


def test_run_of_an_amd_build_without_an_amd_gpu_exits_2(tmp_path):
    """The CLI compiles for MI300X anywhere (source only); running it needs the GPU and says so."""
    import subprocess
    import sys

    if not _no_gpu("amd"):
        pytest.skip("an AMD GPU is visible here")
    out = tmp_path / "amd"
    compile_model("tiny-qwen3", out, Options(target="mi300x", batches=(1,), max_seq_len=32), StageLog(quiet=True))
    assert (out / "b1" / "kernel.hip").exists()
    proc = subprocess.run([sys.executable, "-m", "mkc", "run", str(out), "--max-new-tokens", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "AMD GPU" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("sync,crossing", [("atomic", 32), ("nan", 0)])
def test_compile_crosses_qkv_heads_only_with_counters(tmp_path, sync, crossing):
    """mkc compile applies lower.qkv_cross_pays with the build's sync mode: llama-3.2-1b's qkv runs
    cross head boundaries at batch 1 with counters, not with NaN sentinels (measured slower there)."""
    from mkc.taskgraph.ir import TaskGraph

    out = compile_model("llama-3.2-1b", tmp_path / "b", Options(max_seq_len=64, sync=sync, stop_after="lower"),
                        StageLog(quiet=True))
    tg = TaskGraph.load(out / "b1" / "tasks.json")
    runs = [t.args for t in tg.tasks if t.kind == "qkv" and t.layer == 0]
    assert sum(h1 - h0 > 1 for h0, h1, _, _ in runs) == crossing
    assert len(runs) == (128 if crossing else 96)
