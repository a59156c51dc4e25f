"""torch.export of one decode step of a Hugging Face decoder with a static KV cache.

Capture needs shapes, not weights: registry names and directories are built on the meta device,
so an 8B model exports in a few hundred MB. What was checked on transformers 5.17 / torch 2.13 is
recorded in docs/design.md ("Capture"): strict export of ``TorchExportableModuleForDecoderOnlyLM``, then
decompositions that keep ``linear``, ``scaled_dot_product_attention`` and ``silu`` whole.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import torch

from mkc.capture.registry import ModelSource

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
MKC_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}
MKC_DTYPES[torch.int64] = "i64"

# ATen ops the matcher wants whole; everything else decomposes to the core ATen set.
KEEP_WHOLE = ("linear", "scaled_dot_product_attention", "silu")


# Warnings every export of a transformers 5.17 decoder prints, which say nothing about the user's model.
_EXPORT_NOISE = (
    r"While compiling, we found certain side effects happened",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
)


@dataclass(frozen=True)
class RopeConstants:
    inv_freq: tuple[float, ...]
    attention_scaling: float


def meta_model(src: ModelSource, dtype: torch.dtype = torch.bfloat16):
    """The model's architecture with every weight on the meta device (no memory for weights)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(src.config, dtype=dtype)
    return model.eval()


@contextlib.contextmanager
def _static_cache(model):
    """Ask for a static cache during export, restoring the caller's generation config after."""
    gen = model.generation_config
    before = gen.cache_implementation
    gen.cache_implementation = "static"
    try:
        yield
    finally:
        gen.cache_implementation = before


def export_decode_step(model, batch: int, max_seq_len: int) -> tuple[torch.export.ExportedProgram, str]:
    """Export one decode step (one token per sequence) and decompose it for the matcher.

    Returns the program and the prefix its parameter and buffer names carry in front of the
    model's own state-dict names.
    """
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    with _static_cache(model), torch.no_grad(), warnings.catch_warnings():
        for message in _EXPORT_NOISE:
            warnings.filterwarnings("ignore", message=message)
        wrapper = TorchExportableModuleForDecoderOnlyLM(model, batch_size=batch, max_cache_len=max_seq_len)
        device = next(model.parameters()).device
        ep = wrapper.export(
            input_ids=torch.zeros(batch, 1, dtype=torch.long, device=device),
            cache_position=torch.tensor([0], dtype=torch.long, device=device),
            strict=True,
        )
        table = torch.export.default_decompositions()
        for name in KEEP_WHOLE:
            table.pop(getattr(torch.ops.aten, name).default, None)
        ep = ep.run_decompositions(table)
    # The wrapper holds the model as ``self.model``: its names carry that prefix.
    inner = wrapper.model
    prefix = "model." if getattr(inner, "model", None) is model else ""
    return ep, prefix


def rope_constants(model) -> dict[str, RopeConstants]:
    """RoPE inverse frequencies and attention scaling per rotary module, computed on the CPU.

    On a meta model the ``inv_freq`` buffer has no values, so a fresh rotary module of the same
    class is built from the config on the CPU: this runs the model's own init, rope scaling
    (e.g. llama3) included. Keys are the buffer names (``model.rotary_emb.inv_freq``).
    """
    out = {}
    for path, module in model.named_modules():
        if "inv_freq" not in dict(module.named_buffers(recurse=False)):
            continue
        with torch.device("cpu"):
            fresh = type(module)(config=model.config)
        inv = fresh.inv_freq.detach().to(torch.float32)
        out[f"{path}.inv_freq" if path else "inv_freq"] = RopeConstants(
            tuple(float(x) for x in inv), float(getattr(fresh, "attention_scaling", 1.0))
        )
    return out
