"""What the ATen matcher knows about a node: abstract values, and the op roles it names ops by.

Each exported node gets one of these values (see mkc.capture.aten). ``Step`` values are patterns
under way: e.g. ``Step("norm.rstd", x, eps)`` is rsqrt(mean(x^2) + eps) of activation x, waiting
for the multiplies that finish an RMSNorm.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

# Tensor written by each op role, as mkc.capture.canonical names them (per layer: "l{i}." + name).
ROLE_OUTPUT = {
    "embed": "x0", "input_norm": "xn", "q_proj": "q", "k_proj": "k", "v_proj": "v", "q_norm": "qn",
    "k_norm": "kn", "rope_q": "q_rot", "rope_k": "k_rot", "attn": "attn_out", "o_proj": "o",
    "attn_residual": "xa", "post_attn_norm": "xn2", "gate_proj": "gate", "up_proj": "up", "silu_mul": "h",
    "down_proj": "down", "mlp_residual": "xm", "final_norm": "xf", "lm_head": "logits", "argmax": "next_ids",
}
# Canonical op order within a layer (graph.py's list); capture sorts ops topologically by it.
ROLE_ORDER = (
    "embed", "input_norm", "q_proj", "k_proj", "v_proj", "q_norm", "k_norm", "rope_q", "rope_k", "k_write",
    "v_write", "attn", "o_proj", "attn_residual", "post_attn_norm", "gate_proj", "up_proj", "silu_mul",
    "down_proj", "mlp_residual", "final_norm", "lm_head", "argmax",
)
LINEAR_ROLES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
NORM_ROLES = {"input_layernorm": "input_norm", "post_attention_layernorm": "post_attn_norm",
              "q_norm": "q_norm", "k_norm": "k_norm", "norm": "final_norm"}
RESIDUAL_ROLES = {"o_proj": "attn_residual", "down_proj": "mlp_residual"}

SUPPORTED_OPS = (
    "embedding; RMSNorm (to/pow/mean/add/rsqrt/mul/to/mul); linear with optional bias; rotate-half RoPE; "
    "KV-cache writes (index_put/index_copy at cache_position); GQA expand; causal scaled_dot_product_attention; "
    "SiLU(gate)*up; residual add"
)


# ---- abstract values ---------------------------------------------------------------------------
class Value:
    def describe(self) -> str:
        return type(self).__name__.lower()


@dataclass(frozen=True)
class Param(Value):
    name: str  # Hugging Face state-dict name
    shape: tuple[int, ...]
    dtype: torch.dtype

    def describe(self):
        return f"weight {self.name}"


@dataclass(frozen=True)
class Ids(Value):
    def describe(self):
        return "input_ids"


@dataclass(frozen=True)
class Pos(Value):
    """The decode position (cache_position), whatever its shape."""

    def describe(self):
        return "cache_position"


@dataclass(frozen=True)
class PosPlus(Value):
    """The position advanced by ``k``: the static cache's bookkeeping counter, never computed on."""

    k: int

    def describe(self):
        return f"cache_position + {self.k}"


@dataclass(frozen=True)
class Counter(Value):
    name: str

    def describe(self):
        return f"position counter {self.name}"


@dataclass(frozen=True)
class Arange(Value):
    start: int
    end: int

    def describe(self):
        return f"arange({self.start}, {self.end})"


@dataclass(frozen=True)
class InvFreq(Value):
    buffer: str

    def describe(self):
        return f"RoPE inv_freq {self.buffer}"


@dataclass(frozen=True)
class Angles(Value):
    buffer: str
    full: bool  # both halves (cat'ed), ready for cos/sin

    def describe(self):
        return "RoPE angles"


@dataclass(frozen=True)
class Trig(Value):
    fn: str  # cos | sin
    scale: float
    buffer: str

    def describe(self):
        return f"RoPE {self.fn} table"


@dataclass(frozen=True)
class Causal(Value):
    length: int

    def describe(self):
        return f"causal mask over {self.length} positions"


@dataclass(frozen=True)
class Cache(Value):
    name: str  # mkc tensor name, k_cache.{i} / v_cache.{i}
    layer: int
    kind: str  # k | v
    written: bool
    n_rep: int = 1
    stage: str = ""  # GQA expand progress: "" | unsqueezed | expanded (then back to "" with n_rep)

    def describe(self):
        return f"KV cache {self.name}" + ("" if self.written else " (not yet written this step)")


@dataclass(frozen=True)
class Opaque(Value):
    what: str

    def describe(self):
        return self.what


@dataclass(frozen=True)
class Act(Value):
    """An mkc activation [B, F], seen as flat [B,1,F], per head [B,1,n,hd] (bshd) or [B,n,1,hd] (bhsd)."""

    name: str
    layout: str = "flat"
    heads: int = 0
    head_dim: int = 0

    def describe(self):
        return f"activation {self.name}" + ("" if self.layout == "flat" else f" as {self.layout}")


@dataclass(frozen=True)
class Step(Value):
    """A pattern under way on activation ``x``: e.g. ``norm.rstd`` is rsqrt(mean(x^2) + eps)."""

    kind: str
    x: Act
    eps: float = 0.0
    scale: float = 1.0
    buffer: str = ""  # RoPE: the inv_freq buffer behind the cos/sin table

    def describe(self):
        return f"{self.kind} of {self.x.name}"


class NoRule(Exception):
    """The rule for this op does not accept these arguments."""


# ---- source locations --------------------------------------------------------------------------
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _short(path: str) -> str:
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def source_of(node, model_code: bool = True) -> str:
    """``file:line`` of the node in the model's code (innermost transformers/models frame)."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return ""
    pick = frames[-1]
    if model_code:
        for f in reversed(frames):
            if "/transformers/models/" in f[0]:
                pick = f
                break
    return f"{_short(pick[0])}:{pick[1]}"
