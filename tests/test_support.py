"""Config features mkc cannot compile are named from the config alone, before any export."""

from __future__ import annotations

import json
import re

import pytest

from mkc.capture import support
from mkc.capture.support import check_config, checked_source, full_attention_config
from mkc.errors import UnsupportedModelError

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=128, bos_token_id=1, eos_token_id=2)
SOURCE_LINE = re.compile(r"transformers/\S+\.py:\d+")
SUPPORTED = "Supported architectures: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM"


@pytest.fixture(autouse=True)
def no_export(monkeypatch, request):
    """Nothing here may reach torch.export: the point is to answer before it."""
    import mkc.capture.export as export
    import mkc.capture.stage as pipeline  # before patching: it binds export_decode_step on import

    if request.node.name == "test_idle_window_captures_as_full_attention":
        return

    def boom(*a, **kw):
        raise AssertionError("check_config let an unsupported config through to export")

    monkeypatch.setattr(export, "export_decode_step", boom)
    monkeypatch.setattr(pipeline, "export_decode_step", boom)


def _rejects(config, *texts, max_seq_len=16, n_problems=None):
    with pytest.raises(UnsupportedModelError) as e:
        check_config(config, max_seq_len)
    msg = str(e.value)
    for t in texts:
        assert t in msg, msg
    assert e.value.exit_code == 2
    if n_problems is not None:
        assert msg.count("\n  - ") == n_problems, msg
    return msg


def _llama(**kw):
    from transformers import LlamaConfig

    return LlamaConfig(**{**SMALL, **kw})


# ---- other families: what differs ----------------------------------------------------------
@pytest.mark.parametrize("which,differs", [
    ("gemma", ["GemmaForCausalLM", "modeling_gemma.py", "GeGLU", "sqrt(hidden_size)", "(1 + weight)"]),
    ("phi3", ["Phi3ForCausalLM", "modeling_phi3.py", "qkv_proj", "gate_up_proj"]),
    ("gpt_neox", ["GPTNeoXForCausalLM", "modeling_gpt_neox.py", "LayerNorm", "parallel attention/MLP residual"]),
])
def test_other_families_say_what_differs(which, differs):
    from transformers import GemmaConfig, GPTNeoXConfig, Phi3Config

    config = {"gemma": lambda: GemmaConfig(**SMALL, head_dim=16),
              "phi3": lambda: Phi3Config(**SMALL, pad_token_id=0),
              "gpt_neox": lambda: GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                num_attention_heads=4, vocab_size=128)}[which]()
    msg = _rejects(config, *differs, "it is not a Llama-style decoder", SUPPORTED, "(transformers 5.17.0)")
    assert SOURCE_LINE.search(msg)
    assert "upgrade" not in msg


def test_unknown_model_type_from_a_folder_does_not_say_upgrade(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "foo_bar_llm", "hidden_size": 64}))
    with pytest.raises(UnsupportedModelError) as e:
        check_config(tmp_path, 16)
    msg = str(e.value)
    assert msg.startswith(f"config.json in {tmp_path} has model_type 'foo_bar_llm', which transformers 5.17.0")
    assert "upgrading it is not an option" in msg and "pip install" not in msg
    assert "llama, qwen2, qwen3, mistral" in msg
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(UnsupportedModelError, match="has no model_type"):
        check_config(tmp_path / "config.json", 16)


def test_moe_vision_and_unlisted_families_are_left_to_check_supported():
    from transformers import MixtralConfig, ViTConfig

    check_config(MixtralConfig(**SMALL, num_local_experts=4), 16)  # registry.check_supported names the MoE block
    check_config(ViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4), 16)


# ---- supported families: features ----------------------------------------------------------
def test_supported_configs_pass():
    from transformers import MistralConfig, Qwen2Config, Qwen3Config

    for cfg in (_llama(), _llama(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
                _llama(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
                _llama(rope_scaling={"type": "linear", "factor": 2.0}),
                Qwen2Config(**SMALL), Qwen3Config(**SMALL, head_dim=32), MistralConfig(**SMALL, sliding_window=None),
                # Qwen2.5's hub configs name a window but leave it off
                Qwen2Config(**SMALL, use_sliding_window=False, sliding_window=32768, max_window_layers=1)):
        check_config(cfg, 4096)
        check_config(cfg, None)
    from mkc.capture.registry import MODELS_DIR

    for d in sorted(MODELS_DIR.glob("*/config.json")):
        check_config(d.parent, 4096)


def test_sliding_window_named_and_allowed_while_it_cannot_bite():
    from transformers import MistralConfig, Qwen2Config

    mistral = MistralConfig(**SMALL, sliding_window=8)
    msg = _rejects(mistral, "MistralForCausalLM", "sliding-window attention (window 8 on all 2 layers",
                   "masking_utils.py", "--max-seq-len 8 or less (got 16)", SUPPORTED, max_seq_len=16, n_problems=1)
    assert SOURCE_LINE.search(msg)
    check_config(mistral, 8)
    check_config(mistral, None)  # no length given: only what holds at every length
    qwen = Qwen2Config(**SMALL, use_sliding_window=True, sliding_window=8, max_window_layers=1)
    _rejects(qwen, "Qwen2ForCausalLM", "window 8 on 1 of 2 layers (1)", max_seq_len=9)
    check_config(qwen, 8)


def test_idle_window_is_removed_for_capture(tmp_path):
    from transformers import MistralConfig, Qwen2Config

    from mkc.capture.registry import resolve

    m = MistralConfig(**SMALL, sliding_window=8)
    assert full_attention_config(m, 16) is m
    full = full_attention_config(m, 8)
    assert full.sliding_window is None and m.sliding_window == 8  # a copy: the caller's config is untouched
    q = Qwen2Config(**SMALL, use_sliding_window=True, sliding_window=8, max_window_layers=1)
    fq = full_attention_config(q, 8)
    assert fq.layer_types == ["full_attention"] * 2 and q.layer_types[1] == "sliding_attention"
    src = checked_source(resolve(m), 8)
    assert src.config.sliding_window is None and src.name == resolve(m).name
    plain = resolve(_llama())
    assert checked_source(plain, 16) is plain


def test_idle_window_on_a_model_object_asks_for_the_config():
    import torch
    from transformers import AutoModelForCausalLM, MistralConfig

    from mkc.capture.registry import resolve

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(MistralConfig(**SMALL, sliding_window=8))
    with pytest.raises(UnsupportedModelError, match="pass its config or folder instead"):
        checked_source(resolve(model), 8)


@pytest.mark.parametrize("rope,named", [
    ({"type": "dynamic", "factor": 2.0}, "RoPE scaling 'dynamic'"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8, "factor": 2.0,
      "original_max_position_embeddings": 64}, "RoPE scaling 'longrope'"),
])
def test_rope_that_changes_with_position(rope, named):
    msg = _rejects(_llama(rope_scaling=rope), named, "modeling_rope_utils.py",
                   "recomputes the RoPE frequencies from the position at every step",
                   "supports rope types default, linear, llama3, yarn", n_problems=1)
    assert "GraphModule" not in msg and len(msg.splitlines()) == 3


@pytest.mark.parametrize("hd", [80, 96, 24, 40])
def test_head_dims_the_kernel_cannot_tile(hd):
    cfg = _llama(hidden_size=4 * hd, head_dim=hd)
    _rejects(cfg, f"head_dim {hd}: the kernel (mkc/codegen/render.py:", "multiple of 8",
             "256 threads", "supported head dims are 8, 16, 32, 64, 128, 256", n_problems=1)


def test_supported_head_dims_match_the_codegen_check():
    dims = support.supported_head_dims()
    assert dims == (8, 16, 32, 64, 128, 256)
    assert all(hd % 8 == 0 and 256 % (hd // 2) == 0 for hd in dims)
    for hd in (32, 64, 128, 256):
        check_config(_llama(hidden_size=4 * hd, head_dim=hd), 16)


def test_dims_not_a_multiple_of_8():
    _rejects(_llama(intermediate_size=100), "intermediate_size 100 is not a multiple of 8", n_problems=1)


def test_biases_mkc_does_not_model():
    from transformers import Qwen3Config

    _rejects(_llama(attention_bias=True), "attention_bias (q_proj, k_proj, v_proj and o_proj)",
             "mkc models biases on q_proj, k_proj and v_proj only", n_problems=1)
    _rejects(_llama(mlp_bias=True), "mlp_bias (gate_proj, up_proj, down_proj)", n_problems=1)
    _rejects(Qwen3Config(**SMALL, attention_bias=True), "Qwen3ForCausalLM", "attention_bias", n_problems=1)


def test_activation_and_quantization():
    _rejects(_llama(hidden_act="gelu"), "hidden_act 'gelu'", "SiLU(gate)*up", n_problems=1)
    _rejects({**_llama().to_dict(), "quantization_config": {"quant_method": "gptq", "bits": 4}},
             "quantized weights", "'gptq'", "unquantized", n_problems=1)


def test_every_problem_is_listed_at_once(tmp_path):
    cfg = {**_llama().to_dict(), "hidden_size": 320, "head_dim": None, "mlp_bias": True, "hidden_act": "relu",
           "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    msg = _rejects(tmp_path, f"LlamaForCausalLM (", f" from {tmp_path}:", "hidden_act 'relu'", "'dynamic'",
                   "head_dim 80", "mlp_bias", n_problems=4)
    assert msg.endswith("(transformers 5.17.0).")


def test_capture_calls_the_gate_before_export():
    from mkc.capture import capture

    with pytest.raises(UnsupportedModelError, match="head_dim 80"):
        capture(_llama(hidden_size=320), 1, 16)  # the no_export fixture proves export never ran


def test_idle_window_captures_as_full_attention():
    from transformers import MistralConfig

    from mkc.capture import capture

    graph = capture(MistralConfig(**SMALL, sliding_window=16), 1, 16)
    assert graph == capture(MistralConfig(**SMALL, sliding_window=None), 1, 16)
