"""The reference executor against Hugging Face transformers, and the weights both are fed."""

from __future__ import annotations

import shutil

import pytest
import torch

from mkc.capture import capture, hf_model, load_weights
from mkc.capture.reference import new_cache, run_step
from mkc.capture.registry import MODELS_DIR

TINY = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral"]
L = 16
STEPS = 10


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _decode_against_hf(graph, weights, model, steps: int = STEPS, greedy: bool = False) -> float:
    """Decode from position 0 in both, teacher-forcing random tokens (or feeding the greedy token)."""
    from transformers import StaticCache

    B = graph.batch
    hf_cache = StaticCache(config=model.config, max_cache_len=graph.max_seq_len)
    cache = new_cache(graph)
    gen = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, graph.model.vocab, (B,), generator=gen)
    worst = 0.0
    for pos in range(steps):
        with torch.no_grad():
            out = model(input_ids=ids[:, None], past_key_values=hf_cache, cache_position=torch.tensor([pos]))
        ref = out.logits[:, -1].float()
        env = run_step(graph, weights, cache, ids, pos)
        worst = max(worst, _rel(env["logits"], ref))
        assert torch.equal(env["next_ids"], env["logits"].argmax(-1))
        ids = env["next_ids"] if greedy else torch.randint(0, graph.model.vocab, (B,), generator=gen)
    return worst


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("name", TINY)
def test_reference_matches_transformers(captured, name, batch):
    graph = captured(name, batch, L)
    weights = load_weights(name, torch.float32)
    model = hf_model(name, torch.float32, "cpu", weights)
    assert _decode_against_hf(graph, weights, model) < 1e-5


def test_reference_matches_transformers_greedy(captured):
    graph = captured("tiny-qwen3", 4, L)
    weights = load_weights("tiny-qwen3", torch.float32, seed=7)
    model = hf_model("tiny-qwen3", torch.float32, "cpu", weights)
    assert _decode_against_hf(graph, weights, model, steps=L, greedy=True) < 1e-5


def test_random_weights_are_seeded_and_realistic(captured):
    w = load_weights("tiny-qwen2")
    again = load_weights("tiny-qwen2")
    other = load_weights("tiny-qwen2", seed=1)
    graph = captured("tiny-qwen2", 1, L)
    assert {t.name for t in graph.params()} == set(w)  # graph params use the HF state-dict names
    for name, t in w.items():
        assert t.dtype == torch.bfloat16 and torch.equal(t, again[name]) and not torch.equal(t, other[name])
        assert tuple(t.shape) == graph.tensor(name).shape
    table = w["model.embed_tokens.weight"].float()
    assert table.std().item() == pytest.approx(0.02, rel=0.05)
    assert w["model.layers.0.self_attn.q_proj.bias"].float().abs().mean().item() < 0.05
    norm = w["model.layers.1.post_attention_layernorm.weight"].float()
    assert norm.mean().item() == pytest.approx(1.0, abs=0.02) and 0.01 < norm.std().item() < 0.1
    # a tensor's values depend on (seed, name) only, not on the dtype asked for
    w32 = load_weights("tiny-qwen2", torch.float32)
    assert torch.equal(w32["model.norm.weight"].to(torch.bfloat16), w["model.norm.weight"])


def test_hf_model_holds_the_weights_and_ties_the_head():
    w = load_weights("tiny-llama", torch.float32)
    m = hf_model("tiny-llama", torch.float32, "cpu", w)
    assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    assert torch.equal(m.model.layers[1].mlp.down_proj.weight, w["model.layers.1.mlp.down_proj.weight"])
    assert not any(t.is_meta for t in list(m.parameters()) + list(m.buffers()))


def test_local_directory_with_safetensors(tmp_path, captured):
    from safetensors.torch import save_file

    shutil.copy(MODELS_DIR / "tiny-mistral" / "config.json", tmp_path / "config.json")
    real = {k: torch.randn(v.shape, generator=torch.Generator().manual_seed(3)) * 0.02
            for k, v in load_weights("tiny-mistral", torch.float32).items()}
    names = sorted(real)
    save_file({k: real[k] for k in names[: len(names) // 2]}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({k: real[k] for k in names[len(names) // 2:]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    w = load_weights(tmp_path, torch.float32)
    assert set(w) == set(real) and all(torch.equal(w[k], real[k]) for k in real)
    graph = capture(tmp_path, 1, L)
    assert graph == captured("tiny-mistral", 1, L)  # same config, same graph, wherever it came from
    model = hf_model(tmp_path, torch.float32)
    assert _decode_against_hf(graph, w, model, steps=4) < 1e-5


def test_model_object_weights_are_its_state_dict():
    m = hf_model("tiny-qwen3")
    w = load_weights(m, torch.float32)
    assert set(w) == set(m.state_dict()) and torch.equal(w["model.norm.weight"], m.model.norm.weight)
