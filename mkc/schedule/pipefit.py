"""The pipelined timeline's constants (``PipeCost``) fitted to a device trace.

``stamps`` is ``(wait_start, start, end)``, each [steps, tasks] in us on one clock (``mkc.trace``
takes them from ``Megakernel.trace``); ``queues`` are the schedule's. The fit uses the leading steps
in which every task has stamps, and its samples from the second of them on where there are several
(the first step is cold). In that order:

- ``hop_us``: the median, over tasks whose worker reached them before their latest producer (on
  another worker) ended, of start less that end. A median: a poll that loses its slot to another
  warp is an outlier, not a change of the hop.
- ``hbm_fraction`` and ``task_overhead_us``: least squares on the piped GEMV tasks' durations.
  Each worker's producer is replayed from the *measured* starts (``pipemodel.produce``), so the
  stream is fitted apart from the rest of the model's errors. For a bandwidth the overhead is the
  mean of duration - compute over the tasks whose weights had all arrived when they started (their
  duration is overhead + compute); the bandwidth is a grid over the fraction, then a finer grid
  around its best point. Without a pipeline, or without piped GEMV tasks, neither is fitted;
  the bandwidth is not when no task waited for its stream (tiny models prefetch everything), and
  the overhead is not when no task had all its weights at its start (big tasks on qwen3-8b never
  do: their durations are the stream's alone).
- ``kind_scale``: for each of ``CALIBRATED_KINDS`` whose tasks stream their own bytes, the median of
  (duration - overhead) / work.

Constants a trace cannot determine keep the prior's values; ``fitted`` says which were fitted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from mkc.schedule.cost import DEFAULT_COST, PIPE_LIMITS, CostModel, PipeCost
from mkc.schedule.pipemodel import Parts, produce, task_parts
from mkc.schedule.timeline import Deps
from mkc.target import Target
from mkc.taskgraph.ir import TaskGraph
from mkc.taskgraph.kinds import CALIBRATED_KINDS, STEP_END_KINDS, STEP_START_KINDS



@dataclass(frozen=True)
class PipeFit:
    cost: PipeCost
    fitted: tuple[str, ...]  # the constants the trace determined (the rest are the prior's)
    steps: int  # leading steps with every task stamped
    samples: tuple[tuple[str, int], ...]  # constant -> samples it was fitted from
    gemv_rms_us: float  # residual of the piped GEMV tasks' durations (nan: none)


def fit_pipe(tg: TaskGraph, queues: Sequence[Sequence[int]], target: Target, stamps, prior: CostModel | None = None,
             pipe_slots: int | None = None) -> PipeFit:
    """Fit ``PipeCost`` to ``stamps`` (see the module docstring); ``prior``'s pipe constants fill
    what the trace does not determine."""
    prior = prior or DEFAULT_COST
    ws, st, en = (np.asarray(a, dtype=np.float64) for a in stamps)
    whole = np.isfinite(ws).all(1) & np.isfinite(st).all(1) & np.isfinite(en).all(1)
    steps = int(whole.argmin()) if not whole.all() else len(whole)
    if steps == 0:
        return PipeFit(prior.pipe, (), 0, (), math.nan)
    ws, st, en = ws[:steps], st[:steps], en[:steps]
    first = 1 if steps > 1 else 0
    worker = np.full(len(tg.tasks), -1)
    for w, q in enumerate(queues):
        worker[list(q)] = w
    pc, fitted, samples = prior.pipe, [], {}

    hops = _hop_samples(tg, Deps.from_taskgraph(tg), worker, ws, st, en)[first:]
    hops = hops[np.isfinite(hops)]
    if hops.size:
        pc = replace(pc, hop_us=_clip("hop_us", float(np.median(hops))))
        fitted.append("hop_us")
        samples["hop_us"] = int(hops.size)

    parts = task_parts(tg, target, prior, pipe_slots)
    bw_of = lambda frac: prior.bw_per_sm(target, frac)  # noqa: E731
    rms = math.nan
    piped = np.asarray(parts.pipe_bytes) > 0
    if parts.capacity and piped.any():
        stream = _Stream(parts, queues, piped, ws, st, en, first)
        loss = lambda f: stream.loss(bw_of(f), pc.task_overhead_us)[0]  # noqa: E731
        lo, hi = PIPE_LIMITS["hbm_fraction"]
        grid = np.geomspace(0.05, min(hi, 1.5), 32)
        i = int(np.argmin([loss(f) for f in grid]))
        fine = np.linspace(grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)], 65)  # then around the best
        frac = float(fine[int(np.argmin([loss(f) for f in fine]))])
        sse, o, n_ready, n_bound = stream.loss(bw_of(frac), pc.task_overhead_us)
        if n_bound:
            pc = replace(pc, hbm_fraction=_clip("hbm_fraction", frac))
            fitted.append("hbm_fraction")
            samples["hbm_fraction"] = n_bound
        if n_ready:
            pc = replace(pc, task_overhead_us=_clip("task_overhead_us", o))
            fitted.append("task_overhead_us")
            samples["task_overhead_us"] = n_ready
        rms = math.sqrt(sse / stream.n)

    work = parts.work(bw_of(pc.hbm_fraction))
    dur = (en - st)[first:]
    scale = dict(pc.kind_scale)
    for kind in CALIBRATED_KINDS:
        ids = [t.id for t in tg.tasks if t.kind == kind and not piped[t.id] and work[t.id] > 0]
        if ids:
            r = np.median((dur[:, ids] - pc.task_overhead_us) / work[ids])
            scale[kind] = round(float(min(max(r, 1e-3), 999.0)), 4)
            samples[f"kind_scale.{kind}"] = dur[:, ids].size
    if scale != pc.kind_scale:
        pc = replace(pc, kind_scale=scale)
        fitted.append("kind_scale")
    return PipeFit(pc, tuple(fitted), steps, tuple(samples.items()), rms)


def _clip(key: str, v: float) -> float:
    """A fitted constant inside what a calibration file may hold, rounded for the file."""
    lo, hi = PIPE_LIMITS[key]
    return round(float(min(max(v, lo), hi * (1 - 1e-9))), 4)


def _hop_samples(tg: TaskGraph, deps: Deps, worker: np.ndarray, ws, st, en) -> np.ndarray:
    """[steps, tasks], NaN where a task did not wait: start less the latest producer's end, for
    tasks whose latest producer ran on another worker and whose worker reached them before it
    ended. Step s + 1's ``STEP_START_KINDS`` tasks wait for step s's ``STEP_END_KINDS`` tasks."""
    steps = en.shape[0]
    # per event and step: the latest producer end, its worker, the latest end on another worker
    fires = []
    for prods in deps.prod:
        fires.append(_fire(en[:, list(prods)], worker[list(prods)]) if prods else None)
    ends = [t.id for t in tg.tasks if t.kind in STEP_END_KINDS]
    loop = None
    if ends and steps > 1:
        b, at, o = _fire(en[:-1, ends], worker[ends])
        pad = np.array([-np.inf])
        loop = (np.concatenate([pad, b]), np.concatenate([[-1], at]), np.concatenate([pad, o]))
    out = np.full((steps, len(tg.tasks)), np.nan)
    for t in tg.tasks:
        srcs = [fires[e] for e in deps.waits[t.id]]
        if loop is not None and t.kind in STEP_START_KINDS:
            srcs.append(loop)
        if not srcs:
            continue
        w = worker[t.id]
        best = np.max([b for b, _, _ in srcs], axis=0)
        remote = np.max([np.where(at == w, o, b) for b, at, o in srcs], axis=0)
        ok = (remote >= best) & (ws[:, t.id] < remote) & np.isfinite(remote)
        out[ok, t.id] = st[ok, t.id] - remote[ok]
    return out


def _fire(ends: np.ndarray, workers: np.ndarray):
    """(latest end, its worker, latest end on another worker), each per step, of producers with
    ``ends`` [steps, producers] on ``workers``."""
    i = ends.argmax(1)
    at = workers[i]
    other = np.where(workers[None, :] != at[:, None], ends, -np.inf).max(1)
    return ends.max(1), at, other


class _Stream:
    """The piped GEMV tasks of every worker, in queue order over the steps, with their measured
    starts and durations: the producer's replay at a bandwidth and the loss of the fit."""

    def __init__(self, parts: Parts, queues, piped, ws, st, en, first: int):
        steps = st.shape[0]
        seqs = [[(k, t) for k in range(steps) for t in q if piped[t]] for q in queues]
        W, M = len(queues), max(len(s) for s in seqs)
        self.t0 = np.array([ws[0, q[0]] if q else 0.0 for q in queues])  # the producer starts with its worker
        self.start = np.repeat(self.t0[:, None], M, 1)
        self.nbytes = np.zeros((W, M))
        self.dur = np.full((W, M), np.nan)
        self.own = np.zeros((W, M))
        self.flop = np.zeros((W, M))
        own, flop = np.asarray(parts.own_bytes), np.asarray(parts.flop_us)
        for w, seq in enumerate(seqs):
            for j, (k, t) in enumerate(seq):
                self.start[w, j:] = st[k, t]  # padding repeats the last start: the producer stands still
                self.nbytes[w, j] = parts.pipe_bytes[t]
                self.own[w, j], self.flop[w, j] = own[t], flop[t]
                if k >= first:
                    self.dur[w, j] = en[k, t] - st[k, t]
        self.sample = np.isfinite(self.dur)
        self.n = int(self.sample.sum())
        self.capacity = parts.capacity

    def stream_us(self, bw: float) -> np.ndarray:
        """[W, M]: from each task's start to the arrival of its last weight byte, at ``bw``."""
        W, M = self.start.shape
        t0, a0, through = self.t0.copy(), np.zeros(W), np.zeros(W)
        out = np.zeros((W, M))
        for j in range(M):
            s = self.start[:, j]
            a0, through, last = produce(t0, a0, through, s, self.nbytes[:, j], self.capacity, bw)
            t0 = s
            out[:, j] = last - s
        return out

    def loss(self, bw: float, o_prior: float) -> tuple[float, float, int, int]:
        """(squared error, overhead, tasks it was fitted from, tasks bound by the stream) at ``bw``.
        The overhead is the least squares one of the tasks whose weights had all arrived when they
        started (their duration is overhead + compute), ``o_prior`` without any."""
        a = self.stream_us(bw)[self.sample]
        c = np.maximum(self.own / bw, self.flop)[self.sample]
        d = self.dur[self.sample]
        ready = a <= 0
        o = float(np.mean((d - c)[ready])) if ready.any() else o_prior
        return float(((np.maximum(o + c, a) - d) ** 2).sum()), o, int(ready.sum()), int((a > o + c).sum())
