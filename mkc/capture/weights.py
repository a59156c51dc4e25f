"""Weights for a resolved model, and an eager Hugging Face model holding them.

Registry models have no weights: they get seeded random ones, deterministic per (seed, tensor
name) so any subset can be regenerated, with realistic magnitudes (matrices std 0.02, norm
weights 1 +- 0.05). A local directory loads its ``*.safetensors``; a model object gives its own.
"""

from __future__ import annotations

import zlib

import torch

from mkc.capture.export import meta_model
from mkc.capture.registry import resolve
from mkc.errors import MkcError

MATRIX_STD = 0.02
NORM_NOISE = 0.05


def _generator(seed: int, name: str, device="cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(zlib.crc32(f"{seed}:{name}".encode()))


def random_weight(name: str, shape, dtype=torch.bfloat16, seed: int = 0, device="cpu") -> torch.Tensor:
    """Seeded random values; a CUDA ``device`` draws them there (fast for 8B models, but the values
    differ from the CPU draw of the same seed)."""
    g = _generator(seed, name, device)
    w = torch.randn(tuple(shape), generator=g, dtype=torch.float32, device=device)
    if len(shape) == 1 and not name.endswith(".bias"):  # a norm's weight
        w = w.mul_(NORM_NOISE).add_(1.0)
    else:
        w = w.mul_(MATRIX_STD)
    return w.to(dtype)


def load_weights(model=None, dtype: torch.dtype = torch.bfloat16, seed: int = 0, device="cpu") -> dict[str, torch.Tensor]:
    """Weights by Hugging Face state-dict name (a tied LM head appears once, as the embedding).
    Random weights are drawn on ``device``; loaded ones are returned where they were loaded."""
    src = resolve(model)
    if src.module is not None:
        return {k: v.detach().to(dtype) for k, v in src.module.state_dict().items()}
    if src.weight_files:
        from safetensors.torch import load_file

        out: dict[str, torch.Tensor] = {}
        for f in src.weight_files:
            out.update({k: v.to(dtype) for k, v in load_file(str(f)).items()})
        return out
    shapes = meta_model(src, torch.float32)
    return {name: random_weight(name, p.shape, dtype, seed, device) for name, p in shapes.named_parameters()}


def hf_model(model=None, dtype: torch.dtype = torch.float32, device="cpu", weights=None):
    """An eager transformers model holding ``weights`` (default: ``load_weights(model, dtype)``)."""
    src = resolve(model)
    if weights is None:
        weights = load_weights(src, dtype)
    m = meta_model(src, dtype)
    m.to_empty(device=device)
    # Non-persistent buffers (RoPE inv_freq) have no values after to_empty: rebuild their modules.
    for path, module in list(m.named_modules()):
        if path and "inv_freq" in dict(module.named_buffers(recurse=False)):
            parent, _, leaf = path.rpartition(".")
            with torch.device("cpu"):
                fresh = type(module)(config=m.config)
            setattr(m.get_submodule(parent) if parent else m, leaf, fresh.to(device))
    missing, unexpected = m.load_state_dict({k: v.to(dtype) for k, v in weights.items()}, strict=False)
    tied = {"lm_head.weight"} if getattr(m.config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise MkcError(f"weights do not fit {type(m).__name__}: missing {sorted(set(missing) - tied)[:5]}, "
                       f"unexpected {sorted(unexpected)[:5]}")
    if tied:
        m.tie_weights()
    leftover = [n for n, t in list(m.named_parameters()) + list(m.named_buffers()) if t.is_meta]
    if leftover:
        raise MkcError(f"{type(m).__name__} still has tensors without values: {leftover[:5]}")
    return m.eval()
