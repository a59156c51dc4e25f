"""The scheduling stage: TaskGraph -> Schedule.

    check shared memory -> predict times -> round robin -> list schedule -> CP-SAT (per layer;
    cpsat_place: with placement, hops and pages) -> keep the best -> kernel plan -> Schedule.check()

Everything that goes into the Schedule is deterministic (no wall times), so the same TaskGraph,
target and options give a byte-identical schedule.json; wall times come back in the report of
``schedule_with_report``.

``Schedule.lower_bound`` is max(critical path, total work / workers, packing bound); the packing
bound (timeline.Deps.levels) also counts the rounds a barrier wider than the machine needs, which
the first two ignore. ``Schedule.stats`` (times in us):

  tasks, makespan_round_robin, makespan_list, makespan_cpsat (nan unless method=cpsat)
  makespan_cpsat_place  (method=cpsat_place) its queues' makespan in this, the scheduler's, model
  critical_path, work_bound, packing_bound
  gap                   makespan / lower_bound - 1
  gap_critical_work     makespan / max(critical path, work / workers) - 1 (DESIGN.md's bound)
  gain_over_round_robin makespan_round_robin / makespan
  cpsat_segments, cpsat_solves   segments stitched, distinct segment problems solved
  solver_status         weakest segment: 4 optimal, 2 feasible, 1 kept the list schedule, 0 unknown
  solver_deterministic_s, solver_wall_capped (solves the wall clock stopped: may not reproduce)

and with method=cpsat_place, in its placement model (``cpsat_place``: hops, pages; times in us):

  placed_makespan       the chosen schedule's      placed_makespan_list   the list schedule's
  placed_bound          max(critical path, work / workers) there
  placed_hop_us         its hop                    placed_candidates      fewest workers per task
                                                                          of a solved segment (0: none)
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Sequence

from mkc.errors import ScheduleError, UnknownNameError
from mkc.schedule.baseline import list_schedule, round_robin
from mkc.schedule.cost import CostModel, durations, plan_of, prefetch_bytes, stream_bytes
from mkc.schedule.ir import METHODS, SYNC_MODES, KernelPlan, Schedule
from mkc.schedule.timeline import Deps, Replay
from mkc.backend import for_target
from mkc.target import Target, get_target
from mkc.taskgraph.ir import TaskGraph



def schedule(
    tg: TaskGraph,
    target: Target | str,
    sync: str = "atomic",
    method: str = "cpsat",
    time_limit: float = 10.0,
    progress: Callable[[str], None] | None = None,
    cost: CostModel | None = None,
) -> Schedule:
    """Per-worker queues for ``tg`` on ``target``. ``time_limit`` bounds CP-SAT (deterministic
    seconds over all its solves); ``progress(msg)`` hears about each phase."""
    return schedule_with_report(tg, target, sync, method, time_limit, progress, cost)[0]


def schedule_with_report(
    tg: TaskGraph,
    target: Target | str,
    sync: str = "atomic",
    method: str = "cpsat",
    time_limit: float = 10.0,
    progress: Callable[[str], None] | None = None,
    cost: CostModel | None = None,
) -> tuple[Schedule, dict[str, float]]:
    """``schedule`` plus a report of wall times (seconds) per phase."""
    t0 = time.perf_counter()
    say = progress or (lambda msg: None)
    target = get_target(target) if isinstance(target, str) else target
    if method not in METHODS:
        raise UnknownNameError(f"unknown scheduling method {method!r}; known methods: {', '.join(METHODS)}")
    if sync not in SYNC_MODES:
        raise UnknownNameError(f"unknown sync mode {sync!r}; known modes: {', '.join(SYNC_MODES)}")
    if tg.target != target.name:
        raise ScheduleError(f"the task graph was lowered for {tg.target!r}, not {target.name!r}: lower it again")
    W = target.sms
    check_smem(tg, target)
    deps = Deps.from_taskgraph(tg)
    order = deps.topo_order()
    dur = durations(tg, target, cost)
    _, bottom = deps.levels(dur, order)
    critical = max(bottom, default=0.0)
    work = sum(dur) / W
    top_p, bottom_p = deps.levels(dur, order, W)
    packed = max((a + b for a, b in zip(top_p, bottom_p)), default=0.0)
    lower = max(critical, work, packed)
    report: dict[str, float] = {}

    rr = _replay(deps, dur, W, *round_robin(deps, W))
    lst_order, lst_worker, _ = list_schedule(deps, dur, W, bottom)
    lst = _replay(deps, dur, W, lst_order, lst_worker)
    report["baselines_s"] = time.perf_counter() - t0
    say(f"{len(tg.tasks)} tasks on {W} workers: lower bound {lower:.1f} us (critical path {critical:.1f}, "
        f"work {work:.1f}); round robin {rr.makespan:.1f} us, list {lst.makespan:.1f} us")

    stats: dict[str, float] = {
        "tasks": float(len(tg.tasks)),
        "makespan_round_robin": rr.makespan,
        "makespan_list": lst.makespan,
        "makespan_cpsat": math.nan,
        "critical_path": critical,
        "work_bound": work,
        "packing_bound": packed,
    }
    chosen, used = (rr, "round_robin") if method == "round_robin" else (lst, "list")
    if method == "cpsat":
        cpsat = _solver(method)
        t1 = time.perf_counter()
        cp, infos, solves = cpsat.cpsat_placement(tg, deps, dur, W, time_limit, say)
        report["cpsat_s"] = time.perf_counter() - t1
        stats["makespan_cpsat"] = cp.makespan
        stats.update(_solver_stats(infos, solves, cpsat.STATUS_CODE))
        if cp.makespan <= lst.makespan:
            chosen, used = cp, "cpsat"
        say(f"cpsat {cp.makespan:.1f} us vs list {lst.makespan:.1f} us: keeping {used}")
    elif method == "cpsat_place":
        t1 = time.perf_counter()
        chosen, used = _cpsat_place(tg, target, deps, dur, lst, cost, time_limit, say, stats)
        report["cpsat_place_s"] = time.perf_counter() - t1
    stats["gap"] = max(0.0, _r(chosen.makespan) / _r(lower) - 1.0) if lower > 0 else 0.0
    design = max(critical, work)  # DESIGN.md's bound, for comparison with other systems
    stats["gap_critical_work"] = max(0.0, _r(chosen.makespan) / _r(design) - 1.0) if design > 0 else 0.0
    stats["gain_over_round_robin"] = rr.makespan / chosen.makespan if chosen.makespan > 0 else 1.0

    sched = Schedule(
        target=target.name,
        batch=tg.batch,
        sync=sync,
        num_workers=W,
        queues=tuple(tuple(q) for q in chosen.queues),
        start=tuple(_r(x) for x in chosen.start),
        end=tuple(_r(x) for x in chosen.end),
        thresholds=tuple(e.triggers for e in tg.events),
        plan=kernel_plan(tg, target, chosen.queues),
        method=used,
        makespan=_r(chosen.makespan),
        lower_bound=_r(lower),
        stats=tuple((k, _r(v)) for k, v in stats.items()),
    ).check(len(tg.tasks))
    report["total_s"] = time.perf_counter() - t0
    say(f"schedule: {used}, makespan {sched.makespan:.1f} us, gap {100 * stats['gap']:.2f} %, "
        f"{report['total_s']:.2f} s")
    return sched, report


def _solver(method: str):
    """The module of a CP-SAT method; a clear error where OR-Tools is not installed."""
    try:
        return importlib.import_module(f"mkc.schedule.{method}")
    except ModuleNotFoundError as e:
        if e.name is None or not e.name.startswith("ortools"):
            raise
        raise ScheduleError(f"the {method} scheduler needs OR-Tools, which is not installed here "
                            "(pip install ortools); --method list schedules without it") from None


def _solver_stats(infos: Sequence, solves: int, status_code: dict[str, float]) -> dict[str, float]:
    """The solver's entries of ``Schedule.stats`` from its per-segment infos (one object per class)."""
    return {
        "cpsat_segments": float(len(infos)),
        "cpsat_solves": float(solves),
        "solver_status": min(status_code[i.status] for i in infos),  # the weakest segment
        "solver_deterministic_s": sum({id(i): i.det_time for i in infos}.values()),
        "solver_wall_capped": float(sum({id(i): i.wall_capped for i in infos}.values())),
    }


def _cpsat_place(tg: TaskGraph, target: Target, deps: Deps, dur: Sequence[float], lst: Replay,
                 cost: CostModel | None, time_limit: float, say: Callable[[str], None],
                 stats: dict[str, float]) -> tuple[Replay, str]:
    """The placement model's schedule (``cpsat_place``), kept where that model predicts it no
    slower than the list schedule; fills its entries of ``stats``."""
    place = _solver("cpsat_place")
    problem = place.placed_problem(tg, target, deps, dur, target.sms, cost)
    cp, infos, solves = place.cpsat_place_placement(tg, problem, dur, time_limit, say)
    mine, theirs = place.predicted_us(problem, cp.queues), place.predicted_us(problem, lst.queues)
    keep = mine <= theirs
    stats["makespan_cpsat_place"] = cp.makespan
    stats.update(_solver_stats(infos, solves, place.STATUS_CODE))
    stats.update(placed_makespan=mine if keep else theirs, placed_makespan_list=theirs,
                 placed_bound=place.bound(problem) / place.UNITS_PER_US, placed_hop_us=problem.hop / place.UNITS_PER_US,
                 placed_candidates=float(min((i.candidates for i in infos if i.candidates), default=0)))
    used = "cpsat_place" if keep else "list"
    say(f"cpsat_place {mine:.1f} us vs list {theirs:.1f} us in the placement model "
        f"(bound {stats['placed_bound']:.1f}): keeping {used}")
    return (cp, used) if keep else (lst, used)


def _replay(deps: Deps, dur: Sequence[float], W: int, order: Sequence[int], worker: Sequence[int]) -> Replay:
    rep = Replay(deps, dur, W)
    for t in order:
        rep.place(t, worker[t])
    return rep


def _r(x: float) -> float:
    """Microseconds to the nanosecond: monotone, so start >= producer end survives it."""
    return x if math.isnan(x) else round(x, 3)


def check_smem(tg: TaskGraph, target: Target) -> None:
    budget = target.smem_per_block
    stream = stream_bytes(tg, target)
    worst_next = max((prefetch_bytes(t, stream) for t in tg.tasks), default=0)
    over = [t for t in tg.tasks if t.smem + worst_next > budget]
    if over:
        t = max(over, key=lambda t: (t.smem, -t.id))
        raise ScheduleError(
            f"task {t.id} ({t.kind}, layer {t.layer}) needs {t.smem + worst_next} bytes of shared memory "
            f"({t.smem} of its own + {worst_next} to prefetch the next task's weights) but {target.name} "
            f"allows {budget} per block; {len(over)} task(s) do not fit: lower with smaller tiles"
        )


def kernel_plan(tg: TaskGraph, target: Target, queues: Sequence[Sequence[int]]) -> KernelPlan:
    smem = 0
    stream = stream_bytes(tg, target)
    for q in queues:
        for i, t in enumerate(q):
            nxt = prefetch_bytes(tg.tasks[q[i + 1]], stream) if i + 1 < len(q) else 0
            smem = max(smem, tg.tasks[t].smem + nxt)
    limits = for_target(target).launch_limits(target)
    plan = plan_of(tg, target)
    return KernelPlan(
        threads=plan.launch_threads if plan is not None else limits.threads,
        smem_bytes=min(smem, target.smem_per_block),
        regs_per_thread=limits.regs_for(plan.launch_threads if plan is not None else limits.threads),
        max_queue_len=max((len(q) for q in queues), default=0),
        max_waits=max((len(t.waits) for t in tg.tasks), default=0),
        max_signals=max((len(t.signals) for t in tg.tasks), default=0),
    )
