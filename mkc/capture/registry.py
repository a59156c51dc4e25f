"""The registry of bundled models, and resolving what a user names into a model source.

``models/<name>/config.json`` holds the real Hugging Face config of a model (no weights); registry
names build that architecture with seeded random weights. A user may also name a local directory
holding a ``config.json`` (and optionally ``*.safetensors`` weights), or hand over a transformers
config or model object. Listing the registry reads JSON only, so it stays fast.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mkc
from mkc.errors import UnknownNameError, UnsupportedModelError

REPO_ROOT = Path(mkc.__file__).resolve().parents[1]
MODELS_DIR = REPO_ROOT / "models"
DEFAULT_MODEL = "llama-3.2-1b"

# transformers class -> mkc family; the only architectures capture maps.
SUPPORTED_ARCHS = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MistralForCausalLM": "mistral",
}
SUPPORTED_FAMILIES = tuple(dict.fromkeys(SUPPORTED_ARCHS.values()))


@dataclass(frozen=True)
class ModelEntry:
    name: str
    arch: str
    family: str
    layers: int
    hidden: int
    params: int  # parameter count (a tied embedding counted once)
    bytes: int  # weight bytes in bf16
    path: Path

    @property
    def tiny(self) -> bool:
        return self.name.startswith("tiny-")


@dataclass(frozen=True, eq=False)
class ModelSource:
    """What a model argument resolved to: a config, and where weights come from."""

    name: str  # registry name, directory path, or class name of a given object
    config: Any  # a transformers PretrainedConfig
    directory: Path | None = None  # the directory holding config.json
    registry: bool = False  # a bundled registry model: seeded random weights
    module: Any = None  # a transformers model object handed over by the caller

    @property
    def weight_files(self) -> tuple[Path, ...]:
        if self.registry or self.directory is None:
            return ()
        return tuple(sorted(self.directory.glob("*.safetensors")))

    @property
    def arch(self) -> str:
        return architecture_name(self.config, self.module)


def _registry_names() -> list[str]:
    if not MODELS_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in MODELS_DIR.glob("*/config.json"))


def known_models() -> list[str]:
    """Registry names, real models first, then the tiny test models."""
    names = _registry_names()
    return [n for n in names if not n.startswith("tiny-")] + [n for n in names if n.startswith("tiny-")]


def count_params(cfg: dict) -> int:
    """Parameter count of a supported decoder from its config.json values."""
    H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or H // nh
    V = cfg["vocab_size"]
    family = cfg.get("model_type")
    attn_bias = family == "qwen2" or bool(cfg.get("attention_bias", False))
    per_layer = H * (nh + 2 * nkv) * hd + nh * hd * H + 3 * H * I + 2 * H
    if attn_bias:
        per_layer += (nh + 2 * nkv) * hd
        if family != "qwen2":  # llama's attention_bias also puts a bias on o_proj
            per_layer += H
    if cfg.get("mlp_bias", False):
        per_layer += 2 * I + H
    if family == "qwen3":
        per_layer += 2 * hd  # q_norm, k_norm
    tied = cfg.get("tie_word_embeddings", True)
    return V * H + L * per_layer + H + (0 if tied else V * H)


def list_models() -> list[ModelEntry]:
    entries = []
    for name in known_models():
        path = MODELS_DIR / name
        cfg = json.loads((path / "config.json").read_text())
        arch = (cfg.get("architectures") or ["?"])[0]
        n = count_params(cfg)
        entries.append(ModelEntry(name, arch, SUPPORTED_ARCHS.get(arch, cfg.get("model_type", "?")),
                                  cfg["num_hidden_layers"], cfg["hidden_size"], n, 2 * n, path))
    return entries


def _unknown(name: str) -> UnknownNameError:
    return UnknownNameError(
        f"unknown model {name!r}: not a registry name nor a directory with a config.json.\n"
        f"Known models: {', '.join(known_models())}"
    )


def _load_config(directory: Path):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(directory), local_files_only=True)
    except (ValueError, KeyError) as e:  # e.g. a model_type this transformers does not know
        raise UnsupportedModelError(f"cannot read {directory / 'config.json'}: {e}") from None


def resolve(model: Any = None) -> ModelSource:
    """Resolve a registry name, a local directory, a transformers config or model object."""
    if model is None:
        model = DEFAULT_MODEL
    if isinstance(model, ModelSource):
        return model
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        names = {n.lower(): n for n in _registry_names()}
        if text.lower() in names:
            name = names[text.lower()]
            return ModelSource(name, _load_config(MODELS_DIR / name), MODELS_DIR / name, registry=True)
        path = Path(text).expanduser()
        if path.is_file() and path.name == "config.json":
            path = path.parent
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise UnknownNameError(f"directory {path} has no config.json")
            return ModelSource(str(path), _load_config(path), path.resolve())
        raise _unknown(text)
    from transformers import PretrainedConfig, PreTrainedModel

    if isinstance(model, PretrainedConfig):
        return ModelSource(type(model).__name__, model)
    if isinstance(model, PreTrainedModel):
        return ModelSource(type(model).__name__, model.config, module=model)
    raise UnknownNameError(
        f"cannot resolve a model from {type(model).__name__}: give a registry name, a directory with a "
        f"config.json, or a transformers config or model. Known models: {', '.join(known_models())}"
    )


def architecture_name(config, module=None) -> str:
    """The transformers class that implements this model as a causal LM ('' if none does)."""
    if module is not None:
        return type(module).__name__
    archs = getattr(config, "architectures", None) or []
    if archs:
        return archs[0]
    from transformers import AutoModelForCausalLM

    cls = AutoModelForCausalLM._model_mapping.get(type(config), None)
    return cls.__name__ if cls is not None else ""


def _where(obj) -> str:
    """``file:line`` where a class is defined, relative to site-packages."""
    import inspect

    try:
        path = inspect.getsourcefile(obj)
        line = inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return ""
    for marker in ("site-packages/", "dist-packages/"):
        if path and marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{line}"


def _moe_module(config) -> str:
    """The first mixture-of-experts module of the architecture (built on the meta device), if any."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # noqa: BLE001 - only a better message is at stake
        return ""
    for path, module in model.named_modules():
        if hasattr(module, "experts") or "moe" in type(module).__name__.lower():
            return f"module {path} ({type(module).__name__}, {_where(type(module))})"
    return ""


def _unsupported_reason(config) -> str:
    if any(getattr(config, k, None) for k in ("num_local_experts", "num_experts", "n_routed_experts")):
        where = _moe_module(config)
        return "it is a mixture-of-experts model" + (f": {where}" if where else "") + "; mkc maps dense MLPs only"
    if getattr(config, "is_encoder_decoder", False):
        return "it is an encoder-decoder model, and mkc compiles decoder-only LMs"
    if getattr(config, "vision_config", None) is not None or getattr(config, "image_size", None) is not None:
        return "it is a vision model, and mkc compiles text decoder-only LMs"
    return "mkc maps Llama-style decoders only (RMSNorm, RoPE, grouped-query attention, SiLU-gated MLP)"


def check_supported(src: ModelSource) -> str:
    """Reject an architecture capture cannot map before spending time on export; returns the family."""
    arch = src.arch
    config = src.config
    if arch in SUPPORTED_ARCHS and getattr(config, "model_type", None) == SUPPORTED_ARCHS[arch]:
        return SUPPORTED_ARCHS[arch]
    if arch:
        import transformers

        cls = type(src.module) if src.module is not None else getattr(transformers, arch, None)
        where = _where(cls) if cls is not None else ""
        what = f"{arch}" + (f" ({where})" if where else "")
    else:
        what = f"{type(config).__name__} (model_type {getattr(config, 'model_type', '?')!r}, {_where(type(config))})"
    origin = f" from {src.name}" if src.directory is not None else ""
    reason = _unsupported_reason(config)
    if not arch:
        reason = f"transformers has no causal-LM class for it; {reason}"
    raise UnsupportedModelError(
        f"mkc cannot compile {what}{origin}: {reason}.\n"
        f"Supported architectures: {', '.join(SUPPORTED_ARCHS)}."
    )
