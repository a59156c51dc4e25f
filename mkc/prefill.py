"""Prefill that is not P decode steps: one batched torch forward over positions [0, m) of every row,
on the SAME weights the kernel holds (``mk.weights``: bf16 device tensors by HF name), writing mkc's
KV cache in the kernel's layout; the kernel then decodes from position m.

The forward is written from the task graph's own facts (dims, ``rms_eps``, ``rope_scaling``,
``attn_scale``, the ``inv_freq`` constant) rather than from a transformers model, so it computes
what the kernel computes for every architecture mkc lowers: the cache holds keys after q/k-norm
(Qwen3) and RoPE (rotate-half, natural head order) and values as projected, bf16
``[B, nkv, L, hd]`` per layer (``taskgraph/kinds.py``). Matmuls and attention (SDPA) run in bf16
as Hugging Face's bf16 model does; the residual stream and the norms stay fp32, as in the kernel.

m = min(len(row)) - 1 for all rows: every row keeps at least its last prompt token for the kernel,
whose first step then yields the first new token's logits.
"""

from __future__ import annotations

from mkc.errors import MkcError
from mkc.taskgraph import names

MIN_TOKENS = 16  # below this a prompt costs less as decode steps than a torch forward and a cache copy
MODES = ("auto", "torch", "kernel")


def torch_ready(mk) -> bool:
    """The kernel's weights are torch tensors on a GPU that torch drives (NVIDIA): the forward
    reads them in place and writes the cache in place."""
    import torch

    w = mk.weights.get(names.EMBED)
    return isinstance(w, torch.Tensor) and w.is_cuda


def prefill_length(mk, rows, mode: str = "auto") -> int:
    """How many positions the torch prefill writes (0: none, the kernel runs the whole prompt)."""
    if mode not in MODES:
        raise MkcError(f"prefill={mode!r}: choose one of {', '.join(MODES)}")
    m = min(len(r) for r in rows) - 1
    if mode == "kernel" or m < 1:
        return 0
    if mode == "torch":
        if not torch_ready(mk):
            raise MkcError("the torch prefill needs the weights as torch tensors on an NVIDIA GPU; use "
                           "prefill='kernel' (--prefill kernel) on this device")
        return m
    return m if m >= MIN_TOKENS and torch_ready(mk) else 0


def _rmsnorm(x, w, eps: float):
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    import torch

    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def forward_kv(mk, ids):
    """ids [R, m] (int64, on the weights' device) -> per layer (keys, values), each bf16 [R, nkv, m, hd]."""
    import torch
    import torch.nn.functional as F

    tg, d = mk.tg, dict(mk.tg.dims)
    eps, scaling, scale = tg.const("rms_eps"), tg.const("rope_scaling"), tg.const("attn_scale")
    nh, nkv, hd, n_layers = d["nh"], d["nkv"], d["hd"], d["n_layers"]
    W = {n: mk.driver.tensor(a, 0, mk.plan[n].shape) for n, a in mk.weights.items()}
    dev = W[names.EMBED].device
    R, m = ids.shape
    inv = torch.tensor(next(b.data for b in tg.buffers if b.name == "inv_freq"), dtype=torch.float32, device=dev)
    ang = torch.arange(m, device=dev, dtype=torch.float32)[:, None] * inv[None]  # [m, hd/2], fp32 as HF
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos() * scaling, emb.sin() * scaling  # [m, hd]

    def lin(x, layer, role):
        y = x @ W[names.layer_weight(layer, role)].T
        if d["qkv_bias"] and role in ("q", "k", "v"):
            y = y + W[names.layer_weight(layer, role + "_bias")]
        return y

    x = W[names.EMBED][ids].float().reshape(R * m, -1)  # the residual stream, fp32 as in the kernel
    kv = []
    for layer in range(n_layers):
        xn = _rmsnorm(x, W[names.layer_weight(layer, "input_norm")], eps).bfloat16()
        q = lin(xn, layer, "q").float().reshape(R, m, nh, hd).transpose(1, 2)
        k = lin(xn, layer, "k").float().reshape(R, m, nkv, hd).transpose(1, 2)
        v = lin(xn, layer, "v").bfloat16().reshape(R, m, nkv, hd).transpose(1, 2)
        if d["qk_norm"]:
            q = _rmsnorm(q, W[names.layer_weight(layer, "q_norm")], eps)
            k = _rmsnorm(k, W[names.layer_weight(layer, "k_norm")], eps)
        q, k = _rope(q, cos, sin).bfloat16(), _rope(k, cos, sin).bfloat16()
        kv.append((k, v))
        if layer == n_layers - 1:
            break  # nothing after the last layer's cache feeds the cache
        # GQA by repeating the kv heads (as HF's sdpa path does): every SDPA backend, flash included, takes it
        kr, vr = (k, v) if nh == nkv else (k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1))
        a = F.scaled_dot_product_attention(q, kr, vr, is_causal=True, scale=scale)
        x = x + (a.transpose(1, 2).reshape(R * m, nh * hd) @ W[names.layer_weight(layer, "o")].T).float()
        xn = _rmsnorm(x, W[names.layer_weight(layer, "post_norm")], eps).bfloat16()
        h = F.silu(xn @ W[names.layer_weight(layer, "gate")].T) * (xn @ W[names.layer_weight(layer, "up")].T)
        x = x + (h @ W[names.layer_weight(layer, "down")].T).float()
    return kv


def torch_prefill(mk, rows, m: int) -> None:
    """Reset ``mk`` and fill positions [0, m) of every row's KV cache from ``rows[b][:m]``; rows
    past ``len(rows)`` (padding) get zeros there, so no wait of theirs sees an armed word."""
    import torch

    if not torch_ready(mk):
        raise MkcError("the torch prefill needs the weights as torch tensors on an NVIDIA GPU")
    B, L = mk.B, mk.L
    if not 1 <= m < L:
        raise MkcError(f"a prefill of {m} positions does not fit max_seq_len {L}")
    mk.reset()
    dev = mk.weights[names.EMBED].device
    ids = torch.tensor([list(r[:m]) for r in rows], dtype=torch.int64, device=dev)
    with torch.no_grad():
        kv = forward_kv(mk, ids)
        R = len(rows)
        for layer, (k, v) in enumerate(kv):
            for name, src in ((names.k_cache(layer), k), (names.v_cache(layer), v)):
                cache = mk.driver.tensor(mk.buffers[name], 0, mk.plan[name].shape)  # [B, nkv, L, hd], in place
                cache[:R, :, :m].copy_(src)
                if R < B:
                    cache[R:, :, :m].zero_()
