"""capture(): a Hugging Face decoder -> mkc Graph of one decode step.

The passes, in order (each a named function below or in its own module):

    resolve            registry name / directory / config / model object -> ModelSource
    checked_source     reject config features mkc cannot compile (mkc.capture.support), before exporting
    check_supported    reject architectures mkc has no patterns for, before exporting
    meta_model         build the architecture on the meta device (no weights)
    export_decode_step strict torch.export with a static KV cache, then decompositions
    rope_constants     RoPE inv_freq and scaling, computed by the model's own rotary class on the CPU
    match              ATen nodes -> mkc ops (mkc.capture.aten)
    derive_info        ModelInfo from the matched ops, checked against the config
    assemble           canonical op and tensor order, argmax appended, Graph.check()
"""

from __future__ import annotations

import networkx as nx

from mkc.capture.aten import Matched, match
from mkc.capture.export import TORCH_DTYPES, export_decode_step, meta_model, rope_constants
from mkc.capture.graph import Graph, ModelInfo, Op, Tensor
from mkc.capture.registry import check_supported, resolve
from mkc.capture.support import checked_source
from mkc.capture.values import ROLE_ORDER
from mkc.errors import IRCheckError, MkcError, UnsupportedModelError

LAYER_ROLES = ("input_norm", "q_proj", "k_proj", "v_proj", "rope_q", "rope_k", "k_write", "v_write", "attn",
               "o_proj", "attn_residual", "post_attn_norm", "gate_proj", "up_proj", "silu_mul", "down_proj",
               "mlp_residual")
MODEL_ROLES = ("embed", "final_norm", "lm_head")


def capture(model=None, batch_size: int = 1, max_seq_len: int = 4096, *, dtype: str | None = None) -> Graph:
    """The mkc Graph of one decode step of ``model`` at a fixed batch size and KV-cache length.

    ``model`` is a registry name (default llama-3.2-1b), a directory with a config.json, a
    transformers config, or a transformers model object. Registry names, directories and configs
    are built on the meta device in ``dtype`` (default bf16); a model object is exported as it is.
    """
    if batch_size < 1 or max_seq_len < 1:
        raise MkcError(f"batch size ({batch_size}) and max_seq_len ({max_seq_len}) must be positive")
    src = checked_source(resolve(model), max_seq_len)
    family = check_supported(src)
    if src.module is not None:
        hf = src.module
    else:
        if (dtype or "bf16") not in TORCH_DTYPES:
            raise MkcError(f"unknown weight dtype {dtype!r}; known: {', '.join(TORCH_DTYPES)}")
        hf = meta_model(src, TORCH_DTYPES[dtype or "bf16"])
    arch = type(hf).__name__
    training = hf.training
    try:
        ep, prefix = export_decode_step(hf.eval(), batch_size, max_seq_len)
    except MkcError:
        raise
    except Exception as e:  # torch.export's own errors are long; keep the cause chained
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UnsupportedModelError(f"torch.export of one decode step of {arch} failed: {first}") from e
    finally:
        hf.train(training)  # a caller's model object keeps its mode
    matched = match(ep, model_class=arch, batch=batch_size, max_seq_len=max_seq_len, prefix=prefix,
                    rope_tables=rope_constants(hf))
    info = derive_info(matched, src.config, arch, family)
    return assemble(info, batch_size, max_seq_len, matched)


def _ops_by_name(ops) -> dict[str, Op]:
    return {op.name: op for op in ops}


def derive_info(matched: Matched, config, arch: str, family: str) -> ModelInfo:
    """The model's shape facts, read off the matched ops and cross-checked with its config."""
    ops, tensors = _ops_by_name(matched.ops), matched.tensors
    for role in MODEL_ROLES:
        if role not in ops:
            raise UnsupportedModelError(f"{arch}: capture found no {role} op; mkc needs {', '.join(MODEL_ROLES)}")
    layers = sorted({op.layer for op in matched.ops if op.layer >= 0})
    if not layers or layers != list(range(len(layers))):
        raise UnsupportedModelError(f"{arch}: decoder layers {layers} are not numbered 0..n-1")
    roles = [{op.name.split(".", 1)[1] for op in matched.ops if op.layer == i} for i in layers]
    missing = set(LAYER_ROLES) - roles[0]
    if missing:
        raise UnsupportedModelError(f"{arch}: layer 0 has no {', '.join(sorted(missing))} op; "
                                    f"mkc maps pre-norm attention + gated-MLP layers")
    for i, r in enumerate(roles):
        if r != roles[0]:
            raise UnsupportedModelError(f"{arch}: layer {i} has ops {sorted(r ^ roles[0])} that layer 0 "
                                        f"does not share (or lacks); mkc needs identical layers")
    biased = {op.name.split(".")[-1] for op in matched.ops if op.kind == "linear" and len(op.inputs) == 3}
    if biased and biased != {"q_proj", "k_proj", "v_proj"}:
        raise UnsupportedModelError(f"{arch}: biases on {', '.join(sorted(biased))}; mkc's ModelInfo describes "
                                    f"biases on all of q_proj, k_proj, v_proj (Qwen2) or none")
    norm_eps = {op.attr("eps") for op in matched.ops if op.kind == "rmsnorm"}
    if len(norm_eps) != 1:
        raise UnsupportedModelError(f"{arch}: RMSNorms use different eps values {sorted(norm_eps)}")
    table = tensors[ops["embed"].inputs[0]]
    attn = ops["l0.attn"]
    hd = int(attn.attr("head_dim"))
    info = ModelInfo(
        arch=arch,
        family=family,
        hidden=table.shape[1],
        intermediate=tensors["l0.gate"].shape[1],
        n_layers=len(layers),
        n_heads=tensors["l0.q"].shape[1] // hd,
        n_kv_heads=tensors["l0.k"].shape[1] // hd,
        head_dim=hd,
        vocab=table.shape[0],
        rms_eps=float(norm_eps.pop()),
        tied_embeddings=ops["lm_head"].inputs[1] == table.name,
        qkv_bias=len(ops["l0.q_proj"].inputs) == 3,
        qk_norm="l0.q_norm" in ops,
        dtype=table.dtype,
    )
    _check_against_config(info, config)
    return info


def _check_against_config(info: ModelInfo, config) -> None:
    want = {
        "hidden": config.hidden_size,
        "intermediate": config.intermediate_size,
        "n_layers": config.num_hidden_layers,
        "n_heads": config.num_attention_heads,
        "n_kv_heads": getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        "head_dim": getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        "vocab": config.vocab_size,
        "rms_eps": float(config.rms_norm_eps),
        "tied_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
    }
    wrong = [f"{k}: graph {getattr(info, k)} vs config {v}" for k, v in want.items() if getattr(info, k) != v]
    if wrong:
        raise IRCheckError(f"captured {info.arch} disagrees with its config: " + "; ".join(wrong))


def canonical_order(ops: list[Op]) -> list[Op]:
    """A topological order of the ops, ties broken by (layer, role) as graph.py lists roles."""
    g = nx.DiGraph()
    writer: dict[str, str] = {}
    byname = _ops_by_name(ops)
    for op in ops:
        g.add_node(op.name)
        for t in op.outputs:
            writer[t] = op.name
    for op in ops:
        for t in op.inputs:
            if t in writer:
                g.add_edge(writer[t], op.name)

    def key(name):
        op = byname[name]
        return (op.layer, ROLE_ORDER.index(name.rsplit(".", 1)[-1]))

    return [byname[n] for n in nx.lexicographical_topological_sort(g, key=key)]


def assemble(info: ModelInfo, batch: int, max_seq_len: int, matched: Matched) -> Graph:
    """The Graph in canonical order: inputs and constants first, then tensors in order of first use."""
    tensors = dict(matched.tensors)
    tensors["next_ids"] = Tensor("next_ids", (batch,), "i64", "output")
    argmax = Op("argmax", "argmax", ("logits",), ("next_ids",))  # greedy decoding, appended by mkc
    ops = canonical_order(list(matched.ops) + [argmax])
    order = [n for n in ("input_ids", "cache_position", "rope.inv_freq") if n in tensors]
    for op in ops:
        for name in op.inputs + op.outputs:
            if name not in order:
                order.append(name)
    unused = set(tensors) - set(order)
    if unused:
        raise IRCheckError(f"capture declared tensors no op uses: {sorted(unused)}")
    return Graph(info, batch, max_seq_len, tuple(tensors[n] for n in order), tuple(ops)).check()
