"""The task graph: every op of a decode step fused into task kinds and tiled into per-SM tasks.

A *task* is one SM's share of one fused op. Tasks talk through *buffers* in global memory
(weights, KV caches, fp32 activations) and synchronise through *events*: an event is a counter
that ``triggers`` tasks each bump once per decode step; a task that waits on it may start when
the counter reaches ``triggers * (step + 1)`` (counters never reset; step counts from 0).
In NaN-sentinel mode the same event is instead satisfied when no 32-bit word of its
``regions`` (the union of what its producers write) holds the sentinel pattern.

Task kinds, their arguments and what each computes: ``mkc.taskgraph.kinds`` (the contract shared
by lowering, the CPU simulator and the device code).
``B`` batch, ``H`` hidden, ``L`` max_seq_len; ``l`` is ``task.layer``.

Buffer names are fixed: ``ids``, ``pos``, ``x0``, ``q.{l}``, ``attn.{l}``, ``xa.{l}``, ``h.{l}``,
``xm.{l}``, ``logits``, ``amax_part``, ``amax_idx``, ``next_ids``, ``k_cache.{l}``, ``v_cache.{l}``
(and where lowering makes them: ``kr.{l}``, ``ao.{l}``, ``alse.{l}``, ``lm_cand``, ``xmp.{l}``), the
const ``inv_freq`` (values in ``Buffer.data``) and weights under their Hugging Face names
(``mkc.taskgraph.names``). Float constants (``rms_eps``, ``rope_scaling``, ``attn_scale``) are in
``TaskGraph.consts``.

Regions are boxes ``((lo, hi), ...)`` per dimension of the buffer, half-open. A cache region
along the sequence dimension is written for the worst case ``pos = L - 1`` (the write at pos is
inside every read of ``[0, pos]``, whatever pos is). A cache read's end is relative to that worst
case: ``(0, L)`` reads positions ``[0, pos]`` and ``(0, L - 1)`` reads ``[0, pos)``.
With q/k norm there is one more buffer per layer, ``kr.{l}`` (fp32 ``[B, nkv*hd]``: raw keys); with
attention split over the sequence (S > 1) ``attn.{l}`` is replaced by ``ao.{l}`` (``[B, S, nh*hd]``)
and ``alse.{l}`` (``[B, S, nh]``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mkc.errors import IRCheckError
from mkc.irjson import load_json, save_json
from mkc.taskgraph.kinds import TASK_KINDS
from mkc.taskgraph.plan import DevicePlan

BUFFER_ROLES = ("weight", "const", "input", "act", "cache", "output")


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: tuple[int, ...]
    dtype: str  # bf16 | f32 | i64 | i32
    role: str  # weight | const | input | act | cache | output
    polled: bool = False  # NaN-sentinel mode polls it (activations produced within a step, caches at pos)
    data: tuple[float, ...] = ()  # values of a ``const`` buffer, row-major


@dataclass(frozen=True)
class Region:
    buffer: str
    box: tuple[tuple[int, int], ...]

    def overlaps(self, other: "Region") -> bool:
        if self.buffer != other.buffer:
            return False
        return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(self.box, other.box))

    def size(self) -> int:
        n = 1
        for lo, hi in self.box:
            n *= max(0, hi - lo)
        return n


@dataclass(frozen=True)
class Event:
    id: int
    name: str
    triggers: int  # tasks that signal it once per step
    regions: tuple[Region, ...] = ()  # what its producers write (NaN mode polls these)


@dataclass(frozen=True)
class Task:
    id: int
    kind: str
    layer: int  # -1 outside the decoder layers
    args: tuple[int, ...]
    reads: tuple[Region, ...]
    writes: tuple[Region, ...]
    waits: tuple[int, ...]  # event ids
    signals: tuple[int, ...]  # event ids
    smem: int  # bytes of shared memory it needs (input staging + weight pipeline)
    bytes: int  # bytes moved to/from HBM
    flops: int
    rearm: bool = True  # NaN mode: re-arm its write regions of the other parity buffer


@dataclass(frozen=True)
class TaskGraph:
    model: str  # model name or arch
    target: str
    batch: int
    max_seq_len: int
    buffers: tuple[Buffer, ...]
    tasks: tuple[Task, ...]
    events: tuple[Event, ...]
    dims: tuple[tuple[str, int], ...] = ()  # H, I, nh, nkv, hd, V, n_layers, ... for codegen
    consts: tuple[tuple[str, float], ...] = ()  # rms_eps, rope_scaling, attn_scale
    plan: DevicePlan | None = None  # how the kernel runs it on the target (mkc.taskgraph.plan)

    def dim(self, key: str) -> int:
        return dict(self.dims)[key]

    def const(self, key: str) -> float:
        return dict(self.consts)[key]

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def producers(self) -> dict[int, list[int]]:
        """event id -> ids of the tasks that signal it."""
        out: dict[int, list[int]] = {e.id: [] for e in self.events}
        for t in self.tasks:
            for e in t.signals:
                out.setdefault(e, []).append(t.id)
        return out

    def check(self) -> "TaskGraph":
        problems: list[str] = []
        bufs = {b.name: b for b in self.buffers}
        for b in self.buffers:
            if b.role not in BUFFER_ROLES:
                problems.append(f"buffer {b.name} has unknown role {b.role!r}; roles: {', '.join(BUFFER_ROLES)}")
        for i, t in enumerate(self.tasks):
            if t.id != i:
                problems.append(f"task at index {i} has id {t.id}")
            if t.kind not in TASK_KINDS:
                problems.append(f"task {t.id} has unknown kind {t.kind!r}")
            for r in t.reads + t.writes:
                b = bufs.get(r.buffer)
                if b is None:
                    problems.append(f"task {t.id} ({t.kind}) touches unknown buffer {r.buffer}")
                    continue
                if len(r.box) != len(b.shape) or any(
                    not (0 <= lo < hi <= n) for (lo, hi), n in zip(r.box, b.shape)
                ):
                    problems.append(f"task {t.id} region {r.box} outside buffer {b.name}{list(b.shape)}")
            for r in t.writes:
                if r.buffer in bufs and bufs[r.buffer].role in ("weight", "const", "input"):
                    problems.append(f"task {t.id} writes read-only buffer {r.buffer}")
            for e in t.waits + t.signals:
                if not 0 <= e < len(self.events):
                    problems.append(f"task {t.id} names unknown event {e}")
        if self.plan is not None and self.plan.attn_split != dict(self.dims).get("attn_split", 1):
            problems.append(f"the device plan splits attention {self.plan.attn_split} ways, the tasks "
                            f"{dict(self.dims).get('attn_split', 1)}")
        for i, e in enumerate(self.events):
            if e.id != i:
                problems.append(f"event at index {i} has id {e.id}")
        prod = self.producers()
        for e in self.events:
            if len(prod.get(e.id, [])) != e.triggers:
                problems.append(
                    f"event {e.id} ({e.name}) has triggers={e.triggers} but {len(prod.get(e.id, []))} tasks signal it"
                )
        if problems:
            raise IRCheckError("TaskGraph check failed:\n  " + "\n  ".join(problems[:50]))
        return self

    def save(self, path) -> None:
        save_json(self, path)

    @staticmethod
    def load(path) -> "TaskGraph":
        return load_json(TaskGraph, path).check()
