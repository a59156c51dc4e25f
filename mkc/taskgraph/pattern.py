"""Check that a Graph has the op structure lowering knows how to fuse, and read its constants.

Lowering fuses ops by role (see ``mkc.capture.graph``), so before fusing we walk the graph
layer by layer and check every role is present, has the expected kind, reads what the previous
role wrote, and uses weights of the expected names and shapes. Anything else is an
``UnsupportedModelError`` naming the op, its source line and what is supported.
"""

from __future__ import annotations

from dataclasses import dataclass

from mkc.capture.graph import Graph, Op
from mkc.errors import UnsupportedModelError
from mkc.taskgraph import names

SUPPORTED = (
    "mkc supports Llama/Mistral, Qwen2 (q/k/v bias) and Qwen3 (q/k RMSNorm) decoders whose layers are "
    "input_norm, q_proj, k_proj, v_proj, [q_norm, k_norm], rope_q, rope_k, k_write, v_write, attn, o_proj, "
    "attn_residual, post_attn_norm, gate_proj, up_proj, silu_mul, down_proj, mlp_residual, "
    "followed by final_norm, lm_head and argmax"
)


@dataclass(frozen=True)
class ModelSpec:
    """What lowering needs beyond the ModelInfo: facts read off (and checked against) the graph."""

    tied: bool
    inv_freq: tuple[float, ...]
    rms_eps: float
    rope_scaling: float
    attn_scale: float


class _Matcher:
    def __init__(self, graph: Graph):
        self.g = graph
        self.tensors = graph.tensor_map()
        self.ops: dict[str, Op] = {}
        for op in graph.ops:
            if op.name in self.ops:
                raise self.fail(f"two ops are named {op.name!r}", op)
            self.ops[op.name] = op
        self.seen: set[str] = set()
        self.attrs: dict[str, dict[float, Op]] = {}

    def fail(self, msg: str, op: Op | None = None) -> UnsupportedModelError:
        where = f" (from {op.source or 'an unknown source line'})" if op else ""
        return UnsupportedModelError(f"{self.g.model.arch}: {msg}{where}. {SUPPORTED}.")

    def op(self, name: str, kind: str, inputs: list, out_shape=None, commutative: bool = False) -> str:
        """Check op ``name``; ``inputs`` holds tensor names or (name, shape) for weights. Returns its output."""
        op = self.ops.get(name)
        if op is None:
            raise self.fail(f"the graph has no op {name!r} (expected a {kind})")
        if op.kind != kind:
            raise self.fail(f"op {name} is a {op.kind!r} op, expected {kind!r}", op)
        if len(op.inputs) != len(inputs):
            raise self.fail(f"op {name} has {len(op.inputs)} inputs, expected {len(inputs)}", op)
        want = [w if isinstance(w, str) else w[0] for w in inputs]
        got = list(op.inputs)
        if (sorted(got) != sorted(want)) if commutative else (got != want):
            raise self.fail(f"op {name} reads {got}, expected {want}", op)
        for w in inputs:
            if not isinstance(w, str):
                t = self.tensors[w[0]]
                if t.role != "param" or t.shape != tuple(w[1]):
                    raise self.fail(f"op {name}: {t.name} is a {t.role} of shape {t.shape}, "
                                    f"expected a weight of shape {w[1]}", op)
        if len(op.outputs) != 1:
            raise self.fail(f"op {name} has {len(op.outputs)} outputs, expected 1", op)
        out = self.tensors[op.outputs[0]]
        if out_shape is not None and out.shape != tuple(out_shape):
            raise self.fail(f"op {name} writes {out.name} of shape {out.shape}, expected {tuple(out_shape)}", op)
        self.seen.add(name)
        return out.name

    def attr(self, name: str, key: str, expect=None) -> float:
        op = self.ops[name]
        try:
            v = op.attr(key)
        except KeyError:
            raise self.fail(f"op {name} has no attribute {key!r}", op) from None
        if expect is not None and v != expect:
            raise self.fail(f"op {name} has {key}={v}, expected {expect}", op)
        self.attrs.setdefault(key, {}).setdefault(float(v), op)
        return float(v)

    def single(self, key: str) -> float:
        """An attribute every op must agree on (one eps, one RoPE scaling, one attention scale)."""
        vals = self.attrs.get(key, {})
        if len(vals) > 1:
            a, b = list(vals.items())[:2]
            raise self.fail(f"attribute {key} differs between ops {a[1].name} ({a[0]}) and {b[1].name} ({b[0]}); "
                            f"mkc supports one value per model", b[1])
        return next(iter(vals)) if vals else 0.0


def match_graph(graph: Graph) -> ModelSpec:
    """Check ``graph`` against the supported decoder structure; raise UnsupportedModelError otherwise."""
    m = _Matcher(graph)
    info = graph.model
    B, H, I, V, L = graph.batch, info.hidden, info.intermediate, info.vocab, graph.max_seq_len
    nh, nkv, hd = info.n_heads, info.n_kv_heads, info.head_dim
    n_rep = nh // nkv
    for name, role, shape in (("input_ids", "input", (B,)), ("cache_position", "input", (1,)),
                              ("rope.inv_freq", "const", (hd // 2,))):
        t = m.tensors.get(name)
        if t is None or t.role != role or t.shape != shape:
            raise m.fail(f"the graph has no {role} tensor {name} of shape {shape}")
    pos, inv = "cache_position", "rope.inv_freq"
    if hd % 2:
        raise m.fail(f"head_dim {hd} is odd; RoPE needs an even head_dim")

    x = m.op("embed", "embedding", [(names.EMBED, (V, H)), "input_ids"], (B, H))
    for i in range(info.n_layers):
        a = f"l{i}."

        def w(role, shape, layer=i):
            return (names.layer_weight(layer, role), shape)

        def bias(role, n):
            return [w(role + "_bias", (n,))] if info.qkv_bias else []

        xn = m.op(a + "input_norm", "rmsnorm", [x, w("input_norm", (H,))], (B, H))
        m.attr(a + "input_norm", "group", H)
        m.attr(a + "input_norm", "eps")
        q = m.op(a + "q_proj", "linear", [xn, w("q", (nh * hd, H))] + bias("q", nh * hd), (B, nh * hd))
        k = m.op(a + "k_proj", "linear", [xn, w("k", (nkv * hd, H))] + bias("k", nkv * hd), (B, nkv * hd))
        v = m.op(a + "v_proj", "linear", [xn, w("v", (nkv * hd, H))] + bias("v", nkv * hd), (B, nkv * hd))
        if info.qk_norm:
            q = m.op(a + "q_norm", "rmsnorm", [q, w("q_norm", (hd,))], (B, nh * hd))
            k = m.op(a + "k_norm", "rmsnorm", [k, w("k_norm", (hd,))], (B, nkv * hd))
            for r in ("q_norm", "k_norm"):
                m.attr(a + r, "group", hd)
                m.attr(a + r, "eps")
        elif a + "q_norm" in m.ops or a + "k_norm" in m.ops:
            op = m.ops.get(a + "q_norm") or m.ops[a + "k_norm"]
            raise m.fail(f"op {op.name} found but the model declares no q/k norm", op)
        qr = m.op(a + "rope_q", "rope", [q, inv, pos], (B, nh * hd))
        kr = m.op(a + "rope_k", "rope", [k, inv, pos], (B, nkv * hd))
        for r in ("rope_q", "rope_k"):
            m.attr(a + r, "head_dim", hd)
            m.attr(a + r, "scaling")
        kc = m.op(a + "k_write", "kv_write", [kr, pos], (B, nkv, L, hd))
        vc = m.op(a + "v_write", "kv_write", [v, pos], (B, nkv, L, hd))
        for r, c in (("k_write", kc), ("v_write", vc)):
            m.attr(a + r, "head_dim", hd)
            if m.tensors[c].role != "cache":
                raise m.fail(f"op {a + r} writes {c}, which is not a KV cache", m.ops[a + r])
        o = m.op(a + "attn", "attention", [qr, kc, vc, pos], (B, nh * hd))
        m.attr(a + "attn", "head_dim", hd)
        m.attr(a + "attn", "n_rep", n_rep)
        m.attr(a + "attn", "scale")
        oo = m.op(a + "o_proj", "linear", [o, w("o", (H, nh * hd))], (B, H))
        xa = m.op(a + "attn_residual", "add", [x, oo], (B, H), commutative=True)
        xn2 = m.op(a + "post_attn_norm", "rmsnorm", [xa, w("post_norm", (H,))], (B, H))
        m.attr(a + "post_attn_norm", "group", H)
        m.attr(a + "post_attn_norm", "eps")
        g = m.op(a + "gate_proj", "linear", [xn2, w("gate", (I, H))], (B, I))
        u = m.op(a + "up_proj", "linear", [xn2, w("up", (I, H))], (B, I))
        hm = m.op(a + "silu_mul", "silu_mul", [g, u], (B, I))
        d = m.op(a + "down_proj", "linear", [hm, w("down", (H, I))], (B, H))
        x = m.op(a + "mlp_residual", "add", [xa, d], (B, H), commutative=True)
    xf = m.op("final_norm", "rmsnorm", [x, (names.FINAL_NORM, (H,))], (B, H))
    m.attr("final_norm", "group", H)
    m.attr("final_norm", "eps")
    lm = m.ops.get("lm_head")
    tied = lm is not None and len(lm.inputs) == 2 and lm.inputs[1] == names.EMBED
    logits = m.op("lm_head", "linear", [xf, (names.lm_head_weight(tied), (V, H))], (B, V))
    if tied != info.tied_embeddings:
        raise m.fail(f"lm_head {'is' if tied else 'is not'} tied to the embedding but the model says "
                     f"tied_embeddings={info.tied_embeddings}", lm)
    m.op("argmax", "argmax", [logits], (B,))
    extra = [op for op in graph.ops if op.name not in m.seen]
    if extra:
        raise m.fail(f"op {extra[0].name} is not part of the supported structure"
                     + (f" ({len(extra) - 1} more unexpected ops)" if len(extra) > 1 else ""), extra[0])
    return ModelSpec(
        tied=tied,
        inv_freq=tuple(m.tensors[inv].data),
        rms_eps=m.single("eps"),
        rope_scaling=m.single("scaling") if info.n_layers else 1.0,
        attn_scale=m.single("scale") if info.n_layers else hd**-0.5,
    )
