"""The reference executor: runs a Graph op by op with PyTorch in fp32 on the CPU.

It is the oracle for every later stage, so it is deliberately plain: each op kind is a few
lines of obvious PyTorch with no fusion. Weights are looked up by their Hugging Face names;
KV caches are fp32 tensors ``[B, nkv, L, hd]`` updated in place.
"""

from __future__ import annotations

import torch

from mkc.capture.graph import Graph, Op


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float, group: int) -> torch.Tensor:
    xs = x.reshape(*x.shape[:-1], -1, group)
    y = xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps)
    return (y * w).reshape(x.shape)


def rope(x: torch.Tensor, inv_freq: torch.Tensor, pos: int, head_dim: int, scaling: float) -> torch.Tensor:
    ang = float(pos) * inv_freq  # fp32, as transformers does for one position
    emb = torch.cat([ang, ang])
    cos, sin = emb.cos() * scaling, emb.sin() * scaling
    xs = x.reshape(x.shape[0], -1, head_dim)
    half = head_dim // 2
    rot = torch.cat([-xs[..., half:], xs[..., :half]], dim=-1)
    return (xs * cos + rot * sin).reshape(x.shape)


def attention(q, k_cache, v_cache, pos: int, head_dim: int, n_rep: int, scale: float) -> torch.Tensor:
    B = q.shape[0]
    qs = q.reshape(B, -1, head_dim)  # [B, nh, hd]
    k = k_cache[:, :, : pos + 1].repeat_interleave(n_rep, dim=1)  # [B, nh, T, hd]
    v = v_cache[:, :, : pos + 1].repeat_interleave(n_rep, dim=1)
    s = torch.einsum("bhd,bhtd->bht", qs, k) * scale
    p = torch.softmax(s, dim=-1)
    return torch.einsum("bht,bhtd->bhd", p, v).reshape(B, -1)


def run_op(op: Op, env: dict[str, torch.Tensor]) -> None:
    ins = [env[n] for n in op.inputs]
    k = op.kind
    if k == "embedding":
        out = ins[0][ins[1].long()]
    elif k == "rmsnorm":
        out = rmsnorm(ins[0], ins[1], float(op.attr("eps")), int(op.attr("group")))
    elif k == "linear":
        out = ins[0] @ ins[1].T
        if len(ins) > 2:
            out = out + ins[2]
    elif k == "rope":
        out = rope(ins[0], ins[1], int(ins[2].reshape(-1)[0]), int(op.attr("head_dim")), float(op.attr("scaling")))
    elif k == "kv_write":
        cache = env[op.outputs[0]]
        hd = int(op.attr("head_dim"))
        p = int(ins[1].reshape(-1)[0])
        cache[:, :, p, :] = ins[0].reshape(ins[0].shape[0], -1, hd)
        return
    elif k == "attention":
        out = attention(ins[0], ins[1], ins[2], int(ins[3].reshape(-1)[0]), int(op.attr("head_dim")),
                        int(op.attr("n_rep")), float(op.attr("scale")))
    elif k == "silu_mul":
        out = torch.nn.functional.silu(ins[0]) * ins[1]
    elif k == "add":
        out = ins[0] + ins[1]
    elif k == "argmax":
        out = torch.argmax(ins[0], dim=-1)
    else:  # Graph.check() rejects unknown kinds before we get here
        raise ValueError(f"unknown op kind {k}")
    env[op.outputs[0]] = out


def new_cache(graph: Graph) -> dict[str, torch.Tensor]:
    return {t.name: torch.zeros(t.shape, dtype=torch.float32) for t in graph.tensors if t.role == "cache"}


def run_step(
    graph: Graph,
    weights: dict[str, torch.Tensor],
    cache: dict[str, torch.Tensor],
    input_ids: torch.Tensor,
    cache_position: int,
) -> dict[str, torch.Tensor]:
    """One decode step. Updates ``cache`` in place; returns every tensor of the step (fp32)."""
    env: dict[str, torch.Tensor] = {}
    for t in graph.tensors:
        if t.role == "param":
            env[t.name] = weights[t.name].float()
        elif t.role == "const":
            env[t.name] = torch.tensor(t.data, dtype=torch.float32).reshape(t.shape)
    env.update(cache)
    env["input_ids"] = input_ids.reshape(-1).long()
    env["cache_position"] = torch.tensor([cache_position])
    for op in graph.ops:
        run_op(op, env)
    return env
