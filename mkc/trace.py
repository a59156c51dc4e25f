"""The measured per-task device trace next to the schedule's prediction.

    mk = Megakernel(tg, sched, weights, options=CodegenOptions(trace=True))
    mk.generate(prompt, 8)
    summary = write_trace(tg, sched, mk.trace(), "trace.json")   # + trace.png
    print(format_summary(summary))

``measured`` is ``(wait_start, start, end)``, each [steps, tasks] (or [tasks] for one step) in us on
one clock (``Megakernel.trace``: relative to the launch's first stamp). The Perfetto/Chrome trace
holds process 1 "measured" (one thread per worker: every recorded step's tasks and, before each,
its wait span) and process 0 "predicted" (the schedule, repeated at each measured step's first
stamp so the two line up). The Gantt PNG compares one step (by default the last recorded, past the
cold first step) with the prediction.

``calibration`` fits both cost models to the stamps: the scheduler's per-kind factors and the
pipelined timeline's constants (``mkc.schedule.pipefit``); ``predicted_vs_measured`` puts the
measured step times next to both models' predictions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mkc.schedule.inspect import gantt_compare_png, trace_events
from mkc.schedule.ir import Schedule
from mkc.taskgraph.ir import TaskGraph

MEASURED_PID, PREDICTED_PID = 1, 0


def _as_steps(measured, n_tasks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ws, st, en = (np.asarray(a, dtype=np.float64) for a in measured)
    ws, st, en = (a[None, :] if a.ndim == 1 else a for a in (ws, st, en))
    if not ws.shape == st.shape == en.shape or ws.ndim != 2 or ws.shape[1] != n_tasks:
        raise ValueError(f"measured stamps must be three [steps, {n_tasks}] arrays, got "
                         f"{ws.shape}, {st.shape}, {en.shape}")
    return ws, st, en


def summarize(tg: TaskGraph, sched: Schedule, measured, step: int | None = None) -> dict:
    """Step times against the predicted makespan, wait time per kind and measured/predicted time
    per kind (of ``step``, by default the last recorded one). ``step_us``: a step's last end less
    its first wait's start; in a launch of many steps, workers done early start waiting on the next
    step while the last phase runs, so it can overstate the time a step adds (llama-3.2-1b b1 with
    CodegenOptions.held_early: spans ~55 us longer while a paired bench moved 0-3 us, BENCHMARKS.md,
    thirty-fourth session). ``period_us``, from the second step on: its last end less the step
    before's, what a step adds to a launch."""
    ws, st, en = _as_steps(measured, len(tg.tasks))
    n = ws.shape[0]
    step = n - 1 if step is None else step
    step_us = [float(np.nanmax(en[k]) - np.nanmin(ws[k])) if np.isfinite(en[k]).any() else float("nan")
               for k in range(n)]
    last = [float(np.nanmax(en[k])) if np.isfinite(en[k]).any() else float("nan") for k in range(n)]
    period_us = [b - a for a, b in zip(last, last[1:])]
    kinds = sorted({t.kind for t in tg.tasks}, key=[t.kind for t in tg.tasks].index)
    pred_dur = np.asarray(sched.end, dtype=np.float64) - np.asarray(sched.start, dtype=np.float64)
    per_kind = {}
    for kind in kinds:
        ids = [t.id for t in tg.tasks if t.kind == kind]
        meas = float(np.nansum(en[step, ids] - st[step, ids]))
        pred = float(pred_dur[ids].sum())
        per_kind[kind] = dict(tasks=len(ids), wait_us=float(np.nansum(st[step, ids] - ws[step, ids])),
                              measured_us=meas, predicted_us=pred, ratio=meas / pred if pred > 0 else float("inf"))
    slowest = sorted(per_kind, key=lambda k: -per_kind[k]["ratio"])[:5]
    missing = int((~np.isfinite(en[step])).sum())
    return dict(steps=n, step=step, step_us=step_us, period_us=period_us, predicted_makespan_us=float(sched.makespan),
                per_kind=per_kind, slowest=slowest, missing_tasks=missing)


# what the marks inside a task (Megakernel.trace_marks, stamps 3.. of a record) are, per kind
# (a GEMV task on the weight pipeline: its fifth mark is its start plus the longest time one of its
# warps waited for pages that had not landed, common.cuh trace_pipe_wait; on tensor cores, its sixth
# its start plus the time of all its input stagings, barriers included, common.cuh trace_stage_end;
# None: no such mark)
GEMV_MARKS = ("input staged", "first block's dot products", "epilogues")
PIPE_WAIT = "waiting for pages"
STAGING = "input staging, all chunks"
MARKS = {"qkv": GEMV_MARKS + ("RoPE", PIPE_WAIT, STAGING), "oproj": GEMV_MARKS + (None, PIPE_WAIT, STAGING),
         "gateup": GEMV_MARKS + (None, PIPE_WAIT, STAGING), "down": GEMV_MARKS + (None, PIPE_WAIT, STAGING),
         "downk": GEMV_MARKS + (None, PIPE_WAIT, STAGING), "downp": GEMV_MARKS + (None, PIPE_WAIT, STAGING),
         "qkvp": GEMV_MARKS + (None, PIPE_WAIT, STAGING),
         # (its sixth at batch 1, where the LM head runs on the FMA path: its candidates collected,
         # sampling.cuh lm_candidates_block)
         # (its seventh and eighth on the sampled steps: the candidates ranked and written, or
         # top-p's count pass over the tile done; the tail's partials stored, before the signal)
         "lmhead": GEMV_MARKS + ("candidates: row 0's cut | top-p: mass sums", PIPE_WAIT,
                                 STAGING + " | candidates: collected", "candidates: ranked | top-p: counted",
                                 "sampled tail: partials stored"),
         "attn": ("q staged", "positions", "outputs", "first tile's scores", "its softmax"),
         # the filtered sampler's select over the LM-head tiles' candidates (its first, LM_PREF a tile);
         # a top-k over the held candidates (sampling.cuh held_pick) marks its slots' keys (3: thread
         # 0's loads landed), top-k's and top-p's thresholds (4, 5) and its draw (1, 2), the
         # walk (top-p and/or min-p) its start and end (where the walk hands over to the select, the
         # select's marks overwrite them)
         "argmax": ("tiles' partials merged", "select: bins counted | held: the slots' scores | walk: sums read",
                    "select: reaching bin | held: the winner | walk: end",
                    "select: bin collected | held: the slots' keys", "select: threshold | held: top-k's",
                    "held: top-p's threshold")}


# marks every kind sets (sync.cuh), by index: 8 in signal_task once the block's barrier has passed
# (the end stamp follows the release add, so the end less it is the release's fence); 9 (atomic
# counters) in wait_task when thread 0's poll saw its count, before the acquire fence and the
# barrier (so it lies before the start: the start less it is their time)
COMMON_MARKS = {8: "signal: barrier passed", 9: "count seen (thread 0)"}


def mark_summary(tg: TaskGraph, measured, marks, step: int | None = None) -> dict:
    """Per kind, the mean time (us) from a task's start (its waits satisfied) to each of its marks
    and to its end (signalled), over the tasks of ``step`` (the last recorded by default) that set
    them: where a task's busy time goes."""
    ws, st, en = _as_steps(measured, len(tg.tasks))
    marks = np.asarray(marks, dtype=np.float64)
    marks = marks[None] if marks.ndim == 2 else marks
    if marks.shape[:2] != st.shape:
        raise ValueError(f"marks must be [steps, {len(tg.tasks)}, k], got {marks.shape}")
    step = st.shape[0] - 1 if step is None else step
    out = {}
    for kind, names in MARKS.items():
        ids = [t.id for t in tg.tasks if t.kind == kind]
        if not ids:
            continue
        row = {}
        for k, name in [*enumerate(names), *COMMON_MARKS.items()]:
            if name is None or k >= marks.shape[2]:
                continue
            d = marks[step, ids, k] - st[step, ids]
            if np.isfinite(d).any():
                row[name] = float(np.nanmean(d))
        if row:
            row["end"] = float(np.nanmean(en[step, ids] - st[step, ids]))
            out[kind] = row
    return out


def chain_summary(tg: TaskGraph, measured, steps=None) -> dict:
    """Where a decoder layer's period goes (issue #13: the chain of phases on which HBM idles).

    A phase is the tasks of one kind in one layer. Per phase, mean over the layers that have a
    layer before them in each of ``steps`` (step indices; default the last recorded step alone:
    one traced step's figures vary by ~1 us): ``hop_first`` / ``hop_last``, from
    the previous phase's last end (the previous layer's last phase for a layer's first) to this
    phase's first / last start (its wait satisfied); ``last_busy``, its last start to its last end;
    ``adds``, its last end less the previous phase's last end: what the phase adds to the chain.
    The phases' ``adds`` sum to ``layer_us``, the mean time from one layer's last end to the next's.
    ``busy_mean``: the mean start-to-end of its tasks."""
    ws, st, en = _as_steps(measured, len(tg.tasks))
    picked = [st.shape[0] - 1] if steps is None else list(steps)
    layers = sorted({t.layer for t in tg.tasks if t.layer >= 0})
    order: list[str] = []
    for t in tg.tasks:
        if t.layer >= 0 and t.kind not in order:
            order.append(t.kind)
    ids = {}
    for t in tg.tasks:
        if t.layer >= 0:
            ids.setdefault((t.layer, t.kind), []).append(t.id)
    rows: dict[str, dict[str, list[float]]] = {k: {} for k in order}
    layer_us: list[float] = []
    for k in picked:
        prev_end = None
        for lay in layers:
            start_end = prev_end
            for kind in order:
                if (lay, kind) not in ids:
                    continue
                i = ids[(lay, kind)]
                s, e = st[k, i], en[k, i]
                if not (np.isfinite(s).all() and np.isfinite(e).all()):
                    prev_end = None
                    continue
                if prev_end is not None:
                    r = rows[kind]
                    for name, v in (("hop_first", s.min() - prev_end), ("hop_last", s.max() - prev_end),
                                    ("last_busy", e.max() - s.max()), ("adds", e.max() - prev_end),
                                    ("busy_mean", float(np.mean(e - s)))):
                        r.setdefault(name, []).append(float(v))
                prev_end = float(e.max())
            if start_end is not None and prev_end is not None:
                layer_us.append(prev_end - start_end)
    out = {kind: {name: float(np.mean(v)) for name, v in r.items()} for kind, r in rows.items() if r}
    return dict(steps=picked, layers=len(layer_us),
                layer_us=float(np.mean(layer_us)) if layer_us else float("nan"), phases=out)


def format_chain(c: dict) -> str:
    s = c["steps"]
    which = f"step {s[0]}" if len(s) == 1 else f"steps {s[0]}-{s[-1]}"
    lines = [f"a layer's chain ({which}, mean over {c['layers']} layers): {c['layer_us']:.2f} us from one "
             "layer's last end to the next's; per phase, us: hop to its first / last start, its last task's busy "
             "time, what it adds to the chain, its tasks' mean busy time"]
    for kind, r in c["phases"].items():
        lines.append(f"  {kind:8s} hop {r['hop_first']:.2f} / {r['hop_last']:.2f}, last busy {r['last_busy']:.2f}, "
                     f"adds {r['adds']:.2f}, mean busy {r['busy_mean']:.2f}")
    return "\n".join(lines)


def format_marks(m: dict) -> str:
    lines = ["inside the tasks (mean us after the waits end, to each mark and to the signal):"]
    for kind, row in m.items():
        lines.append(f"  {kind:8s} " + ", ".join(f"{name} {v:.2f}" for name, v in row.items()))
    return "\n".join(lines)


def calibration(tg: TaskGraph, sched: Schedule, measured, base_scale: dict[str, float] | None = None,
                step: int | None = None) -> dict:
    """The calibration file's contents (``mkc.schedule.cost.load_calibration`` reads them).

    ``kind_scale``: the scheduler's per-kind factors that would have predicted ``measured``: for each
    kind of ``CALIBRATED_KINDS``, the factor the schedule was made with (``base_scale``) times the
    kind's measured occupancy of its workers over its predicted time in ``step`` (default: the last
    recorded one, past the cold first step). The occupancy is the busy time (start to end) plus,
    of the pipeline constants this trace determined, the dispatch of every task and the hop and
    straggle of every task that waits: the scheduler's model has no hop of its own (a consumer may
    start when its last producer ends), so its task times carry it; with busy times alone the
    calibrated makespan fell 3-11 % short of the measured step (BENCHMARKS.md, twelfth session).
    ``mkc compile --calibration FILE`` schedules with them.
    ``pipeline``: the pipelined timeline's constants fitted to every fully stamped step
    (``mkc.schedule.pipefit``; ``source.pipeline_fit`` says which the trace determined)."""
    from mkc.schedule.cost import CALIBRATED_KINDS
    from mkc.schedule.pipefit import fit_pipe
    from mkc.target import get_target

    s = summarize(tg, sched, measured, step)
    fit = fit_pipe(tg, sched.queues, get_target(sched.target), _as_steps(measured, len(tg.tasks)))
    pc = fit.cost
    base = dict(base_scale or {})
    scale = dict(base)

    def got(name):  # a constant this trace determined (not the prior's)
        return getattr(pc, name) if name in fit.fitted else 0.0

    for kind, v in s["per_kind"].items():
        if kind in CALIBRATED_KINDS and v["predicted_us"] > 0 and np.isfinite(v["ratio"]) and v["measured_us"] > 0:
            ids = [t for t in tg.tasks if t.kind == kind]
            occupancy = v["measured_us"] + len(ids) * got("dispatch_us") + \
                sum(1 for t in ids if t.waits) * (got("hop_us") + got("straggle_us"))
            scale[kind] = round(base.get(kind, 1.0) * occupancy / v["predicted_us"], 4)
    return {"kind_scale": scale,
            "pipeline": {"hop_us": pc.hop_us, "task_overhead_us": pc.task_overhead_us, "hbm_fraction": pc.hbm_fraction,
                         "page_latency_us": pc.page_latency_us, "tail_us": pc.tail_us, "dispatch_us": pc.dispatch_us,
                         "straggle_us": pc.straggle_us, "kind_scale": dict(pc.kind_scale)},
            "source": {"model": tg.model, "target": sched.target, "batch": sched.batch, "step": s["step"],
                       "measured_step_us": s["step_us"][s["step"]], "predicted_makespan_us": sched.makespan,
                       "base_scale": base,
                       "pipeline_fit": {"fitted": list(fit.fitted), "steps": fit.steps, "samples": dict(fit.samples),
                                        "gemv_rms_us": None if np.isnan(fit.gemv_rms_us) else
                                        round(fit.gemv_rms_us, 4)}}}


def predicted_vs_measured(tg: TaskGraph, sched: Schedule, measured, cost, old=None, step: int | None = None) -> dict:
    """Each traced step's measured time next to the scheduler's model (the timeline of the
    schedule's queues with ``old``'s task times, default the datasheet model: one step, the same
    for all) and the pipelined timeline under ``cost.pipe`` (``cost``: a ``CostModel``, e.g. a
    calibration file's), replayed over as many steps; and per kind, the busy time (start to end,
    summed over tasks) of ``step`` (default the last) measured and in both."""
    from mkc.schedule.cost import durations
    from mkc.schedule.pipemodel import pipelined_timeline
    from mkc.schedule.timeline import Deps, timeline
    from mkc.target import get_target

    ws, st, en = _as_steps(measured, len(tg.tasks))
    n = ws.shape[0]
    step = n - 1 if step is None else step
    target = get_target(sched.target)
    dur = np.asarray(durations(tg, target, old))
    _, old_end = timeline(Deps.from_taskgraph(tg), dur, sched.queues)
    pt = pipelined_timeline(tg, sched.queues, target, cost, steps=n)
    pipe_dur = np.asarray(pt.end[step]) - np.asarray(pt.start[step])
    per_kind = {}
    for t in tg.tasks:
        v = per_kind.setdefault(t.kind, dict(measured_us=0.0, old_us=0.0, pipelined_us=0.0))
        if np.isfinite(en[step, t.id]) and np.isfinite(st[step, t.id]):
            v["measured_us"] += float(en[step, t.id] - st[step, t.id])
        v["old_us"] += float(dur[t.id])
        v["pipelined_us"] += float(pipe_dur[t.id])
    return dict(step=step, measured_us=summarize(tg, sched, measured, step)["step_us"],
                old_us=float(max(old_end, default=0.0)), pipelined_us=pt.step_us(), per_kind=per_kind)


def format_prediction(p: dict) -> str:
    k = p["step"]
    meas, old, pipe = p["measured_us"][k], p["old_us"], p["pipelined_us"][k]
    ratio = lambda x: f" ({x / meas:.2f}x)" if meas > 0 and np.isfinite(meas) else ""  # noqa: E731
    lines = [f"step {k}: {meas:.1f} us measured; predicted {old:.1f} us by the scheduler's model{ratio(old)}, "
             f"{pipe:.1f} us by the pipelined model{ratio(pipe)}",
             "  per traced step, measured / pipelined (us): " + ", ".join(
                 f"{m:.1f} / {q:.1f}" for m, q in zip(p["measured_us"], p["pipelined_us"])),
             f"  busy time per kind in step {k}, measured / scheduler's / pipelined (us): " + ", ".join(
                 f"{kind} {v['measured_us']:.1f} / {v['old_us']:.1f} / {v['pipelined_us']:.1f}"
                 for kind, v in p["per_kind"].items())]
    return "\n".join(lines)


def format_summary(s: dict) -> str:
    steps = ", ".join(f"{x:.1f}" for x in s["step_us"])
    k = s["step"]
    pred = s["predicted_makespan_us"]
    periods = ", ".join(f"{x:.1f}" for x in s.get("period_us", []))
    lines = [f"measured step time (us) per traced step: {steps}",
             f"step period (us; a step's last end less the step before's): {periods}" if periods else "",
             f"step {k}: {s['step_us'][k]:.1f} us measured vs {pred:.1f} us predicted makespan "
             f"({s['step_us'][k] / pred:.2f}x)" if pred > 0 else
             f"step {k}: {s['step_us'][k]:.1f} us measured; the schedule predicts no times (makespan 0)"]
    if s["missing_tasks"]:
        lines.append(f"  {s['missing_tasks']} task(s) have no stamps in step {k}")
    lines.append(f"wait time per kind (step {k}, summed over tasks): " + ", ".join(
        f"{kind} {v['wait_us']:.1f} us" for kind, v in s["per_kind"].items()))
    lines.append("slowest kinds relative to prediction (measured / predicted busy time):")
    for kind in s["slowest"]:
        v = s["per_kind"][kind]
        ratio = f"{v['ratio']:6.2f}x" if np.isfinite(v["ratio"]) else "    n/a"
        lines.append(f"  {kind:8s} {ratio}  ({v['measured_us']:.1f} us measured, "
                     f"{v['predicted_us']:.1f} us predicted, {v['tasks']} tasks)")
    return "\n".join(ln for ln in lines if ln)


def trace_doc(tg: TaskGraph, sched: Schedule, measured) -> dict:
    """The Chrome/Perfetto trace document (see the module docstring)."""
    ws, st, en = _as_steps(measured, len(tg.tasks))
    wo = sched.worker_of()
    workers = [wo[t] for t in range(len(tg.tasks))]
    events: list[dict] = []
    for k in range(ws.shape[0]):
        events += trace_events(tg, st[k], en[k], workers, pid=MEASURED_PID, label="measured (device trace)",
                               metadata=k == 0, extra={"step": k})
        for t in tg.tasks:
            i = t.id
            if np.isfinite(ws[k, i]) and np.isfinite(st[k, i]) and st[k, i] > ws[k, i]:
                events.append({"name": "wait", "cat": "wait", "ph": "X", "pid": MEASURED_PID, "tid": workers[i],
                               "ts": round(float(ws[k, i]), 3), "dur": round(float(st[k, i] - ws[k, i]), 3),
                               "args": {"task": i, "kind": t.kind, "layer": t.layer, "step": k}})
        # the prediction at the step's first measured stamp
        origin = float(np.nanmin(ws[k])) if np.isfinite(ws[k]).any() else 0.0
        ps = [origin + float(x) for x in sched.start]
        pe = [origin + float(x) for x in sched.end]
        events += trace_events(tg, ps, pe, workers, pid=PREDICTED_PID, label=f"predicted ({sched.method})",
                               metadata=k == 0, extra={"step": k})
    # a task's wait_us in its args, for a click in the UI
    for e in events:
        if e.get("ph") == "X" and e.get("pid") == MEASURED_PID and e["name"] != "wait":
            k, i = e["args"]["step"], e["args"]["task"]
            e["args"]["wait_us"] = round(float(st[k, i] - ws[k, i]), 3) if np.isfinite(ws[k, i]) else None
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"model": tg.model, "target": sched.target, "batch": sched.batch, "method": sched.method,
                      "makespan_us": sched.makespan, "lower_bound_us": sched.lower_bound,
                      "traced_steps": int(ws.shape[0])},
    }


def write_trace(tg: TaskGraph, sched: Schedule, measured, path, png: str | Path | None = None,
                step: int | None = None) -> dict:
    """Write the Perfetto/Chrome trace to ``path`` and the measured-vs-predicted Gantt chart to ``png``
    (default: ``path`` with a .png suffix; False: none). Returns ``summarize``'s dict, with the paths."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace_doc(tg, sched, measured), separators=(",", ":")) + "\n")
    summary = summarize(tg, sched, measured, step)
    summary["trace"] = str(path)
    if png is not False:
        ws, st, en = _as_steps(measured, len(tg.tasks))
        k = summary["step"]
        origin = float(np.nanmin(ws[k])) if np.isfinite(ws[k]).any() else 0.0
        rel = [np.nan_to_num(a[k] - origin, nan=0.0) for a in (ws, st, en)]
        png = path.with_suffix(".png") if png is None else Path(png)
        gantt_compare_png(tg, sched, png, rel[1], rel[2], wait_start=rel[0],
                          title=f"{tg.model} on {sched.target}, batch {sched.batch}: measured step {k}, "
                                f"{summary['step_us'][k]:.1f} us")
        summary["png"] = str(png)
    return summary
