"""The canonical op graph of a decoder, written from its shape facts.

Capture derives a graph from the model's exported ATen code; this module writes the graph that
capture must arrive at for a supported architecture. Tests compare the two, and stages after
capture use it to build small graphs without running torch.export.
"""

from __future__ import annotations

from mkc.capture.graph import Graph, ModelInfo, Op, Tensor


def rope_inv_freq(head_dim: int, theta: float) -> tuple[float, ...]:
    """Default (unscaled) RoPE inverse frequencies, as transformers computes them in fp32."""
    import torch

    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim))
    return tuple(float(x) for x in inv)


def build_graph(
    info: ModelInfo,
    batch: int,
    max_seq_len: int,
    inv_freq: tuple[float, ...],
    rope_scaling: float = 1.0,
    sources: dict[str, str] | None = None,
) -> Graph:
    B, H, I, hd = batch, info.hidden, info.intermediate, info.head_dim
    nh, nkv, V, L = info.n_heads, info.n_kv_heads, info.vocab, max_seq_len
    wdt = info.dtype
    sources = sources or {}
    tensors: list[Tensor] = []
    ops: list[Op] = []

    def tensor(name, shape, dtype="f32", role="act", data=()):
        tensors.append(Tensor(name, tuple(shape), dtype, role, tuple(data)))
        return name

    def op(name, kind, inputs, outputs, layer=-1, **attrs):
        ops.append(Op(name, kind, tuple(inputs), tuple(outputs), tuple(attrs.items()), layer, sources.get(name, "")))

    ids = tensor("input_ids", (B,), "i64", "input")
    pos = tensor("cache_position", (1,), "i64", "input")
    inv = tensor("rope.inv_freq", (hd // 2,), "f32", "const", inv_freq)
    table = tensor("model.embed_tokens.weight", (V, H), wdt, "param")
    x = tensor("x0", (B, H))
    op("embed", "embedding", (table, ids), (x,))
    for i in range(info.n_layers):
        p = f"model.layers.{i}."
        a = f"l{i}."

        def lin(role, xin, n, k, bias=False, w=None):
            w = w or tensor(f"{p}{'self_attn' if role in ('q_proj', 'k_proj', 'v_proj', 'o_proj') else 'mlp'}.{role}.weight", (n, k), wdt, "param")
            ins = [xin, w]
            if bias:
                ins.append(tensor(w.replace(".weight", ".bias"), (n,), wdt, "param"))
            out = tensor(a + role.replace("_proj", ""), (B, n))
            op(a + role, "linear", ins, (out,), i)
            return out

        w_in = tensor(p + "input_layernorm.weight", (H,), wdt, "param")
        xn = tensor(a + "xn", (B, H))
        op(a + "input_norm", "rmsnorm", (x, w_in), (xn,), i, eps=info.rms_eps, group=H)
        q = lin("q_proj", xn, nh * hd, H, info.qkv_bias)
        k = lin("k_proj", xn, nkv * hd, H, info.qkv_bias)
        v = lin("v_proj", xn, nkv * hd, H, info.qkv_bias)
        if info.qk_norm:
            # tensors are declared in order of first use, the order capture writes them in
            wq = tensor(p + "self_attn.q_norm.weight", (hd,), wdt, "param")
            qn = tensor(a + "qn", (B, nh * hd))
            op(a + "q_norm", "rmsnorm", (q, wq), (qn,), i, eps=info.rms_eps, group=hd)
            wk = tensor(p + "self_attn.k_norm.weight", (hd,), wdt, "param")
            kn = tensor(a + "kn", (B, nkv * hd))
            op(a + "k_norm", "rmsnorm", (k, wk), (kn,), i, eps=info.rms_eps, group=hd)
            q, k = qn, kn
        qr, kr = tensor(a + "q_rot", (B, nh * hd)), tensor(a + "k_rot", (B, nkv * hd))
        op(a + "rope_q", "rope", (q, inv, pos), (qr,), i, head_dim=hd, scaling=rope_scaling)
        op(a + "rope_k", "rope", (k, inv, pos), (kr,), i, head_dim=hd, scaling=rope_scaling)
        kc = tensor(f"k_cache.{i}", (B, nkv, L, hd), wdt, "cache")
        vc = tensor(f"v_cache.{i}", (B, nkv, L, hd), wdt, "cache")
        op(a + "k_write", "kv_write", (kr, pos), (kc,), i, head_dim=hd)
        op(a + "v_write", "kv_write", (v, pos), (vc,), i, head_dim=hd)
        o = tensor(a + "attn_out", (B, nh * hd))
        op(a + "attn", "attention", (qr, kc, vc, pos), (o,), i, head_dim=hd, n_rep=nh // nkv, scale=hd**-0.5)
        oo = lin("o_proj", o, H, nh * hd)
        xa = tensor(a + "xa", (B, H))
        op(a + "attn_residual", "add", (x, oo), (xa,), i)
        w_post = tensor(p + "post_attention_layernorm.weight", (H,), wdt, "param")
        xn2 = tensor(a + "xn2", (B, H))
        op(a + "post_attn_norm", "rmsnorm", (xa, w_post), (xn2,), i, eps=info.rms_eps, group=H)
        g = lin("gate_proj", xn2, I, H)
        u = lin("up_proj", xn2, I, H)
        hm = tensor(a + "h", (B, I))
        op(a + "silu_mul", "silu_mul", (g, u), (hm,), i)
        d = lin("down_proj", hm, H, I)
        xm = tensor(a + "xm", (B, H))
        op(a + "mlp_residual", "add", (xa, d), (xm,), i)
        x = xm
    w_f = tensor("model.norm.weight", (H,), wdt, "param")
    xf = tensor("xf", (B, H))
    op("final_norm", "rmsnorm", (x, w_f), (xf,), eps=info.rms_eps, group=H)
    w_lm = table if info.tied_embeddings else tensor("lm_head.weight", (V, H), wdt, "param")
    logits = tensor("logits", (B, V), role="output")
    op("lm_head", "linear", (xf, w_lm), (logits,))
    nxt = tensor("next_ids", (B,), "i64", "output")
    op("argmax", "argmax", (logits,), (nxt,))
    return Graph(info, batch, max_seq_len, tuple(tensors), tuple(ops)).check()
