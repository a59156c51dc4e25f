"""Predicted task times, in microseconds, from the target's datasheet figures.

A task streams ``bytes`` from HBM and does ``flops`` of arithmetic; a resident worker gets one
SM's share of the chip, so

    time = max(bytes / bw_per_sm, flops / flops_per_sm) + TASK_OVERHEAD_US + WAIT_US * len(waits)

scaled by a per-kind factor (1.0 until measured device times replace the guess). The overheads
model what a task costs beyond its data: fetching its descriptor, block barriers, the release
atomic it signals with, and the acquire round trip of each event it waits on (one dependent step
through global memory is ~1-2 us, ANCHORS.md; with the next task's weights prefetched during the
wait, about 1.5 us of it stays on the critical path).

Every constant lives here so a calibration run changes one file. ``PipeCost`` holds the constants
of the pipelined timeline (``mkc.schedule.pipemodel``), which predicts and reports but never
schedules: the list scheduler and CP-SAT see only ``task_time``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mkc.target import Target
from mkc.taskgraph.ir import Task, TaskGraph
from mkc.taskgraph.kinds import CALIBRATED_KINDS  # noqa: F401 (mkc.trace reads it from here)
from mkc.taskgraph.kinds import GEMV_KINDS, TASK_KINDS
from mkc.taskgraph.plan import DevicePlan, device_plan
from mkc.taskgraph.smem import smem_plan

# Fraction of the datasheet HBM bandwidth a streaming read reaches: 4.20 TB/s measured / 4.8 TB/s
# datasheet on our H200 (ANCHORS.md). Hazy's megakernel reached 78 % end to end on H100.
HBM_FRACTION = 0.875
# Fraction of the peak fp32 FMA rate a GEMV inner loop or the attention softmax reaches
# (bf16 -> fp32 converts and shuffles share the issue slots with the FMAs).
FMA_FRACTION = 0.5
# Fraction of the dense bf16 tensor-core peak a skinny GEMM tile reaches (small N, no 2-CTA MMA).
MMA_FRACTION = 0.5
# Fixed cost of every task: queue entry fetch and decode, two block barriers, the release add.
TASK_OVERHEAD_US = 0.5
# Cost of each event a task waits on: the acquire poll round trip through L2 (~0.7 us on H100)
# plus the barrier that publishes it to the block.
WAIT_US = 1.0
# Pipelined timeline: from the last producer's end to the consumer's start across workers, as
# measured on the H200 (1.2-1.4 us: the release, the acquire poll, the block barrier).
HOP_US = 1.3


@dataclass(frozen=True)
class PipeCost:
    """Constants of the pipelined timeline. Separate from the list scheduler's: those price a task
    on its own (its wait cost included), these the hop between workers and the weight stream that
    runs ahead of the tasks, so a calibration of one must not move the other."""

    hop_us: float = HOP_US  # per dependency hop between workers
    task_overhead_us: float = TASK_OVERHEAD_US  # fixed cost of every task
    hbm_fraction: float = HBM_FRACTION  # of the datasheet bandwidth, shared by every SM
    # how long a page's bytes are queued at HBM once the producer asks for them: of the pages'
    # bytes, bandwidth x this much is in flight and cannot be ahead of the tasks (Little's law)
    page_latency_us: float = 0.0
    # a piped GEMV task's time after its last weight byte (its epilogue and signal), which the
    # stream cannot hide; task_overhead_us is the part before that can overlap the stream
    tail_us: float = 0.0
    # from a task's end (its signal) to the next task of its worker starting to wait: reading the
    # next task's record and entries
    dispatch_us: float = 0.0
    # how much later than their median the last of an event's producers signals (tasks of one phase
    # do not end together on the device; the model's do): added to the hop of a many-producer event
    straggle_us: float = 0.0
    # kind -> factor on the work (not the overhead) of tasks that stream their own bytes
    kind_scale: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CostModel:
    hbm_fraction: float = HBM_FRACTION
    fma_fraction: float = FMA_FRACTION
    mma_fraction: float = MMA_FRACTION
    task_overhead_us: float = TASK_OVERHEAD_US
    wait_us: float = WAIT_US
    # kind -> factor on the whole predicted time, e.g. measured / predicted from a device trace
    kind_scale: dict[str, float] = field(default_factory=dict)
    pipe: PipeCost = field(default_factory=PipeCost)  # the pipelined timeline's constants (not scheduling)

    def bw_per_sm(self, target: Target, hbm_fraction: float | None = None) -> float:
        """Bytes per microsecond one worker streams when every SM streams at once (at this model's
        ``hbm_fraction`` or the one given)."""
        return target.hbm_bw * (self.hbm_fraction if hbm_fraction is None else hbm_fraction) / target.sms / 1e6

    def flops_per_sm(self, target: Target, kind: str, mma: bool) -> float:
        """Flops per microsecond of one worker for a task of this kind; ``mma``: the device plan runs
        the GEMV kinds on tensor cores."""
        if kind in GEMV_KINDS and mma:
            return target.bf16_flops * self.mma_fraction / target.sms / 1e6
        return target.fp32_flops * self.fma_fraction / target.sms / 1e6

    def task_time(self, task: Task, target: Target, mma: bool) -> float:
        data = max(task.bytes / self.bw_per_sm(target), task.flops / self.flops_per_sm(target, task.kind, mma))
        t = data + self.task_overhead_us + self.wait_us * len(task.waits)
        return t * self.kind_scale.get(task.kind, 1.0)


DEFAULT_COST = CostModel()


def load_calibration(path: str | Path) -> CostModel:
    """The cost model of a calibration file (``mkc run DIR --trace T.json`` writes
    ``T.calibration.json``): ``{"kind_scale": {kind: factor, ...}, "pipeline": {...}, ...}``.
    ``kind_scale`` scales the scheduler's task times; the optional ``pipeline`` object (``hop_us``,
    ``task_overhead_us``, ``hbm_fraction``, ``kind_scale``) sets ``PipeCost``, its missing keys
    keeping their defaults. Files without it (older ones) load as before."""
    from mkc.errors import MkcError

    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MkcError(f"cannot read the calibration file {path}: {e}") from None
    scale = data.get("kind_scale") if isinstance(data, dict) else None
    if not isinstance(scale, dict):
        raise MkcError(f"{path} is not a calibration file: it has no \"kind_scale\" object of task kind -> factor")
    pipe = data.get("pipeline", {})
    if not isinstance(pipe, dict):
        raise MkcError(f"{path}: \"pipeline\" must be an object of the pipelined model's constants, not {pipe!r}")
    unknown = sorted(set(pipe) - set(PIPE_LIMITS) - {"kind_scale"})
    if unknown:
        raise MkcError(f"{path}: unknown pipeline constants {unknown}; known: {', '.join(PIPE_LIMITS)}, kind_scale")
    consts = {}
    for key, (lo, hi) in PIPE_LIMITS.items():
        if key in pipe:
            v = pipe[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v < hi:
                raise MkcError(f"{path}: pipeline {key} = {v!r} is out of range: a number in [{lo}, {hi})")
            consts[key] = float(v)
    return CostModel(kind_scale=_kind_scale(path, "kind_scale", scale),
                     pipe=PipeCost(**consts, kind_scale=_kind_scale(path, "pipeline kind_scale",
                                                                    pipe.get("kind_scale", {}))))


# what a calibration file's pipeline constants may be: [lo, hi)
PIPE_LIMITS = {"hop_us": (0.0, 1e3), "task_overhead_us": (0.0, 1e3), "hbm_fraction": (0.01, 2.0),
               "page_latency_us": (0.0, 1e3), "tail_us": (0.0, 1e3), "dispatch_us": (0.0, 1e3),
               "straggle_us": (0.0, 1e3)}


def _kind_scale(path: Path, what: str, scale) -> dict[str, float]:
    from mkc.errors import MkcError

    if not isinstance(scale, dict):
        raise MkcError(f"{path}: {what} must be an object of task kind -> factor, not {scale!r}")
    bad = {k: v for k, v in scale.items()
           if k not in TASK_KINDS or isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e3}
    if bad:
        raise MkcError(f"{path}: bad {what} entries {bad}: kinds are {', '.join(TASK_KINDS)}, factors positive")
    return {k: float(v) for k, v in scale.items()}


def durations(tg: TaskGraph, target: Target, cost: CostModel | None = None) -> list[float]:
    """Predicted time of every task, indexed by task id (microseconds)."""
    cost = cost or DEFAULT_COST
    plan = plan_of(tg, target)
    mma = plan is not None and plan.mma
    return [cost.task_time(t, target, mma) for t in tg.tasks]


def plan_of(tg: TaskGraph, target: Target) -> DevicePlan | None:
    """The task graph's device plan: its own, or one from the same planner for a graph saved
    without one; None for a synthetic graph without model shapes (tests)."""
    if tg.plan is not None:
        return tg.plan
    return device_plan(dict(tg.dims), target) if "B" in dict(tg.dims) else None


def launched_smem(layout_bytes: int, plan, target: Target) -> int:
    """The dynamic shared memory the kernel is launched with: what its layout needs (the device
    plan's ``smem_bytes``) or what the schedule's kernel plan budgets, whichever is larger, within
    the block's limit. Codegen launches with it and the verifier proves residency with it."""
    return min(max(layout_bytes, plan.smem_bytes), target.smem_per_block)


def stream_bytes(tg: TaskGraph, target: Target) -> int:
    """Shared memory one GEMV task's weight stream holds (the plan's stages x stage bytes)."""
    plan = plan_of(tg, target)
    if plan is not None:
        return plan.prefetch_bytes
    sp = smem_plan(target, tg.batch, 256)  # a synthetic graph: the same streaming model
    return sp.stages * sp.stage_bytes


def prefetch_bytes(task: Task, stream: int) -> int:
    """Shared memory the *previous* task on a worker holds to prefetch this task's weights: GEMV
    kinds stream weights through ``stream`` bytes of stages (``stream_bytes``), which the worker
    starts filling while the task before it still runs."""
    return stream if task.kind in GEMV_KINDS else 0
