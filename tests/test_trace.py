"""The per-task device trace, CPU tier: rendering on/off, a clean nvcc build, the trace writer."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from codegen_fixtures import rr_schedule, taskgraph
from mkc.codegen.render import CodegenOptions, generate


@pytest.fixture(scope="module")
def llama_tg():
    return taskgraph("llama-3.2-1b", 1, 512)


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_trace_switch_is_one_constant(llama_tg, sync):
    sched = rr_schedule(llama_tg, "h200", sync)
    plain, cfg0, _ = generate(llama_tg, sched, "h200")
    off, cfg1, _ = generate(llama_tg, sched, "h200", CodegenOptions(trace=False))
    on, cfg2, _ = generate(llama_tg, sched, "h200", CodegenOptions(trace=True))
    assert off == plain and not cfg0.trace and not cfg1.trace and cfg2.trace
    # the buffer is 3 kernel arguments in both (an untraced launch passes nullptr, 0, 0); stamps by one
    # thread at 3 points per task, compiled only where TRACE is true
    for src in (plain, on):
        assert "unsigned long long* trace, int trace_steps, int trace_tasks)" in src
        assert len(re.findall(r"trace_rec\[\d\] = mk_globaltimer\(\);", src)) == 3  # (pipe.cuh's timeouts read it too)
        assert re.search(r"trace_rec\[0\] = mk_globaltimer\(\)", src) and "trace_rec[2] = mk_globaltimer()" in src
    assert "constexpr bool TRACE = false;" in plain and "constexpr bool TRACE = true;" in on
    # the constant is the only difference
    assert plain.replace("TRACE = false;", "TRACE = true;") == on


def test_tensor_core_trace_adds_up_the_input_stagings():
    """Batch 32 (tensor cores, the weight pipeline): every staging of a chunk is timed between
    trace_now and trace_stage_end, into the record's stamp 8, which the host reads (TRACE_STAMPS
    in the kernel and in the runtime are one constant); untraced, the helpers are empty."""
    from mkc.codegen.render import TRACE_STAMPS
    from mkc.runtime import TRACE_STAMPS as RUNTIME_STAMPS

    assert RUNTIME_STAMPS is TRACE_STAMPS  # one constant: the kernel's record and the runtime's buffer

    tg = taskgraph("llama-3.2-1b", 32, 512)
    sched = rr_schedule(tg, "h200", "atomic")
    on, _, _ = generate(tg, sched, "h200", CodegenOptions(trace=True))
    body = on[on.index("gemv_task_mma_pipe("):]
    body = body[: body.index("\n}\n")]
    assert body.count("trace_now(c);") == 2 and body.count("trace_stage_end(c, t0);") == 2
    assert f"constexpr int TRACE_STAMPS = {TRACE_STAMPS};" in on and TRACE_STAMPS == 13
    assert "c.trace_rec[8] = " in on
    # every kind's marks fit the record (mkc.trace.MARKS names them)
    from mkc.trace import COMMON_MARKS, MARKS

    assert max(len(m) for m in MARKS.values()) <= min(COMMON_MARKS) and max(COMMON_MARKS) < TRACE_STAMPS - 3
    # the marks every kind sets: the signal's barrier passed, thread 0's count seen (sync.cuh)
    assert on.count("c.trace_rec[3 + 8] = ") == 1 and on.count("c.trace_rec[3 + 9] = ") == 1


def test_trace_on_amd_renders_without_vendor_words():
    tg = taskgraph("tiny-llama", 1, 64, "mi300x")
    src, cfg, _ = generate(tg, rr_schedule(tg, "mi300x"), "mi300x", CodegenOptions(trace=True))
    assert cfg.trace and "trace_rec[1] = mk_globaltimer()" in src and "s_memrealtime" in src
    assert "%globaltimer" not in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_trace_kernel_compiles_cleanly(llama_tg, sync, tmp_path):
    from mkc.targets.nvidia.compiler import build_cubin

    # the kernel `mkc run --trace` launches for greedy steps (Megakernel's first, without the sampler)
    src, cfg, _ = generate(llama_tg, rr_schedule(llama_tg, "h200", sync), "h200", CodegenOptions(trace=True, sampler=False))
    assert cfg.arch == "sm_90a"
    res = build_cubin(src, cfg.arch, out_dir=tmp_path, verbose=True)
    assert res.cubin.stat().st_size > 0
    assert res.warnings == [], res.log
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", res.log)]
    # batch 1: the consumers' 200 registers beside the weight pipeline's producer warpgroup
    # (CodegenOptions.consumer_regs; test_codegen_compile); the greedy kernel spills nothing without
    # the trace, its stamps may add a few
    assert spills and max(spills) <= 32, res.log


def _synthetic(tg, sched, steps=3, seed=0):
    """Stamps as a device would write them: the predicted schedule, stretched and shifted per step."""
    rng = np.random.default_rng(seed)
    s0, e0 = np.asarray(sched.start, float), np.asarray(sched.end, float)
    span = float(e0.max())
    ws, st, en = [], [], []
    for k in range(steps):
        off = k * span * 1.3
        start = off + s0 * 1.2 + rng.uniform(0, 0.5, len(s0))
        ws.append(start - rng.uniform(0, 2, len(s0)))
        st.append(start)
        en.append(start + (e0 - s0) * 1.1 + 0.05)
    return np.array(ws), np.array(st), np.array(en)


def test_write_trace_on_synthetic_stamps(tmp_path):
    from mkc.trace import format_summary, write_trace

    from mkc.schedule import schedule

    tg = taskgraph("tiny-llama", 1, 64)
    sched = schedule(tg, "h200", sync="atomic", method="list")  # predicted times (round robin has none)
    assert sched.makespan > 0
    measured = _synthetic(tg, sched)
    summary = write_trace(tg, sched, measured, tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    ev = doc["traceEvents"]
    n, W = len(tg.tasks), sched.num_workers
    wo = sched.worker_of()
    for pid, label in ((1, "measured"), (0, "predicted")):
        names = [e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == pid]
        assert len(names) == 1 and label in names[0]
        tasks = [e for e in ev if e["ph"] == "X" and e["pid"] == pid and e["name"] != "wait"]
        assert len(tasks) == 3 * n  # every task of every step
        per_worker = {}
        for e in tasks:
            assert e["tid"] == wo[e["args"]["task"]] and e["dur"] >= 0
            per_worker[e["tid"]] = per_worker.get(e["tid"], 0) + 1
        assert sorted(per_worker) == sorted({w for w, q in enumerate(sched.queues) if q})
        assert sum(per_worker.values()) == 3 * n
    waits = [e for e in ev if e["name"] == "wait"]
    assert waits and all(e["pid"] == 1 and e["dur"] > 0 for e in waits)
    assert doc["otherData"]["traced_steps"] == 3
    assert (tmp_path / "t.png").stat().st_size > 0 and summary["png"] == str(tmp_path / "t.png")
    # summary: step times, wait per kind, the slowest kinds (all stretched 1.1x + 0.05 us)
    assert len(summary["step_us"]) == 3 and all(x > 0 for x in summary["step_us"])
    # the period: each step's last end less the step before's (these steps lie 1.3 spans apart)
    ends = [float(np.nanmax(e)) for e in measured[2]]
    assert summary["period_us"] == pytest.approx([ends[1] - ends[0], ends[2] - ends[1]])
    assert set(summary["per_kind"]) == {t.kind for t in tg.tasks} and len(summary["slowest"]) <= 5
    assert all(v["ratio"] > 1.09 and v["wait_us"] > 0 for v in summary["per_kind"].values())
    text = format_summary(summary)
    assert "predicted makespan" in text and "slowest kinds" in text and "step period" in text and W > 0
    # a schedule without times (round robin) still summarises
    rr = rr_schedule(tg, "h200", "atomic")
    assert "predicts no times" in format_summary(write_trace(tg, rr, measured, tmp_path / "rr.json"))


def test_write_trace_one_step_and_missing_tasks(tmp_path):
    from mkc.trace import summarize, write_trace

    tg = taskgraph("tiny-llama", 1, 64)
    sched = rr_schedule(tg, "h200", "nan")
    ws, st, en = (a[0].copy() for a in _synthetic(tg, sched, steps=1))
    en[0] = st[0] = ws[0] = np.nan  # a task that never ran (a fault) is left out
    write_trace(tg, sched, (ws, st, en), tmp_path / "one.json", png=False)
    doc = json.loads((tmp_path / "one.json").read_text())
    measured = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1 and e["name"] != "wait"]
    assert len(measured) == len(tg.tasks) - 1 and not (tmp_path / "one.png").exists()
    assert summarize(tg, sched, (ws, st, en))["missing_tasks"] == 1
    with pytest.raises(ValueError):
        summarize(tg, sched, (ws[:-1], st[:-1], en[:-1]))


def test_measured_times_calibrate_the_cost_model(tmp_path):
    """A trace where gate/up tasks took 3x their prediction (the rest 1.1x) gives a calibration
    file; scheduling with it predicts those times, and a second round composes with the first."""
    from mkc.schedule import schedule
    from mkc.schedule.cost import durations, load_calibration
    from mkc.target import get_target
    from mkc.trace import calibration

    tg = taskgraph("tiny-llama", 1, 64)
    sched = schedule(tg, "h200", sync="atomic", method="list")
    ws, st, en = _synthetic(tg, sched)
    gateup = [t.id for t in tg.tasks if t.kind == "gateup"]
    pred = np.asarray(sched.end) - np.asarray(sched.start)
    en[:, gateup] = st[:, gateup] + 3.0 * pred[gateup]
    cal = calibration(tg, sched, (ws, st, en))
    scale = cal["kind_scale"]
    assert "attn" not in scale  # position-dependent: not calibrated from a short trace
    # each factor: the kind's busy time, plus the fitted dispatch of every task and hop and straggle
    # of every waiting task (the scheduler's model has no hop of its own), over its predicted time
    pipe, fitted = cal["pipeline"], cal["source"]["pipeline_fit"]["fitted"]
    got = {k: (pipe[k] if k in fitted else 0.0) for k in ("dispatch_us", "hop_us", "straggle_us")}
    step = cal["source"]["step"]
    for kind, v in scale.items():
        ids = [t.id for t in tg.tasks if t.kind == kind]
        busy = float((en[step, ids] - st[step, ids]).sum())
        occ = busy + len(ids) * got["dispatch_us"] + \
            sum(1 for i in ids if tg.tasks[i].waits) * (got["hop_us"] + got["straggle_us"])
        assert abs(v - round(occ / pred[ids].sum(), 4)) < 1e-3, kind
    assert scale["gateup"] > 3.0 and all(v > 1.1 for v in scale.values())
    assert cal["source"]["batch"] == 1 and cal["source"]["measured_step_us"] > 0
    path = tmp_path / "t.calibration.json"
    path.write_text(json.dumps(cal))
    cost = load_calibration(path)
    target = get_target("h200")
    base, scaled = durations(tg, target), durations(tg, target, cost)
    assert all(abs(scaled[i] - scale["gateup"] * base[i]) < 1e-6 for i in gateup)
    recal = schedule(tg, "h200", sync="atomic", method="list", cost=cost)
    assert recal.makespan > sched.makespan
    # measured as the calibrated schedule predicts: the busy times compose with the first round's
    # factors (base_scale), plus what this trace's own dispatch, hop and straggle add
    again = calibration(tg, recal, (np.asarray([recal.start]), np.asarray([recal.start]), np.asarray([recal.end])),
                        base_scale=scale)
    assert all(v - 1e-3 <= again["kind_scale"][k] for k, v in scale.items())


@pytest.mark.parametrize("content,why", [
    ("not json", "cannot read"),
    ('{"scale": {}}', "kind_scale"),
    ('{"kind_scale": {"conv": 2.0}}', "bad kind_scale"),
    ('{"kind_scale": {"qkv": -1}}', "bad kind_scale"),
    ('{"kind_scale": {}, "pipeline": 3}', "pipeline"),
    ('{"kind_scale": {}, "pipeline": {"hop": 1.0}}', "unknown pipeline constants"),
    ('{"kind_scale": {}, "pipeline": {"hop_us": -1}}', "hop_us = -1 is out of range"),
    ('{"kind_scale": {}, "pipeline": {"hbm_fraction": 0}}', "hbm_fraction = 0 is out of range"),
    ('{"kind_scale": {}, "pipeline": {"task_overhead_us": "small"}}', "task_overhead_us"),
    ('{"kind_scale": {}, "pipeline": {"hop_us": true}}', "hop_us"),
    ('{"kind_scale": {}, "pipeline": {"kind_scale": {"conv": 1.0}}}', "bad pipeline kind_scale"),
    ('{"kind_scale": {}, "pipeline": {"kind_scale": [1.0]}}', "pipeline kind_scale must be an object"),
])
def test_bad_calibration_files_are_refused(tmp_path, content, why):
    from mkc.errors import MkcError
    from mkc.schedule.cost import load_calibration

    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(MkcError, match=why):
        load_calibration(path)


def test_compile_with_a_calibration_file(tmp_path, capsys):
    """mkc compile --calibration: the schedule uses it and the report says so; a bad file stops the
    build with exit code 2 before capture, leaving no directory."""
    from mkc.cli import main

    cal = tmp_path / "c.json"
    cal.write_text(json.dumps({"kind_scale": {"gateup": 2.0, "down": 1.5}}))
    out = tmp_path / "b"
    assert main(["compile", "tiny-llama", "--max-seq-len", "64", "--method", "list", "--calibration", str(cal),
                 "--out", str(out), "-q"]) == 0
    rep = json.loads((out / "b1" / "report.json").read_text())
    assert rep["schedule"]["kind_scale"] == {"gateup": 2.0, "down": 1.5}
    plain = tmp_path / "p"
    assert main(["compile", "tiny-llama", "--max-seq-len", "64", "--method", "list", "--out", str(plain), "-q"]) == 0
    prep = json.loads((plain / "b1" / "report.json").read_text())
    assert prep["schedule"]["kind_scale"] == {} and rep["schedule"]["makespan_us"] > prep["schedule"]["makespan_us"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind_scale": {"gateup": "fast"}}')
    assert main(["compile", "tiny-llama", "--calibration", str(bad), "--out", str(tmp_path / "x"), "-q"]) == 2
    assert "bad kind_scale" in capsys.readouterr().err and not (tmp_path / "x").exists()


# the constants the pipelined-model tests measure with: not the defaults
TRUE = dict(hop_us=1.1, task_overhead_us=0.8, hbm_fraction=0.7, page_latency_us=2.0, tail_us=0.6, dispatch_us=0.3,
            kind_scale={"embed": 2.0, "argmax": 1.5})


def _from_model(tg, sched, pipe, steps=3, noise=0.02, seed=0):
    """Stamps the pipelined model predicts with ``pipe``, each start and end off by N(0, noise) us."""
    from mkc.schedule.cost import CostModel
    from mkc.schedule.pipemodel import pipelined_timeline
    from mkc.target import get_target

    pt = pipelined_timeline(tg, sched.queues, get_target(sched.target), CostModel(pipe=pipe), steps=steps)
    rng = np.random.default_rng(seed)
    ws, st, en = (np.array(a) for a in (pt.arrive, pt.start, pt.end))
    return ws, st + rng.normal(0, noise, st.shape), en + rng.normal(0, noise, en.shape)


def test_pipeline_fit_recovers_the_constants(llama_tg):
    """llama-3.2-1b at batch 1 has both kinds of GEMV tasks: qkv and o-proj weights fit the pages
    (the overhead shows), gate/up and down do not (the bandwidth, the pages' latency and the tail
    show). The overhead, the tail and the latency trade off against each other a little; their sum
    on a task, the hop, the dispatch gap and the bandwidth do not, and the fitted constants replay
    the step."""
    import dataclasses

    from mkc.schedule.cost import CostModel, PipeCost
    from mkc.schedule.pipefit import fit_pipe
    from mkc.schedule.pipemodel import pipelined_timeline
    from mkc.target import get_target

    sched = rr_schedule(llama_tg, "h200")
    stamps = _from_model(llama_tg, sched, PipeCost(**TRUE))
    fit = fit_pipe(llama_tg, sched.queues, get_target("h200"), stamps)
    assert set(fit.fitted) == {"hop_us", "task_overhead_us", "hbm_fraction", "kind_scale", "page_latency_us",
                               "tail_us", "dispatch_us", "straggle_us"} and fit.steps == 3
    c = fit.cost
    # the hop is biased low by the noise on the latest of many producer ends
    assert abs(c.hop_us - 1.1) < 0.1 and abs(c.hbm_fraction - 0.7) < 0.01 and abs(c.dispatch_us - 0.3) < 0.02
    assert abs(c.task_overhead_us + c.tail_us - 1.4) < 0.25 and abs(c.page_latency_us - 2.0) <= 1.0
    assert c.straggle_us < 0.1  # the model's tasks of a phase end together: only the noise is left
    assert fit.gemv_rms_us < 0.1 and dict(fit.samples)["tail_us"] > 100
    want = pipelined_timeline(llama_tg, sched.queues, get_target("h200"), CostModel(pipe=PipeCost(**TRUE)), steps=2)
    got = pipelined_timeline(llama_tg, sched.queues, get_target("h200"), dataclasses.replace(CostModel(), pipe=c), steps=2)
    assert got.step_us()[1] == pytest.approx(want.step_us()[1], rel=0.01)
    # a missing stamp in the last step leaves the first two
    ws, st, en = (a.copy() for a in stamps)
    en[2, 5] = np.nan
    assert fit_pipe(llama_tg, sched.queues, get_target("h200"), (ws, st, en)).steps == 2


def test_pipeline_fit_keeps_what_a_trace_cannot_tell():
    """tiny-llama prefetches every weight: its stream never shows, so the bandwidth stays the prior's;
    a trace without stamps fits nothing."""
    from mkc.schedule.cost import PipeCost
    from mkc.schedule.pipefit import fit_pipe
    from mkc.target import get_target

    tg = taskgraph("tiny-llama", 1, 64)
    sched = rr_schedule(tg, "h200")
    fit = fit_pipe(tg, sched.queues, get_target("h200"), _from_model(tg, sched, PipeCost(**TRUE)))
    assert "hbm_fraction" not in fit.fitted and fit.cost.hbm_fraction == PipeCost().hbm_fraction
    # no task waits for its stream, so the tail cannot be told from the overhead: the overhead holds both
    assert "tail_us" not in fit.fitted and "page_latency_us" not in fit.fitted
    assert abs(fit.cost.task_overhead_us - 1.4) < 0.03
    empty = np.full((2, len(tg.tasks)), np.nan)
    none = fit_pipe(tg, sched.queues, get_target("h200"), (empty, empty, empty))
    assert none.fitted == () and none.steps == 0 and none.cost == PipeCost()


def test_calibration_file_carries_the_pipeline_and_old_files_still_load(tmp_path):
    """calibration() writes the fitted pipeline constants; load_calibration reads them back without
    moving the scheduler's times; a file with only kind_scale gives the default pipeline."""
    from mkc.schedule import schedule
    from mkc.schedule.cost import CostModel, PipeCost, durations, load_calibration
    from mkc.target import get_target
    from mkc.trace import calibration, format_prediction, predicted_vs_measured

    tg = taskgraph("tiny-llama", 1, 64)
    sched = schedule(tg, "h200", sync="atomic", method="list")
    # (tiny-llama's trace cannot tell the bandwidth: measured at the prior's)
    # (nor the tail from the overhead: its GEMV tasks never wait for their weights)
    stamps = _from_model(tg, sched, PipeCost(**dict(TRUE, hbm_fraction=PipeCost().hbm_fraction, tail_us=0.0)),
                         noise=0.0)
    cal = calibration(tg, sched, stamps)
    pipe = cal["pipeline"]
    assert set(pipe) == {"hop_us", "task_overhead_us", "hbm_fraction", "page_latency_us", "tail_us", "dispatch_us",
                         "straggle_us", "kind_scale"}
    assert abs(pipe["dispatch_us"] - 0.3) < 1e-3
    assert abs(pipe["hop_us"] - 1.1) < 1e-6 and abs(pipe["task_overhead_us"] - 0.8) < 1e-3
    assert "hop_us" in cal["source"]["pipeline_fit"]["fitted"]
    path = tmp_path / "t.calibration.json"
    path.write_text(json.dumps(cal))
    cost = load_calibration(path)
    assert cost.pipe.hop_us == pipe["hop_us"] and cost.pipe.kind_scale == pipe["kind_scale"]
    target = get_target("h200")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"kind_scale": cal["kind_scale"]}))
    assert load_calibration(old) == CostModel(kind_scale=cal["kind_scale"]) and load_calibration(old).pipe == PipeCost()
    assert durations(tg, target, cost) == durations(tg, target, load_calibration(old))
    # the fitted model replays the trace it came from; the scheduler's model is one step's makespan
    p = predicted_vs_measured(tg, sched, stamps, cost)
    assert len(p["measured_us"]) == len(p["pipelined_us"]) == 3
    assert p["old_us"] == pytest.approx(sched.makespan, abs=1e-3)
    assert all(abs(m - q) < 1e-3 * m for m, q in zip(p["measured_us"], p["pipelined_us"]))
    assert set(p["per_kind"]) == {t.kind for t in tg.tasks}
    text = format_prediction(p)
    assert "pipelined model (1.00x)" in text and "scheduler's model" in text and "busy time per kind" in text


def test_mark_summary_averages_each_kinds_marks_after_the_waits(llama_tg):
    from mkc.trace import MARKS, format_marks, mark_summary

    n = len(llama_tg.tasks)
    ws = np.zeros((2, n))
    st = np.full((2, n), 1.0)
    en = np.full((2, n), 6.0)
    marks = np.full((2, n, 6), np.nan)
    kinds = [t.kind for t in llama_tg.tasks]
    oproj = [i for i, k in enumerate(kinds) if k == "oproj"]
    attn = [i for i, k in enumerate(kinds) if k == "attn"]
    marks[1, oproj, 0] = 2.0
    marks[1, oproj[0], 0] = 4.0  # one slow task moves the mean
    marks[1, oproj, 2] = 5.0
    marks[1, attn, 1] = 3.0
    marks[1, oproj, 4] = 1.5  # the start plus 0.5 waiting for pages (trace_pipe_wait)
    marks[1, oproj, 5] = 3.25  # the start plus 2.25 staging the input (trace_stage_end)
    m = mark_summary(llama_tg, (ws, st, en), marks)
    want = 1.0 + 2.0 / len(oproj)
    assert m["oproj"] == pytest.approx({"input staged": want, "epilogues": 4.0, "waiting for pages": 0.5,
                                        "input staging, all chunks": 2.25, "end": 5.0})
    assert m["attn"] == pytest.approx({"positions": 2.0, "end": 5.0})
    assert "qkv" not in m and "embed" not in MARKS  # no marks: no row
    assert "oproj" in format_marks(m) and "positions 2.00" in format_marks(m)
    with pytest.raises(ValueError):
        mark_summary(llama_tg, (ws, st, en), marks[:, :3])


def test_pipeline_fit_recovers_the_piped_kinds_compute_factors():
    """At batch 32 (tensor cores) the GEMV tasks are bound by their compute, not by the weight stream
    (on the H200, 0.06-0.08 us per KiB of weights, their input staged from L2): each piped kind's
    factor on its compute is fitted beside the stream, and a calibration without them (factor 1)
    replays the step as before."""
    import dataclasses

    from mkc.schedule.cost import CostModel, PipeCost
    from mkc.schedule.pipefit import fit_pipe
    from mkc.schedule.pipemodel import pipelined_timeline
    from mkc.target import get_target

    tg = taskgraph("llama-3.2-1b", 32, 64)
    sched = rr_schedule(tg, "h200")
    factors = {"qkv": 1.6, "oproj": 0.5, "gateup": 2.5, "down": 0.4}
    true = PipeCost(**dict(TRUE, kind_scale={**TRUE["kind_scale"], **factors}))
    fit = fit_pipe(tg, sched.queues, get_target("h200"), _from_model(tg, sched, true, steps=2))
    got = fit.cost.kind_scale
    for kind, f in factors.items():
        assert got[kind] == pytest.approx(f, rel=0.05), (kind, got[kind])
    assert fit.gemv_rms_us < 0.1
    want = pipelined_timeline(tg, sched.queues, get_target("h200"), CostModel(pipe=true), steps=2)
    again = pipelined_timeline(tg, sched.queues, get_target("h200"), dataclasses.replace(CostModel(), pipe=fit.cost), steps=2)
    assert again.period_us()[0] == pytest.approx(want.period_us()[0], rel=0.01)
    # without the factors (older calibration files) every piped kind's compute counts once
    plain = dataclasses.replace(true, kind_scale=dict(TRUE["kind_scale"]))
    one = dataclasses.replace(plain, kind_scale={**plain.kind_scale, **{k: 1.0 for k in factors}})
    a = pipelined_timeline(tg, sched.queues, get_target("h200"), CostModel(pipe=plain), steps=2)
    b = pipelined_timeline(tg, sched.queues, get_target("h200"), CostModel(pipe=one), steps=2)
    assert a.end == b.end and a.period_us()[0] != pytest.approx(want.period_us()[0], rel=0.01)


def test_refinement_gives_each_piped_kind_the_traced_phase_span():
    """Factors 30 % off the trace's are moved until the replay gives every piped kind the phase span
    (its tasks of one layer: last end less first start) of the trace, within the tolerance."""
    import dataclasses

    from mkc.schedule import pipefit
    from mkc.schedule.cost import CostModel, PipeCost
    from mkc.schedule.pipemodel import pipelined_timeline
    from mkc.target import get_target

    tg = taskgraph("llama-3.2-1b", 32, 64)
    sched = rr_schedule(tg, "h200")
    kinds = ["down", "gateup", "oproj", "qkv"]
    true = PipeCost(**dict(TRUE, kind_scale={**TRUE["kind_scale"], "qkv": 1.6, "oproj": 0.5, "gateup": 2.5, "down": 0.4}))
    t = pipelined_timeline(tg, sched.queues, get_target("h200"), CostModel(pipe=true), steps=3)
    st, en = np.asarray(t.start), np.asarray(t.end)
    off = dataclasses.replace(true, kind_scale={k: v * (1.3 if k in kinds else 1.0) for k, v in true.kind_scale.items()})
    got = pipefit._refine(tg, sched.queues, get_target("h200"), CostModel(), off, st, en, 1, 3, None, kinds)
    for k in kinds:
        assert got.kind_scale[k] != off.kind_scale[k]
        assert got.kind_scale[k] == pytest.approx(true.kind_scale[k], rel=0.05), k
    again = pipelined_timeline(tg, sched.queues, get_target("h200"), CostModel(pipe=got), steps=3)
    assert again.period_us()[-1] == pytest.approx(t.period_us()[-1], rel=0.01)


def test_chain_summary_adds_up_to_the_layer():
    """Each phase's `adds` is its last end less the previous phase's; they sum to the layer's period,
    and the hops are measured from the previous phase's last end."""
    from mkc.trace import chain_summary, format_chain

    tg = taskgraph("tiny-llama", 1, 64)
    n = len(tg.tasks)
    order = []
    for t in tg.tasks:
        if t.layer >= 0 and t.kind not in order:
            order.append(t.kind)
    # phases laid end to end: phase p of layer l starts 1 us after the previous one's last end
    # (its tasks released over 0.5 us) and each task runs 2 us, the last one 3
    st, en = np.full(n, np.nan), np.full(n, np.nan)
    for t in tg.tasks:
        if t.layer < 0:
            st[t.id], en[t.id] = 0.0, 1.0
    clock = 1.0
    for lay in sorted({t.layer for t in tg.tasks if t.layer >= 0}):
        for kind in order:
            ids = [t.id for t in tg.tasks if t.layer == lay and t.kind == kind]
            if not ids:
                continue
            s = clock + 1.0 + np.linspace(0, 0.5, len(ids))
            e = s + 2.0
            e[-1] += 1.0
            st[ids], en[ids] = s, e
            clock = float(e.max())
    c = chain_summary(tg, (st - 0.1, st, en))
    layers = len({t.layer for t in tg.tasks if t.layer >= 0})
    assert c["layers"] == layers - 1
    assert set(c["phases"]) == set(order)
    for kind, r in c["phases"].items():
        many = sum(1 for t in tg.tasks if t.layer == 0 and t.kind == kind) > 1
        assert r["hop_first"] == pytest.approx(1.0)
        assert r["hop_last"] == pytest.approx(1.5 if many else 1.0)
        assert r["last_busy"] == pytest.approx(3.0)
        assert r["adds"] == pytest.approx(r["hop_last"] + 3.0)
    assert c["layer_us"] == pytest.approx(sum(r["adds"] for r in c["phases"].values()))
    assert "a layer's chain (step 0," in format_chain(c)
    # over several steps: the means of all their layers (two steps, the second 2 us later, the same)
    two = tuple(np.stack([a, a + 2.0]) for a in (st - 0.1, st, en))
    c2 = chain_summary(tg, two, steps=[0, 1])
    assert c2["layers"] == 2 * (layers - 1) and c2["steps"] == [0, 1] and c["steps"] == [0]
    assert c2["phases"].keys() == c["phases"].keys() and c2["layer_us"] == pytest.approx(c["layer_us"])
    assert all(c2["phases"][k] == pytest.approx(v) for k, v in c["phases"].items())
    assert "a layer's chain (steps 0-1," in format_chain(c2)
