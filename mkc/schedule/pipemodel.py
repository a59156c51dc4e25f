"""The pipelined timeline: predicted times of per-worker queues on a kernel whose GEMV weights
stream ahead of the tasks, with a latency on every dependency hop between workers.

The scheduler's model (``cost.durations`` + ``timeline.timeline``) prices each task on its own: its
bytes after it starts plus a fixed cost per event it waits on. On batch 1 the kernel has a
cross-task weight pipeline (``DevicePlan.pipe_slots``): per worker a producer warp copies every GEMV
task's weight rows into shared-memory pages in queue order, across tasks and steps, waiting only for
a free page, so a GEMV task's weights partly arrive during the waits and tasks before it. Here:

- the producer streams the weight bytes of the worker's GEMV tasks at the worker's share of the
  bandwidth (``hbm_fraction`` of it over the workers that have tasks, ``stream_share``), holding at most ``pipe_slots`` pages (``DevicePlan.pipe_page`` bytes each) that their task has not consumed; a
  started task consumes its bytes as they arrive, which frees their pages. Of those pages, the
  bandwidth times ``page_latency_us`` are still queued at HBM at any time, so the bytes that can be
  ahead of the tasks are the pages' capacity less that (``effective_capacity``): on the H200 every
  SM keeps its pages queued and a page waits ~6 us, which leaves little ahead;
- a task starts when its worker is free (``dispatch_us`` after its previous task ended) and every
  event it waits on has fired (an event of ``STRAGGLE_PRODUCERS`` or more producers ``straggle_us``
  later: on the device the last of a phase's tasks ends after the others), plus ``hop_us`` when
  the latest producer ran on another worker (a worker's own release is behind it already);
- a pipelined GEMV task ends at max(start + overhead + its kind's factor x compute, arrival of its
  last weight byte) + ``tail_us`` (its epilogue and signal, after the last byte). Compute is the
  input it stages at the worker's bandwidth or its arithmetic at the flop rate, whichever is more;
  the kind's factor (``kind_scale``, fitted per kind, 1 where a calibration has none) carries what
  that leaves out: the staging comes from L2 rather than HBM, and the tensor-core path consumes a
  page more slowly than its arithmetic alone (batch 32: ~0.06-0.08 us per KiB of weights);
  every other task, and every task of a plan without the pipeline, streams its own bytes after it
  starts: start + overhead + kind factor x max(bytes / bandwidth, flops / flop rate);
- step s + 1's first tasks (``STEP_START_KINDS``) also wait for every ``STEP_END_KINDS`` task of
  step s, the kernel's loop counter.

Granularity: the pipeline is a fluid of bytes, not of pages. A task's partly filled last page, the
per-page copy latency and the compute warps' consumption rate are ignored, and the other tasks'
HBM traffic does not slow the producer. In that model the state of a worker's producer between two
of its GEMV starts is two numbers (``Producer``), so a replay costs O(tasks + waits).

It predicts and reports (``mkc.trace``); schedules never come from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mkc.capture.graph import DTYPE_BYTES
from mkc.errors import ScheduleError
from mkc.schedule.cost import DEFAULT_COST, CostModel, plan_of
from mkc.schedule.timeline import Deps
from mkc.target import Target
from mkc.taskgraph.ir import TaskGraph
from mkc.taskgraph.kinds import GEMV_KINDS, STEP_END_KINDS, STEP_START_KINDS
from mkc.taskgraph.plan import PIPE_PAGE


STRAGGLE_PRODUCERS = 8  # events with this many producers or more get ``straggle_us``


@dataclass(frozen=True)
class Parts:
    """What the pipelined timeline needs of each task, indexed by task id, apart from the bandwidth."""

    pipe_bytes: tuple[float, ...]  # weight bytes the producer streams ahead (0: the task streams its own)
    own_bytes: tuple[float, ...]  # bytes the task moves itself once started
    flop_us: tuple[float, ...]  # its arithmetic at the worker's flop rate
    capacity: float  # bytes of pages per worker (0: no pipeline)

    def work(self, bw: float) -> np.ndarray:
        """Each task's own work beyond the overhead, unscaled, at ``bw`` bytes/us (a piped GEMV's
        is its compute: the input it stages and its arithmetic)."""
        return np.maximum(np.asarray(self.own_bytes) / bw, np.asarray(self.flop_us))


def task_parts(tg: TaskGraph, target: Target, cost: CostModel | None = None, pipe_slots: int | None = None) -> Parts:
    """Each task's piped weight bytes, own bytes and flop time. ``pipe_slots``: pages per worker,
    by default the device plan's (0 for a graph without one)."""
    cost = cost or DEFAULT_COST
    plan = plan_of(tg, target)
    if pipe_slots is None:
        pipe_slots = plan.pipe_slots if plan is not None else 0
    page = plan.pipe_page if plan is not None and plan.pipe_slots else PIPE_PAGE
    mma = tg.plan is not None and tg.plan.mma
    role = {b.name: (b.role, DTYPE_BYTES[b.dtype]) for b in tg.buffers}
    piped, own, flop = [], [], []
    for t in tg.tasks:
        w = 0
        if pipe_slots and t.kind in GEMV_KINDS:
            # the matrices' rows; 1-D weights (norm vectors) are read by the consumers
            w = sum(r.size() * role[r.buffer][1] for r in t.reads if role[r.buffer][0] == "weight" and len(r.box) == 2)
        piped.append(float(w))
        own.append(float(t.bytes - w))
        flop.append(t.flops / cost.flops_per_sm(target, t.kind, mma))
    return Parts(tuple(piped), tuple(own), tuple(flop), float(pipe_slots * page))


def effective_capacity(capacity: float, bw: float, page_latency_us: float) -> float:
    """The pages' bytes that can have arrived ahead of the tasks: the rest are in flight."""
    return max(0.0, capacity - bw * page_latency_us) if capacity else 0.0


def produce(t0, a0, through, start, nbytes, capacity: float, bw: float):
    """One piped task starting at ``start``: the producer had delivered ``a0`` cumulative bytes at
    ``t0`` (the worker's previous piped start) and holds at most ``capacity`` bytes past ``through``
    (the cumulative bytes of the tasks started so far). Returns (delivered at ``start``, the new
    ``through``, when the task's last byte arrives). Scalars or numpy arrays (one entry per worker)."""
    a = np.minimum(a0 + bw * (start - t0), through + capacity)
    through = through + nbytes
    return a, through, start + np.maximum(through - a, 0.0) / bw


@dataclass(frozen=True)
class PipeTimes:
    """Predicted times of consecutive decode steps, each [step][task id], in us from the launch."""

    arrive: tuple[tuple[float, ...], ...]  # when the task's worker reached it (its previous task ended)
    start: tuple[tuple[float, ...], ...]
    end: tuple[tuple[float, ...], ...]

    def step_us(self) -> list[float]:
        """Each step's time as the device trace measures it: last end less first arrival."""
        return [max(e) - min(a) for a, e in zip(self.arrive, self.end)]

    def period_us(self) -> list[float]:
        """From the second step on, each step's last end less the step before's: what a launch of
        many steps takes per step (its ms/token). A step's first arrival can come long before that
        (workers whose last task ended early start waiting on the next step), so ``step_us``
        overstates it by the last phase's spread."""
        return [max(e) - max(p) for p, e in zip(self.end, self.end[1:])]


# A worker's share of HBM grows when some workers have nothing to run (the bandwidth is the chip's, not
# the SM's), up to this many times the share of all SMs streaming: measured only to 132/120 (the
# crowded schedules of BENCHMARKS.md, sixteenth session), so the cap is a bound, not a fit
MAX_STREAM_SHARE = 2.0


def stream_share(queues: Sequence[Sequence[int]], target: Target) -> float:
    """How much more of HBM each worker streams than 1 / ``target.sms`` when only the workers with
    a non-empty queue stream (capped at MAX_STREAM_SHARE)."""
    active = sum(1 for q in queues if len(q))
    return min(MAX_STREAM_SHARE, target.sms / active) if 0 < active < target.sms else 1.0


def pipelined_timeline(tg: TaskGraph, queues: Sequence[Sequence[int]], target: Target, cost: CostModel | None = None,
                       steps: int = 1, pipe_slots: int | None = None) -> PipeTimes:
    """Replay ``steps`` decode steps of ``queues`` (per worker, task ids in order, as
    ``Schedule.queues``) under ``cost.pipe`` (see the module docstring). Queues that can never
    finish are a ScheduleError naming the blocked heads."""
    cost = cost or DEFAULT_COST
    pc = cost.pipe
    parts = task_parts(tg, target, cost, pipe_slots)
    bw = cost.bw_per_sm(target, pc.hbm_fraction) * stream_share(queues, target)
    work = parts.work(bw).tolist()
    capacity = effective_capacity(parts.capacity, bw, pc.page_latency_us)
    deps = Deps.from_taskgraph(tg)
    n, W, ne = len(tg.tasks), len(queues), len(deps.prod)
    many = [len(p) >= STRAGGLE_PRODUCERS for p in deps.prod]
    kind = [t.kind for t in tg.tasks]
    scale = [pc.kind_scale.get(k, 1.0) for k in kind]
    loop_waiters = {t.id for t in tg.tasks if t.kind in STEP_START_KINDS}
    loop_signals = [t.id for t in tg.tasks if t.kind in STEP_END_KINDS]
    wo = {t: w for w, q in enumerate(queues) for t in q}
    free, t0, a0, through = [0.0] * W, [0.0] * W, [0.0] * W, [0.0] * W
    out_a, out_s, out_e = [], [], []
    loop = (-math.inf, -1, -math.inf)
    for k in range(steps):
        arrive, start, end = [math.nan] * n, [math.nan] * n, [math.nan] * n
        left = [len(p) for p in deps.prod]
        # per event: (latest end, its worker, latest end on any other worker)
        fire = [(-math.inf, -1, -math.inf)] * ne
        head = [0] * W
        placed, progress = 0, True
        while progress:
            progress = False
            for w, q in enumerate(queues):
                while head[w] < len(q) and all(left[e] == 0 for e in deps.waits[q[head[w]]]):
                    t = q[head[w]]
                    s = free[w] = free[w] + (pc.dispatch_us if head[w] else 0.0)
                    waits = [fire[e] for e in deps.waits[t]] + ([loop] if k and t in loop_waiters else [])
                    for best, at, other in waits:
                        s = max(s, best, (other if at == w else best) + pc.hop_us)
                    if pc.straggle_us and any(many[e] for e in deps.waits[t]):
                        s = max(s, max(fire[e][0] for e in deps.waits[t] if many[e]) + pc.hop_us + pc.straggle_us)
                    if parts.pipe_bytes[t]:
                        a, thru, last = produce(t0[w], a0[w], through[w], s, parts.pipe_bytes[t], capacity, bw)
                        t0[w], a0[w], through[w] = s, float(a), float(thru)
                        e_ = max(s + pc.task_overhead_us + scale[t] * work[t], float(last)) + pc.tail_us
                    else:
                        e_ = s + pc.task_overhead_us + scale[t] * work[t]
                    arrive[t], start[t], end[t] = free[w], s, e_
                    free[w] = e_
                    for e in deps.signals[t]:
                        left[e] -= 1
                        fire[e] = _signal(fire[e], e_, w)
                    head[w] += 1
                    placed += 1
                    progress = True
        if placed < sum(len(q) for q in queues):
            blocked = [f"worker {w} at task {q[head[w]]} ({kind[q[head[w]]]})" for w, q in enumerate(queues)
                       if head[w] < len(q)]
            raise ScheduleError("the queues deadlock in the pipelined timeline:\n  " + "\n  ".join(blocked[:12]))
        loop = (-math.inf, -1, -math.inf)  # the loop counter: step k's STEP_END tasks
        for t in loop_signals:
            loop = _signal(loop, end[t], wo[t])
        out_a.append(tuple(arrive))
        out_s.append(tuple(start))
        out_e.append(tuple(end))
    return PipeTimes(tuple(out_a), tuple(out_s), tuple(out_e))


def _signal(fire: tuple[float, int, float], end: float, w: int) -> tuple[float, int, float]:
    """An event's (latest end, its worker, latest end on another worker) after a producer on ``w``
    ends at ``end``."""
    best, at, other = fire
    if end > best:
        return (end, w, other if w == at else best)
    return (best, at, end if w != at and end > other else other)
