"""Capture: the graph mapped from the exported ATen code equals the canonical graph of the model."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from mkc.capture import Graph, capture, hf_model
from mkc.capture.canonical import build_graph, rope_inv_freq
from mkc.capture.graph import OP_KINDS
from mkc.capture.registry import resolve

TINY = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral"]
L = 16


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _strip_sources(g: Graph) -> Graph:
    return dataclasses.replace(g, ops=tuple(dataclasses.replace(op, source="") for op in g.ops))


def _expected_rope(name: str) -> tuple[tuple[float, ...], float]:
    """RoPE inv_freq worked out here from the config alone, independently of capture."""
    cfg = resolve(name).config
    rope = cfg.rope_parameters
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    inv = rope_inv_freq(hd, rope["rope_theta"])
    if rope.get("rope_type", "default") == "llama3":  # Llama 3.1's frequency-dependent scaling
        old, lo, hi = rope["original_max_position_embeddings"], rope["low_freq_factor"], rope["high_freq_factor"]
        scaled = []
        for f in torch.tensor(inv, dtype=torch.float32):
            wavelen = 2 * math.pi / f
            if wavelen < old / hi:
                scaled.append(f)
            elif wavelen > old / lo:
                scaled.append(f / rope["factor"])
            else:
                s = (old / wavelen - lo) / (hi - lo)
                scaled.append((1 - s) * f / rope["factor"] + s * f)
        inv = tuple(float(x) for x in torch.stack(scaled))
    return inv, 1.0


def _assert_equals_build(g: Graph, name: str):
    inv, scaling = _expected_rope(name)
    got = g.tensor("rope.inv_freq").data
    assert got == pytest.approx(inv, rel=1e-6)
    expected = build_graph(g.model, g.batch, g.max_seq_len, got, scaling)
    assert _strip_sources(g) == expected


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("name", TINY)
def test_tiny_capture_equals_canonical_graph(captured, name, batch):
    g = captured(name, batch, L)
    cfg = resolve(name).config
    assert g.model.family == cfg.model_type and g.model.arch == cfg.architectures[0]
    assert g.model.dtype == "bf16" and g.batch == batch and g.max_seq_len == L
    assert g.model.qkv_bias == (name == "tiny-qwen2") and g.model.qk_norm == (name == "tiny-qwen3")
    assert g.model.tied_embeddings == cfg.tie_word_embeddings
    _assert_equals_build(g, name)


@pytest.mark.slow
def test_llama_3_2_1b_capture_equals_canonical_graph(captured):
    g = captured("llama-3.2-1b", 1, 4096)
    assert g.model.n_layers == 16 and g.model.tied_embeddings and g.model.head_dim == 64
    assert "lm_head.weight" not in g.tensor_map()  # the tied head reads the embedding table
    _assert_equals_build(g, "llama-3.2-1b")


def test_ops_carry_model_source_lines(captured):
    g = captured("tiny-qwen3", 1, L)
    for op in g.ops:
        if op.kind == "argmax":  # appended by mkc, not in the model
            continue
        assert re.fullmatch(r"transformers/.+\.py:\d+", op.source), op
    by_name = {op.name: op for op in g.ops}
    assert "modeling_qwen3.py" in by_name["l0.q_norm"].source and "modeling_qwen3.py" in by_name["l1.attn"].source
    assert set(g.op_counts()) == set(OP_KINDS)


def test_graph_json_round_trip(captured, tmp_path):
    g = captured("tiny-qwen2", 4, L)
    g.save(tmp_path / "graph.json")
    assert Graph.load(tmp_path / "graph.json") == g


def test_capture_of_a_model_object_and_of_another_dtype(captured):
    model = hf_model("tiny-mistral")  # fp32 eager model with weights
    before = model.generation_config.cache_implementation
    g = capture(model, 2, L)
    assert model.generation_config.cache_implementation == before  # capture leaves the object as it was
    assert g.model == dataclasses.replace(captured("tiny-mistral", 2, L).model, dtype="f32")
    assert g.tensor("k_cache.0").dtype == "f32"
    _assert_equals_build(g, "tiny-mistral")
    g16 = capture("tiny-llama", 1, 8, dtype="f16")
    assert {t.dtype for t in g16.params()} == {"f16"}
    _assert_equals_build(g16, "tiny-llama")


@pytest.mark.parametrize("kv_heads", [4, 1])
def test_multi_and_single_kv_head_configs(kv_heads):
    """MHA (HF skips repeat_kv, so attention reads the cache directly) and MQA, from config objects."""
    from transformers import Qwen2Config, StaticCache

    from mkc.capture import load_weights
    from mkc.capture.reference import new_cache, run_step

    cfg = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=kv_heads, vocab_size=128, bos_token_id=1, eos_token_id=2)
    g = capture(cfg, 2, 8)
    assert g.model.n_kv_heads == kv_heads
    assert {op.attr("n_rep") for op in g.ops if op.kind == "attention"} == {4 // kv_heads}
    expected = build_graph(g.model, 2, 8, rope_inv_freq(g.model.head_dim, cfg.rope_parameters["rope_theta"]))
    assert _strip_sources(g) == expected
    weights = load_weights(cfg, torch.float32)
    model = hf_model(cfg, torch.float32, "cpu", weights)
    hf_cache, cache = StaticCache(config=model.config, max_cache_len=8), new_cache(g)
    for pos, tok in enumerate([[5, 9], [17, 3], [100, 42], [7, 7]]):
        ids = torch.tensor(tok)
        with torch.no_grad():
            out = model(input_ids=ids[:, None], past_key_values=hf_cache, cache_position=torch.tensor([pos]))
        ref = out.logits[:, -1]
        got = run_step(g, weights, cache, ids, pos)["logits"]
        assert float((got - ref).norm() / ref.norm()) < 1e-5
