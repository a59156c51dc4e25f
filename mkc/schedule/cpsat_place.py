"""CP-SAT with placement and pages: which worker runs each task, in which order, with the hop
between workers and the weight pipeline's shared-memory pages, one segment at a time.

``cpsat.solve_segment`` decides start times under one cumulative of the worker count and a sweep
gives out the workers afterwards, so it cannot see what depends on which tasks share a worker
(docs/design.md "CP-SAT with placement and pages"):

- the hop: a consumer starts ``hop`` after a producer's end when the two run on different
  workers; a worker's own signal needs none. Only an event of one producer can be signalled by
  the consumer's own worker in this model (a "same worker" literal relaxes its hop); an event of
  several producers always costs the hop, since which of them signals last is not modelled;
- the pages: on a plan with the weight pipeline (``DevicePlan.pipe_slots``) a GEMV task's weights
  start streaming ``lead`` before it starts, into pages of its worker, and it runs that much
  shorter than the scheduler's time (``run``): the lead is what the pages hold ahead
  (``pipemodel.effective_capacity``, or all of its weights if they fit) at the scheduler's
  bandwidth. The task holds ``pages`` of its worker's ``slots`` from ``lead`` before its start
  until its last weight byte has streamed (``stream`` after its start; a task whose weights fit
  the pages frees them as it starts, as in ``pipemodel``), all of them while it streams past its
  start. So a task whose worker's producer is still busy starts later and ends where it would
  have without the pipeline, one after a wait, an attention task or a task whose weights were
  all ahead keeps the saving. The lead is fixed per task, not a variable, and may start before
  0 (the producer is free by then: the previous segment's or step's last weights have streamed).

Per (task, candidate worker) a presence literal and an optional interval of ``run`` (and one of
``lead + stream``, ``lead`` earlier, for a page holder); exactly one worker per task; per worker no
overlap of the run intervals and a cumulative of the page intervals of capacity ``slots``; the
events' precedences with the hop; the makespan minimised. The list schedule, its queues replayed
in this model (``replay``), is the hint and the fallback, and ``bound`` the lower bound beside
CP-SAT's.

Size: with every worker a candidate a segment has tasks x workers placements (a decoder layer
on an H200: 76k, 67k of them left by symmetry breaking). Beyond ``MAX_FULL_PLACEMENTS`` each
task keeps ``CANDIDATES`` workers (``candidates``): a restriction of the same model, so whatever
it finds is a schedule of the full one. Segments, their classes, the time budget and the
stitching are ``cpsat``'s, and so is determinism: one search worker, a fixed seed, a limit of
deterministic time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from mkc.errors import ScheduleError
from mkc.schedule.baseline import list_schedule
from mkc.schedule.cost import DEFAULT_COST, CostModel, PipeCost, plan_of
from mkc.schedule.cpsat import STATUS_CODE  # noqa: F401 (stage.py reads it from here)
from mkc.schedule.cpsat import (DET_PER_SECOND, MAX_SEGMENT_TASKS, MIN_SHARE, SEED, UNITS_PER_US, SolveInfo,
                                deterministic_solver, segment_classes, segment_label, stitch, to_units)
from mkc.schedule.pipemodel import effective_capacity, task_parts
from mkc.schedule.timeline import Deps, Replay
from mkc.target import Target
from mkc.taskgraph.ir import Task, TaskGraph

# From a producer's end to a consumer's start on another worker unless a calibration set the
# pipeline's constants (``PipeCost.hop_us``): what the H200 calibrations fitted (0.45-0.48 us,
# docs/bench/calibration-*.json). ``cost.HOP_US`` (1.3 us) is the older median from release to
# start, which includes the acquire and barrier the scheduler's task times price as ``WAIT_US``.
DEFAULT_HOP_US = 0.45
MAX_FULL_PLACEMENTS = 4000  # tasks x workers beyond which candidates are restricted
CANDIDATES = 4  # workers per task in the restricted model
# CP-SAT options of the restricted model: on whole layers probing, symmetry detection and the LP
# relaxation took 2-4x the wall time of the rest per unit of deterministic time (which undercounts
# them: the wall clock stopped a solve) and found no better schedule (docs/design.md "CP-SAT with
# placement and pages"); the full model of a small segment keeps CP-SAT's defaults
RESTRICTED_OPTIONS = {"cp_model_probing_level": 0, "symmetry_level": 0, "linearization_level": 0}


@dataclass(frozen=True)
class Placed:
    """A placement problem in CP-SAT units (``cpsat.UNITS_PER_US``), indexed by task."""

    deps: Deps
    run: tuple[int, ...]  # from start to end (the prefetched part of the scheduler's time excluded), >= 1
    lead: tuple[int, ...]  # how long before its start its weights start streaming into pages (0: none)
    stream: tuple[int, ...]  # how long after its start they stream on (0: they fit the pages), <= run
    pages: tuple[int, ...]  # pages it holds from start - lead to start + stream (0: none)
    slots: int  # pages per worker (0: no weight pipeline)
    hop: int  # from a producer's end to a consumer's start on another worker
    num_workers: int

    def units(self) -> list[int]:
        """The scheduler's time of each task (``cpsat.to_units`` of its duration)."""
        return [r + a for r, a in zip(self.run, self.lead)]

    def restrict(self, tasks: Sequence[int], local: Deps | None = None) -> "Placed":
        """The sub-problem on ``tasks`` (``Deps.restrict``; ``local`` if already computed)."""
        return replace(self, deps=local if local is not None else self.deps.restrict(tasks),
                       run=tuple(self.run[t] for t in tasks), lead=tuple(self.lead[t] for t in tasks),
                       stream=tuple(self.stream[t] for t in tasks), pages=tuple(self.pages[t] for t in tasks))

    def makespan(self, start: Sequence[int]) -> int:
        return max((s + r for s, r in zip(start, self.run)), default=0)


@dataclass(frozen=True)
class PlaceInfo(SolveInfo):
    """``SolveInfo`` of one segment's placement model. ``status`` and ``bound`` are the full
    model's: a restricted model's optimum is FEASIBLE unless it meets ``bound``, and its own bound
    is ``model_status``'s, not reported."""

    candidates: int = 0  # workers per task in the model (num_workers: the full model; 0: no model built)
    placements: int = 0  # presence literals
    model_status: str = ""  # CP-SAT's status on the model it solved (empty: none solved)


def placed_problem(tg: TaskGraph, target: Target, deps: Deps, dur: Sequence[float], num_workers: int,
                   cost: CostModel | None = None) -> Placed:
    """The whole graph's problem: ``dur`` (the scheduler's times, ``cost.durations``) less each GEMV
    task's lead, its pages on the device plan's pipeline, and the hop (``cost.pipe.hop_us`` where a
    calibration set the pipeline's constants, else ``DEFAULT_HOP_US``; a calibrated hop also comes
    off the time of every task that waits, whose calibrated factor carries it). A task's lead and stream
    are what its weights cost in ``cost.task_time``: the time saved with the bytes ahead removed,
    and the rest of its weights' time."""
    cost = cost or DEFAULT_COST
    calibrated = cost.pipe != PipeCost()
    hop_us = cost.pipe.hop_us if calibrated else DEFAULT_HOP_US
    if calibrated and hop_us > 0:
        # A calibration's scheduler factors carry the hop of every task that waits (mkc.trace.calibration:
        # the list scheduler has no hop of its own, so its task times hold it). This model adds the hop
        # on each dependency between workers itself, so it comes off those tasks' times here; before,
        # it was counted twice
        dur = [max(d - hop_us, 1.0 / UNITS_PER_US) if t.waits else d for t, d in zip(tg.tasks, dur)]
    plan = plan_of(tg, target)
    slots = plan.pipe_slots if plan is not None else 0
    parts = task_parts(tg, target, cost)
    ahead = effective_capacity(parts.capacity, cost.bw_per_sm(target, cost.pipe.hbm_fraction),
                               cost.pipe.page_latency_us)
    mma = plan is not None and plan.mma
    units = to_units(dur)
    run, lead, stream, pages = [], [], [], []
    for t, u in zip(tg.tasks, units):
        piped = parts.pipe_bytes[t.id]
        a = b = 0
        if slots and piped and ahead:
            a = min(u - 1, _saved(cost, t, target, mma, dur[t.id], min(piped, ahead)))
            b = min(u - a, max(0, _saved(cost, t, target, mma, dur[t.id], piped) - a))
        run.append(u - a)
        lead.append(a)
        stream.append(b)
        pages.append((slots if b else min(slots, math.ceil(piped / plan.pipe_page))) if a else 0)
    return Placed(deps, tuple(run), tuple(lead), tuple(stream), tuple(pages), slots,
                  max(0, round(hop_us * UNITS_PER_US)), num_workers)


def _saved(cost: CostModel, task: Task, target: Target, mma: bool, dur: float, nbytes: float) -> int:
    """Units of ``dur`` (the task's time) that ``nbytes`` fewer bytes would save, rounded down."""
    rest = cost.task_time(replace(task, bytes=task.bytes - int(nbytes)), target, mma)
    return max(0, math.floor((dur - rest) * UNITS_PER_US + 1e-9))


def _hop(p: Placed, e: int, same: bool) -> int:
    """The hop from event ``e``'s producers to a consumer (``same``: on the one producer's worker)."""
    return 0 if same and len(p.deps.prod[e]) == 1 else p.hop


def _page_start(held: Sequence[tuple[int, int, int]], s: int, lead: int, stream: int, need: int,
                slots: int) -> int:
    """The earliest start from ``s`` on at which ``need`` pages are free from ``lead`` before it to
    ``stream`` after it, beside the page intervals ``held`` (from, to, pages) of the worker's
    earlier tasks."""
    for c in sorted({s} | {b + lead for _, b, _ in held if b + lead > s}):
        lo, hi = c - lead, c + stream
        points = [lo] + [a for a, _, _ in held if lo < a < hi]
        if all(sum(q for a, b, q in held if a <= x < b) + need <= slots for x in points):
            return c
    raise AssertionError("unreachable: after the last held interval every page is free")


def replay(p: Placed, queues: Sequence[Sequence[int]]) -> list[int]:
    """Start (units) of every task when each worker runs its queue in order, each task as early as
    the model allows: after its worker's previous task, after each event it waits on (plus the hop
    unless its one producer ran on the same worker) and with its pages free.
    Queues that can never finish are a ScheduleError."""
    d = p.deps
    start, end, worker = [0] * d.n, [0] * d.n, [-1] * d.n
    left = [len(ps) for ps in d.prod]
    free = [0] * len(queues)
    held: list[list[tuple[int, int, int]]] = [[] for _ in queues]
    longest = max(p.lead, default=0)
    head = [0] * len(queues)
    placed, progress = 0, True
    while progress:
        progress = False
        for w, q in enumerate(queues):
            while head[w] < len(q) and all(left[e] == 0 for e in d.waits[q[head[w]]]):
                t = q[head[w]]
                s = max([free[w]] + [end[x] + _hop(p, e, worker[x] == w) for e in d.waits[t] for x in d.prod[e]])
                if p.pages[t]:
                    s = _page_start(held[w], s, p.lead[t], p.stream[t], p.pages[t], p.slots)
                    held[w] = [h for h in held[w] if h[1] > s - longest]  # what can still overlap
                    held[w].append((s - p.lead[t], s + p.stream[t], p.pages[t]))
                start[t], end[t], worker[t], free[w] = s, s + p.run[t], w, s + p.run[t]
                for e in d.signals[t]:
                    left[e] -= 1
                head[w] += 1
                placed += 1
                progress = True
    if placed < sum(len(q) for q in queues):
        raise ScheduleError("the queues deadlock in the placement model")
    return start


def predicted_us(p: Placed, queues: Sequence[Sequence[int]]) -> float:
    """The makespan of ``queues`` (per worker, task ids in order) in the model, in microseconds."""
    return p.makespan(replay(p, queues)) / UNITS_PER_US


def violations(p: Placed, start: Sequence[int], worker: Sequence[int]) -> list[str]:
    """What in (``start``, ``worker``) breaks the model: a worker out of range, a start before 0,
    two tasks overlapping on a worker, a start before a producer's end (plus the hop), more than
    ``slots`` pages held on a worker. Empty if nothing; independent of the solver."""
    d, out = p.deps, []
    out += [f"task {t} on worker {worker[t]}" for t in range(d.n) if not 0 <= worker[t] < p.num_workers]
    out += [f"task {t} starts at {start[t]} < 0" for t in range(d.n) if start[t] < 0]
    for e, ps in enumerate(d.prod):
        for c in d.cons[e]:
            for x in ps:
                need = start[x] + p.run[x] + _hop(p, e, worker[x] == worker[c])
                if start[c] < need:
                    out.append(f"task {c} starts at {start[c]}, before {need} (event {e}, producer {x})")
    mine: list[list[int]] = [[] for _ in range(p.num_workers)]
    for t in sorted(range(d.n), key=lambda t: (start[t], t)):
        if 0 <= worker[t] < p.num_workers:
            mine[worker[t]].append(t)
    for w, ts in enumerate(mine):
        out += [f"tasks {a} and {b} overlap on worker {w}" for a, b in zip(ts, ts[1:])
                if start[b] < start[a] + p.run[a]]
        steps = sorted([(start[t] - p.lead[t], p.pages[t]) for t in ts if p.pages[t]]
                       + [(start[t] + p.stream[t], -p.pages[t]) for t in ts if p.pages[t]])
        use = 0
        for at, dq in steps:
            use += dq
            if use > p.slots:
                out.append(f"worker {w} holds {use} > {p.slots} pages at {at}")
    return out


def levels(p: Placed) -> tuple[list[int], list[int]]:
    """(top, bottom): a lower bound on each task's start, and on the time from its start to the end
    (its own run included), with the hop of every event of several producers and none elsewhere."""
    d = p.deps
    order = d.topo_order()
    top, bottom = [0] * d.n, [0] * d.n
    for t in order:
        top[t] = max([0] + [top[x] + p.run[x] + _hop(p, e, True) for e in d.waits[t] for x in d.prod[e]])
    for t in reversed(order):
        bottom[t] = p.run[t] + max([0] + [bottom[c] + _hop(p, e, True) for e in d.signals[t] for c in d.cons[e]])
    return top, bottom


def bound(p: Placed) -> int:
    """max(critical path, work / workers, packing bound) of the model: no schedule of it is shorter.
    The packing bound is ``Deps.levels``' over the run times, without hops."""
    top, bottom = levels(p)
    ptop, pbottom = p.deps.levels(p.run, None, p.num_workers)
    return max(max((a + b for a, b in zip(top, bottom)), default=0), math.ceil(sum(p.run) / p.num_workers),
               math.ceil(max((a + b for a, b in zip(ptop, pbottom)), default=0) - 1e-6))


def list_hint(p: Placed) -> tuple[list[int], list[int]]:
    """The list schedule of the scheduler's times (``baseline.list_schedule``) in this model: its
    queues replayed, its workers renumbered in order of their first task (by start, then id)."""
    order, worker, _ = list_schedule(p.deps, p.units(), p.num_workers)
    queues: list[list[int]] = [[] for _ in range(p.num_workers)]
    for t in order:
        queues[worker[t]].append(t)
    start = replay(p, queues)
    label: dict[int, int] = {}
    for t in sorted(range(p.deps.n), key=lambda t: (start[t], t)):
        label.setdefault(worker[t], len(label))
    return start, [label[w] for w in worker]


def candidates(p: Placed, start: Sequence[int], worker: Sequence[int], k: int) -> list[tuple[int, ...]]:
    """The workers each task may run on given the hint (``start``, ``worker``). With ``k`` at least
    the worker count, all that symmetry leaves: the task i-th by hint start, workers 0..i (workers
    are identical, so any schedule can be renumbered in order of the workers' first tasks, and the
    hint is). Else ``k`` of them: the hint's, those of its events' single producers, then the ones
    the hint leaves free earliest before its start."""
    n, W = p.deps.n, p.num_workers
    order = sorted(range(n), key=lambda t: (start[t], t))
    if k >= W:
        out: list[tuple[int, ...]] = [()] * n
        for i, t in enumerate(order):
            out[t] = tuple(range(min(i + 1, W)))
        return out
    out = [()] * n
    last_end = [0] * W  # per worker, the end of its latest task (by start) so far
    for t in order:
        solo = [worker[x] for e in p.deps.waits[t] if len(p.deps.prod[e]) == 1 for x in p.deps.prod[e]]
        free = sorted(range(W), key=lambda w: (last_end[w] if last_end[w] <= start[t] else math.inf, w))
        out[t] = tuple(sorted(list(dict.fromkeys([worker[t]] + solo + free))[:k]))
        last_end[worker[t]] = start[t] + p.run[t]
    return out


@dataclass
class _Model:
    """A built model and the variables a solution is read from."""

    model: cp_model.CpModel
    start: list[cp_model.IntVar]
    at: dict[tuple[int, int], cp_model.IntVar]  # (task, worker) -> presence literal
    placements: int


def build_model(p: Placed, cand: Sequence[Sequence[int]], hint_start: Sequence[int], hint_worker: Sequence[int],
                horizon: int) -> _Model:
    """The CP-SAT model of the module docstring over the ``cand`` workers of each task, with the
    hint (which must be one of its solutions) and the domains [top, ``horizon`` - bottom]."""
    d, W = p.deps, p.num_workers
    top, bottom = levels(p)
    m = cp_model.CpModel()
    start = [m.new_int_var(top[t], horizon - bottom[t], f"s{t}") for t in range(d.n)]
    at: dict[tuple[int, int], cp_model.IntVar] = {}
    runs: list[list[cp_model.IntervalVar]] = [[] for _ in range(W)]
    held: list[list[tuple[cp_model.IntervalVar, int]]] = [[] for _ in range(W)]
    for t in range(d.n):
        for w in cand[t]:
            x = at[t, w] = m.new_bool_var(f"x{t}_{w}")
            runs[w].append(m.new_optional_fixed_size_interval_var(start[t], p.run[t], x, f"r{t}_{w}"))
            if p.pages[t]:
                held[w].append((m.new_optional_fixed_size_interval_var(
                    start[t] - p.lead[t], p.lead[t] + p.stream[t], x, f"p{t}_{w}"), p.pages[t]))
            m.add_hint(x, hint_worker[t] == w)
        m.add_exactly_one(at[t, w] for w in cand[t])
    for w in range(W):
        if len(runs[w]) > 1:
            m.add_no_overlap(runs[w])
        if sum(q for _, q in held[w]) > p.slots:
            m.add_cumulative([i for i, _ in held[w]], [q for _, q in held[w]], p.slots)
    for e, ps in enumerate(d.prod):
        cs = d.cons[e]
        if len(ps) == 1:
            for c in cs:
                _solo_edge(m, p, at, cand, start, ps[0], c, hint_worker)
        elif len(ps) * len(cs) <= len(ps) + len(cs):
            for x in ps:
                for c in cs:
                    m.add(start[c] >= start[x] + p.run[x] + p.hop)
        elif cs:  # a fan-in/fan-out event: one variable for its firing time
            fire = m.new_int_var(max(top[x] + p.run[x] for x in ps), horizon, f"e{e}")
            for x in ps:
                m.add(fire >= start[x] + p.run[x])
            for c in cs:
                m.add(start[c] >= fire + p.hop)
            m.add_hint(fire, max(hint_start[x] + p.run[x] for x in ps))
    makespan = m.new_int_var(bound(p), horizon, "makespan")
    for t in range(d.n):
        if not any(d.cons[e] for e in d.signals[t]):
            m.add(makespan >= start[t] + p.run[t])
    m.minimize(makespan)
    for t in range(d.n):
        m.add_hint(start[t], hint_start[t])
    m.add_hint(makespan, horizon)
    return _Model(m, start, at, len(at))


def _solo_edge(m: cp_model.CpModel, p: Placed, at: dict[tuple[int, int], cp_model.IntVar],
               cand: Sequence[Sequence[int]], start: Sequence[cp_model.IntVar], x: int, c: int,
               hint_worker: Sequence[int]) -> None:
    """Consumer ``c`` of an event whose one producer is ``x``: the hop unless a "same worker"
    literal holds, which puts ``c`` on ``x``'s worker."""
    common = set(cand[x]) & set(cand[c])
    if not p.hop or not common:
        m.add(start[c] >= start[x] + p.run[x] + p.hop)
        return
    same = m.new_bool_var(f"same{x}_{c}")
    for w in cand[c]:
        m.add_bool_or([~same, ~at[c, w]] + ([at[x, w]] if w in common else []))
    m.add(start[c] + p.hop * same >= start[x] + p.run[x] + p.hop)
    m.add_hint(same, hint_worker[x] == hint_worker[c])


def solve_placed(p: Placed, seconds: float, seed: int = SEED,
                 k: int | None = None) -> tuple[list[int], list[int], PlaceInfo]:
    """Start times (units) and workers of one segment's tasks, inputs available at 0: minimum
    makespan within about ``seconds`` (as deterministic time), from and never worse than
    ``list_hint``. ``k``: workers per task (default: all of them up to ``MAX_FULL_PLACEMENTS``
    placements, else ``CANDIDATES``)."""
    t0 = time.perf_counter()
    n, W = p.deps.n, p.num_workers
    hint_start, hint_worker = list_hint(p)
    horizon = p.makespan(hint_start)
    bound0 = bound(p)
    if n > MAX_SEGMENT_TASKS or horizon <= bound0:
        status = "OPTIMAL" if horizon <= bound0 else "LIST"
        return hint_start, hint_worker, PlaceInfo(status, horizon, bound0, horizon, 0.0, time.perf_counter() - t0)
    k = min(W, k if k is not None else (W if n * W <= MAX_FULL_PLACEMENTS else CANDIDATES))
    built = build_model(p, candidates(p, hint_start, hint_worker, k), hint_start, hint_worker, horizon)

    solver = deterministic_solver(seconds, seed)
    prm = solver.parameters
    for key, value in (RESTRICTED_OPTIONS if k < W else {}).items():
        setattr(prm, key, value)
    code = solver.solve(built.model)
    capped = code != cp_model.OPTIMAL and solver.deterministic_time < 0.99 * prm.max_deterministic_time

    def info(status: str, span: int, best: int) -> PlaceInfo:
        return PlaceInfo(status, span, best, horizon, solver.deterministic_time, time.perf_counter() - t0, capped,
                         k, built.placements, solver.status_name(code))

    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        start = [solver.value(s) for s in built.start]
        worker = [next(w for w in range(W) if (t, w) in built.at and solver.boolean_value(built.at[t, w]))
                  for t in range(n)]
        span = p.makespan(start)
        if span <= horizon and not violations(p, start, worker):
            best = max(bound0, int(solver.best_objective_bound)) if k == W else bound0
            return start, worker, info("OPTIMAL" if span <= best else "FEASIBLE", span, best)
    return hint_start, hint_worker, info("LIST", horizon, bound0)


def cpsat_place_placement(
    tg: TaskGraph,
    p: Placed,
    dur: Sequence[float],
    time_limit: float,
    progress: Callable[[str], None] | None = None,
    seed: int = SEED,
) -> tuple[Replay, list[PlaceInfo], int]:
    """``cpsat.cpsat_placement`` with ``solve_placed`` per distinct segment of ``p`` (the whole
    graph's problem, ``placed_problem``): the templates' workers and orders are kept, their times
    replayed in the scheduler's model (``timeline.Replay``).

    Returns the replay, the solve info per segment, and the number of solves.
    """
    say = progress or (lambda msg: None)
    W = p.num_workers
    sc = segment_classes(tg, p.deps, p.units(), list(zip(p.lead, p.pages)))
    templates: dict[int, tuple[list[int], list[int]]] = {}
    infos: dict[int, PlaceInfo] = {}
    remaining = time_limit
    remaining_size = sum(len(sc.segs[c]) for c in sc.classes)
    for j, c in enumerate(sc.classes):
        size = len(sc.segs[c])
        share = max(MIN_SHARE, remaining * size / remaining_size)
        start, worker, info = solve_placed(p.restrict(sc.segs[c], sc.locals[c]), share, seed)
        remaining = max(0.0, remaining - info.det_time / DET_PER_SECOND)
        remaining_size -= size
        templates[c], infos[c] = (start, worker), info
        say(f"cpsat_place {j + 1}/{len(sc.classes)}: {size} tasks x {len(sc.members(c))} "
            f"({segment_label(tg, sc.segs, sc.members(c))}), {_model_size(info, size, W)}: {info.status}, "
            f"{info.makespan / UNITS_PER_US:.1f} us (list {info.hint / UNITS_PER_US:.1f}, "
            f"bound {info.bound / UNITS_PER_US:.1f}) in {info.wall:.2f} s"
            + (" (stopped by the wall clock: may not reproduce)" if info.wall_capped else ""))
    rep = stitch(p.deps, dur, W, sc, templates)
    return rep, [infos[f] for f in sc.first_of], len(sc.classes)


def _model_size(info: PlaceInfo, size: int, num_workers: int) -> str:
    """What the progress message says of the model: full, restricted (and why), or none."""
    if not info.candidates:
        return "no model" if size <= MAX_SEGMENT_TASKS else f"too large for any model (> {MAX_SEGMENT_TASKS} tasks)"
    if info.candidates >= num_workers:
        return f"full model ({info.placements} placements)"
    return (f"{size} x {num_workers} placements is too large for the full model: {info.candidates} "
            f"candidate workers per task ({info.placements} placements, {info.model_status.lower()} there)")
