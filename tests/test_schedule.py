"""Scheduler tests: cost model, baselines, CP-SAT, plan, errors, determinism. All CPU, all short."""

from __future__ import annotations

import dataclasses
import math

import pytest

from mkc.errors import ScheduleError, UnknownNameError
from mkc.schedule import CostModel, Schedule, schedule
from mkc.schedule.stage import schedule_with_report
from mkc.schedule.cost import HBM_FRACTION, TASK_OVERHEAD_US, WAIT_US, durations, prefetch_bytes, stream_bytes
from mkc.schedule.cpsat import segments
from mkc.schedule.timeline import Deps, timeline
from mkc.target import get_target
from taskgraph_fixtures import (
    TINY,
    assert_schedule_valid,
    decoder_taskgraph,
    have_lowering,
    random_taskgraph,
    real_taskgraph,
    toy_target,
)

H200 = get_target("h200")
TOY8 = toy_target(8)


@pytest.fixture(scope="module")
def tiny_toy8():
    return decoder_taskgraph(TOY8, **dict(TINY, tiles=24, lm_tiles=16))


@pytest.fixture(scope="module")
def tiny_h200():
    return decoder_taskgraph(H200, **TINY)


# ---- cost model --------------------------------------------------------------------------------


def test_cost_bytes_bound_with_overheads():
    tg = random_taskgraph(4, seed=1)
    t = tg.tasks[3]
    bw = H200.hbm_bw * HBM_FRACTION / H200.sms / 1e6
    want = t.bytes / bw + TASK_OVERHEAD_US + WAIT_US * len(t.waits)
    assert durations(tg, H200)[3] == pytest.approx(want)


def test_cost_flops_bound_and_kind_scale():
    tg = random_taskgraph(2, seed=1)
    t = dataclasses.replace(tg.tasks[0], bytes=0, flops=10**9, waits=())
    cost = CostModel()
    rate = H200.fp32_flops * cost.fma_fraction / H200.sms / 1e6
    assert cost.task_time(t, H200, False) == pytest.approx(1e9 / rate + TASK_OVERHEAD_US)
    scaled = CostModel(kind_scale={t.kind: 2.0})
    assert scaled.task_time(t, H200, False) == pytest.approx(2 * cost.task_time(t, H200, False))
    # GEMV kinds are priced on tensor cores where the device plan puts them there
    assert cost.task_time(dataclasses.replace(t, kind="oproj"), H200, True) < cost.task_time(
        dataclasses.replace(t, kind="oproj"), H200, False)


def test_cost_model_prices_the_gemv_path_the_kernel_runs():
    """One decision: the device plan's GEMV path (tensor cores from batch 2 on NVIDIA, never on AMD)."""
    from codegen_fixtures import taskgraph
    from mkc.schedule.cost import plan_of
    from mkc.target import get_target

    for target, batch, mma in (("h200", 1, False), ("h200", 2, True), ("h200", 16, True), ("mi300x", 16, False),
                               ("mi300x", 64, False), ("a100", 8, True)):
        tg = taskgraph("tiny-llama", batch, 64, target)
        assert plan_of(tg, get_target(target)).mma == tg.plan.mma == mma, (target, batch)


def test_cost_override_changes_schedule_times(tiny_toy8):
    base = schedule(tiny_toy8, TOY8, method="list")
    slow = schedule(tiny_toy8, TOY8, method="list", cost=CostModel(kind_scale={"gateup": 3.0}))
    assert slow.makespan > base.makespan


# ---- baselines and CP-SAT: validity -------------------------------------------------------------


@pytest.mark.parametrize("method", ["round_robin", "list", "cpsat"])
def test_methods_valid_on_decoder(method, tiny_toy8):
    s = schedule(tiny_toy8, TOY8, method=method, time_limit=0.5)
    assert_schedule_valid(tiny_toy8, s)
    assert s.method == method or (method == "cpsat" and s.method == "list")
    st = dict(s.stats)
    for key in ("makespan_round_robin", "makespan_list", "critical_path", "work_bound", "packing_bound", "gap"):
        assert key in st
    assert s.lower_bound == pytest.approx(max(st["critical_path"], st["work_bound"], st["packing_bound"]), abs=1e-3)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("workers", [2, 3, 5])
def test_random_dags_valid_and_cpsat_not_worse(seed, workers):
    tgt = toy_target(workers)
    tg = random_taskgraph(20, seed, tgt, max_preds=3)
    s = schedule(tg, tgt, time_limit=0.3)
    assert_schedule_valid(tg, s)
    st = dict(s.stats)
    assert s.makespan <= st["makespan_list"] + 1e-6
    assert st["makespan_cpsat"] <= st["makespan_list"] + 1e-6 or s.method == "list"


def test_cpsat_beats_list_somewhere():
    """Random DAGs on 2-3 workers where critical-path list scheduling is not optimal."""
    wins = 0
    for seed in range(4):
        tgt = toy_target(2)
        s = schedule(random_taskgraph(24, seed, tgt, max_preds=2), tgt, time_limit=0.5)
        wins += s.method == "cpsat" and s.makespan < s.stat("makespan_list") - 1e-6
    assert wins >= 2


def test_layers_solved_once_and_stitched(tiny_toy8):
    deps = Deps.from_taskgraph(tiny_toy8)
    segs = segments(tiny_toy8, deps, deps.topo_order())
    assert len(segs) == TINY["n_layers"] + 2  # head, layers, tail
    assert {tiny_toy8.tasks[t].kind for t in segs[0]} == {"embed"}
    assert {tiny_toy8.tasks[t].kind for t in segs[-1]} == {"lmhead", "argmax"}
    s = schedule(tiny_toy8, TOY8, time_limit=0.5)
    assert s.stat("cpsat_solves") == 3 and s.stat("cpsat_segments") == len(segs)


def test_non_isomorphic_layers_solved_separately():
    tgt = toy_target(3)
    tg = random_taskgraph(30, seed=3, target=tgt, layers=3)
    s = schedule(tg, tgt, time_limit=0.3)
    assert_schedule_valid(tg, s)
    assert s.stat("cpsat_solves") == 3


def test_h200_decoder_gap_small(tiny_h200):
    s = schedule(tiny_h200, H200, time_limit=1.0)
    assert_schedule_valid(tiny_h200, s)
    assert s.stat("gap") < 0.05
    assert s.stat("makespan_round_robin") >= s.makespan - 1e-6


def test_progress_reports_phases(tiny_toy8):
    msgs = []
    schedule(tiny_toy8, TOY8, time_limit=0.3, progress=msgs.append)
    assert any(m.startswith("cpsat 2/3") for m in msgs)
    assert msgs[-1].startswith("schedule:")


def test_report_has_wall_times(tiny_toy8):
    _, rep = schedule_with_report(tiny_toy8, TOY8, time_limit=0.3)
    assert rep["total_s"] >= rep["cpsat_s"] > 0


# ---- determinism, batch ---------------------------------------------------------------------------


def test_same_input_same_bytes(tmp_path, tiny_toy8):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    schedule(tiny_toy8, TOY8, time_limit=0.5).save(a)
    schedule(tiny_toy8, TOY8, time_limit=0.5).save(b)
    assert a.read_bytes() == b.read_bytes()
    assert Schedule.load(a) == Schedule.load(b)


def test_batch_sizes_give_different_schedules(tmp_path):
    s1 = schedule(decoder_taskgraph(H200, batch=1, **TINY), H200, time_limit=0.3)
    s2 = schedule(decoder_taskgraph(H200, batch=2, **TINY), H200, time_limit=0.3)
    assert len(s1.start) != len(s2.start)  # attention is tiled per batch row
    assert s1.queues != s2.queues and s1.batch == 1 and s2.batch == 2


# ---- kernel plan and shared memory ----------------------------------------------------------------


def test_kernel_plan(tiny_h200):
    s = schedule(tiny_h200, H200, method="list")
    p = s.plan
    # batch 1 on the H200: 256 consumers and the weight pipeline's producer warp, under the
    # registers __launch_bounds__(288, 1) leaves (3 warps share a sub-partition's 16384)
    assert p.threads == 288 and p.regs_per_thread == 168
    assert p.max_queue_len == max(len(q) for q in s.queues)
    assert p.max_waits == max(len(t.waits) for t in tiny_h200.tasks)
    assert p.max_signals == max(len(t.signals) for t in tiny_h200.tasks)
    assert max(t.smem for t in tiny_h200.tasks) < p.smem_bytes <= H200.smem_per_block
    for q in s.queues:  # every task plus the next one's prefetch fits
        for a, b in zip(q, q[1:]):
            assert tiny_h200.tasks[a].smem + prefetch_bytes(tiny_h200.tasks[b], stream_bytes(tiny_h200, H200)) <= p.smem_bytes
    amd = dataclasses.replace(get_target("mi300x"), name="toyamd", sms=16)
    tg = decoder_taskgraph(amd, **dict(TINY, tiles=16, lm_tiles=16))
    assert schedule(tg, amd, method="list", sync="nan").plan.regs_per_thread == 128


def test_smem_error_names_the_task(tiny_h200):
    tasks = list(tiny_h200.tasks)
    victim = next(t for t in tasks if t.kind == "gateup" and t.layer == 1)
    tasks[victim.id] = dataclasses.replace(victim, smem=200 * 1024)
    tg = dataclasses.replace(tiny_h200, tasks=tuple(tasks))
    with pytest.raises(ScheduleError) as err:
        schedule(tg, H200)
    msg = str(err.value)
    need = 200 * 1024 + prefetch_bytes(victim, stream_bytes(tg, H200))
    for part in (f"task {victim.id}", "gateup", "layer 1", str(need), str(H200.smem_per_block)):
        assert part in msg


# ---- errors and the replay -----------------------------------------------------------------------


def test_bad_options(tiny_toy8):
    with pytest.raises(UnknownNameError, match="cpsat"):
        schedule(tiny_toy8, TOY8, method="magic")
    with pytest.raises(UnknownNameError, match="atomic"):
        schedule(tiny_toy8, TOY8, sync="smoke")
    with pytest.raises(ScheduleError, match="lowered for"):
        schedule(tiny_toy8, H200)


def test_cpsat_without_ortools_is_a_clear_error(tiny_toy8, monkeypatch):
    import sys

    # an import of ortools fails as it does where it is not installed (the GPU machine has none)
    for name in [m for m in sys.modules if m == "ortools" or m.startswith("ortools.")] + ["ortools"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "mkc.schedule.cpsat", raising=False)
    with pytest.raises(ScheduleError, match=r"needs OR-Tools.*--method list"):
        schedule(tiny_toy8, TOY8, method="cpsat")
    assert schedule(tiny_toy8, TOY8, method="list").method == "list"


def test_cycle_is_reported():
    tg = random_taskgraph(5, seed=0)
    tasks = list(tg.tasks)
    tasks[0] = dataclasses.replace(tasks[0], waits=(4,))
    tasks[4] = dataclasses.replace(tasks[4], waits=(0,))
    with pytest.raises(ScheduleError, match="cycle"):
        schedule(dataclasses.replace(tg, tasks=tuple(tasks)), H200)


def test_deadlocked_queues_are_reported():
    tg = random_taskgraph(6, seed=2, max_preds=1)
    deps = Deps.from_taskgraph(tg)
    p, c = next((p, c) for p, c in deps.edges())
    with pytest.raises(ScheduleError, match="deadlock"):
        timeline(deps, [1.0] * 6, [[c, p]] + [[t] for t in range(6) if t not in (p, c)])


def test_lower_bound_is_valid_on_optimal_solves():
    """When CP-SAT proves a whole small graph optimal, the bound may not exceed the optimum."""
    for seed in range(8):
        tgt = toy_target(3)
        tg = random_taskgraph(14, seed, tgt, max_preds=2)
        s = schedule(tg, tgt, time_limit=1.0)
        if s.stat("solver_status") == 4.0:
            assert s.lower_bound <= s.stat("makespan_cpsat") + 1e-6
        assert not math.isnan(s.stat("makespan_cpsat"))


# ---- the real lowering ---------------------------------------------------------------------------


@pytest.mark.skipif(not have_lowering(), reason="mkc.taskgraph.lower not there yet")
def test_real_llama_schedules():
    tg1 = real_taskgraph("llama-3.2-1b", "h200", batch=1, max_seq_len=256)
    s1 = schedule(tg1, H200, time_limit=1.0)
    assert_schedule_valid(tg1, s1)
    assert s1.stat("gap") < 0.05
    assert s1.stat("cpsat_solves") <= 3  # the 16 layers are one problem
    tg2 = real_taskgraph("llama-3.2-1b", "h200", batch=2, max_seq_len=256)
    s2 = schedule(tg2, H200, time_limit=1.0)
    assert_schedule_valid(tg2, s2)
    assert s1.queues != s2.queues


def _chain_deps() -> Deps:
    """A0, A1 independent; B1 (id 2) waits only on A1, B0 (id 3) only on A0: one producer each."""
    return Deps(4, waits=((), (), (1,), (0,)), signals=((0,), (1,), (), ()), prod=((0,), (1,)), cons=((3,), (2,)))


def test_list_schedule_keeps_a_single_producer_chain_on_its_worker():
    """Where priorities tie, the freed worker takes the task whose only producer it ran (B0 after A0),
    not the lowest id (B1, whose producer ran elsewhere); without the tie-break it would cross."""
    from mkc.schedule import baseline

    deps = _chain_deps()
    _, worker, _ = baseline.list_schedule(deps, [1.0] * 4, 2)
    assert worker[3] == worker[0] and worker[2] == worker[1] and worker[0] != worker[1]


def test_cpsat_sweep_gives_a_task_its_solo_producers_worker():
    from mkc.schedule.baseline import solo_producers
    from mkc.schedule.cpsat import sweep_workers

    deps = _chain_deps()
    assert solo_producers(deps) == [None, None, 1, 0]
    start, dur = [0, 0, 1, 1], [1, 1, 1, 1]
    plain = sweep_workers(start, dur, 2)
    assert plain[2] == plain[0]  # by start and lowest free worker: B1 lands on A0's worker
    w = sweep_workers(start, dur, 2, solo_producers(deps))
    assert w[2] == w[1] and w[3] == w[0]
