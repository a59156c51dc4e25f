"""The benchmark's reporting (the timing itself needs a GPU and is exercised by `mkc bench`)."""

import math

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


def _tiny(tied: bool, batch: int = 3, qk_norm: bool = False):
    from mkc.capture.canonical import build_graph, rope_inv_freq
    from mkc.capture.graph import ModelInfo
    from mkc.taskgraph import lower

    # hidden 64, intermediate 128, 2 layers, 4 heads, 2 kv heads, head_dim 16, vocab 100
    info = ModelInfo("Qwen3ForCausalLM" if qk_norm else "LlamaForCausalLM", "qwen3" if qk_norm else "llama",
                     64, 128, 2, 4, 2, 16, 100, 1e-5, tied, False, qk_norm)
    return lower(build_graph(info, batch, 32, rope_inv_freq(16, 10000.0)), "h200")


# per layer, bf16: 2 norms (64 each), q (64x64), k, v (32x64 each), o (64x64), gate, up (128x64), down (64x128)
LAYER = 2 * (2 * 64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 2 * 128 * 64 + 64 * 128)
TABLE = 2 * 100 * 64  # the embedding (or LM head) matrix, bf16


@pytest.mark.parametrize("qk_norm", [False, True])
def test_step_bytes_count_an_untied_embedding_as_one_row_per_batch_row(qk_norm):
    tg = _tiny(tied=False, batch=3, qk_norm=qk_norm)
    w, kv = bench.model_bytes(tg, context=7)
    qk = 2 * 2 * 16 if qk_norm else 0  # q and k norm weights (head_dim each) per layer
    # 2 layers, the final norm, the LM head in full, 3 gathered embedding rows of 64
    assert w == 2 * (LAYER + qk) + 2 * 64 + TABLE + 3 * 64 * 2
    # keys and values, 2 layers, 3 batch rows, 2 kv heads, positions 0..7, head_dim 16, bf16
    assert kv == 2 * 2 * 3 * 2 * 8 * 16 * 2
    # the whole table would have been counted before: every weight buffer in full
    every = sum(2 * math.prod(b.shape) for b in tg.buffers if b.role == "weight")
    assert every - w == TABLE - 3 * 64 * 2


def test_step_bytes_count_a_tied_embedding_once_in_full():
    tg = _tiny(tied=True, batch=3)
    w, kv = bench.model_bytes(tg, context=0)
    assert w == 2 * LAYER + 2 * 64 + TABLE  # the table is the LM head: read in full, once
    assert kv == 2 * 2 * 3 * 2 * 1 * 16 * 2  # only the new position


def test_step_bytes_at_a_mean_context():
    tg = _tiny(tied=True, batch=1)
    per_position = 2 * 2 * 1 * 2 * 16 * 2
    # positions 0..3 averaged: (1 + 2 + 3 + 4) / 4 = 2.5 positions read per step
    assert bench.model_bytes(tg, context=1.5)[1] == round(2.5 * per_position)


def test_bench_without_gpu_is_a_clear_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["bench", "tiny-llama"]) == 2
    assert "GPU" in capsys.readouterr().err


def test_bench_cli_takes_autotune_and_says_it_needs_a_gpu(capsys):
    """`mkc bench --autotune` parses (the max-autotune-no-cudagraphs baseline) and, without CUDA, exits 2 with a message."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the CPU machine's message")
    assert main(["bench", "tiny-llama", "--autotune", "--iters", "1"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
