"""Weights for a resolved model, and an eager Hugging Face model holding them.

Registry models have no weights: they get seeded random ones, deterministic per (seed, tensor
name) so any subset can be regenerated, with realistic magnitudes (matrices std 0.02, norm
weights 1 +- 0.05). A local directory loads its checkpoint (mkc.capture.checkpoint picks the files
and checks their headers first); a model object gives its own. Whatever loading changes or
assumes (a dtype conversion, random weights for a folder without any) is said, never silent.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Callable

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


def _warn(message: str) -> None:
    warnings.warn(message, UserWarning, stacklevel=3)


def load_weights(model=None, dtype: torch.dtype = torch.bfloat16, seed: int = 0, device="cpu",
                 notify: Callable[[str], None] | None = None) -> dict[str, torch.Tensor]:
    """Weights by Hugging Face state-dict name (a tied LM head appears once, as the embedding).
    Random weights are drawn on ``device``; loaded ones are returned where they were loaded.

    ``notify`` receives each notice (a dtype conversion, random weights for a folder without a
    checkpoint); by default they are issued as warnings. A CLI passes a printer, and calls
    ``checkpoint.require_weights`` first where random weights need the user's consent.
    """
    weights, notices = load_weights_with_notices(model, dtype, seed, device)
    for n in notices:
        (notify or _warn)(n)
    return weights


def load_weights_with_notices(model=None, dtype: torch.dtype = torch.bfloat16, seed: int = 0, device="cpu"
                              ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """``load_weights``, returning the notices instead of issuing them."""
    from mkc.capture.checkpoint import checkpoint_of, expected_tensors, load_checkpoint

    src = resolve(model)
    if src.module is not None:
        return {k: v.detach().to(dtype) for k, v in src.module.state_dict().items()}, []
    ckpt = checkpoint_of(src)
    notices = []
    if ckpt is not None:
        if ckpt.has_weights:
            return load_checkpoint(src, dtype, expected_tensors(src, dtype))
        beside = f" ({', '.join(f.name for f in ckpt.ignored)} not being a transformers checkpoint)" \
            if ckpt.ignored else ""
        notices.append(f"{ckpt.directory} has no weights{beside}: using seeded random weights (seed {seed})")
    shapes = meta_model(src, torch.float32)
    weights = {name: random_weight(name, p.shape, dtype, seed, device) for name, p in shapes.named_parameters()}
    return weights, notices


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
