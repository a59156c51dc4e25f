"""CP-SAT scheduling, one layer at a time.

One-shot CP-SAT over a whole model (~20k tasks) times out in presolve, and per-worker optional
intervals lose even at a few hundred tasks (DESIGN.md). So the graph is cut into segments (the
tasks before the first layer, each decoder layer, the tasks after the last), segments with the
same shape are solved once with their inputs available at t = 0, as one interval per task,
precedences through the events, and a cumulative of capacity = workers; a sweep over start
times gives each task a worker. The per-segment templates are then replayed in segment order,
which keeps every queue sorted by start and every start after its producers' ends.
``cpsat_place`` solves the same segments with a worker per task, hops and pages.

Time is integer: one unit is 10 ns. The search is bounded by CP-SAT's *deterministic* time, not
the clock, so a build is reproducible on any machine: ``time_limit`` seconds (over all solves)
become ``DET_PER_SECOND * time_limit`` units of deterministic time, calibrated on these models
(a unit took 4-8 s of wall time on a 2026 x86 core: cumulative propagation is undercounted), so a
solve takes about half its share of the limit. A wall-clock cap of ``WALL_FACTOR`` times the share
guards an overloaded machine; only if it fires can two runs differ, and ``SolveInfo.wall_capped``
says so.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from mkc.schedule.baseline import list_schedule, solo_producers
from mkc.schedule.timeline import Deps, Replay, packing
from mkc.taskgraph.ir import TaskGraph

UNITS_PER_US = 100  # CP-SAT time unit: 10 ns
SEED = 20260101
DET_PER_SECOND = 0.1  # deterministic time per second of the time limit
WALL_FACTOR = 5.0  # wall-clock cap of a solve = WALL_FACTOR * its share of the time limit + 1 s
MIN_SHARE = 0.2  # seconds of the time limit any solve gets
MAX_SEGMENT_TASKS = 6000  # beyond this a segment keeps its list schedule (presolve would not finish)

STATUS_CODE = {"OPTIMAL": 4.0, "FEASIBLE": 2.0, "LIST": 1.0, "UNKNOWN": 0.0}


@dataclass(frozen=True)
class SolveInfo:
    status: str  # OPTIMAL | FEASIBLE | LIST (no solve, or no solution found) | UNKNOWN
    makespan: int  # units, of the segment alone
    bound: int  # units: CP-SAT's lower bound on the segment alone
    hint: int  # units: the list schedule's makespan of the segment alone
    det_time: float
    wall: float
    wall_capped: bool = False  # stopped by the clock, not the deterministic limit: may not reproduce


def segments(tg: TaskGraph, deps: Deps, order: Sequence[int]) -> list[list[int]]:
    """Head (layer -1 tasks no layer task precedes), each layer in order, tail (other layer -1
    tasks). One segment of everything if some dependency runs backwards between them."""
    after_layer = [False] * len(deps.prod)
    seg_key: dict[int, tuple[int, int]] = {}
    for t in order:
        layer = tg.tasks[t].layer
        below = any(after_layer[e] for e in deps.waits[t])
        for e in deps.signals[t]:
            after_layer[e] = after_layer[e] or below or layer >= 0
        seg_key[t] = (1, layer) if layer >= 0 else ((2, 0) if below else (0, 0))
    keys = sorted(set(seg_key.values()))
    index = {k: i for i, k in enumerate(keys)}
    seg = [index[seg_key[t]] for t in range(deps.n)]
    for e, ps in enumerate(deps.prod):
        if ps and deps.cons[e] and max(seg[p] for p in ps) > min(seg[c] for c in deps.cons[e]):
            return [list(range(deps.n))]
    out: list[list[int]] = [[] for _ in keys]
    for t in range(deps.n):
        out[seg[t]].append(t)
    return out


def signature(tg: TaskGraph, local: Deps, tasks: Sequence[int], dunits: Sequence[int]) -> tuple:
    """Two segments with equal signatures have the same scheduling problem, task for task."""
    return tuple(
        (tg.tasks[t].kind, dunits[i], tuple(local.prod[e] for e in local.waits[i])) for i, t in enumerate(tasks)
    )


def deterministic_solver(seconds: float, seed: int = SEED) -> cp_model.CpSolver:
    """A solver that reproduces: one worker, a fixed seed, ``seconds`` of the limit as deterministic
    time, and the wall-clock cap (module docstring)."""
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.num_workers = 1
    prm.random_seed = seed
    prm.max_deterministic_time = DET_PER_SECOND * seconds
    prm.max_time_in_seconds = WALL_FACTOR * seconds + 1.0
    return solver


def solve_segment(
    local: Deps, dunits: Sequence[int], num_workers: int, seconds: float, seed: int = SEED
) -> tuple[list[int], SolveInfo]:
    """Start times (units) of one segment's tasks, inputs available at 0: minimum makespan within
    about ``seconds`` (as deterministic time)."""
    t0 = time.perf_counter()
    n = local.n
    _, _, hint_start = list_schedule(local, dunits, num_workers)
    hint_start = [int(s) for s in hint_start]
    horizon = max(s + d for s, d in zip(hint_start, dunits))
    top, bottom = local.levels(dunits, local.topo_order(), num_workers)
    bound0 = max(math.ceil(max(a + b for a, b in zip(top, bottom)) - 1e-6), math.ceil(sum(dunits) / num_workers))
    if n > MAX_SEGMENT_TASKS or horizon <= bound0:
        status = "OPTIMAL" if horizon <= bound0 else "LIST"
        return hint_start, SolveInfo(status, horizon, bound0, horizon, 0.0, time.perf_counter() - t0)

    m = cp_model.CpModel()
    start = [m.new_int_var(int(top[i]), horizon - int(bottom[i]), f"s{i}") for i in range(n)]
    intervals = [m.new_fixed_size_interval_var(start[i], dunits[i], f"i{i}") for i in range(n)]
    for e, ps in enumerate(local.prod):
        cs = local.cons[e]
        pack = math.ceil(packing([dunits[p] for p in ps], num_workers) - 1e-6) if len(ps) > 1 else 0
        cut = pack > max(dunits[p] for p in ps)  # the producers need more than one round
        if not cs and not cut:
            continue
        if not cut and len(ps) * len(cs) <= len(ps) + len(cs):
            for p in ps:
                for c in cs:
                    m.add(start[c] >= start[p] + dunits[p])
            continue
        # a fan-in/fan-out event: one variable for its firing time
        lo = max(int(top[p]) + dunits[p] for p in ps)
        fire = m.new_int_var(lo, horizon, f"e{e}")
        for p in ps:
            m.add(fire >= start[p] + dunits[p])
        for c in cs:
            m.add(start[c] >= fire)
        m.add_hint(fire, max(hint_start[p] + dunits[p] for p in ps))
        if cut:  # redundant: the producers fit on the workers between the first start and the firing
            first = m.new_int_var(min(int(top[p]) for p in ps), horizon, f"f{e}")
            m.add_min_equality(first, [start[p] for p in ps])
            m.add(fire >= first + pack)
            m.add_hint(first, min(hint_start[p] for p in ps))
    if n > num_workers:
        m.add_cumulative(intervals, [1] * n, num_workers)
    makespan = m.new_int_var(bound0, horizon, "makespan")
    for i in range(n):
        if not local.signals[i] or not any(local.cons[e] for e in local.signals[i]):
            m.add(makespan >= start[i] + dunits[i])
    m.minimize(makespan)
    for i in range(n):
        m.add_hint(start[i], hint_start[i])
    m.add_hint(makespan, horizon)

    solver = deterministic_solver(seconds, seed)
    p = solver.parameters
    code = solver.solve(m)
    status = solver.status_name(code)
    wall = time.perf_counter() - t0
    capped = code != cp_model.OPTIMAL and solver.deterministic_time < 0.99 * p.max_deterministic_time
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        starts = [solver.value(s) for s in start]
        span = max(s + d for s, d in zip(starts, dunits))
        if span <= horizon:
            bound = max(bound0, int(solver.best_objective_bound))
            return starts, SolveInfo(status, span, bound, horizon, solver.deterministic_time, wall, capped)
    return hint_start, SolveInfo("LIST", horizon, bound0, horizon, solver.deterministic_time, wall, capped)


def sweep_workers(start: Sequence[int], dunits: Sequence[int], num_workers: int,
                  solo: Sequence[int | None] | None = None) -> list[int]:
    """Give each task a worker: in order of start, the worker of its solo producer
    (``baseline.solo_producers``) if that one is free by then, else the lowest-numbered worker free
    by then. The cumulative constraint guarantees one is."""
    free = list(range(num_workers))
    idle = set(free)
    busy: list[tuple[int, int]] = []  # (end, worker)
    worker = [0] * len(start)
    for i in sorted(range(len(start)), key=lambda i: (start[i], i)):
        while busy and busy[0][0] <= start[i]:
            w = heapq.heappop(busy)[1]
            heapq.heappush(free, w)
            idle.add(w)
        p = solo[i] if solo is not None else None
        if p is not None and worker[p] in idle and start[p] < start[i]:
            w = worker[p]
            free.remove(w)
            heapq.heapify(free)
        else:
            w = heapq.heappop(free)
        idle.discard(w)
        worker[i] = w
        heapq.heappush(busy, (start[i] + dunits[i], w))
    return worker


def segment_label(tg: TaskGraph, segs: list[list[int]], idx: list[int]) -> str:
    """How progress messages name the segments ``idx`` (one class of equal segments)."""
    layers = sorted({tg.tasks[t].layer for i in idx for t in segs[i]})
    if layers[0] >= 0:
        return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}..{layers[-1]}"
    if len(layers) > 1:
        return "whole graph"
    return "head" if idx[0] == 0 and len(segs) > 1 else "tail"


@dataclass(frozen=True)
class SegmentClasses:
    """The segments of a graph grouped into classes of equal scheduling problems."""

    segs: list[list[int]]  # task ids per segment, in segment order
    locals: list[Deps]  # per segment, its dependencies renumbered (``Deps.restrict``)
    first_of: list[int]  # per segment, the first segment of its class (the one that is solved)
    classes: list[int]  # the solved segments, in order

    def members(self, c: int) -> list[int]:
        """The segments of class ``c`` (``c`` is the first of them)."""
        return [i for i, f in enumerate(self.first_of) if f == c]


def segment_classes(tg: TaskGraph, deps: Deps, dunits: Sequence[int],
                    extra: Sequence[tuple] | None = None) -> SegmentClasses:
    """Cut the graph into ``segments`` and group them by ``signature`` (and ``extra[t]``, further
    per-task facts a solver depends on, where given)."""
    segs = segments(tg, deps, deps.topo_order())
    locals_ = [deps.restrict(s) for s in segs]
    sigs = [signature(tg, loc, s, [dunits[t] for t in s]) + (tuple(extra[t] for t in s) if extra else ())
            for loc, s in zip(locals_, segs)]
    first: dict[tuple, int] = {}
    for i, sg in enumerate(sigs):
        first.setdefault(sg, i)
    first_of = [first[sg] for sg in sigs]
    return SegmentClasses(segs, locals_, first_of, sorted(set(first_of)))


def stitch(deps: Deps, dur: Sequence[float], num_workers: int, sc: SegmentClasses,
           templates: dict[int, tuple[Sequence[int], Sequence[int]]]) -> Replay:
    """Replay each segment's class template (start units and worker by rank) in segment order:
    the template's workers, earliest first, go to the workers free earliest."""
    rep = Replay(deps, dur, num_workers)
    for i, seg in enumerate(sc.segs):
        starts, tworker = templates[sc.first_of[i]]
        first: dict[int, int] = {}
        for r, w in enumerate(tworker):
            first[w] = min(first.get(w, starts[r]), starts[r])
        used = sorted(first, key=lambda w: (first[w], w))
        idle = sorted(range(num_workers), key=lambda w: (rep.free[w], w))
        to_actual = dict(zip(used, idle))  # earliest template worker -> earliest free worker
        for r in sorted(range(len(seg)), key=lambda r: (starts[r], r)):
            rep.place(seg[r], to_actual[tworker[r]])
    return rep


def cpsat_placement(
    tg: TaskGraph,
    deps: Deps,
    dur: Sequence[float],
    num_workers: int,
    time_limit: float,
    progress: Callable[[str], None] | None = None,
    seed: int = SEED,
) -> tuple[Replay, list[SolveInfo], int]:
    """Solve each distinct segment once and replay the templates in segment order.

    Returns the replay (times, queues), the solve info per segment, and the number of solves.
    """
    say = progress or (lambda msg: None)
    dunits = to_units(dur)
    sc = segment_classes(tg, deps, dunits)
    templates: dict[int, tuple[list[int], list[int]]] = {}  # class -> (start units, worker) by rank
    infos: dict[int, SolveInfo] = {}
    remaining = time_limit  # seconds of the limit, spent as deterministic time
    remaining_size = sum(len(sc.segs[c]) for c in sc.classes)
    for k, c in enumerate(sc.classes):
        size = len(sc.segs[c])
        share = max(MIN_SHARE, remaining * size / remaining_size)
        du = [dunits[t] for t in sc.segs[c]]
        starts, info = solve_segment(sc.locals[c], du, num_workers, share, seed)
        remaining = max(0.0, remaining - info.det_time / DET_PER_SECOND)
        remaining_size -= size
        templates[c] = (starts, sweep_workers(starts, du, num_workers, solo_producers(sc.locals[c])))
        infos[c] = info
        where = segment_label(tg, sc.segs, sc.members(c))
        say(f"cpsat {k + 1}/{len(sc.classes)}: {size} tasks x {len(sc.members(c))} ({where}): {info.status}, "
            f"{info.makespan / UNITS_PER_US:.1f} us (list {info.hint / UNITS_PER_US:.1f}, "
            f"bound {info.bound / UNITS_PER_US:.1f}) in {info.wall:.2f} s"
            + (" (stopped by the wall clock: may not reproduce)" if info.wall_capped else ""))
    rep = stitch(deps, dur, num_workers, sc, templates)
    return rep, [infos[f] for f in sc.first_of], len(sc.classes)


def to_units(dur: Sequence[float]) -> list[int]:
    """Task times in CP-SAT units, rounded up (at least one unit)."""
    return [max(1, math.ceil(d * UNITS_PER_US - 1e-9)) for d in dur]
