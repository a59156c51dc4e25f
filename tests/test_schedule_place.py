"""CP-SAT with placement and pages (``mkc.schedule.cpsat_place``): its schedules checked against the
model here, independently of the solver; determinism; the full model against the restricted one
and the list schedule; cases where placement matters; the fallbacks; the ``cpsat_place`` method.
All CPU, all short."""

from __future__ import annotations

import dataclasses
import random

import pytest
from codegen_fixtures import shape_graph
from taskgraph_fixtures import TINY, assert_schedule_valid, decoder_taskgraph, toy_target

from mkc.schedule import CostModel, cpsat_place as cp, schedule
from mkc.schedule.cost import DEFAULT_COST, PipeCost, durations, plan_of
from mkc.schedule.cpsat import segments, to_units
from mkc.schedule.ir import METHODS
from mkc.schedule.stage import schedule_with_report
from mkc.schedule.timeline import Deps, Replay
from mkc.target import get_target
from mkc.taskgraph.kinds import GEMV_KINDS
from mkc.taskgraph.lower import lower
from mkc.verify.verifier import verify

H200 = get_target("h200")


def problem(runs, events, W, hop=30, lead=None, stream=None, pages=None, slots=0) -> cp.Placed:
    """A placement problem from task runs and events given as (producers, consumers)."""
    n = len(runs)
    waits: list[list[int]] = [[] for _ in range(n)]
    signals: list[list[int]] = [[] for _ in range(n)]
    for e, (ps, cs) in enumerate(events):
        for p in ps:
            signals[p].append(e)
        for c in cs:
            waits[c].append(e)
    deps = Deps(n, tuple(map(tuple, waits)), tuple(map(tuple, signals)), tuple(tuple(ps) for ps, _ in events),
                tuple(tuple(cs) for _, cs in events))
    zero = (0,) * n
    return cp.Placed(deps, tuple(runs), tuple(lead or zero), tuple(stream or zero), tuple(pages or zero), slots, hop, W)


def random_problem(n: int, W: int, seed: int, slots: int = 4, hop: int = 40) -> cp.Placed:
    """Phases of about W tasks, each joined to the next by one-producer events (a chain per task)
    or by a barrier; 60 % of the tasks hold pages (some all of them while they stream on)."""
    rng = random.Random(seed)
    phases, t = [], 0
    while t < n:
        k = min(n - t, rng.randint(max(1, W // 2), W + 2))
        phases.append(list(range(t, t + k)))
        t += k
    events = []
    for a, b in zip(phases, phases[1:]):
        if rng.random() < 0.5:
            events += [((a[i % len(a)],), (c,)) for i, c in enumerate(b)]
        else:
            events.append((tuple(a), tuple(b)))
    runs, lead, stream, pages = [], [], [], []
    for _ in range(n):
        runs.append(rng.choice((60, 100, 150, 250)))
        held = rng.random() < 0.6
        a, b = (rng.choice((30, 60)), rng.choice((0, 0, 50))) if held else (0, 0)
        lead.append(a)
        stream.append(min(b, runs[-1]))
        pages.append((slots if b else rng.choice((1, 2, slots))) if held else 0)
    return problem(runs, events, W, hop, lead, stream, pages, slots)


def split_k_layer(workers: int, split: int = 2) -> cp.Placed:
    """One decoder layer of tiny-llama at batch 1 with split-K down-proj (one-producer chains), on a
    toy H200 of ``workers`` SMs, through the real lowering and the weight pipeline's plan."""
    tgt = toy_target(workers)
    tg = lower(shape_graph("tiny-llama", 1, 64), tgt, name="tiny-llama", down_split=split)
    deps = Deps.from_taskgraph(tg)
    whole = cp.placed_problem(tg, tgt, deps, durations(tg, tgt), workers)
    return whole.restrict(segments(tg, deps, deps.topo_order())[1])


def check(p: cp.Placed, start, worker) -> None:
    """The model's constraints, checked on a schedule without the module's own checks."""
    d = p.deps
    assert all(0 <= w < p.num_workers for w in worker) and min(start) >= 0
    for w in range(p.num_workers):
        mine = sorted((start[t], t) for t in range(d.n) if worker[t] == w)
        for (sa, a), (sb, b) in zip(mine, mine[1:]):
            assert sb >= sa + p.run[a], ("overlap", w, a, b)
        held = [(start[t] - p.lead[t], start[t] + p.stream[t], p.pages[t]) for _, t in mine if p.pages[t]]
        for x, _, _ in held:
            assert sum(q for a, b, q in held if a <= x < b) <= p.slots, ("pages", w, x)
    for e, ps in enumerate(d.prod):
        for c in d.cons[e]:
            for x in ps:
                own = len(ps) == 1 and worker[x] == worker[c]
                assert start[c] >= start[x] + p.run[x] + (0 if own else p.hop), ("precedence", e, x, c)


def queues_of(p: cp.Placed, start, worker) -> list[list[int]]:
    q: list[list[int]] = [[] for _ in range(p.num_workers)]
    for t in sorted(range(p.deps.n), key=lambda t: (start[t], t)):
        q[worker[t]].append(t)
    return q


# ---- the model's solutions ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [None, 2])
def test_solutions_respect_the_model(seed, k):
    p = random_problem(30, 4, seed)
    start, worker, info = cp.solve_placed(p, 2.0, k=k)
    check(p, start, worker)
    assert cp.violations(p, start, worker) == []
    assert info.makespan == p.makespan(start) <= info.hint
    assert cp.bound(p) <= info.bound <= info.makespan
    assert info.candidates == (2 if k else 4) and info.status in ("OPTIMAL", "FEASIBLE")
    # the ASAP replay of the solution's queues is valid and no later
    again = cp.replay(p, queues_of(p, start, worker))
    check(p, again, worker)
    assert p.makespan(again) <= info.makespan


def test_violations_names_what_is_broken():
    p = problem([100, 100, 100], [((0,), (1,)), ((0, 1), (2,))], 2, hop=30,
                lead=(0, 50, 50), stream=(0, 20, 0), pages=(0, 2, 2), slots=2)
    assert cp.violations(p, [0, 100, 230], [0, 0, 1]) == []
    assert any("before" in v for v in cp.violations(p, [0, 100, 200], [0, 0, 1]))  # no hop from the barrier
    assert any("before" in v for v in cp.violations(p, [0, 100, 230], [0, 1, 1]))  # the chain crossed: hop
    assert any("pages" in v for v in cp.violations(p, [0, 100, 165], [0, 0, 0]))  # 2 + 2 pages at 115..120
    assert any("overlap" in v for v in cp.violations(p, [0, 50, 230], [0, 0, 1]))


def test_same_problem_same_schedule():
    p = random_problem(40, 6, 1)
    a, b = cp.solve_placed(p, 1.0), cp.solve_placed(p, 1.0)
    assert a[:2] == b[:2]
    assert dataclasses.replace(a[2], wall=0.0) == dataclasses.replace(b[2], wall=0.0)


def test_candidates():
    p = random_problem(30, 6, 2)
    start, worker = cp.list_hint(p)
    order = sorted(range(p.deps.n), key=lambda t: (start[t], t))
    full = cp.candidates(p, start, worker, 6)
    assert [full[t] for t in order[:3]] == [(0,), (0, 1), (0, 1, 2)] and full[order[-1]] == tuple(range(6))
    assert all(worker[t] in full[t] for t in range(p.deps.n))  # the hint is numbered that way
    few = cp.candidates(p, start, worker, 3)
    for t in range(p.deps.n):
        solo = {worker[x] for e in p.deps.waits[t] if len(p.deps.prod[e]) == 1 for x in p.deps.prod[e]}
        assert len(few[t]) == 3 and worker[t] in few[t] and solo <= set(few[t])


# ---- what the decomposition loses -----------------------------------------------------------------


def test_full_model_not_worse_than_the_restricted_one_nor_the_list():
    """Solved to optimality both ways: the full model (every worker a candidate) is never worse than
    the restricted one (2 candidates per task), which is never worse than the list schedule; both
    beat the list somewhere, and the restriction loses somewhere (docs/design.md "CP-SAT with
    placement and pages")."""
    cases = [random_problem(40, 6, seed) for seed in range(4)] + [split_k_layer(3), split_k_layer(4)]
    rows = []
    for p in cases:
        hint, _ = cp.list_hint(p)
        _, _, full = cp.solve_placed(p, 30.0, k=p.num_workers)
        _, _, few = cp.solve_placed(p, 30.0, k=2)
        assert full.status == "OPTIMAL" and few.model_status == "OPTIMAL"
        assert full.makespan <= few.makespan <= p.makespan(hint) == full.hint == few.hint
        rows.append((full.makespan, few.makespan, p.makespan(hint)))
    assert sum(f < h for f, _, h in rows) >= 4 and sum(r < h for _, r, h in rows) >= 4
    assert any(f < r for f, r, _ in rows)


# ---- where placement matters ----------------------------------------------------------------------


def test_a_chain_stays_on_one_worker():
    """A chain of one-producer events: the list scheduler gives each link to the worker that idled
    meanwhile, so every link crosses (3 hops); the model keeps the chain on one worker."""
    p = problem([60, 40, 50, 20], [((0,), (1,)), ((1,), (2,)), ((2,), (3,))], 2, hop=30)
    hint, hint_worker = cp.list_hint(p)
    assert hint_worker == [0, 1, 0, 1] and p.makespan(hint) == 60 + 40 + 50 + 20 + 3 * 30
    start, worker, info = cp.solve_placed(p, 1.0)
    check(p, start, worker)
    assert len(set(worker)) == 1 and info.makespan == 170 and info.status == "OPTIMAL"


def test_pages_reorder_a_worker():
    """One worker, two GEMV tasks holding all its pages (the first streams 100 past its start) and
    a task without pages: in priority order the second GEMV waits for the first's pages with the
    worker idle; the model puts the pageless task between them, where the second's weights stream."""
    p = problem([150, 50, 100], [], 1, lead=(100, 100, 0), stream=(100, 0, 0), pages=(2, 2, 0), slots=2)
    hint, _ = cp.list_hint(p)
    assert p.makespan(hint) == 350
    start, worker, info = cp.solve_placed(p, 1.0)
    check(p, start, worker)
    assert sorted(range(3), key=start.__getitem__) == [0, 2, 1] and info.makespan == 300


# ---- fallbacks -------------------------------------------------------------------------------------


def test_too_large_keeps_the_list_schedule(monkeypatch):
    p = random_problem(30, 4, 0)
    hint = cp.list_hint(p)
    monkeypatch.setattr(cp, "MAX_SEGMENT_TASKS", 20)
    start, worker, info = cp.solve_placed(p, 1.0)
    assert (start, worker) == hint and info.status == "LIST" and info.candidates == 0


def test_too_many_placements_restricts_candidates(monkeypatch):
    p = random_problem(30, 6, 0)
    monkeypatch.setattr(cp, "MAX_FULL_PLACEMENTS", 100)
    start, worker, info = cp.solve_placed(p, 1.0)
    check(p, start, worker)
    assert info.candidates == cp.CANDIDATES < 6 and info.placements == 30 * cp.CANDIDATES
    assert info.bound == cp.bound(p)  # a restricted model's own bound proves nothing of the full one
    assert info.status == ("OPTIMAL" if info.makespan == info.bound else "FEASIBLE")


def test_no_solution_keeps_the_list_schedule(monkeypatch):
    p = random_problem(30, 4, 0)
    hint = cp.list_hint(p)
    build = cp.build_model

    def infeasible(*args):
        built = build(*args)
        built.model.add(built.start[0] < 0)
        return built

    monkeypatch.setattr(cp, "build_model", infeasible)
    start, worker, info = cp.solve_placed(p, 1.0)
    assert (start, worker) == hint and info.status == "LIST" and info.model_status == "INFEASIBLE"


# ---- the whole graph's problem ---------------------------------------------------------------------


def test_problem_from_the_pipeline_plan():
    tg = decoder_taskgraph(H200, **TINY)
    deps, dur = Deps.from_taskgraph(tg), durations(tg, H200)
    p = cp.placed_problem(tg, H200, deps, dur, H200.sms)
    plan = plan_of(tg, H200)
    assert p.slots == plan.pipe_slots > 0 and p.hop == 45
    assert p.units() == to_units(dur)
    for t in tg.tasks:
        assert (p.lead[t.id] > 0) == (t.kind in GEMV_KINDS) and 0 <= p.pages[t.id] <= p.slots
        assert p.stream[t.id] <= p.run[t.id]
        assert p.stream[t.id] == 0 or p.pages[t.id] == p.slots
    assert cp.placed_problem(tg, H200, deps, dur, H200.sms, DEFAULT_COST).hop == 45  # not calibrated
    assert cp.placed_problem(tg, H200, deps, dur, H200.sms, CostModel(pipe=PipeCost(hop_us=0.9))).hop == 90
    amd = toy_target(16, "mi300x")  # no weight pipeline: placement and hops only
    tg_amd = decoder_taskgraph(amd, **dict(TINY, tiles=16, lm_tiles=16))
    p = cp.placed_problem(tg_amd, amd, Deps.from_taskgraph(tg_amd), durations(tg_amd, amd), amd.sms)
    assert p.slots == 0 and not any(p.lead) and not any(p.pages)


def test_a_calibrated_hop_is_counted_once():
    """A calibration's scheduler factors carry each waiting task's hop (mkc.trace.calibration), and the
    placement model adds the hop between workers itself: the calibrated hop comes off every waiting
    task's time, once, and off no task that waits on nothing."""
    tg = decoder_taskgraph(H200, **TINY)
    deps, dur = Deps.from_taskgraph(tg), durations(tg, H200)
    runs = {}
    for hop in (0.0, 0.9):
        p = cp.placed_problem(tg, H200, deps, dur, H200.sms, CostModel(pipe=PipeCost(hop_us=hop, dispatch_us=0.2)))
        assert p.hop == round(hop * cp.UNITS_PER_US)
        runs[hop] = [r + lead for r, lead in zip(p.run, p.lead)]
    waiting = [t.id for t in tg.tasks if t.waits]
    assert waiting and len(waiting) < len(tg.tasks)
    for t in tg.tasks:
        cut = runs[0.0][t.id] - runs[0.9][t.id]
        # (units rounded on each side: one either way)
        assert abs(cut - (90 if t.waits else 0)) <= 1 or (t.waits and runs[0.9][t.id] == 1), (t.kind, cut)
    # uncalibrated task times are the scheduler's, hop or not
    assert cp.placed_problem(tg, H200, deps, dur, H200.sms).units() == to_units(dur)


# ---- the method ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_toy8():
    tgt = toy_target(8)
    return decoder_taskgraph(tgt, **dict(TINY, tiles=24, lm_tiles=16)), tgt


def test_method_valid_and_deterministic(tmp_path, tiny_toy8):
    tg, tgt = tiny_toy8
    assert "cpsat_place" in METHODS
    s, rep = schedule_with_report(tg, tgt, method="cpsat_place", time_limit=0.5)
    assert_schedule_valid(tg, s)
    st = dict(s.stats)
    assert s.method in ("cpsat_place", "list") and rep["cpsat_place_s"] > 0
    assert st["placed_bound"] <= st["placed_makespan"] <= st["placed_makespan_list"]
    assert st["placed_hop_us"] == 0.45 and st["placed_candidates"] == 8 and st["solver_status"] >= 1
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    s.save(a)
    schedule(tg, tgt, method="cpsat_place", time_limit=0.5).save(b)
    assert a.read_bytes() == b.read_bytes()


def test_method_wins_on_split_k_and_verifies():
    tgt = toy_target(4)
    tg = lower(shape_graph("tiny-llama", 1, 64), tgt, name="tiny-llama", down_split=2)
    msgs: list[str] = []
    s = schedule(tg, tgt, method="cpsat_place", time_limit=2.0, progress=msgs.append)
    assert_schedule_valid(tg, s)
    assert s.method == "cpsat_place" and s.stat("placed_makespan") < s.stat("placed_makespan_list")
    assert any("full model" in m for m in msgs)
    rep = verify(tg, s, tgt)
    assert rep.ok, rep.text()


def test_method_keeps_the_list_where_its_model_says_so(monkeypatch, tiny_toy8):
    tg, tgt = tiny_toy8
    deps, dur = Deps.from_taskgraph(tg), durations(tg, tgt)

    def serial(tg_, p, dur_, *args):  # every task on worker 0: worse than the list in any model
        rep = Replay(deps, dur, tgt.sms)
        for t in deps.topo_order():
            rep.place(t, 0)
        return rep, [cp.PlaceInfo("FEASIBLE", 0, 0, 0, 0.0, 0.0)], 1

    monkeypatch.setattr(cp, "cpsat_place_placement", serial)
    s = schedule(tg, tgt, method="cpsat_place")
    assert s.method == "list" and s.stat("placed_makespan") == s.stat("placed_makespan_list")
    assert s.queues == schedule(tg, tgt, method="list").queues


def test_stitching_layers_loses_nothing_on_a_small_graph():
    """The whole tiny split-K graph (2 layers, 45 tasks, 3 workers) as one full model, proven
    optimal, against the method's per-layer solves stitched together: equal."""
    tgt = toy_target(3)
    tg = lower(shape_graph("tiny-llama", 1, 64), tgt, name="tiny-llama", down_split=2)
    deps, dur = Deps.from_taskgraph(tg), durations(tg, tgt)
    _, _, whole = cp.solve_placed(cp.placed_problem(tg, tgt, deps, dur, 3), 30.0, k=3)
    s = schedule(tg, tgt, method="cpsat_place", time_limit=2.0)
    assert whole.status == "OPTIMAL"
    assert s.stat("placed_makespan") == whole.makespan / 100 < s.stat("placed_makespan_list")
