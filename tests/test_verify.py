"""The static verifier: real schedules pass, and each check rejects its kind of bug with a
diagnostic that names the culprit. Each unsafe case is also confirmed by the oracle."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from verify_fixtures import real_case, replace_task, round_robin, tiny_decoder

from mkc.verify.oracle import Simulator, Violation, judge
from mkc.verify.verifier import CHECKS, blocks_per_sm, verify
from mkc.target import get_target

FAMILIES = ("llama", "qwen2", "qwen3", "mistral")


def signalers(tg, e):
    return [t.id for t in tg.tasks if e in t.signals]


def errors(rep, name):
    return rep.check(name).errors


def with_threshold(sched, e, value):
    thr = list(sched.thresholds)
    thr[e] = value
    return dataclasses.replace(sched, thresholds=tuple(thr))


@pytest.fixture(scope="module")
def atomic():
    return real_case("llama", batch=2, sync="atomic")


@pytest.fixture(scope="module")
def nan():
    return real_case("llama", batch=2, sync="nan")


# ---- accepted -------------------------------------------------------------------------------


@pytest.mark.parametrize("sync", ("atomic", "nan"))
@pytest.mark.parametrize("family", FAMILIES)
def test_real_schedules_accepted(family, sync):
    tg, sched, target = real_case(family, batch=2, sync=sync, layers=2)
    rep = verify(tg, sched, target)
    assert rep.ok, rep.text()
    assert judge(tg, sched, target, seeds=2).safe


@pytest.mark.parametrize("sync", ("atomic", "nan"))
def test_hand_written_fixture_accepted(sync):
    tg = tiny_decoder("h200", batch=2, layers=2)
    rep = verify(tg, round_robin(tg, "h200", sync, workers=6), get_target("h200"))
    assert rep.ok, rep.text()


def test_report_api(atomic):
    rep = verify(*atomic)
    text = rep.text()
    assert [c.name for c in rep.checks] == [n for n, _ in CHECKS]
    assert text.splitlines()[-1] == rep.verdict() and rep.verdict().startswith("SAFE")
    assert all(c.title in text for c in rep.checks)
    json.dumps(rep.to_dict())
    assert rep.raise_if_unsafe() is rep


# ---- 1 events and thresholds ----------------------------------------------------------------


def _attn_q_event(tg):
    """(attn task, event it waits on whose producers write q)."""
    for t in tg.tasks:
        if t.kind == "attn":
            for e in t.waits:
                if any(r.buffer.startswith("q.") for r in tg.events[e].regions):
                    return t, e
    raise AssertionError("no attn task waits on q")


def test_raised_threshold_hangs(atomic):
    tg, sched, target = atomic
    t, e = _attn_q_event(tg)
    bad = with_threshold(sched, e, sched.thresholds[e] + 1)
    rep = verify(tg, bad, target)
    msg = " ".join(errors(rep, "events"))
    assert f"event {e} " in msg and "never fire" in msg and f"task {t.id} " in msg
    assert judge(tg, bad, target).kind == "deadlock"


def test_lowered_threshold_fires_early(atomic):
    tg, sched, target = atomic
    gateup = next(t for t in tg.tasks if t.kind == "gateup")
    e = next(e for e in gateup.waits if len(signalers(tg, e)) >= 2)  # all o-proj tiles of xa
    bad = with_threshold(sched, e, sched.thresholds[e] - 1)
    rep = verify(tg, bad, target)
    assert not rep.ok
    assert any(f"event {e} " in m and "fires early" in m for m in errors(rep, "events"))
    assert any("race on xa.0" in m for m in errors(rep, "race"))
    assert not judge(tg, bad, target).safe


def test_redundant_lowered_threshold_is_only_a_warning(atomic):
    """down waits on its own o-proj tile and on every gate/up tile, which already wait on all of
    xa: dropping the first wait's threshold to 0 changes nothing."""
    tg, sched, target = atomic
    down = next(t for t in tg.tasks if t.kind == "down")
    e = next(e for e in down.waits if len(signalers(tg, e)) == 1)
    ok = with_threshold(sched, e, 0)
    rep = verify(tg, ok, target)
    assert rep.ok, rep.text()
    assert rep.check("events").warnings
    assert judge(tg, ok, target).safe


def test_counters_unused_in_nan_mode(nan):
    tg, sched, target = nan
    t, e = _attn_q_event(tg)
    assert verify(tg, with_threshold(sched, e, 0), target).ok
    assert judge(tg, with_threshold(sched, e, 0), target).safe


# ---- 2 deadlock and residency ---------------------------------------------------------------


def test_queue_swap_into_cycle(atomic):
    tg, sched, target = atomic
    for w, q in enumerate(sched.queues):
        pair = next(((i, j) for i in range(len(q)) for j in range(i + 1, len(q))
                     if set(tg.tasks[q[j]].waits) & set(tg.tasks[q[i]].signals)), None)
        if pair:
            break
    i, j = pair
    qs = [list(x) for x in sched.queues]
    qs[w][i], qs[w][j] = qs[w][j], qs[w][i]
    bad = dataclasses.replace(sched, queues=tuple(map(tuple, qs)))
    rep = verify(tg, bad, target)
    msg = " ".join(errors(rep, "deadlock"))
    assert "deadlock" in msg and "cycle" in msg and f"task {q[i]} " in msg and f"task {q[j]} " in msg
    assert rep.check("race").skipped
    assert judge(tg, bad, target).kind == "deadlock"


def test_more_workers_than_resident(atomic):
    tg, sched, target = atomic
    qs = [list(q) for q in sched.queues] + [[]]
    qs[-1].append(qs[0].pop())
    bad = dataclasses.replace(sched, queues=tuple(map(tuple, qs)), num_workers=len(qs))
    rep = verify(tg, bad, target)
    assert any("cannot all be resident" in m for m in errors(rep, "deadlock"))
    assert judge(tg, bad, target).kind == "resources"


def test_residency_model():
    from mkc.schedule.ir import KernelPlan

    h200, mi300x = get_target("h200"), get_target("mi300x")
    assert blocks_per_sm(h200, KernelPlan(256, 160 * 1024, 255, 64, 4, 4)) == (1, "registers")
    assert blocks_per_sm(h200, KernelPlan(256, 100 * 1024, 128, 64, 4, 4))[0] == 2
    assert blocks_per_sm(h200, KernelPlan(256, 120 * 1024, 64, 64, 4, 4)) == (1, "shared memory")
    assert blocks_per_sm(mi300x, KernelPlan(256, 16 * 1024, 128, 64, 4, 4)) == (4, "VGPRs")
    assert blocks_per_sm(mi300x, KernelPlan(256, 40 * 1024, 64, 64, 4, 4)) == (1, "shared memory")


# ---- 3 races --------------------------------------------------------------------------------


def test_dropped_wait_is_a_race(atomic):
    tg, sched, target = atomic
    t, e = _attn_q_event(tg)
    bad_tg = replace_task(tg, t.id, waits=tuple(x for x in t.waits if x != e))
    rep = verify(bad_tg, sched, target)
    msg = " ".join(errors(rep, "race"))
    assert f"task {t.id} " in msg and "q.0[" in msg and any(f"task {p} " in msg for p in signalers(tg, e))
    assert judge(bad_tg, sched, target).kind in ("race", "unwritten")


def _partial_sums_verified(family, method, part, adder, buf, **lower_kw):
    """A real schedule of ``part`` tasks and the ``adder`` that adds their partial products passes
    the verifier and the judge; an adder task that no longer waits for them races on ``buf``.
    Returns the graph, schedule and target."""
    from mkc.verify.mutants import real_schedule

    target = dataclasses.replace(get_target("h200"), name="h200-8sm", sms=8)
    tg, sched, tgt = real_schedule(family, 4, "atomic", target, 2, method, xn_bf16=True, **lower_kw)
    assert part in {t.kind for t in tg.tasks}
    rep = verify(tg, sched, tgt)
    assert rep.ok, rep.text()
    assert judge(tg, sched, tgt, seeds=2).safe
    t = next(t for t in tg.tasks if t.kind == adder and t.layer == 1)
    e = next(e for e in t.waits if any(tg.tasks[p].kind == part for p in signalers(tg, e)))
    bad = replace_task(tg, t.id, waits=tuple(x for x in t.waits if x != e))
    msg = " ".join(errors(verify(bad, sched, tgt), "race"))
    assert f"task {t.id} " in msg and f"{buf}[" in msg
    assert not judge(bad, sched, tgt).safe
    return tg, sched, tgt


@pytest.mark.parametrize("method", ("list", "cpsat"))
def test_down_partial_sums_are_verified(method):
    """lower(down_sum=2): a real schedule of downp and dsum tasks passes; a dsum task that no longer
    waits for the partial products of its rows (or a partial written over another chunk's) races."""
    tg, sched, tgt = _partial_sums_verified("llama", method, "downp", "dsum", "dp.1", down_sum=2)
    assert "down" not in {t.kind for t in tg.tasks}
    p = next(p for p in tg.tasks if p.kind == "downp" and p.layer == 1 and p.writes[0].box[0] == (1, 2))
    w = p.writes[0]
    clash = replace_task(tg, p.id, writes=(dataclasses.replace(w, box=((0, 1),) + w.box[1:]),))
    assert any("written by both" in m and "dp.1[" in m for m in errors(verify(clash, sched, tgt), "race"))


@pytest.mark.parametrize("family,method", (("llama", "list"), ("qwen3", "cpsat")))
def test_qkv_partial_sums_are_verified(family, method):
    """lower(qkv_sum=2): a real schedule of qkvp tasks and the attention that adds their partial
    products passes; an attention task that no longer waits for them races on qp."""
    tg, _, _ = _partial_sums_verified(family, method, "qkvp", "attn", "qp.1", qkv_sum=2)
    assert "qkv" not in {t.kind for t in tg.tasks}


def test_overlapping_writes(atomic):
    tg, sched, target = atomic
    t = next(t for t in tg.tasks if t.kind == "oproj" and t.writes[0].box[1][0] > 0)
    (lo, hi) = t.writes[0].box[1]
    box = (t.writes[0].box[0], (lo - 1, hi))
    bad_tg = replace_task(tg, t.id, writes=(dataclasses.replace(t.writes[0], box=box),))
    rep = verify(bad_tg, sched, target)
    assert any("written by both" in m and f"task {t.id} " in m and "xa.0[" in m for m in errors(rep, "race"))
    assert judge(bad_tg, sched, target).kind in ("double write", "race")


# ---- 4 shared memory ------------------------------------------------------------------------


def test_task_smem_over_budget(atomic):
    tg, sched, target = atomic
    t = tg.tasks[0]
    bad_tg = replace_task(tg, t.id, smem=sched.plan.smem_bytes + 1)
    rep = verify(bad_tg, sched, target)
    assert any(f"task {t.id} " in m and str(sched.plan.smem_bytes) in m for m in errors(rep, "smem"))
    assert judge(bad_tg, sched, target).kind == "resources"


def test_prefetch_of_next_task_counts(atomic):
    tg, sched, target = atomic
    bad = dataclasses.replace(sched, plan=dataclasses.replace(sched.plan, smem_bytes=sched.plan.smem_bytes - 1))
    rep = verify(tg, bad, target)
    assert any("prefetch" in m for m in errors(rep, "smem"))
    assert judge(tg, bad, target).kind == "resources"


# ---- 5 NaN sentinel -------------------------------------------------------------------------


def test_skipped_rearm_reads_stale_data(nan):
    tg, sched, target = nan
    for t in tg.tasks:
        bad_tg = replace_task(tg, t.id, rearm=False)
        rep = verify(bad_tg, sched, target)
        if not rep.ok:
            break
    msg = " ".join(errors(rep, "nan"))
    assert f"task {t.id} " in msg and "without re-arming" in msg
    assert not judge(bad_tg, sched, target).safe
    # two steps cannot show it: both parity copies start filled with the sentinel
    with pytest.raises(Violation):
        Simulator(bad_tg, sched, steps=3).run(__import__("random").Random(0))
    Simulator(bad_tg, sched, steps=2).run(__import__("random").Random(0))


def test_poll_of_unwritten_region_hangs(nan):
    tg, sched, target = nan
    t = next(t for t in tg.tasks if t.kind == "oproj" and t.writes[0].box[1][0] > 0)
    (lo, hi) = t.writes[0].box[1]
    shifted = (t.writes[0].box[0], (lo - (hi - lo), lo))  # onto its neighbour; its own tile is never written
    bad_tg = replace_task(tg, t.id, writes=(dataclasses.replace(t.writes[0], box=shifted),))
    rep = verify(bad_tg, sched, target)
    assert any("no queued task writes" in m and "xa.0[" in m for m in errors(rep, "nan"))
    assert not rep.check("deadlock").ok
    assert judge(bad_tg, sched, target).kind in ("deadlock", "race", "double write")


def test_poll_not_covering_a_read(nan):
    tg, sched, target = nan
    t, e = _attn_q_event(tg)
    ev = tg.events[e]
    events = list(tg.events)
    events[e] = dataclasses.replace(ev, regions=tuple(r for r in ev.regions if not r.buffer.startswith("q.")))
    bad_tg = dataclasses.replace(tg, events=tuple(events))
    rep = verify(bad_tg, sched, target)
    assert any(f"task {t.id} " in m and "no region it polls" in m and "q.0[" in m for m in errors(rep, "nan"))
    assert not judge(bad_tg, sched, target).safe
    assert verify(bad_tg, dataclasses.replace(sched, sync="atomic"), target).ok  # atomic mode never polls


def test_unpolled_buffer_does_not_wait(nan):
    tg, sched, target = nan
    bufs = tuple(dataclasses.replace(b, polled=False) if b.name == "q.0" else b for b in tg.buffers)
    bad_tg = dataclasses.replace(tg, buffers=bufs)
    rep = verify(bad_tg, sched, target)
    assert any("not a polled buffer" in m for m in rep.check("nan").warnings)
    assert any("q.0[" in m for m in errors(rep, "race"))
    assert not judge(bad_tg, sched, target).safe


def test_every_task_before_argmax(nan):
    tg, sched, target = nan
    argmaxes = [t for t in tg.tasks if t.kind == "argmax"]
    assert len(argmaxes) == tg.batch  # one per row
    bad_tg = tg
    for a in argmaxes:  # with one of them still waiting, every LM-head tile would still happen before it
        bad_tg = replace_task(bad_tg, a.id, waits=())
    rep = verify(bad_tg, sched, target)
    on = sched.worker_of()
    lm = next(t for t in tg.tasks if t.kind == "lmhead" and all(on[t.id] != on[a.id] for a in argmaxes))
    assert any(f"task {lm.id} " in m and "before the step's argmax" in m for m in errors(rep, "nan"))
    assert not judge(bad_tg, sched, target).safe
    # one argmax task without its waits: every task still happens before the others, but it reads
    # the LM head's partials unordered (a race), and the verdict says unsafe
    one = replace_task(tg, argmaxes[0].id, waits=())
    assert not judge(one, sched, target).safe


# ---- 6 queue and table sizes ----------------------------------------------------------------


def test_queue_table_too_small(atomic):
    tg, sched, target = atomic
    longest = max(range(sched.num_workers), key=lambda w: len(sched.queues[w]))
    bad = dataclasses.replace(sched, plan=dataclasses.replace(sched.plan, max_queue_len=sched.plan.max_queue_len - 1))
    rep = verify(tg, bad, target)
    assert any(f"worker {longest} " in m for m in errors(rep, "tables"))
    assert judge(tg, bad, target).kind == "resources"


def test_wait_table_too_small(atomic):
    tg, sched, target = atomic
    bad = dataclasses.replace(sched, plan=dataclasses.replace(sched.plan, max_waits=sched.plan.max_waits - 1))
    rep = verify(tg, bad, target)
    t = next(t for t in tg.tasks if len(t.waits) == sched.plan.max_waits)
    assert any(f"task {t.id} " in m and "waits on" in m for m in errors(rep, "tables"))


def test_task_queued_twice(atomic):
    tg, sched, target = atomic
    qs = [list(q) for q in sched.queues]
    qs[1].append(qs[0][0])
    bad = dataclasses.replace(sched, queues=tuple(map(tuple, qs)))
    rep = verify(tg, bad, target)
    assert any(f"task {qs[0][0]} " in m and "queued 2 times" in m for m in errors(rep, "tables"))
    assert not judge(tg, bad, target).safe


# ---- the size that matters ------------------------------------------------------------------


@pytest.mark.slow
def test_llama_3_2_1b_verify_time():
    from mkc.capture.canonical import build_graph, rope_inv_freq
    from mkc.capture.graph import ModelInfo
    from mkc.schedule.stage import schedule
    from mkc.taskgraph.lower import lower

    info = ModelInfo("LlamaForCausalLM", "llama", 2048, 8192, 16, 32, 8, 64, 128256, 1e-5, True, False, False)
    target = get_target("h200")
    tg = lower(build_graph(info, 1, 512, rope_inv_freq(64, 500000.0)), target)
    sched = schedule(tg, target, "atomic", "list")
    for sync in ("atomic", "nan"):
        t0 = time.perf_counter()
        rep = verify(tg, dataclasses.replace(sched, sync=sync), target)
        print(f"llama-3.2-1b {len(tg.tasks)} tasks, sync {sync}: verify {time.perf_counter() - t0:.2f} s")
        assert rep.ok, rep.text()


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_a_read_before_its_writer_in_the_step_is_rejected(sync):
    """Split-K down: chunk c reads chunk c - 1's partial and writes its own. A chunk that also reads
    the partial it writes, or the next chunk's, reads it before it is written in the step (the
    previous step's data; nan mode: the sentinel). The 5000-mutant campaign of the eleventh session
    found two such mutants accepted (grow_read on xmp: a chunk reading its own output); the
    verifier now wants every reader after its writer and no task reading what it writes."""
    import dataclasses as dc

    from mkc.verify.mutants import real_schedule

    target = dc.replace(get_target("h200"), name="h200-8sm", sms=8)
    tg, sched, tgt = real_schedule("llama", 1, sync, target, 2, "list", down_split=4)
    t = next(t for t in tg.tasks if t.kind == "downk" and any(r.buffer.startswith("xmp.") and r.box[0] == (0, 1)
                                                              for r in t.reads))
    i = next(i for i, r in enumerate(t.reads) if r.buffer.startswith("xmp."))
    r = t.reads[i]
    grown = dc.replace(r, box=((0, 2),) + r.box[1:])
    bad = replace_task(tg, t.id, reads=t.reads[:i] + (grown,) + t.reads[i + 1:])
    rep = verify(bad, sched, tgt)
    assert any(f"{r.buffer}[1:2" in m and "which it writes itself" in m for m in errors(rep, "race"))
    assert not judge(bad, sched, tgt).safe
    # the next chunk's partial: written by a task that waits (through this one's output) for the reader
    nxt = next(u for u in tg.tasks if u.kind == "downk" and any(w.buffer == r.buffer and w.box[0] == (2, 3) for w in u.writes))
    two = dc.replace(r, box=((2, 3),) + r.box[1:])
    bad2 = replace_task(tg, t.id, reads=t.reads + (two,))
    assert any(f"reads {r.buffer}[2:3" in m and f"before task {nxt.id} " in m for m in errors(verify(bad2, sched, tgt), "race"))
    assert not judge(bad2, sched, tgt).safe
    assert not [m for m in errors(verify(tg, sched, tgt), "race")]
