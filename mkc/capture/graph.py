"""mkc's op graph: one decode step of a decoder LLM, in a dozen meaningful ops.

Every activation is 2-D, ``[batch, features]`` (a decode step has one token per sequence);
per-head ops take ``head_dim`` as an attribute instead of reshaping. The graph is SSA: every
activation is written by exactly one op. KV caches are the one exception: a ``kv_write`` op
updates a cache in place (it names the cache as its output), and ``attention`` reads it.

Op kinds and their exact meaning (the reference executor implements exactly this):

=============  ==========================================  =========================================
kind           inputs -> outputs                            semantics (all math in fp32)
=============  ==========================================  =========================================
embedding      (table[V,H], ids[B]) -> x[B,H]               x[b] = table[ids[b]]
rmsnorm        (x[B,D], w[G]) -> y[B,D]   attrs eps, group   per group of G = attrs.group features:
                                                            y = x * rsqrt(mean(x^2) + eps) * w
linear         (x[B,K], w[N,K] [, bias[N]]) -> y[B,N]       y = x @ w.T (+ bias)
rope           (x[B,n*hd], inv_freq[hd/2], pos[1]) -> y      HF rotate-half RoPE per head, angle
               attrs head_dim, scaling                      pos*inv_freq, cos/sin times ``scaling``
kv_write       (new[B,nkv*hd], pos[1]) -> cache[B,nkv,L,hd] cache[:, h, pos, :] = new[:, h*hd:(h+1)*hd]
               attrs head_dim
attention      (q[B,nh*hd], k_cache, v_cache, pos[1])        causal GQA over positions 0..pos:
               -> o[B,nh*hd]  attrs head_dim, n_rep, scale   head h uses kv head h // n_rep
silu_mul       (g[B,I], u[B,I]) -> y[B,I]                   y = silu(g) * u
add            (a[B,D], b[B,D]) -> y[B,D]                   y = a + b
argmax         (logits[B,V]) -> ids[B]                      first index of the maximum per row
=============  ==========================================  =========================================

Op names are roles, which later stages rely on: ``embed``; per layer ``l{i}.input_norm``,
``l{i}.q_proj``, ``l{i}.k_proj``, ``l{i}.v_proj``, ``l{i}.q_norm``, ``l{i}.k_norm`` (Qwen3),
``l{i}.rope_q``, ``l{i}.rope_k``, ``l{i}.k_write``, ``l{i}.v_write``, ``l{i}.attn``, ``l{i}.o_proj``,
``l{i}.attn_residual``, ``l{i}.post_attn_norm``, ``l{i}.gate_proj``, ``l{i}.up_proj``,
``l{i}.silu_mul``, ``l{i}.down_proj``, ``l{i}.mlp_residual``; then ``final_norm``, ``lm_head``,
``argmax``. ``mkc.capture.canonical.build_graph`` writes the canonical graph of a ModelInfo.

Tensors with role ``param`` are weights under their Hugging Face state-dict names; ``const``
tensors (RoPE's ``inv_freq``) carry their values in the graph; ``input`` tensors are
``input_ids`` and ``cache_position``; ``cache`` tensors are the per-layer KV caches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mkc.errors import IRCheckError
from mkc.irjson import load_json, save_json

OP_KINDS = ("embedding", "rmsnorm", "linear", "rope", "kv_write", "attention", "silu_mul", "add", "argmax")
ROLES = ("input", "param", "const", "cache", "act", "output")
DTYPES = ("bf16", "f16", "f32", "i64")
DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "i64": 8}


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    data: tuple[float, ...] = ()  # values of a ``const`` tensor, row-major

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Op:
    name: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, float | int | str], ...] = ()
    layer: int = -1  # decoder layer index, -1 outside the layers
    source: str = ""  # "file:line" of the model code this op came from

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        if default is None:
            raise KeyError(f"op {self.name} ({self.kind}) has no attribute {key!r}")
        return default


@dataclass(frozen=True)
class ModelInfo:
    """The shape facts of a model that later stages need."""

    arch: str  # the transformers class name, e.g. "LlamaForCausalLM"
    family: str  # llama | qwen2 | qwen3 | mistral
    hidden: int
    intermediate: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    rms_eps: float
    tied_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    dtype: str = "bf16"  # weight dtype on the device


@dataclass(frozen=True)
class Graph:
    model: ModelInfo
    batch: int
    max_seq_len: int
    tensors: tuple[Tensor, ...]
    ops: tuple[Op, ...]
    outputs: tuple[str, ...] = ("logits", "next_ids")

    # ---- lookups -------------------------------------------------------------------------
    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def tensor_map(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.tensors}

    def params(self) -> list[Tensor]:
        return [t for t in self.tensors if t.role == "param"]

    def param_bytes(self) -> int:
        return sum(t.nbytes for t in self.params())

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.kind] = counts.get(op.kind, 0) + 1
        return counts

    # ---- invariants ----------------------------------------------------------------------
    def check(self) -> "Graph":
        problems: list[str] = []
        tmap = {}
        for t in self.tensors:
            if t.name in tmap:
                problems.append(f"tensor {t.name} declared twice")
            tmap[t.name] = t
            if t.role not in ROLES:
                problems.append(f"tensor {t.name} has unknown role {t.role!r}")
            if t.dtype not in DTYPES:
                problems.append(f"tensor {t.name} has unknown dtype {t.dtype!r}")
            if t.role == "const" and len(t.data) != t.numel:
                problems.append(f"const {t.name} has {len(t.data)} values for shape {t.shape}")
        written: dict[str, str] = {}
        for op in self.ops:
            if op.kind not in OP_KINDS:
                problems.append(f"op {op.name} has unknown kind {op.kind!r}")
            for name in op.inputs:
                if name not in tmap:
                    problems.append(f"op {op.name} reads undeclared tensor {name}")
                elif tmap[name].role in ("act", "output") and name not in written:
                    problems.append(f"op {op.name} reads {name} before any op writes it")
            for name in op.outputs:
                if name not in tmap:
                    problems.append(f"op {op.name} writes undeclared tensor {name}")
                    continue
                role = tmap[name].role
                if role in ("param", "const", "input"):
                    problems.append(f"op {op.name} writes read-only {role} tensor {name}")
                if name in written:
                    problems.append(f"tensor {name} written by both {written[name]} and {op.name}")
                written[name] = op.name
                if role == "cache" and op.kind != "kv_write":
                    problems.append(f"cache {name} written by {op.kind} op {op.name}, not kv_write")
        for name in self.outputs:
            if name not in written:
                problems.append(f"graph output {name} is never written")
        if self.batch < 1 or self.max_seq_len < 1:
            problems.append(f"batch {self.batch} and max_seq_len {self.max_seq_len} must be positive")
        m = self.model
        if m.n_heads % m.n_kv_heads:
            problems.append(f"{m.n_heads} heads not a multiple of {m.n_kv_heads} kv heads")
        if problems:
            raise IRCheckError("Graph check failed:\n  " + "\n  ".join(problems))
        return self

    # ---- persistence ---------------------------------------------------------------------
    def save(self, path) -> None:
        save_json(self, path)

    @staticmethod
    def load(path) -> "Graph":
        return load_json(Graph, path).check()
