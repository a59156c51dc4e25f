"""The model registry: bundled configs, parameter counts, and resolving what a user names."""

from __future__ import annotations

import importlib.resources
import json
import shutil
from pathlib import Path

import pytest
import torch

from mkc.capture import list_models, resolve
from mkc.capture.registry import (DEFAULT_MODEL, MODELS_DIR, SUPPORTED_ARCHS, count_params, model_info,
                                  read_config)
from mkc.errors import UnknownNameError

REAL = ["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "qwen3-0.6b", "qwen3-8b", "qwen2.5-1.5b", "mistral-7b-v0.3"]
TINY = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral"]


def _cfg(name):
    return json.loads((MODELS_DIR / name / "config.json").read_text())


def test_registry_lists_real_and_tiny_models():
    entries = {e.name: e for e in list_models()}
    assert set(REAL + TINY) <= set(entries)
    assert DEFAULT_MODEL == "llama-3.2-1b"
    assert [e.name for e in list_models()][: len(REAL)] == sorted(REAL)  # real models first
    for e in entries.values():
        assert e.arch in SUPPORTED_ARCHS and e.family == SUPPORTED_ARCHS[e.arch]
        assert e.bytes == 2 * e.params and e.layers == _cfg(e.name)["num_hidden_layers"]
        assert e.tiny == e.name.startswith("tiny-")


@pytest.mark.parametrize("name,billions", [
    ("llama-3.2-1b", 1.236), ("llama-3.1-8b", 8.030), ("llama-3.1-70b", 70.554), ("qwen3-0.6b", 0.596), ("qwen3-8b", 8.191),
    ("qwen2.5-1.5b", 1.544), ("mistral-7b-v0.3", 7.248),
])
def test_real_model_sizes(name, billions):
    entry = next(e for e in list_models() if e.name == name)
    assert entry.params / 1e9 == pytest.approx(billions, abs=0.001)


def test_real_configs_carry_the_hub_values():
    llama = _cfg("llama-3.2-1b")
    assert llama["rope_scaling"] == {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}
    assert llama["rope_theta"] == 500000.0 and llama["tie_word_embeddings"] is True
    assert (llama["hidden_size"], llama["num_hidden_layers"], llama["num_key_value_heads"]) == (2048, 16, 8)
    assert _cfg("llama-3.1-8b")["rope_scaling"]["factor"] == 8.0
    assert _cfg("qwen3-8b")["head_dim"] == 128 and _cfg("qwen3-8b")["tie_word_embeddings"] is False
    assert _cfg("qwen2.5-1.5b")["num_key_value_heads"] == 2 and _cfg("qwen2.5-1.5b")["tie_word_embeddings"]
    assert _cfg("mistral-7b-v0.3")["vocab_size"] == 32768 and _cfg("mistral-7b-v0.3")["sliding_window"] is None


def test_tiny_configs_cover_each_family_feature():
    llama, qwen2, qwen3, mistral = (_cfg(n) for n in TINY)
    assert llama["rope_scaling"]["rope_type"] == "llama3" and llama["tie_word_embeddings"]
    assert qwen2["model_type"] == "qwen2" and qwen2["tie_word_embeddings"]  # Qwen2 always has q/k/v bias
    assert qwen3["head_dim"] != qwen3["hidden_size"] // qwen3["num_attention_heads"]  # as in real Qwen3
    assert not mistral["tie_word_embeddings"]
    for cfg in (llama, qwen2, qwen3, mistral):
        assert cfg["num_hidden_layers"] == 2 and cfg["num_attention_heads"] > cfg["num_key_value_heads"]
        assert 256 <= cfg["vocab_size"] <= 512


@pytest.mark.parametrize("name", REAL + TINY)
def test_param_count_matches_the_transformers_model(name):
    from mkc.capture.export import meta_model

    model = meta_model(resolve(name))
    assert count_params(_cfg(name)) == sum(p.numel() for p in model.parameters())


def test_resolve_registry_names_and_default():
    src = resolve(None)
    assert src.name == DEFAULT_MODEL and src.registry and src.weight_files == ()
    assert src.arch == "LlamaForCausalLM" and src.config.num_hidden_layers == 16
    assert resolve("Tiny-Qwen3").name == "tiny-qwen3"  # names are case-insensitive


def test_unknown_name_lists_known_models():
    with pytest.raises(UnknownNameError) as e:
        resolve("llama-99b")
    assert "llama-99b" in str(e.value) and "llama-3.2-1b" in str(e.value) and "tiny-qwen3" in str(e.value)


def test_resolve_local_directory(tmp_path):
    shutil.copy(MODELS_DIR / "tiny-qwen3" / "config.json", tmp_path / "config.json")
    src = resolve(tmp_path)
    assert not src.registry and src.directory == tmp_path.resolve() and src.config.head_dim == 32
    assert resolve(str(tmp_path / "config.json")).directory == tmp_path.resolve()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UnknownNameError, match="no config.json"):
        resolve(empty)


def test_resolve_config_and_model_objects():
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=128)
    assert resolve(cfg).config is cfg and resolve(cfg).arch == "LlamaForCausalLM"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    src = resolve(model)
    assert src.module is model and src.config is model.config and resolve(src) is src
    with pytest.raises(UnknownNameError):
        resolve(3.14)


@pytest.mark.parametrize("name", TINY)
def test_model_info_from_the_config_equals_what_capture_derives(captured, name):
    # The cheap config path stands in for capture in later stages' tests, so the two must never drift.
    assert model_info(name) == captured(name, 1, 16).model


def test_model_info_accepts_names_entries_paths_dicts_and_configs():
    entry = next(e for e in list_models() if e.name == "tiny-qwen3")
    want = model_info("tiny-qwen3")
    assert want.qk_norm and not want.qkv_bias and not want.tied_embeddings and want.head_dim == 32
    for form in (entry, entry.path, entry.path / "config.json", str(entry.path), _cfg("tiny-qwen3"),
                 resolve("tiny-qwen3"), resolve("tiny-qwen3").config):
        assert model_info(form) == want, form
    with pytest.raises(UnknownNameError):
        read_config("llama-99b")


def test_feature_flags_follow_what_each_family_hard_wires():
    base = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
            "vocab_size": 100, "rms_norm_eps": 1e-6}

    def cfg(arch, **kw):
        return {**base, "architectures": [arch], **kw}

    assert model_info(cfg("Qwen2ForCausalLM")).qkv_bias  # whatever attention_bias says
    assert not model_info(cfg("MistralForCausalLM", attention_bias=True)).qkv_bias
    assert model_info(cfg("LlamaForCausalLM", attention_bias=True)).qkv_bias
    assert model_info(cfg("Qwen3ForCausalLM")).qk_norm and not model_info(cfg("LlamaForCausalLM")).qk_norm
    # llama's attention_bias also biases o_proj; qwen2's hard-wired q/k/v biases do not
    llama = cfg("LlamaForCausalLM")
    assert count_params({**llama, "attention_bias": True}) - count_params(llama) == 3 * 64 + 64
    qwen2 = cfg("Qwen2ForCausalLM")
    assert count_params({**qwen2, "attention_bias": True}) == count_params(qwen2)


def test_models_are_package_data_not_found_through_the_repository():
    # mkc.models is the wheel's copy of models/; only a checkout that is not installed falls back to the folder
    import importlib.util

    assert (MODELS_DIR / DEFAULT_MODEL / "config.json").is_file()
    if importlib.util.find_spec("mkc.models") is not None:
        assert MODELS_DIR == Path(str(importlib.resources.files("mkc.models")))
