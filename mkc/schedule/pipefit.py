"""The pipelined timeline's constants (``PipeCost``) fitted to a device trace.

``stamps`` is ``(wait_start, start, end)``, each [steps, tasks] in us on one clock (``mkc.trace``
takes them from ``Megakernel.trace``); ``queues`` are the schedule's. The fit uses the leading steps
in which every task has stamps, and its samples from the second of them on where there are several
(the first step is cold). In that order:

- ``hop_us``: the median, over tasks whose worker reached them before their latest producer (on
  another worker) ended, of start less that end. A median: a poll that loses its slot to another
  warp is an outlier, not a change of the hop.
- ``hbm_fraction``, ``task_overhead_us``, ``page_latency_us`` and ``tail_us``: least squares on
  the piped GEMV tasks' durations, the latency over a grid (0 to 8 us, then a finer one around its
  best point), the bandwidth for each latency as below, the tail the mean of what the rest leaves.
  Each worker's producer is replayed from the *measured* starts (``pipemodel.produce``), so the
  stream is fitted apart from the rest of the model's errors. For a bandwidth the overhead is the
  mean of duration - compute over the tasks whose weights had all arrived when they started (their
  duration is overhead + compute); the bandwidth is a grid over the fraction, then a finer grid
  around its best point. Without a pipeline, or without piped GEMV tasks, neither is fitted;
  the bandwidth is not when no task waited for its stream (tiny models prefetch everything), and
  the overhead is not when no task had all its weights at its start (big tasks on qwen3-8b never
  do: their durations are the stream's alone).
- ``dispatch_us``: the median gap from a task's end to its worker's next task's wait start.
- ``straggle_us``: the median, over the events of ``STRAGGLE_PRODUCERS`` producers or more and the
  steps, of the last producer's end less the producers' median end.
- ``kind_scale``: for each kind whose tasks stream their own bytes (attention included, at the
  traced context), the median of (duration - overhead) / work.

Constants a trace cannot determine keep the prior's values; ``fitted`` says which were fitted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from mkc.schedule.cost import DEFAULT_COST, PIPE_LIMITS, CostModel, PipeCost
from mkc.schedule.pipemodel import STRAGGLE_PRODUCERS, Parts, effective_capacity, produce, task_parts
from mkc.schedule.timeline import Deps
from mkc.target import Target
from mkc.taskgraph.ir import TaskGraph
from mkc.taskgraph.kinds import STEP_END_KINDS, STEP_START_KINDS



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

    # the dispatch gap: a worker's task end to its next task's wait start (medians, as the hop)
    gaps = np.concatenate([(ws[first:, q[1:]] - en[first:, q[:-1]]).ravel() for q in queues if len(q) > 1] or [np.zeros(0)])
    gaps = gaps[np.isfinite(gaps)]
    if gaps.size:
        pc = replace(pc, dispatch_us=_clip("dispatch_us", max(0.0, float(np.median(gaps)))))
        fitted.append("dispatch_us")
        samples["dispatch_us"] = int(gaps.size)

    # the straggle: per many-producer event and step, its last producer's end less their median end
    deps = Deps.from_taskgraph(tg)
    lag = [en[first:, list(p)].max(1) - np.median(en[first:, list(p)], 1) for p in deps.prod if len(p) >= STRAGGLE_PRODUCERS]
    lag = np.concatenate(lag) if lag else np.zeros(0)
    lag = lag[np.isfinite(lag)]
    if lag.size:
        pc = replace(pc, straggle_us=_clip("straggle_us", float(np.median(lag))))
        fitted.append("straggle_us")
        samples["straggle_us"] = int(lag.size)

    parts = task_parts(tg, target, prior, pipe_slots)
    bw_of = lambda frac: prior.bw_per_sm(target, frac)  # noqa: E731
    rms = math.nan
    piped = np.asarray(parts.pipe_bytes) > 0
    if parts.capacity and piped.any():
        stream = _Stream(parts, queues, piped, ws, st, en, first)

        def fit_bw(lat: float) -> tuple[float, float]:  # (squared error, fraction) at a page latency
            def loss(f: float) -> float:
                bw = bw_of(f)
                return stream.loss(bw, pc.task_overhead_us, effective_capacity(parts.capacity, bw, lat))[0]

            lo, hi = PIPE_LIMITS["hbm_fraction"]
            grid = np.geomspace(0.05, min(hi, 1.5), 32)
            i = int(np.argmin([loss(f) for f in grid]))
            fine = np.linspace(grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)], 65)  # then around the best
            f = float(fine[int(np.argmin([loss(x) for x in fine]))])
            return loss(f), f

        lats = np.arange(0.0, 8.01, 1.0)
        errs = [fit_bw(x) for x in lats]
        j = int(np.argmin([e for e, _ in errs]))
        near = np.arange(max(0.0, lats[j] - 0.75), lats[j] + 0.76, 0.25)
        lat, (_, frac) = min(((x, fit_bw(x)) for x in near), key=lambda r: r[1][0])
        bw = bw_of(frac)
        sse, o, tail, n_ready, n_bound = stream.fit_at(bw, pc.task_overhead_us, effective_capacity(parts.capacity, bw, lat))
        if n_bound:
            pc = replace(pc, tail_us=_clip("tail_us", tail))
            fitted.append("tail_us")
            samples["tail_us"] = n_bound
            pc = replace(pc, hbm_fraction=_clip("hbm_fraction", frac), page_latency_us=_clip("page_latency_us", lat))
            fitted += ["hbm_fraction", "page_latency_us"]
            samples["hbm_fraction"] = samples["page_latency_us"] = n_bound
        if n_ready:
            pc = replace(pc, task_overhead_us=_clip("task_overhead_us", o))
            fitted.append("task_overhead_us")
            samples["task_overhead_us"] = n_ready
        rms = math.sqrt(sse / stream.n)

    work = parts.work(bw_of(pc.hbm_fraction))
    dur = (en - st)[first:]
    scale = dict(pc.kind_scale)
    # every kind whose tasks stream their own bytes, attention too (its factor holds at the traced
    # context: the scheduler's model leaves it uncalibrated for that reason, the replay of a trace
    # needs it)
    for kind in dict.fromkeys(t.kind for t in tg.tasks if not piped[t.id]):
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

    def stream_us(self, bw: float, capacity: float | None = None) -> np.ndarray:
        """[W, M]: from each task's start to the arrival of its last weight byte, at ``bw``, with
        ``capacity`` bytes that can be ahead (the pages', by default)."""
        capacity = self.capacity if capacity is None else capacity
        W, M = self.start.shape
        t0, a0, through = self.t0.copy(), np.zeros(W), np.zeros(W)
        out = np.zeros((W, M))
        for j in range(M):
            s = self.start[:, j]
            a0, through, last = produce(t0, a0, through, s, self.nbytes[:, j], capacity, bw)
            t0 = s
            out[:, j] = last - s
        return out

    def loss(self, bw: float, o_prior: float, capacity: float | None = None) -> tuple[float, float, int, int]:
        """(squared error, overhead, tasks it was fitted from, tasks bound by the stream) at ``bw``."""
        sse, o, _, n_ready, n_bound = self.fit_at(bw, o_prior, capacity)
        return sse, o, n_ready, n_bound

    def fit_at(self, bw: float, o_prior: float, capacity: float | None = None):
        """(squared error, overhead, tail, tasks the overhead was fitted from, tasks whose stream
        ended after overhead + compute) at ``bw``. A duration is max(overhead + compute, stream) +
        tail: the overhead from the tasks whose weights had all arrived at their start, the tail
        from those the stream held up, alternately (without the latter the tail is 0 and the
        overhead holds both; without the former the overhead is ``o_prior``)."""
        a = self.stream_us(bw, capacity)[self.sample]
        c = np.maximum(self.own / bw, self.flop)[self.sample]
        d = self.dur[self.sample]
        ready = a <= 0
        o, tail = (float(np.mean((d - c)[ready])) if ready.any() else o_prior), 0.0
        for _ in range(4):
            bound = a > o + c
            if not bound.any():
                break
            tail = max(0.0, float(np.mean((d - a)[bound])))
            if ready.any():
                o = float(np.mean((d - c - tail)[ready]))
        pred = np.maximum(o + c, a) + tail
        return float(((pred - d) ** 2).sum()), o, tail, int(ready.sum()), int((a > o + c).sum())
