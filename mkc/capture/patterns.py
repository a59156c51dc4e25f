"""The matcher's rules: one per ATen op, from argument values to the node's value.

A rule either returns the node's abstract value (mkc.capture.values), emitting an mkc op when a
pattern completes, or raises NoRule saying what it saw; the matcher turns that into an
UnsupportedModelError for the user.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from mkc.capture.graph import Op
from mkc.capture.values import (LINEAR_ROLES, NORM_ROLES, RESIDUAL_ROLES, Act, Angles, Arange, Cache, Causal, Counter,
                                Ids, InvFreq, NoRule, Param, Pos, PosPlus, Step, Trig, Value, source_of)

if TYPE_CHECKING:
    from mkc.capture.aten import Matcher

RULES: dict = {}


def rule(*targets):
    def deco(fn):
        for t in targets:
            RULES[t] = fn
        return fn
    return deco


def _is(v, cls, **fields) -> bool:
    return isinstance(v, cls) and all(getattr(v, k) == x for k, x in fields.items())


def _pair(a, b, ta, tb):
    """(x, y) with x of type ta and y of type tb, in either argument order, else None."""
    if isinstance(a, ta) and isinstance(b, tb):
        return a, b
    if isinstance(b, ta) and isinstance(a, tb):
        return b, a
    return None


def _last_dim(m: Matcher, dim) -> bool:
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    n = len(m.shape(m.node.args[0]))
    return len(dims) == 1 and dims[0] in (-1, n - 1)


def _act_width(m: Matcher, node) -> int:
    return math.prod(m.shape(node)[1:]) if m.shape(node) else 0


@rule("aten._to_copy.default", "aten.alias.default", "aten.clone.default", "aten.detach.default",
      "aten.lift_fresh_copy.default")
def _transparent(m, x, *args, **kwargs):
    # dtype casts and copies: mkc computes in fp32 and stores at its own precision
    if isinstance(x, Step) and x.kind in ("norm.sq", "norm.mean", "norm.eps", "norm.rstd"):
        raise NoRule("a cast inside RMSNorm's statistics")
    if isinstance(x, (Act, Step, Param, Pos, Trig, InvFreq, Angles, Causal)) or _is(x, Cache, written=True):
        return x
    raise NoRule(f"a copy of {x.describe() if isinstance(x, Value) else x!r}")


@rule("aten.embedding.default")
def _embedding(m, table, ids, *rest):
    if not (isinstance(table, Param) and isinstance(ids, Ids) and len(table.shape) == 2):
        raise NoRule("an embedding that is not a token-table lookup of input_ids")
    if m.module()[0].rsplit(".", 1)[-1] != "embed_tokens":
        raise NoRule("an embedding outside embed_tokens")
    m.declare("input_ids", (m.B,), "i64", "input")
    return m.emit("embed", "embedding", (m.param(table), "input_ids"), table.shape[1], -1)


@rule("aten.linear.default")
def _linear(m, x, w, b=None):
    if not (isinstance(x, Act) and x.layout == "flat" and isinstance(w, Param)):
        raise NoRule("a linear whose input is not a whole activation or whose weight is not a parameter")
    if b is not None and not isinstance(b, Param):
        raise NoRule("a linear bias that is not a parameter")
    role = m.module()[0].rsplit(".", 1)[-1]
    if role not in LINEAR_ROLES:
        raise NoRule(f"a linear in module {m.module()[0]!r}, not one of {', '.join(LINEAR_ROLES)}")
    layer = m.layer()
    if (role == "lm_head") != (layer < 0):
        raise NoRule(f"{role} {'outside' if layer < 0 else 'inside'} the decoder layers")
    ins = [x.name, m.param(w)] + ([m.param(b)] if b is not None else [])
    if role == "lm_head":
        return m.emit(role, "linear", ins, w.shape[0], -1, out_role="output")
    return m.emit(role, "linear", ins, w.shape[0], layer)


@rule("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")
def _view(m, x, size):
    out = m.shape()
    if isinstance(x, Act):
        width = _act_width(m, m.node.args[0])
        if out in ((m.B, 1, width), (m.B, width)) and x.layout in ("flat", "bshd"):
            return Act(x.name)
        if len(out) == 4 and out[:2] == (m.B, 1) and out[2] * out[3] == width and x.layout in ("flat", "bshd"):
            return Act(x.name, "bshd", out[2], out[3])
        if out == m.shape(m.node.args[0]):
            return x
        raise NoRule(f"a reshape of {x.describe()} to {list(out)}")
    if isinstance(x, Cache) and x.written and x.stage == "expanded":
        if out == (m.B, x.n_rep * m.shape(m.node.args[0])[1], *m.shape(m.node.args[0])[3:]):
            return Cache(x.name, x.layer, x.kind, True, x.n_rep, "")
        raise NoRule(f"a reshape of the expanded {x.name} to {list(out)}")
    if isinstance(x, (Pos, InvFreq, Angles, Trig)) and math.prod(out) == math.prod(m.shape(m.node.args[0])):
        return x
    raise NoRule(f"a reshape of {x.describe() if isinstance(x, Value) else x!r}")


@rule("aten.permute.default", "aten.transpose.int")
def _permute(m, x, *dims):
    perm = list(dims[0]) if len(dims) == 1 else None
    n = len(m.shape(m.node.args[0]))
    if perm is None:  # transpose(d0, d1)
        d0, d1 = (d % n for d in dims)
        perm = list(range(n))
        perm[d0], perm[d1] = perm[d1], perm[d0]
    if isinstance(x, Act) and x.layout in ("bshd", "bhsd") and perm == [0, 2, 1, 3]:
        return Act(x.name, "bhsd" if x.layout == "bshd" else "bshd", x.heads, x.head_dim)
    if isinstance(x, (InvFreq, Angles, Pos)):
        return x  # the rotary embedding's [1, hd/2, 1] <-> [1, 1, hd/2]
    raise NoRule(f"a permutation {perm} of {x.describe() if isinstance(x, Value) else x!r}")


@rule("aten.unsqueeze.default")
def _unsqueeze(m, x, dim):
    if isinstance(x, (Pos, Arange, InvFreq, Angles, Trig, Causal)):
        return x
    if _is(x, Cache, written=True, stage="") and x.n_rep == 1 and dim == 2:
        return Cache(x.name, x.layer, x.kind, True, 1, "unsqueezed")
    raise NoRule(f"an unsqueeze of {x.describe() if isinstance(x, Value) else x!r}")


@rule("aten.expand.default")
def _expand(m, x, size, **kw):
    if isinstance(x, (Pos, InvFreq, Angles, Trig, Causal)):
        return x
    if _is(x, Cache, stage="unsqueezed"):
        out, before = m.shape(), m.shape(m.node.args[0])
        if out[:2] + out[3:] != before[:2] + before[3:]:
            raise NoRule(f"an expand of {x.name} to {list(out)} beyond repeating KV heads")
        return Cache(x.name, x.layer, x.kind, True, out[2], "expanded")
    raise NoRule(f"an expand of {x.describe() if isinstance(x, Value) else x!r}")


@rule("aten.select.int")
def _select(m, x, dim, index):
    if isinstance(x, Pos) and index == 0:
        return Pos()
    raise NoRule(f"a select from {x.describe() if isinstance(x, Value) else x!r}")


@rule("aten.copy.default")
def _copy(m, dst, src, *rest):
    if isinstance(dst, Counter) and isinstance(src, Pos):
        return Pos()  # StaticCache resets its counter to cache_position[0]
    raise NoRule("a copy into something other than the static cache's position counter")


@rule("aten.arange.start_step", "aten.arange.start", "aten.arange.default")
def _arange(m, *args, **kwargs):
    ints = [a for a in args if isinstance(a, int)]
    start, end = (0, ints[0]) if len(ints) == 1 else (ints[0], ints[1])
    if len(ints) > 2 and ints[2] != 1:
        raise NoRule("an arange with a step")
    return Arange(start, end)


@rule("aten.add.Tensor")
def _add(m, a, b, alpha=1):
    if alpha != 1:
        raise NoRule("an add with alpha")
    # positions and indices
    if _pair(a, b, Arange, Pos):
        r, _ = _pair(a, b, Arange, Pos)
        if (r.start, r.end) != (0, 1):
            raise NoRule("positions for more than one token (mkc compiles the decode step)")
        return Pos()
    if isinstance(a, Arange) and b == 0:
        return a
    if isinstance(a, Pos) and isinstance(b, int):
        return PosPlus(b)
    # RMSNorm: mean(x^2) + eps
    if _is(a, Step, kind="norm.mean") and isinstance(b, float):
        return Step("norm.eps", a.x, eps=b)
    # RoPE: x*cos + rotate_half(x)*sin
    pr = _pair(a, b, Step, Step)
    if pr and {a.kind, b.kind} == {"rope.cos", "rope.sin"}:
        c, s = (a, b) if a.kind == "rope.cos" else (b, a)
        if c.x != s.x or c.scale != s.scale or c.buffer != s.buffer:
            raise NoRule("a RoPE whose cos and sin terms come from different tensors or tables")
        return _emit_rope(m, c.x, c.scale, c.buffer)
    # residual
    if isinstance(a, Act) and isinstance(b, Act) and a.layout == b.layout == "flat":
        role = RESIDUAL_ROLES.get(m.role_of(b)) or RESIDUAL_ROLES.get(m.role_of(a))
        layer = m.layer()
        if role is None or layer < 0:
            raise NoRule(f"an add of {a.name} and {b.name} that is not a residual after o_proj or down_proj")
        res, upd = (a, b) if RESIDUAL_ROLES.get(m.role_of(b)) == role else (b, a)
        return m.emit(role, "add", (res.name, upd.name), _act_width(m, m.node), layer)
    raise NoRule("an add mkc has no pattern for")


def _emit_rope(m: Matcher, x: Act, scale: float, buffer: str) -> Act:
    which = {"q_proj": "q", "q_norm": "q", "k_proj": "k", "k_norm": "k"}.get(m.role_of(x))
    if which is None:
        raise NoRule(f"RoPE applied to {x.name}, which is not a query or key projection")
    hd = x.head_dim
    inv = m.rope_tables[buffer]
    if len(inv.inv_freq) != hd // 2:
        raise NoRule(f"RoPE inv_freq of {len(inv.inv_freq)} values for head_dim {hd}")
    if abs(scale - inv.attention_scaling) > 1e-12 * max(1.0, abs(scale)):
        raise NoRule(f"RoPE scaled by {scale} in the graph but {inv.attention_scaling} by the rotary module")
    if m.rope_used not in (None, (buffer, scale)):
        raise NoRule("two different RoPE tables in one model (mkc has one rope.inv_freq)")
    m.rope_used = (buffer, scale)
    m.declare("cache_position", (1,), "i64", "input")
    m.declare("rope.inv_freq", (hd // 2,), "f32", "const", inv.inv_freq)
    out = m.emit(f"rope_{which}", "rope", (x.name, "rope.inv_freq", "cache_position"), x.heads * hd, m.layer(),
                 (("head_dim", hd), ("scaling", scale)))
    return Act(out.name, x.layout, x.heads, hd)


@rule("aten.mul.Tensor")
def _mul(m, a, b):
    # RoPE tables: cos/sin times the attention scaling
    if isinstance(a, Trig) and isinstance(b, (int, float)):
        return Trig(a.fn, a.scale * float(b), a.buffer)
    # RMSNorm: x * rsqrt(...), then weight * normed
    pr = _pair(a, b, Act, Step)
    if pr and pr[1].kind == "norm.rstd":
        x, st = pr
        if x != st.x:
            raise NoRule("an RMSNorm that scales a different tensor than it measured")
        return Step("norm.normed", x, eps=st.eps)
    pr = _pair(a, b, Param, Step)
    if pr and pr[1].kind == "norm.normed":
        return _emit_rmsnorm(m, pr[0], pr[1])
    # RoPE: x * cos, rotate_half(x) * sin
    pr = _pair(a, b, Act, Trig)
    if pr and pr[1].fn == "cos" and pr[0].layout in ("bshd", "bhsd"):
        return Step("rope.cos", pr[0], scale=pr[1].scale, buffer=pr[1].buffer)
    pr = _pair(a, b, Step, Trig)
    if pr and pr[0].kind == "rope.rot" and pr[1].fn == "sin":
        return Step("rope.sin", pr[0].x, scale=pr[1].scale, buffer=pr[1].buffer)
    # SwiGLU: silu(gate) * up
    pr = _pair(a, b, Step, Act)
    if pr and pr[0].kind == "silu" and pr[1].layout == "flat":
        g, u = pr[0].x, pr[1]
        if m.role_of(g) != "gate_proj" or m.role_of(u) != "up_proj" or m.layer() < 0:
            raise NoRule(f"silu({g.name}) * {u.name} outside a gate/up MLP")
        return m.emit("silu_mul", "silu_mul", (g.name, u.name), _act_width(m, m.node), m.layer())
    # angles = inv_freq * position (when not written as a matmul)
    if _pair(a, b, InvFreq, Pos):
        return Angles(_pair(a, b, InvFreq, Pos)[0].buffer, full=False)
    raise NoRule("a multiply mkc has no pattern for")


def _emit_rmsnorm(m: Matcher, w: Param, st: Step) -> Act:
    x = st.x
    group = x.head_dim if x.layout != "flat" else _act_width(m, m.node)
    if w.shape != (group,):
        raise NoRule(f"an RMSNorm weight of shape {list(w.shape)} over groups of {group}")
    leaf = m.module()[0].rsplit(".", 1)[-1]
    role = NORM_ROLES.get(leaf)
    layer = m.layer()
    if role is None or (role == "final_norm") != (layer < 0):
        raise NoRule(f"an RMSNorm in module {m.module()[0]!r}, not one of {', '.join(NORM_ROLES)}")
    width = _act_width(m, m.node)
    out = m.emit(role, "rmsnorm", (x.name, m.param(w)), width, layer, (("eps", st.eps), ("group", group)))
    return Act(out.name, x.layout, x.heads, x.head_dim)


@rule("aten.pow.Tensor_Scalar")
def _pow(m, x, e):
    if isinstance(x, Act) and e == 2:
        return Step("norm.sq", x)
    raise NoRule("a power other than the square of an activation")


@rule("aten.mean.dim")
def _mean(m, x, dim, keepdim=False, **kw):
    if _is(x, Step, kind="norm.sq") and keepdim and _last_dim(m, dim):
        return Step("norm.mean", x.x)
    raise NoRule("a mean other than RMSNorm's over the last dimension")


@rule("aten.rsqrt.default")
def _rsqrt(m, x):
    if _is(x, Step, kind="norm.eps"):
        return Step("norm.rstd", x.x, eps=x.eps)
    raise NoRule("an rsqrt other than RMSNorm's")


@rule("aten.silu.default")
def _silu(m, x):
    if isinstance(x, Act) and x.layout == "flat":
        return Step("silu", x)
    raise NoRule("a SiLU of something other than a projection")


@rule("aten.bmm.default", "aten.matmul.default", "aten.mm.default")
def _matmul(m, a, b):
    pr = _pair(a, b, InvFreq, Pos)
    if pr:
        return Angles(pr[0].buffer, full=False)
    raise NoRule("a matrix product outside linear layers (only RoPE's inv_freq x position is mapped)")


@rule("aten.cat.default")
def _cat(m, xs, dim=0):
    n = len(m.shape())
    last = dim in (-1, n - 1)
    if last and len(xs) == 2 and all(isinstance(x, Angles) and not x.full for x in xs) and xs[0] == xs[1]:
        return Angles(xs[0].buffer, full=True)
    if last and len(xs) == 2 and _is(xs[0], Step, kind="rope.neg_hi") and _is(xs[1], Step, kind="rope.lo") \
            and xs[0].x == xs[1].x:
        return Step("rope.rot", xs[0].x)
    raise NoRule("a concatenation other than RoPE's")


@rule("aten.cos.default", "aten.sin.default")
def _trig(m, x):
    if _is(x, Angles, full=True):
        return Trig(str(m.node.target).split(".")[1], 1.0, x.buffer)
    raise NoRule("a cos/sin of something other than the RoPE angles")


@rule("aten.slice.Tensor")
def _slice(m, x, dim=0, start=None, end=None, step=1):
    if step != 1:
        raise NoRule("a strided slice")
    in_shape = m.shape(m.node.args[0])
    n = len(in_shape)
    if isinstance(x, Act) and m.shape() == in_shape:
        return x  # a slice that keeps everything (e.g. logits_to_keep=0)
    if isinstance(x, Act) and x.layout in ("bshd", "bhsd") and dim in (-1, n - 1):
        half = x.head_dim // 2
        start = start or 0
        if start == 0 and end == half:
            return Step("rope.lo", x)
        if start == half and (end is None or end >= x.head_dim):
            return Step("rope.hi", x)
    raise NoRule(f"a slice [{start}:{end}] of {x.describe() if isinstance(x, Value) else x!r} along dim {dim}")


@rule("aten.neg.default")
def _neg(m, x):
    if _is(x, Step, kind="rope.hi"):
        return Step("rope.neg_hi", x.x)
    raise NoRule("a negation other than RoPE's rotate-half")


@rule("aten.le.Tensor", "aten.ge.Tensor")
def _causal(m, a, b):
    kv, q = (a, b) if str(m.node.target) == "aten.le.Tensor" else (b, a)
    if isinstance(kv, Arange) and kv.start == 0 and isinstance(q, Pos):
        return Causal(kv.end)
    raise NoRule("a comparison other than the causal mask kv_index <= position")


@rule("aten.index_put.default")
def _index_put(m, cache, indices, values, accumulate=False):
    if not (isinstance(cache, Cache) and not cache.written and not accumulate):
        raise NoRule("an index_put that is not a KV-cache write")
    idx = list(indices)
    if not (len(idx) == 3 and idx[0] is None and idx[1] is None and isinstance(idx[2], Pos)):
        raise NoRule("a KV-cache write at an index other than cache_position")
    return _emit_kv_write(m, cache, values)


@rule("aten.index_copy.default")
def _index_copy(m, cache, dim, index, values):
    if not (isinstance(cache, Cache) and not cache.written and dim == 2 and isinstance(index, Pos)):
        raise NoRule("an index_copy that is not a KV-cache write at cache_position")
    return _emit_kv_write(m, cache, values)


def _emit_kv_write(m: Matcher, cache: Cache, values) -> Cache:
    if not (isinstance(values, Act) and values.layout == "bhsd"):
        raise NoRule(f"a KV-cache write of {values.describe() if isinstance(values, Value) else values!r}")
    want = {"k": ("rope_k",), "v": ("v_proj",)}[cache.kind]
    if m.role_of(values) not in want:
        raise NoRule(f"{cache.name} written with {values.name}, not the output of {' or '.join(want)}")
    shape = m.shape(m.node.args[0])
    if shape != (m.B, values.heads, m.L, values.head_dim):
        raise NoRule(f"{cache.name} of shape {list(shape)} for {values.heads} heads of {values.head_dim}")
    from mkc.capture.export import MKC_DTYPES

    dtype = MKC_DTYPES[m.node.args[0].meta["val"].dtype]
    m.declare("cache_position", (1,), "i64", "input")
    m.declare(cache.name, shape, dtype, "cache")
    layer = cache.layer
    if m.layer() not in (-1, layer):
        raise NoRule(f"{cache.name} written from layer {m.layer()}")
    name = f"l{layer}.{cache.kind}_write"
    if any(op.name == name for op in m.ops):
        raise NoRule(f"a second write of {cache.name}")
    m.ops.append(Op(name, "kv_write", (values.name, "cache_position"), (cache.name,),
                    (("head_dim", values.head_dim),), layer, source_of(m.node)))
    return Cache(cache.name, layer, cache.kind, written=True)


@rule("aten.scaled_dot_product_attention.default")
def _sdpa(m, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if not (isinstance(q, Act) and q.layout == "bhsd" and m.role_of(q) == "rope_q"):
        raise NoRule("attention whose query is not the rotated query projection")
    for c, kind in ((k, "k"), (v, "v")):
        if not (isinstance(c, Cache) and c.written and c.stage == "" and c.kind == kind):
            raise NoRule(f"attention whose {kind} is not this step's {kind} cache")
    if not k.layer == v.layer == m.producer[q.name].layer or k.n_rep != v.n_rep:
        raise NoRule("attention over a query and K/V caches of different layers or head groupings")
    if dropout_p != 0.0 or is_causal:
        raise NoRule("attention with dropout or is_causal (mkc expects an explicit causal mask)")
    if not _is(attn_mask, Causal, length=m.L):
        raise NoRule(f"attention masked by {attn_mask.describe() if isinstance(attn_mask, Value) else attn_mask!r}, "
                     f"not the causal mask over the {m.L}-position cache (sliding windows are not supported)")
    kv_heads = m.tensors[k.name].shape[1]
    n_rep = q.heads // kv_heads if enable_gqa else k.n_rep
    if n_rep * kv_heads != q.heads:
        raise NoRule(f"{q.heads} query heads over {kv_heads} KV heads repeated {n_rep} times")
    hd = q.head_dim
    scale = float(scale) if scale is not None else hd ** -0.5
    out = m.emit("attn", "attention", (q.name, k.name, v.name, "cache_position"), q.heads * hd, k.layer,
                 (("head_dim", hd), ("n_rep", n_rep), ("scale", scale)))
    return Act(out.name, "bhsd", q.heads, hd)
