"""Capture: a Hugging Face decoder -> mkc's op Graph of one decode step.

Public API: ``capture``, ``load_weights``, ``hf_model``, ``resolve``, ``list_models``, ``Graph``,
``ModelInfo``. The torch/transformers-heavy modules load on first use, so importing
``mkc.capture.graph`` (or listing models) stays cheap for stages that only read graphs.
"""

from __future__ import annotations

from mkc.capture.graph import Graph, ModelInfo
from mkc.capture.registry import DEFAULT_MODEL, ModelEntry, ModelSource, list_models, resolve


def capture(model=None, batch_size: int = 1, max_seq_len: int = 4096, *, dtype: str | None = None) -> Graph:
    """The mkc Graph of one decode step of ``model`` at a fixed batch size and KV-cache length.

    ``model``: a registry name (default llama-3.2-1b), a directory with a config.json, a
    transformers config, or a transformers model object. Names, directories and configs are built
    on the meta device with weights in ``dtype`` ("bf16" default, "f16", "f32"); a model object is
    exported as it is. Raises UnsupportedModelError for what mkc cannot map.
    """
    from mkc.capture.stage import capture as _capture

    return _capture(model, batch_size, max_seq_len, dtype=dtype)


def load_weights(model=None, dtype=None, seed: int = 0, device="cpu"):
    """Weights by HF state-dict name, in ``dtype`` (default torch.bfloat16).

    Registry names: seeded random weights; a directory: its ``*.safetensors``; a model object:
    its state_dict. ``device="cuda"`` draws random weights on the GPU (fast; other values than
    the CPU draw of the same seed).
    """
    import torch

    from mkc.capture.weights import load_weights as _load

    return _load(model, dtype or torch.bfloat16, seed, device)


def hf_model(model=None, dtype=None, device="cpu", weights=None):
    """An eager transformers model of ``model`` in ``dtype`` (default torch.float32) on ``device``,
    holding ``weights`` (default: ``load_weights(model, dtype)``)."""
    import torch

    from mkc.capture.weights import hf_model as _hf

    return _hf(model, dtype or torch.float32, device, weights)


__all__ = ["capture", "load_weights", "hf_model", "resolve", "list_models", "Graph", "ModelInfo",
           "ModelEntry", "ModelSource", "DEFAULT_MODEL"]
