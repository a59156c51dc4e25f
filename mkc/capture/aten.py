"""Map the ATen graph of one exported decode step onto mkc's op graph.

The matcher is an abstract interpreter. It walks the exported nodes in order and gives each one
an abstract value (mkc.capture.values) saying what the node is in mkc's terms: a weight, an
activation (an mkc tensor seen through a view), the decode position, a RoPE table, a KV cache,
the causal mask, or one step of a multi-node pattern that is not finished yet (RMSNorm's
pow/mean/add/rsqrt/mul chain, RoPE's rotate-half, SiLU before its mul). One rule per ATen op
(mkc.capture.patterns) turns its arguments' values into the node's value; when a pattern
completes the rule emits an mkc op, named by the role of the module the node came from
(``node.meta["nn_module_stack"]``). A node that no rule accepts stops capture with an
UnsupportedModelError naming the op, the module, the model class and the source line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch.export.graph_signature import InputKind, OutputKind

from mkc.capture.graph import Op, Tensor
from mkc.capture.patterns import RULES
from mkc.capture.registry import SUPPORTED_ARCHS
from mkc.capture.values import (ROLE_OUTPUT, SUPPORTED_OPS, Act, Cache, Counter, Ids, InvFreq, NoRule, Opaque,
                                Param, Pos, PosPlus, Value, source_of)
from mkc.errors import UnsupportedModelError


# ---- the matcher -------------------------------------------------------------------------------
@dataclass
class Matched:
    ops: list[Op]
    tensors: dict[str, Tensor]


class Matcher:
    def __init__(self, ep, *, model_class: str, batch: int, max_seq_len: int, prefix: str,
                 rope_tables: dict, act_dtype: str = "f32"):
        self.ep = ep
        self.model_class = model_class
        self.B = batch
        self.L = max_seq_len
        self.prefix = prefix
        self.rope_tables = rope_tables
        self.act_dtype = act_dtype
        self.values: dict = {}
        self.ops: list[Op] = []
        self.tensors: dict[str, Tensor] = {}
        self.producer: dict[str, Op] = {}
        self.rope_used: tuple[str, float] | None = None
        self.node = None

    # -- helpers --------------------------------------------------------------------------------
    def hf_name(self, target: str) -> str:
        return target[len(self.prefix):] if target.startswith(self.prefix) else target

    def module(self, node=None) -> tuple[str, str]:
        """(path, class name) of the innermost module of the node, path in the HF model's terms."""
        stack = list(((node or self.node).meta.get("nn_module_stack") or {}).values())
        if not stack:
            return "", ""
        path, cls = stack[-1]
        if path == self.prefix.rstrip("."):
            path = ""  # the model itself
        return self.hf_name(path), cls.rsplit(".", 1)[-1]

    def layer(self) -> int:
        m = re.search(r"(?:^|\.)layers\.(\d+)(?:\.|$)", self.module()[0])
        return int(m.group(1)) if m else -1

    def shape(self, node=None) -> tuple[int, ...]:
        v = (node or self.node).meta.get("val")
        return tuple(int(s) for s in v.shape) if isinstance(v, torch.Tensor) else ()

    def fail(self, why: str) -> UnsupportedModelError:
        node = self.node
        path, cls = self.module()
        where = f"module {path or '<top>'} ({cls})" if cls else "no module"
        inner = source_of(node, model_code=False)
        outer = source_of(node)
        at = inner + (f" (called from {outer})" if outer and outer != inner else "") if inner else "unknown line"
        args = ", ".join(self._describe_arg(a) for a in node.args)
        return UnsupportedModelError(
            f"mkc cannot map {node.target}({args}) in {self.model_class}: {why}.\n"
            f"  from {where}, at {at}\n"
            f"mkc maps: {SUPPORTED_OPS}.\n"
            f"Supported architectures: {', '.join(SUPPORTED_ARCHS)}."
        )

    def _describe_arg(self, a) -> str:
        if isinstance(a, torch.fx.Node):
            v = self.values.get(a)
            return v.describe() if v is not None else a.name
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(self._describe_arg(x) for x in a) + "]"
        return repr(a)

    def declare(self, name, shape, dtype, role, data=()):
        t = Tensor(name, tuple(shape), dtype, role, tuple(data))
        old = self.tensors.get(name)
        if old is not None and old != t:
            raise self.fail(f"tensor {name} seen with two different shapes/types ({old} vs {t})")
        self.tensors[name] = t
        return name

    def param(self, p: Param) -> str:
        from mkc.capture.export import MKC_DTYPES

        return self.declare(p.name, p.shape, MKC_DTYPES.get(p.dtype, str(p.dtype)), "param")

    def emit(self, role, kind, inputs, width, layer, attrs=(), out_role="act") -> Act:
        """Append an mkc op for ``role`` and declare its output [B, width] under build_graph's name."""
        name = f"l{layer}.{role}" if layer >= 0 else role
        out = f"l{layer}.{ROLE_OUTPUT[role]}" if layer >= 0 else ROLE_OUTPUT[role]
        if any(op.name == name for op in self.ops):
            raise self.fail(f"a second {role} op in {'layer %d' % layer if layer >= 0 else 'the model'}")
        self.declare(out, (self.B, width), self.act_dtype, out_role)
        op = Op(name, kind, tuple(inputs), (out,), tuple(attrs), layer, source_of(self.node))
        self.ops.append(op)
        self.producer[out] = op
        return Act(out)

    def role_of(self, act: Act) -> str:
        op = self.producer.get(act.name)
        return op.name.split(".")[-1] if op else ""

    # -- driving --------------------------------------------------------------------------------
    def run(self) -> Matched:
        sig = self.ep.graph_signature
        kinds = {s.arg.name: s for s in sig.input_specs}
        for node in self.ep.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                self.values[node] = self.placeholder(node, kinds[node.name])
            elif node.op == "call_function":
                self.values[node] = self.call(node)
            elif node.op == "output":
                self.output(node)
            else:
                raise self.fail(f"unexpected FX node kind {node.op}")
        return Matched(self.ops, self.tensors)

    def placeholder(self, node, spec) -> Value:
        target = spec.target or ""
        if spec.kind == InputKind.PARAMETER:
            v = node.meta["val"]
            return Param(self.hf_name(target), tuple(v.shape), v.dtype)
        if spec.kind == InputKind.USER_INPUT:
            if node.name == "input_ids":
                return Ids()
            if node.name == "cache_position":
                return Pos()
            return Opaque(f"input {node.name}")
        if spec.kind == InputKind.BUFFER:
            m = re.fullmatch(r"(key|value)_cache_(\d+)", target)
            if m:
                i = int(m.group(2))
                kind = "k" if m.group(1) == "key" else "v"
                return Cache(f"{kind}_cache.{i}", i, kind, written=False)
            if re.fullmatch(r"cumulative_length_\d+", target):
                return Counter(target)
            name = self.hf_name(target)
            if name.endswith("inv_freq") and name in self.rope_tables:
                return InvFreq(name)
            return Opaque(f"buffer {name}")
        return Opaque(f"{spec.kind.name.lower()} {target or node.name}")

    def call(self, node) -> Value | None:
        name = str(node.target)
        if name.startswith("aten._assert") or name.startswith("aten.sym_constrain"):
            return None  # shape/dtype assertions: nothing to compute
        rule = RULES.get(name)
        if rule is None:
            raise self.fail("mkc has no rule for this op")
        args = [self.lookup(a) for a in node.args]
        kwargs = {k: self.lookup(v) for k, v in node.kwargs.items()}
        try:
            return rule(self, *args, **kwargs)
        except NoRule as e:
            raise self.fail(str(e)) from None

    def lookup(self, a):
        if isinstance(a, torch.fx.Node):
            return self.values[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.lookup(x) for x in a)
        return a

    def output(self, node):
        sig = self.ep.graph_signature
        outs = node.args[0]
        logits = None
        for spec, arg in zip(sig.output_specs, outs):
            v = self.values.get(arg) if isinstance(arg, torch.fx.Node) else None
            if spec.kind == OutputKind.USER_OUTPUT:
                if logits is not None or not (isinstance(v, Act) and v.name == "logits" and v.layout == "flat"):
                    raise self.fail(f"the model returns {v.describe() if v else arg!r}, not the LM-head logits")
                logits = v
            elif spec.kind == OutputKind.BUFFER_MUTATION:
                target = spec.target
                if re.fullmatch(r"cumulative_length_\d+", target) and isinstance(v, (Pos, PosPlus)):
                    continue
                m = re.fullmatch(r"(key|value)_cache_(\d+)", target)
                want = f"{'k' if m and m.group(1) == 'key' else 'v'}_cache.{m.group(2)}" if m else None
                if not (isinstance(v, Cache) and v.written and v.name == want):
                    raise self.fail(f"the step writes buffer {target} with {v.describe() if v else arg!r}")
            else:
                raise self.fail(f"unexpected output kind {spec.kind.name}")
        if logits is None:
            raise self.fail("the model returns no logits")


def match(ep, *, model_class: str, batch: int, max_seq_len: int, prefix: str, rope_tables: dict) -> Matched:
    """Run the matcher over an exported, decomposed decode step."""
    return Matcher(ep, model_class=model_class, batch=batch, max_seq_len=max_seq_len, prefix=prefix,
                   rope_tables=rope_tables).run()
