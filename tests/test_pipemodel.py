"""The pipelined timeline (mkc/schedule/pipemodel.py): a hand-made two-worker case with exact
times, the page limit, the loop counter between steps, determinism, and the scheduler's model left
alone. All CPU."""

from __future__ import annotations

import dataclasses

import pytest

from codegen_fixtures import rr_schedule, taskgraph
from mkc.schedule.cost import CostModel, PipeCost, durations
from mkc.schedule.pipemodel import pipelined_timeline
from mkc.target import get_target
from mkc.taskgraph.ir import Buffer, Event, Region, Task, TaskGraph
from mkc.taskgraph.plan import PIPE_PAGE

# two workers that stream one page per microsecond each, no arithmetic
TWO = dataclasses.replace(get_target("h200"), name="two", sms=2, hbm_bw=2 * PIPE_PAGE * 1e6)
COST = CostModel(pipe=PipeCost(hop_us=1.0, task_overhead_us=0.5, hbm_fraction=1.0))


def two_workers() -> tuple[TaskGraph, tuple[tuple[int, ...], ...]]:
    """Worker 0: A (an embed streaming 10 pages) signals e, then D waits on e. Worker 1: B (a GEMV
    of 4 pages of weights) waits on e, then C (another 4) follows it."""
    rows = 4 * PIPE_PAGE // 2 // 1024  # bf16 rows of 1024 columns in 4 pages
    bufs = (Buffer("w", (2 * rows, 1024), "bf16", "weight"), Buffer("x", (1, 64), "f32", "act"))
    w = lambda i: (Region("w", ((i * rows, (i + 1) * rows), (0, 1024))),)  # noqa: E731
    x = (Region("x", ((0, 1), (0, 64))),)

    def task(i, kind, reads, waits, signals, nbytes):
        return Task(i, kind, 0, (), reads, x, waits, signals, 0, nbytes, 0)

    tasks = (task(0, "embed", (), (), (0,), 10 * PIPE_PAGE), task(1, "qkv", w(0), (0,), (), 4 * PIPE_PAGE),
             task(2, "qkv", w(1), (), (), 4 * PIPE_PAGE), task(3, "argmax", (), (0,), (), 0))
    tg = TaskGraph("two", "two", 1, 64, bufs, tasks, (Event(0, "e", 1),)).check()
    return tg, ((0, 3), (1, 2))


@pytest.mark.parametrize("slots,b_end,c_end", [
    (0, 16.0, 20.5),  # no pipeline: B streams its 4 pages after it starts at 10.5 + hop
    (8, 12.0, 12.5),  # B's and C's pages all arrived during A: overhead only
    (1, 14.5, 18.5),  # one page held during the wait, the other 3 after B starts; C streams behind B
    (2, 13.5, 17.5),
])
def test_prefetch_during_a_wait_shortens_the_gemv(slots, b_end, c_end):
    tg, queues = two_workers()
    pt = pipelined_timeline(tg, queues, TWO, COST, pipe_slots=slots)
    start, end = pt.start[0], pt.end[0]
    assert (start[0], end[0]) == (0.0, 10.5)
    assert start[3] == 10.5 and end[3] == 11.0  # D waits on its own worker's A: no hop
    assert start[1] == 11.5 and end[1] == pytest.approx(b_end)
    assert start[2] == pytest.approx(b_end) and end[2] == pytest.approx(c_end)
    assert pt.step_us() == [pytest.approx(c_end)]


def test_page_limit_bounds_the_prefetch():
    """The longer B waits, the more of it arrives before it starts, up to the pages it may hold."""
    tg, queues = two_workers()
    for slots in (1, 2, 3, 4, 6):
        pt = pipelined_timeline(tg, queues, TWO, COST, pipe_slots=slots)
        after = pt.end[0][1] - pt.start[0][1]  # B's time: the pages it could not hold
        assert after == pytest.approx(max(0.5, 4 - slots))


def test_an_idle_worker_leaves_its_share_of_hbm_to_the_others():
    """All four tasks on worker 0, worker 1 idle: worker 0 streams at the chip's whole bandwidth
    (two pages per microsecond), so the 18 pages take 9 us, not 18 (no pipeline: each task streams
    its own bytes); a share more than MAX_STREAM_SHARE times the fair one is capped."""
    from mkc.schedule.pipemodel import MAX_STREAM_SHARE, stream_share

    tg, _ = two_workers()
    one = ((0, 3, 1, 2), ())
    pt = pipelined_timeline(tg, one, TWO, COST, pipe_slots=0)
    assert pt.end[0][0] == pytest.approx(0.5 + 5.0)  # A: 10 pages at 2 per us
    assert pt.end[0][2] == pytest.approx(5.5 + 0.5 + (0.5 + 2.0) * 2)  # D, then B and C: 4 pages each
    assert stream_share(one, TWO) == 2.0 and stream_share(((0, 3), (1, 2)), TWO) == 1.0
    many = dataclasses.replace(TWO, sms=8)
    assert stream_share(one + ((),) * 6, many) == MAX_STREAM_SHARE < 8


def test_deadlocked_queues_are_reported():
    from mkc.errors import ScheduleError

    tg, _ = two_workers()
    with pytest.raises(ScheduleError, match="worker 0 at task 3"):
        pipelined_timeline(tg, ((3, 0), (1, 2)), TWO, COST)


@pytest.fixture(scope="module")
def tiny():
    tg = taskgraph("tiny-llama", 1, 64)
    return tg, rr_schedule(tg)


def test_steps_follow_the_loop_counter_and_replays_repeat(tiny):
    tg, sched = tiny
    h200 = get_target("h200")
    a = pipelined_timeline(tg, sched.queues, h200, COST, steps=3)
    assert a == pipelined_timeline(tg, sched.queues, h200, COST, steps=3)
    embed = next(t.id for t in tg.tasks if t.kind == "embed")
    argmax = next(t.id for t in tg.tasks if t.kind == "argmax")
    wo = sched.worker_of()
    hop = COST.pipe.hop_us if wo[embed] != wo[argmax] else 0.0
    for k in (1, 2):
        assert a.start[k][embed] >= a.end[k - 1][argmax] + hop - 1e-9
    assert all(x > 0 for x in a.step_us()) and len(a.step_us()) == 3
    # the plan's pipeline (tiny-llama's weights all fit in its pages) makes the GEMVs no slower
    off = pipelined_timeline(tg, sched.queues, h200, COST, steps=3, pipe_slots=0)
    assert all(p <= q + 1e-9 for p, q in zip(a.step_us(), off.step_us()))


def test_pipeline_constants_leave_the_scheduler_alone(tiny):
    tg, _ = tiny
    h200 = get_target("h200")
    fitted = CostModel(pipe=PipeCost(hop_us=3.0, task_overhead_us=2.0, hbm_fraction=0.3, kind_scale={"embed": 5.0}))
    assert durations(tg, h200, fitted) == durations(tg, h200) == durations(tg, h200, CostModel())
