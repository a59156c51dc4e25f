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
  traced context), the median of (duration - overhead) / work; for each piped GEMV kind, the
  factor on its compute, fitted with the stream (below).

The piped GEMV tasks' fit, at a bandwidth and latency: a task is bound by the stream where its
last byte arrives after overhead + factor x compute, else by its compute. The tail is the mean of
duration - arrival over the stream-bound tasks; the overhead (at least 0: on compute-bound tasks
overhead and tail add up) the mean of duration - factor x compute - tail over the tasks whose
weights had all arrived at their start; each kind's factor the median of (duration - tail -
overhead) / compute over its compute-bound tasks; alternately, from three starts of the tail.
Where tasks are bound by their compute (batch 32 on tensor cores) the stream's constants and the
factors trade off against each other in the tasks' squared error, so there are two candidate
fits: the stream's constants fitted with every factor 1 and then the factors, and the stream's
constants fitted with the factors refitted at every point of the grid. The one kept is the one
whose replay (``pipelined_timeline`` of the traced queues, ``REPLAY_STEPS`` steps) puts the
tasks' ends nearer the trace's, each counted from the previous step's last end. The stream is
fitted on ``STREAM_STEPS`` sampled steps (a fit takes 20-40 s on the 2-core machine). Last, each
piped kind's factor is adjusted until the replay gives it the phase span the trace measured
(``_refine``).

Constants a trace cannot determine keep the prior's values; ``fitted`` says which were fitted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from mkc.schedule.cost import DEFAULT_COST, PIPE_LIMITS, CostModel, PipeCost
from mkc.schedule.pipemodel import (STRAGGLE_PRODUCERS, Parts, effective_capacity, pipelined_timeline, produce,
                                    task_parts)
from mkc.schedule.timeline import Deps
from mkc.target import Target
from mkc.taskgraph.ir import TaskGraph
from mkc.taskgraph.kinds import STEP_END_KINDS, STEP_START_KINDS



REFINE_ROUNDS = 8  # the replay's rounds of the factors' adjustment, at most
REFINE_TOL = 0.01  # a kind's replayed phase span within 1 % of the trace's
STREAM_STEPS = 3  # the sampled steps of a trace the stream's constants are fitted on
REPLAY_STEPS = 4  # the steps of a trace the candidate fits' replays are compared on


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
    base, cands = pc, []
    if parts.capacity and piped.any():
        k1 = min(steps, first + STREAM_STEPS)  # the stream is fitted on the first few sampled steps
        stream = _Stream(parts, queues, piped, ws[:k1], st[:k1], en[:k1], first, [t.kind for t in tg.tasks])

        def fit_bw(lat: float, g, joint: bool) -> tuple[float, float]:  # (squared error, fraction) at a latency
            def loss(f: float) -> float:
                bw = bw_of(f)
                cap = effective_capacity(parts.capacity, bw, lat)
                if joint:
                    return stream.fit_at(bw, base.task_overhead_us, cap)[0]
                return stream.loss(bw, base.task_overhead_us, cap, g)[0]

            lo, hi = PIPE_LIMITS["hbm_fraction"]
            grid = np.geomspace(0.05, min(hi, 1.5), 32)
            i = int(np.argmin([loss(f) for f in grid]))
            fine = np.linspace(grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)], 25)  # then around the best
            f = float(fine[int(np.argmin([loss(x) for x in fine]))])
            return loss(f), f

        def fit_stream(g=None, joint=False):  # (latency, fraction, fit_at's tuple)
            lats = np.arange(0.0, 8.01, 1.0)
            errs = [fit_bw(x, g, joint) for x in lats]
            j = int(np.argmin([e for e, _ in errs]))
            near = [x for x in np.arange(max(0.0, lats[j] - 0.75), lats[j] + 0.76, 0.25) if x not in lats]
            lat, (_, frac) = min([(lats[j], errs[j])] + [(x, fit_bw(x, g, joint)) for x in near], key=lambda r: r[1][0])
            bw = bw_of(frac)
            return lat, frac, stream.fit_at(bw, base.task_overhead_us, effective_capacity(parts.capacity, bw, lat))

        # first the stream with every compute factor 1, then the factors at that stream (see the
        # module docstring); then, where there are piped kinds, the stream and the factors
        # together, and the candidate whose replay comes nearer the trace is kept
        cands.append(fit_stream())
        if stream.kinds:
            cands.append(fit_stream(joint=True))

    def finish(cand) -> tuple[PipeCost, list[str], dict[str, int], float]:
        pc, fit, smp, rms = base, list(fitted), dict(samples), math.nan
        if cand is not None:
            lat, frac, (sse, o, tail, n_ready, n_bound, factors) = cand
            if factors:
                pc = replace(pc, kind_scale={**pc.kind_scale, **factors})
                fit.append("kind_scale")
                smp.update({f"kind_scale.{k}": n for k, n in stream.kind_samples().items()})
            if n_bound:
                pc = replace(pc, tail_us=_clip("tail_us", tail))
                fit.append("tail_us")
                smp["tail_us"] = n_bound
                pc = replace(pc, hbm_fraction=_clip("hbm_fraction", frac), page_latency_us=_clip("page_latency_us", lat))
                fit += ["hbm_fraction", "page_latency_us"]
                smp["hbm_fraction"] = smp["page_latency_us"] = n_bound
            if n_ready:
                pc = replace(pc, task_overhead_us=_clip("task_overhead_us", o))
                fit.append("task_overhead_us")
                smp["task_overhead_us"] = n_ready
            rms = math.sqrt(sse / stream.n)

        work = parts.work(bw_of(pc.hbm_fraction))
        dur = (en - st)[first:]
        scale = dict(pc.kind_scale)
        # every kind whose tasks stream their own bytes, attention too (its factor holds at the
        # traced context: the scheduler's model leaves it uncalibrated for that reason, the replay
        # of a trace needs it)
        for kind in dict.fromkeys(t.kind for t in tg.tasks if not piped[t.id]):
            ids = [t.id for t in tg.tasks if t.kind == kind and not piped[t.id] and work[t.id] > 0]
            if ids:
                r = np.median((dur[:, ids] - pc.task_overhead_us) / work[ids])
                scale[kind] = round(float(min(max(r, 1e-3), 999.0)), 4)
                smp[f"kind_scale.{kind}"] = dur[:, ids].size
        if scale != pc.kind_scale:
            pc = replace(pc, kind_scale=scale)
        if scale and "kind_scale" not in fit:
            fit.append("kind_scale")
        return pc, fit, smp, rms

    outs = [finish(c) for c in cands] or [finish(None)]
    if len(outs) > 1:
        errs = [_replay_error(tg, queues, target, prior, o[0], st, en, first, steps, pipe_slots) for o in outs]
        outs = [outs[int(np.argmin(errs))]]
    pc, fit, smp, rms = outs[0]
    if cands and stream.kinds:
        pc = _refine(tg, queues, target, prior, pc, st, en, first, steps, pipe_slots, stream.kinds)
    return PipeFit(pc, tuple(fit), steps, tuple(smp.items()), rms)


def _refine(tg, queues, target, prior, pc, st, en, first, steps, pipe_slots, kinds) -> PipeCost:
    """The piped kinds' factors adjusted until the replay of the traced queues gives each kind the
    span the trace measured (within ``REFINE_TOL``, at most ``REFINE_ROUNDS`` rounds): per kind,
    the median over its phases (its tasks of one layer) and steps of the phase's last end less its
    first start. The fit above reproduces the tasks' durations from the *measured* starts; the
    replay starts them itself, and a phase lasts until its slowest task ends (the trace's phases
    of llama-3.2-1b b1 outlast their median task by 1-2 us), so the factors that match the
    durations leave the step some 5 % short."""
    steps = min(steps, REPLAY_STEPS)
    k0 = min(first, steps - 1)
    of = np.array([t.kind for t in tg.tasks])
    layer = np.array([-1 if t.layer is None else t.layer for t in tg.tasks])
    groups = {k: [np.flatnonzero((of == k) & (layer == l)) for l in np.unique(layer[of == k])] for k in kinds}

    def spans(s_, e_):
        return {k: float(np.nanmedian([e_[j, g].max() - s_[j, g].min() for g in gs for j in range(k0, steps)]))
                for k, gs in groups.items()}

    want = spans(st[:steps], en[:steps])
    for _ in range(REFINE_ROUNDS):
        times = pipelined_timeline(tg, queues, target, replace(prior, pipe=pc), steps=steps, pipe_slots=pipe_slots)
        got = spans(np.asarray(times.start), np.asarray(times.end))
        scale, moved = dict(pc.kind_scale), False
        for k in kinds:
            if got[k] > 0 and abs(got[k] / want[k] - 1) > REFINE_TOL:
                f = scale.get(k, 1.0)
                # the compute part only: overhead and tail stay
                part = max(got[k] - pc.task_overhead_us - pc.tail_us, 1e-3)
                need = max(want[k] - pc.task_overhead_us - pc.tail_us, 1e-3 * part)
                scale[k] = round(float(min(max(f * need / part, 1e-3), 999.0)), 4)
                moved = True
        if not moved:
            break
        pc = replace(pc, kind_scale=scale)
    return pc


def _replay_error(tg, queues, target, prior, pc, st, en, first, steps, pipe_slots) -> float:
    """Squared error of the pipelined replay of ``queues`` with ``pc`` against the trace: each task's
    end, from step ``first`` on, counted from its step's previous step's last end (so the period
    and the timeline inside a step both count)."""
    steps = min(steps, REPLAY_STEPS)
    en = en[:steps]
    times = pipelined_timeline(tg, queues, target, replace(prior, pipe=pc), steps=steps, pipe_slots=pipe_slots)
    pe = np.asarray(times.end, dtype=np.float64)
    k0 = max(first, 1)
    if steps <= k0:
        return float((((pe[0] - pe[0].min()) - (en[0] - en[0].min())) ** 2).sum())
    rel = lambda e: e[k0:] - e[k0 - 1:-1].max(1, keepdims=True)  # noqa: E731
    return float(((rel(pe) - rel(en)) ** 2).sum())


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

    def __init__(self, parts: Parts, queues, piped, ws, st, en, first: int, kinds: Sequence[str] = ()):
        steps = st.shape[0]
        seqs = [[(k, t) for k in range(steps) for t in q if piped[t]] for q in queues]
        W, M = len(queues), max(len(s) for s in seqs)
        self.t0 = np.array([ws[0, q[0]] if q else 0.0 for q in queues])  # the producer starts with its worker
        self.start = np.repeat(self.t0[:, None], M, 1)
        self.nbytes = np.zeros((W, M))
        self.dur = np.full((W, M), np.nan)
        self.own = np.zeros((W, M))
        self.flop = np.zeros((W, M))
        self.kind = np.full((W, M), -1)  # index into self.kinds (-1: padding)
        self.kinds = sorted({kinds[t] for q in queues for t in q if piped[t]}) if len(kinds) else []
        kid = {k: i for i, k in enumerate(self.kinds)}
        own, flop = np.asarray(parts.own_bytes), np.asarray(parts.flop_us)
        for w, seq in enumerate(seqs):
            for j, (k, t) in enumerate(seq):
                self.start[w, j:] = st[k, t]  # padding repeats the last start: the producer stands still
                self.nbytes[w, j] = parts.pipe_bytes[t]
                self.own[w, j], self.flop[w, j] = own[t], flop[t]
                if self.kinds:
                    self.kind[w, j] = kid[kinds[t]]
                if k >= first:
                    self.dur[w, j] = en[k, t] - st[k, t]
        self.sample = np.isfinite(self.dur)
        k = self.kind[self.sample]
        self.masks = [k == i for i in range(len(self.kinds))]  # per piped kind, over the samples
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

    def loss(self, bw: float, o_prior: float, capacity: float | None = None, scale=None) -> tuple[float, float, int, int]:
        """(squared error, overhead, tasks it was fitted from, tasks bound by the stream) at ``bw``,
        each piped kind's compute times ``scale`` (its factor; 1 where None)."""
        sse, o, _, n_ready, n_bound, _ = self.fit_at(bw, o_prior, capacity, scale, factors=False)
        return sse, o, n_ready, n_bound

    def kind_samples(self) -> dict[str, int]:
        """Sampled tasks per piped kind."""
        return {name: int(m.sum()) for name, m in zip(self.kinds, self.masks)}

    def fit_at(self, bw: float, o_prior: float, capacity: float | None = None, scale=None, factors: bool = True):
        """(squared error, overhead, tail, tasks the overhead was fitted from, tasks whose stream
        ended after overhead + compute, each kind's factor on its compute) at ``bw``. A duration is
        max(overhead + factor x compute, stream) + tail. First, each factor as in ``scale`` (1
        where None): the overhead from the tasks whose weights had all arrived at their start and
        the tail from those the stream held up, alternately (without stream-bound tasks the tail is
        0; without ready ones the overhead is ``o_prior``). Then (``factors`` and ``kinds``), that
        overhead kept, the tail and the factors anew (below); else the factors are ``scale``'s."""
        a = self.stream_us(bw, capacity)[self.sample]
        kind = self.kind[self.sample]
        c0 = np.maximum(self.own / bw, self.flop)[self.sample]
        g = np.ones(len(self.kinds)) if scale is None else np.asarray(scale, dtype=np.float64)
        cs = c0 * g[kind] if len(self.kinds) else c0
        d = self.dur[self.sample]
        ready = a <= 0
        # the overhead inside the file's limits here, not after: on compute-bound tasks overhead and
        # tail add up, so an overhead below its limit would come back as a tail the clip leaves
        lo = PIPE_LIMITS["task_overhead_us"][0]
        o, tail = (max(lo, float(np.mean((d - cs)[ready]))) if ready.any() else o_prior), 0.0
        for _ in range(4):
            bound = a > o + cs
            if not bound.any():
                break
            tail = max(0.0, float(np.mean((d - a)[bound])))
            if ready.any():
                o = max(lo, float(np.mean((d - cs - tail)[ready])))

        if not self.kinds or not factors:
            pred = np.maximum(o + cs, a) + tail
            got = {k: round(float(g[i]), 4) for i, k in enumerate(self.kinds)} if scale is not None else {}
            return float(((pred - d) ** 2).sum()), o, tail, int(ready.sum()), int((a > o + cs).sum()), got
        # the tail and each kind's factor alternately: the tail from the tasks the stream held up
        # (duration - arrival), each kind's factor from the tasks it did not (median of (duration
        # - tail - overhead) / compute). Alternating can settle where compute-bound tasks pass for
        # stream-bound ones, so it runs from three starts and keeps the one of least squared error:
        # the tail above, the least duration - arrival (a duration is never less than arrival +
        # tail), and the median duration - arrival of the kinds whose durations less arrivals vary
        # less than their durations (bound by their stream).
        q = d - a
        streamed = np.zeros(len(d), dtype=bool)
        for sel in self.masks:
            if sel.sum() > 1 and np.var(q[sel]) < np.var(d[sel]):
                streamed |= sel
        starts = [tail, max(0.0, float(np.percentile(q, 2)))]
        if streamed.any():
            starts.append(max(0.0, float(np.median(q[streamed]))))
        best, pos = None, c0 > 0
        for t0 in starts:
            f = np.ones(len(self.kinds))
            tl = t0
            for r in range(7):
                held = (q <= tl + 0.25) if r == 0 else (a > o + f[kind] * c0)
                if r and held.any():
                    tl = max(0.0, float(np.mean(q[held])))
                for i, m in enumerate(self.masks):
                    sel = m & ~held & pos
                    if sel.any():
                        f[i] = min(max(float(np.median((d - tl - o)[sel] / c0[sel])), 1e-3), 999.0)
            c = f[kind] * c0
            pred = np.maximum(o + c, a) + tl
            sse = float(((pred - d) ** 2).sum())
            if best is None or sse < best[0]:
                best = (sse, tl, f.copy(), int((a > o + c).sum()))
        sse, tail, f, n_bound = best
        factors = {k: round(float(f[i]), 4) for i, k in enumerate(self.kinds)}
        return sse, o, tail, int(ready.sum()), n_bound, factors
