"""Bad input: architectures and ops capture cannot map fail with one clear message."""

from __future__ import annotations

import re

import pytest
import torch

from mkc.capture import capture, hf_model
from mkc.capture.aten import match
from mkc.capture.export import export_decode_step, rope_constants
from mkc.errors import MkcError, UnknownNameError, UnsupportedModelError

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=128, bos_token_id=1, eos_token_id=2)
SOURCE_LINE = re.compile(r"transformers/\S+\.py:\d+")


def _rejects(model, *names):
    with pytest.raises(UnsupportedModelError) as e:
        capture(model, 1, 16)
    msg = str(e.value)
    for name in names:
        assert name in msg, msg
    assert SOURCE_LINE.search(msg), msg
    assert "Supported architectures: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM" in msg
    return msg


def test_gpt2_is_rejected_early():
    from transformers import GPT2Config

    _rejects(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=128, bos_token_id=1, eos_token_id=2),
             "GPT2LMHeadModel", "modeling_gpt2.py")


def test_mixtral_moe_is_rejected_naming_the_moe_module():
    from transformers import MixtralConfig

    msg = _rejects(MixtralConfig(**SMALL, num_local_experts=4), "MixtralForCausalLM", "mixture-of-experts",
                   "model.layers.0.mlp", "MixtralSparseMoeBlock")
    assert "modeling_mixtral.py" in msg


@pytest.mark.parametrize("kind", ["vision", "encoder"])
def test_vision_and_encoder_configs_are_rejected(kind):
    from transformers import BertConfig, ViTConfig

    if kind == "vision":
        _rejects(ViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4), "ViTConfig", "'vit'",
                 "no causal-LM class")
    else:  # BERT's causal-LM head is an encoder stack run causally: still not a supported decoder
        _rejects(BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4), "BertLMHeadModel")


def test_unmappable_activation_names_op_module_and_line():
    from transformers import LlamaConfig

    # check_config now refuses hidden_act "gelu" before export; the matcher behind it must still name the op
    with pytest.raises(UnsupportedModelError) as e:
        _match_bypassing_arch_check(LlamaConfig(**SMALL, hidden_act="gelu"))
    msg = str(e.value)
    for name in ("aten.gelu.default", "LlamaForCausalLM", "model.layers.0.mlp.act_fn", "GELUActivation",
                 "activation l0.gate", "modeling_llama.py"):
        assert name in msg, msg
    assert SOURCE_LINE.search(msg), msg
    assert "Supported architectures: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM" in msg
    assert "SiLU(gate)*up" in msg  # lists what mkc maps


def test_monkeypatched_module_of_a_model_object_is_reported():
    model = hf_model("tiny-llama")
    model.model.layers[1].mlp.act_fn = torch.nn.Tanh()
    _rejects(model, "aten.tanh.default", "model.layers.1.mlp.act_fn", "(Tanh)", "LlamaForCausalLM")


def test_sliding_window_mask_is_not_mapped():
    from transformers import MistralConfig

    _rejects(MistralConfig(**SMALL, sliding_window=8), "MistralForCausalLM", "masking_utils.py")


def _match_bypassing_arch_check(config):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    ep, prefix = export_decode_step(model, 1, 16)
    return match(ep, model_class=type(model).__name__, batch=1, max_seq_len=16, prefix=prefix,
                 rope_tables=rope_constants(model))


@pytest.mark.parametrize("which", ["gemma", "phi3"])
def test_matcher_itself_fails_loudly_on_other_decoders(which):
    """Were the architecture check skipped, the ATen matcher still stops at the first foreign node."""
    from transformers import GemmaConfig, Phi3Config

    config, expect = {
        "gemma": (GemmaConfig(**SMALL, head_dim=16), ["aten.mul.Tensor", "embed_scale", "GemmaForCausalLM"]),
        "phi3": (Phi3Config(**SMALL, pad_token_id=0), ["qkv_proj", "Phi3ForCausalLM"]),
    }[which]
    with pytest.raises(UnsupportedModelError) as e:
        _match_bypassing_arch_check(config)
    for text in expect:
        assert text in str(e.value)
    assert SOURCE_LINE.search(str(e.value))


def test_bad_arguments():
    with pytest.raises(UnknownNameError):
        capture("no-such-model", 1, 16)
    with pytest.raises(MkcError):
        capture("tiny-llama", 0, 16)
    with pytest.raises(MkcError):
        capture("tiny-llama", 1, 16, dtype="int3")
