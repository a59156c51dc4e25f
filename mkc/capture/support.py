"""What mkc cannot compile, read off a model's config before anything expensive runs.

Capture (torch.export plus the ATen matcher) rejects every unsupported model eventually, but
late and in its own terms: a sliding-window mask surfaces as ``aten.full`` in masking_utils,
dynamic RoPE as torch.fx "data-dependent branching" after a page of generated source, an
untileable head_dim only at codegen, after scheduling and verification (exit 1). The config
already says all of this, so ``check_config`` reads it first and names the feature, the model
class and what mkc supports instead.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import os
from pathlib import Path

from mkc.errors import UnsupportedModelError

TRANSFORMERS_PIN = "5.17.0"
SUPPORTED_ARCHS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                   "mistral": "MistralForCausalLM"}

# RoPE types whose frequencies the rotary module fixes at init: capture reads them off a CPU copy
# of the module (export.rope_constants) into one table. "dynamic" and "longrope" recompute them
# from the position inside forward, which one static table cannot follow.
FIXED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "proportional")

# What a family does that the Llama-style decoder (pre-RMSNorm, RoPE, GQA, SiLU-gated MLP) does not.
DIFFERENCES = {
    "gemma": "a GeGLU MLP (GELU-tanh gate where mkc has SiLU), embeddings multiplied by sqrt(hidden_size), "
             "and RMSNorm scaling by (1 + weight)",
    "gemma2": "a GeGLU MLP (GELU-tanh gate where mkc has SiLU), embeddings multiplied by sqrt(hidden_size), "
              "RMSNorm scaling by (1 + weight), extra norms after attention and MLP, attention and final-logit "
              "soft-capping, and sliding-window attention on every other layer",
    "gemma3_text": "a GeGLU MLP (GELU-tanh gate where mkc has SiLU), embeddings multiplied by sqrt(hidden_size), "
                   "RMSNorm scaling by (1 + weight), extra norms after attention and MLP, and sliding-window "
                   "(local) attention layers with their own RoPE base",
    "phi3": "fused projections (one qkv_proj, one gate_up_proj) where mkc maps separate q/k/v and gate/up "
            "linears",
    "phi": "LayerNorm with a bias, attention and MLP in parallel off one norm, a partial rotary embedding, and "
           "a GELU MLP without a gate",
    "gpt_neox": "LayerNorm with a bias, a parallel attention/MLP residual, a fused query_key_value projection, "
                "a partial rotary embedding (rotary_pct), and a GELU MLP without a gate",
    "gpt2": "learned absolute position embeddings (no RoPE), LayerNorm, a fused c_attn projection, and a "
            "GELU MLP without a gate",
    "falcon": "LayerNorm, a fused query_key_value projection, attention and MLP in parallel, and a GELU MLP "
              "without a gate",
    "olmo": "LayerNorm without learned weights",
    "olmo2": "norms after attention and after the MLP (not before them), and q/k RMSNorm over all heads at once",
    "cohere": "LayerNorm, attention and MLP in parallel, and logits scaled by logit_scale",
    "stablelm": "LayerNorm with a bias and a partial rotary embedding",
    "starcoder2": "LayerNorm with a bias, a GELU MLP without a gate, biases on every projection, and "
                  "sliding-window attention",
    "granite": "scaling factors mkc does not model (embedding_multiplier, residual_multiplier, "
               "attention_multiplier, logits_scaling)",
}


def supported_head_dims() -> tuple[int, ...]:
    """The head dims the generated kernel tiles (mkc.codegen.render.kernel_config): a multiple of 8
    (16-byte cache rows) whose half (the rotary pairs) divides the threads of a block."""
    from mkc.backend import backends
    from mkc.target import TARGETS

    threads = {backends()[t.vendor].launch_limits(t).threads for t in TARGETS.values()}
    # 512 also passes those two checks, but the q/k-norm path stages a whole key in one 256-position
    # attention tile (kernel.j2: static_assert NREP * ATT_CH >= HD), which nvcc rejects for 512 with
    # one query head per KV head; and no model mkc targets has a head_dim above 256
    top = min(min(threads), 256)
    return tuple(hd for hd in range(8, top + 1, 8) if all(t % (hd // 2) == 0 for t in threads))


def _where(obj) -> str:
    """``path:line`` of a class or function, relative to site-packages (or to mkc's checkout)."""
    try:
        path, line = inspect.getsourcefile(obj), inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return ""
    for marker in ("site-packages/", "dist-packages/"):
        if path and marker in path:
            path = path.split(marker, 1)[1]
    if path and "/mkc/" in path:
        path = "mkc/" + path.rsplit("/mkc/", 1)[1]
    return f"{path}:{line}" if path else ""


def _arch(config) -> str:
    archs = getattr(config, "architectures", None) or []
    if archs:
        return archs[0]
    from transformers import AutoModelForCausalLM

    cls = AutoModelForCausalLM._model_mapping.get(type(config), None)
    return cls.__name__ if cls is not None else type(config).__name__


def _model_class(config) -> str:
    """'LlamaForCausalLM (transformers/models/llama/modeling_llama.py:NNN)'."""
    import transformers

    arch = _arch(config)
    cls = getattr(transformers, arch, None)
    where = _where(cls) if cls is not None else ""
    return arch + (f" ({where})" if where else "")


def _origin(config) -> str:
    path = getattr(config, "_name_or_path", "") or ""
    return f" from {path}" if path else ""


def _raise(config, problems: list[str], lead: str = "") -> None:
    body = lead or "\n".join(f"  - {p}" for p in problems)
    sep = ": " if lead else ":\n"
    raise UnsupportedModelError(
        f"mkc cannot compile {_model_class(config)}{_origin(config)}{sep}{body}\n"
        f"Supported architectures: {', '.join(SUPPORTED_ARCHS.values())} "
        f"(transformers {TRANSFORMERS_PIN})."
    )


def _as_config(config):
    """A transformers config from a config object, a config.json dict, or a folder / config.json path."""
    if isinstance(config, (str, os.PathLike)):
        p = Path(config).expanduser()
        p = p / "config.json" if p.is_dir() else p
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise UnsupportedModelError(f"cannot read {p}: {e}") from None
        data["_name_or_path"] = data.get("_name_or_path") or str(p.parent)
        config = data
    if not isinstance(config, dict):
        return config
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    data = dict(config)
    model_type = data.pop("model_type", None)
    where = f" in {data['_name_or_path']}" if data.get("_name_or_path") else ""
    if model_type not in CONFIG_MAPPING:
        what = f"model_type {model_type!r}" if model_type else "no model_type"
        raise UnsupportedModelError(
            f"config.json{where} has {what}, which transformers {TRANSFORMERS_PIN} (the version mkc pins; "
            f"upgrading it is not an option) does not know, so mkc cannot build the model. mkc compiles "
            f"model_type {', '.join(SUPPORTED_ARCHS)} ({', '.join(SUPPORTED_ARCHS.values())}); a fine-tune of "
            f"one of those keeps its base model's model_type and architectures.")
    name = data.pop("_name_or_path", "")
    cfg = AutoConfig.for_model(model_type, **data)
    cfg._name_or_path = name
    return cfg


def _sliding(config) -> tuple[int, list[int]]:
    """(window, the layers that use it); (0, []) for full attention everywhere."""
    window = getattr(config, "sliding_window", None) or 0
    n = getattr(config, "num_hidden_layers", 0)
    types = getattr(config, "layer_types", None)
    if types:
        layers = [i for i, t in enumerate(types) if "sliding" in str(t)]
    else:  # Mistral: a window set means every layer uses it
        layers = list(range(n)) if window else []
    return (window, layers) if window and layers else (0, [])


def _rope_parameters(config) -> list[dict]:
    rp = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(rp, dict) and rp and all(isinstance(v, dict) for v in rp.values()):
        return list(rp.values())  # one set per layer type
    return [rp] if isinstance(rp, dict) else []


def _layers_text(layers: list[int], n: int) -> str:
    if len(layers) == n:
        return f"all {n} layers"
    shown = ", ".join(map(str, layers[:8])) + (" ..." if len(layers) > 8 else "")
    return f"{len(layers)} of {n} layers ({shown})"


def check_config(config, max_seq_len: int | None = None) -> None:
    """Raise UnsupportedModelError naming every feature of ``config`` mkc cannot compile.

    ``config``: a transformers config, a config.json dict, or a folder / config.json path (a dict
    or path is checked before transformers parses it, so an unknown model_type gets mkc's
    message). ``max_seq_len``: the KV-cache length to be compiled; a sliding window is allowed
    when it is at most the window (it then never bites). With None, only the checks that hold at
    every length run. Families other than mkc's four that are not listed in DIFFERENCES pass
    through (registry.check_supported explains mixture-of-experts, vision and encoder models).
    """
    config = _as_config(config)
    model_type = getattr(config, "model_type", None)
    if model_type in DIFFERENCES:
        _raise(config, [], f"it is not a Llama-style decoder: {model_type} has {DIFFERENCES[model_type]}.")
    if model_type not in SUPPORTED_ARCHS:
        return
    problems = []

    q = getattr(config, "quantization_config", None)
    if q:
        method = q.get("quant_method", "?") if isinstance(q, dict) else getattr(q, "quant_method", "?")
        problems.append(f"quantized weights (quantization_config, quant_method {method!r}): mkc compiles bf16 "
                        f"weights; use the unquantized checkpoint")

    act = getattr(config, "hidden_act", "silu")
    if act != "silu":
        problems.append(f"hidden_act {act!r}: mkc maps the SiLU-gated MLP, SiLU(gate)*up, only")

    window, layers = _sliding(config)
    if layers and max_seq_len is not None and max_seq_len > window:
        from transformers import masking_utils

        where = _where(masking_utils.create_sliding_window_causal_mask)
        n = getattr(config, "num_hidden_layers", len(layers))
        problems.append(f"sliding-window attention (window {window} on {_layers_text(layers, n)}; {where}): "
                        f"mkc's attention is full causal over the KV cache, so it compiles this model only with "
                        f"--max-seq-len {window} or less (got {max_seq_len}), where the window never bites")

    for rp in _rope_parameters(config):
        rtype = rp.get("rope_type", rp.get("type", "default"))
        if rtype not in FIXED_ROPE_TYPES:
            from transformers import modeling_rope_utils

            why = ("recomputes the RoPE frequencies from the position at every step"
                   if "dynamic" in rtype or rtype == "longrope" else "is not a RoPE type mkc knows")
            problems.append(f"RoPE scaling {rtype!r} ({_where(modeling_rope_utils.dynamic_rope_update)}) {why}; "
                            f"mkc computes one RoPE table at compile time and supports rope types "
                            f"{', '.join(FIXED_ROPE_TYPES)}")
            break
        partial = rp.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)) or 1.0
        if partial != 1.0 and rtype != "proportional":
            problems.append(f"a partial rotary embedding (partial_rotary_factor {partial}): mkc rotates the "
                            f"whole head")
            break

    H, nh = config.hidden_size, config.num_attention_heads
    hd = getattr(config, "head_dim", None) or H // nh
    dims = supported_head_dims()
    if hd not in dims:
        import importlib

        render = importlib.import_module("mkc.codegen.render")  # the package re-exports a function of that name
        problems.append(f"head_dim {hd}: the kernel ({_where(render.kernel_config)}) needs head_dim a multiple of "
                        f"8 whose half divides the 256 threads of a block; supported head dims are "
                        f"{', '.join(map(str, dims))}")
    for name, k in (("hidden_size", H), ("intermediate_size", config.intermediate_size),
                    ("num_attention_heads * head_dim", nh * hd)):
        if k % 8:
            problems.append(f"{name} {k} is not a multiple of 8 (the kernel reads weight rows in 16-byte loads)")

    biases = []
    if getattr(config, "attention_bias", False) and model_type != "qwen2":
        biases.append("attention_bias (q_proj, k_proj, v_proj and o_proj)")
    if getattr(config, "mlp_bias", False):
        biases.append("mlp_bias (gate_proj, up_proj, down_proj)")
    if biases:
        problems.append(f"biases from {' and '.join(biases)}: mkc models biases on q_proj, k_proj and v_proj "
                        f"only (as Qwen2 has them), none on o_proj or the MLP")

    if problems:
        _raise(config, problems)


def full_attention_config(config, max_seq_len: int):
    """``config`` with its sliding window removed when the window cannot bite at ``max_seq_len``
    (a copy; the same object when there is nothing to remove)."""
    window, layers = _sliding(config)
    if not layers or max_seq_len > window:
        return config
    cfg = copy.deepcopy(config)
    cfg.sliding_window = None
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = ["full_attention"] * len(cfg.layer_types)
    if hasattr(cfg, "use_sliding_window"):
        cfg.use_sliding_window = False
    return cfg


def checked_source(src, max_seq_len: int):
    """``check_config`` on a resolved ModelSource, and the source capture should build: one whose
    idle sliding window is removed, since the exported mask would otherwise carry it."""
    check_config(src.config, max_seq_len)
    cfg = full_attention_config(src.config, max_seq_len)
    if cfg is src.config:
        return src
    if src.module is not None:
        raise UnsupportedModelError(
            f"{_model_class(src.config)} was handed over as a model object with sliding-window attention: mkc "
            f"can compile it at --max-seq-len {max_seq_len} (the window never bites) only by rebuilding it "
            f"without the window; pass its config or folder instead")
    return dataclasses.replace(src, config=cfg)
