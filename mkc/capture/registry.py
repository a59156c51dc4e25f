"""The registry of bundled models, and resolving what a user names into a model source.

``models/<name>/config.json`` holds the real Hugging Face config of a model (no weights); registry
names build that architecture with seeded random weights. A user may also name a local directory
holding a ``config.json`` (and optionally ``*.safetensors`` weights), or hand over a transformers
config or model object. Listing the registry reads JSON only, so it stays fast.
"""

from __future__ import annotations

import importlib.resources
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from mkc.capture.graph import ModelInfo
from mkc.errors import UnknownNameError, UnsupportedModelError


def _models_dir() -> Path:
    """The bundled configs: package data ``mkc.models`` (the repository's top-level models/, mapped by
    pyproject.toml), so a wheel lists the same models as a checkout."""
    try:
        return Path(str(importlib.resources.files("mkc.models")))
    except ModuleNotFoundError:
        # A checkout put on PYTHONPATH without being installed: nothing maps mkc.models onto models/ then.
        return Path(__file__).resolve().parents[2] / "models"


MODELS_DIR = _models_dir()
DEFAULT_MODEL = "llama-3.2-1b"

# transformers class -> mkc family; the only architectures capture maps.
SUPPORTED_ARCHS = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MistralForCausalLM": "mistral",
}
# What a family's transformers code hard-wires whatever its config says: Qwen2 always biases q/k/v but not
# o_proj, Mistral never biases, Qwen3 always RMS-normalises q and k per head. Elsewhere (Llama, Qwen3) the
# config's attention_bias puts biases on q/k/v and o_proj.
FIXED_FEATURES = {"qwen2": {"qkv_bias": True}, "mistral": {"qkv_bias": False}, "qwen3": {"qk_norm": True}}


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
        """The transformers checkpoint's files only (a consolidated.safetensors beside it is another copy)."""
        if self.registry or self.directory is None:
            return ()
        from mkc.capture.checkpoint import find_checkpoint

        return find_checkpoint(self.directory).files

    @property
    def shadows_registry(self) -> bool:
        """A folder named like a bundled model: the folder was used, which a user may not expect."""
        return not self.registry and self.directory is not None and \
            self.name.lower() in {n.lower() for n in _registry_names()}

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


def read_config(model: Any) -> dict:
    """The config.json values of a registry name, a ModelEntry, a directory or config.json path; a mapping
    or a transformers config as a dict."""
    if isinstance(model, Mapping):
        return dict(model)
    if isinstance(model, ModelSource):
        model = model.config if model.directory is None else model.directory
    if isinstance(model, ModelEntry):
        model = model.path
    if hasattr(model, "to_dict"):  # a transformers PretrainedConfig
        return model.to_dict()
    text = os.fspath(model)
    names = {n.lower(): n for n in _registry_names()}
    local = Path(text).expanduser()
    local_cfg = local / "config.json" if local.is_dir() else local
    # the same precedence as resolve: an existing folder wins over a registry name
    path = local if local_cfg.is_file() or text.lower() not in names else MODELS_DIR / names[text.lower()]
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise _unknown(text)
    return json.loads(path.read_text())


def model_info(model: Any) -> ModelInfo:
    """The ModelInfo of a config, read without transformers or export (see read_config for what ``model``
    may be).

    Capture derives the same facts from the exported graph (tests/test_registry.py keeps the two equal);
    this is the cheap path, for listing models and for tests of later stages, which need shapes and
    feature flags but no export.
    """
    cfg = read_config(model)
    arch = (cfg.get("architectures") or ["?"])[0]
    family = SUPPORTED_ARCHS.get(arch) or cfg.get("model_type") or "?"
    fixed = FIXED_FEATURES.get(family, {})
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    return ModelInfo(
        arch=arch, family=family, hidden=H, intermediate=cfg["intermediate_size"],
        n_layers=cfg["num_hidden_layers"], n_heads=nh, n_kv_heads=cfg.get("num_key_value_heads") or nh,
        head_dim=cfg.get("head_dim") or H // nh, vocab=cfg["vocab_size"], rms_eps=float(cfg["rms_norm_eps"]),
        # transformers' default when a config leaves it out, and what capture then finds
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=fixed.get("qkv_bias", bool(cfg.get("attention_bias", False))),
        qk_norm=fixed.get("qk_norm", False),
    )


def count_params(model: Any) -> int:
    """Parameter count of a supported decoder from its config.json values (a tied embedding counted once)."""
    cfg = read_config(model)
    m = model_info(cfg)
    H, I, hd, nh, nkv = m.hidden, m.intermediate, m.head_dim, m.n_heads, m.n_kv_heads
    per_layer = H * (nh + 2 * nkv) * hd + nh * hd * H + 3 * H * I + 2 * H
    if m.qkv_bias:
        per_layer += (nh + 2 * nkv) * hd
    if m.qk_norm:
        per_layer += 2 * hd
    # Biases ModelInfo has no flag for, as capture rejects them; counted so that `mkc models` still sizes
    # such a config right. Where attention_bias governs q/k/v it biases o_proj too.
    if "qkv_bias" not in FIXED_FEATURES.get(m.family, {}) and cfg.get("attention_bias", False):
        per_layer += H
    if cfg.get("mlp_bias", False):
        per_layer += 2 * I + H
    return m.vocab * H + m.n_layers * per_layer + H + (0 if m.tied_embeddings else m.vocab * H)


def list_models() -> list[ModelEntry]:
    entries = []
    for name in known_models():
        path = MODELS_DIR / name
        cfg = read_config(path)
        info, n = model_info(cfg), count_params(cfg)
        entries.append(ModelEntry(name, info.arch, info.family, info.n_layers, info.hidden, n, 2 * n, path))
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
        path = Path(text).expanduser()
        if path.is_file() and path.name == "config.json":
            path = path.parent
        # a folder the user downloaded wins over a bundled config of the same name: its weights are real
        if path.is_dir() and (path / "config.json").is_file():
            return ModelSource(str(path), _load_config(path), path.resolve())
        names = {n.lower(): n for n in _registry_names()}
        if text.lower() in names:
            name = names[text.lower()]
            return ModelSource(name, _load_config(MODELS_DIR / name), MODELS_DIR / name, registry=True)
        if path.is_dir():
            raise UnknownNameError(f"directory {path} has no config.json")
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
