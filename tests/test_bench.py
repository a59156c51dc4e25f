"""The benchmark's reporting (the timing itself needs a GPU and is exercised by `mkc bench`)."""

import pytest

from mkc import bench
from mkc.cli import main


def _rows():
    return [
        bench.Row("llama-3.2-1b", 1, "mkc-step", 1.0, 1000.0, 58.8, 1.4),
        bench.Row("llama-3.2-1b", 1, "compile", 1.4, 714.0, 42.0, 1.0),
        bench.Row("llama-3.2-1b", 8, "mkc-step", 2.0, 4000.0, 29.4, 0.9),
    ]


def test_markdown_table_has_every_row_and_the_run_facts():
    md = bench.markdown(_rows(), {"date": "2026-11-30", "gpu": "NVIDIA H200", "torch": "2.11", "read_bw_TBps": 4.2,
                                  "context": 512})
    assert "NVIDIA H200" in md and "4.20 TB/s" in md
    assert md.count("| llama-3.2-1b |") == 3
    assert "1.40x" in md


def test_bar_chart_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    bench.bar_chart(_rows(), tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_model_bytes_counts_weights_and_kv(tmp_path):
    from mkc.capture.canonical import build_graph, rope_inv_freq
    from mkc.capture.graph import ModelInfo
    from mkc.taskgraph import lower

    info = ModelInfo("LlamaForCausalLM", "llama", 64, 128, 2, 4, 2, 16, 100, 1e-5, True, False, False)
    g = build_graph(info, 2, 32, rope_inv_freq(16, 10000.0))
    tg = lower(g, "h200")
    w, kv = bench.model_bytes(tg, context=7)
    assert w == g.param_bytes()
    assert kv == 2 * 2 * 2 * 2 * 8 * 16 * 2  # k+v, layers, batch, kv heads, positions 0..7, hd, bf16


def test_bench_without_gpu_is_a_clear_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["bench", "tiny-llama"]) == 2
    assert "GPU" in capsys.readouterr().err
