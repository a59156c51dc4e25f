"""Buffer names of the task graph: fixed activation names (ir.py) and the weights' Hugging Face names.

Lowering, the simulator and the code generator all find a layer's weights through these
functions, so the role -> name mapping lives in one place. ``lower`` checks that the graph
uses exactly these names.
"""

from __future__ import annotations

EMBED = "model.embed_tokens.weight"
FINAL_NORM = "model.norm.weight"
LM_HEAD = "lm_head.weight"
LM_CAND = "lm_cand"  # the LM-head tiles' top logits per row, for the filtered sampler (lower.LM_CAND)

# role -> name under ``model.layers.{l}.``
LAYER_WEIGHTS = {
    "input_norm": "input_layernorm.weight",
    "q": "self_attn.q_proj.weight",
    "k": "self_attn.k_proj.weight",
    "v": "self_attn.v_proj.weight",
    "q_bias": "self_attn.q_proj.bias",
    "k_bias": "self_attn.k_proj.bias",
    "v_bias": "self_attn.v_proj.bias",
    "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight",
    "o": "self_attn.o_proj.weight",
    "post_norm": "post_attention_layernorm.weight",
    "gate": "mlp.gate_proj.weight",
    "up": "mlp.up_proj.weight",
    "down": "mlp.down_proj.weight",
}


def layer_weight(layer: int, role: str) -> str:
    return f"model.layers.{layer}.{LAYER_WEIGHTS[role]}"


def lm_head_weight(tied: bool) -> str:
    return EMBED if tied else LM_HEAD


def h_act(layer: int) -> str:
    """Gate/up's output, down's input (f32, or bf16 with ``lower(h_bf16=True)``)."""
    return f"h.{layer}"


def attn_act(layer: int) -> str:
    """Unsplit attention's output, o-proj's input (f32, or bf16 with ``lower(attn_bf16=True)``)."""
    return f"attn.{layer}"


def x_in(layer: int) -> str:
    """The residual stream entering ``layer`` (``x_in(n_layers)`` is the last layer's output)."""
    return "x0" if layer == 0 else f"xm.{layer - 1}"


def k_cache(layer: int) -> str:
    return f"k_cache.{layer}"


def v_cache(layer: int) -> str:
    return f"v_cache.{layer}"


def k_raw(layer: int) -> str:
    """Raw (pre-norm, pre-RoPE) keys of a q/k-norm model's layer: attention norms them into the cache."""
    return f"kr.{layer}"


def attn_out(layer: int) -> str:
    """Per-split attention outputs [B, S, nh*hd] (each normalised by its own softmax sum)."""
    return f"ao.{layer}"


def attn_lse(layer: int) -> str:
    """Per-split log-sum-exp of the scores [B, S, nh] (-inf for a split with no positions)."""
    return f"alse.{layer}"


def down_partial(layer: int) -> str:
    """Split-K down's running sums [C - 1, B, H]: xa plus the chunks of h up to c (lower_downk)."""
    return f"xmp.{layer}"


def down_parts(layer: int) -> str:
    """Down-proj's partial products over chunks of h [C, B, H] (lower_downp; dsum adds them)."""
    return f"dp.{layer}"


def qkv_parts(layer: int) -> str:
    """qkv's partial products over chunks of the normed input [C, B, (nh + 2 nkv) hd], rows in the
    concatenated (q | k | v) order (lower_qkvp; attention adds them)."""
    return f"qp.{layer}"


# lower(xn_bf16=True): each residual-stream activation a GEMV normalises (x0, xm.l, xa.l) has two
# companions its producer writes beside it: bf16(x * w_norm) [B, H] (w_norm the norm its reader
# applies: the next layer's input norm, the final norm, the layer's post-attention norm) and the sums
# of squares of x over each 8 columns [B, H / 8]. qkv, gate/up and the LM head stage the bf16
# copy as it is (half the bytes of the f32 stream, no norm) and take 1/rms from the sums.
XN_GROUP = 8  # columns per sum of squares (row_tiles' finest alignment)


def norm_into(layer: int, n_layers: int) -> str:
    """The RMSNorm weight applied to the residual stream entering ``layer`` (the final norm past the last)."""
    return FINAL_NORM if layer == n_layers else layer_weight(layer, "input_norm")


def xn_of(act: str) -> str:
    """The bf16 normed companion of residual-stream activation ``act`` (``x0``, ``xm.l``, ``xa.l``)."""
    return "xn0" if act == "x0" else f"xn{act[1]}.{act.split('.')[1]}"


def xss_of(act: str) -> str:
    """The per-16-column sums of squares of residual-stream activation ``act``."""
    return "xss0" if act == "x0" else f"xss{act[1]}.{act.split('.')[1]}"
