"""Pictures of a schedule: a Gantt chart (PNG) and a Chrome/Perfetto trace (JSON).

Both take the times to draw as arguments, defaulting to the schedule's predictions, so a measured
device trace (per-task start/end and the worker that ran it) goes through the same writers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from mkc.schedule.ir import Schedule
from mkc.taskgraph.ir import TaskGraph
from mkc.taskgraph.kinds import KINDS, TASK_KINDS


def _times(sched: Schedule, start, end, workers) -> tuple[Sequence[float], Sequence[float], Sequence[int]]:
    start = sched.start if start is None else start
    end = sched.end if end is None else end
    if workers is None:
        wo = sched.worker_of()
        workers = [wo[t] for t in range(len(start))]
    if not len(start) == len(end) == len(workers):
        raise ValueError(f"{len(start)} starts, {len(end)} ends and {len(workers)} workers must agree")
    return start, end, workers


def kind_colors() -> dict[str, str]:
    """A fixed colour per task kind, the same in every picture."""
    return {k.name: k.color for k in KINDS}


def _draw_gantt(ax, tg: TaskGraph, start, end, workers, n_workers: int, waits=None) -> list[str]:
    """One bar per task on ``ax`` coloured by kind (wait spans, when given, as thin grey bars);
    returns the kinds drawn."""
    from matplotlib.collections import PolyCollection

    colors = kind_colors()
    h = 0.8
    kinds_used = []
    if waits is not None:
        verts = [[(waits[i], workers[i] - h / 8), (start[i], workers[i] - h / 8), (start[i], workers[i] + h / 8),
                  (waits[i], workers[i] + h / 8)] for i in range(len(start)) if start[i] > waits[i]]
        ax.add_collection(PolyCollection(verts, facecolors="#c7c7c7", edgecolors="none"))
    for kind in TASK_KINDS:
        ids = [t.id for t in tg.tasks if t.kind == kind]
        if not ids:
            continue
        kinds_used.append(kind)
        verts = [[(start[i], workers[i] - h / 2), (end[i], workers[i] - h / 2),
                  (end[i], workers[i] + h / 2), (start[i], workers[i] + h / 2)] for i in ids]
        ax.add_collection(PolyCollection(verts, facecolors=colors[kind], edgecolors="none"))
    ax.set_ylim(n_workers - 0.5, -0.5)
    ax.set_ylabel("worker (SM)")
    return kinds_used


def gantt_png(
    tg: TaskGraph,
    sched: Schedule,
    path,
    start: Sequence[float] | None = None,
    end: Sequence[float] | None = None,
    workers: Sequence[int] | None = None,
    title: str | None = None,
) -> Path:
    """Workers on y, time (us) on x, one bar per task coloured by kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    start, end, workers = _times(sched, start, end, workers)
    colors = kind_colors()
    n_workers = max(sched.num_workers, max(workers, default=-1) + 1)
    fig, ax = plt.subplots(figsize=(16, max(4.0, 1.5 + 0.06 * n_workers)))
    kinds_used = _draw_gantt(ax, tg, start, end, workers, n_workers)
    t_end = max(end, default=1.0)
    ax.set_xlim(0, t_end * 1.01 if t_end > 0 else 1.0)
    ax.set_xlabel("time (us)")
    span = t_end - min(start, default=0.0)
    ax.set_title(title or f"{tg.model} on {sched.target}, batch {sched.batch}: {sched.method}, "
                 f"makespan {span:.1f} us, lower bound {sched.lower_bound:.1f} us")
    ax.legend(handles=[Patch(color=colors[k], label=k) for k in kinds_used], loc="upper center",
              bbox_to_anchor=(0.5, -0.5 / fig.get_figheight()), ncol=len(kinds_used), frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def gantt_compare_png(
    tg: TaskGraph,
    sched: Schedule,
    path,
    start: Sequence[float],
    end: Sequence[float],
    wait_start: Sequence[float] | None = None,
    title: str | None = None,
) -> Path:
    """Two panels on one time axis: the measured step (with its wait spans in grey) over the
    schedule's prediction. Measured times are in us from the step's first stamp."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    _, _, workers = _times(sched, start, end, None)
    colors = kind_colors()
    n_workers = max(sched.num_workers, max(workers, default=-1) + 1)
    fig, (am, ap) = plt.subplots(2, 1, sharex=True, figsize=(16, max(6.0, 2.5 + 0.12 * n_workers)))
    kinds = _draw_gantt(am, tg, start, end, workers, n_workers, waits=wait_start)
    _draw_gantt(ap, tg, sched.start, sched.end, workers, n_workers)
    m_end = max(end, default=0.0)
    t_end = max(m_end, max(sched.end, default=0.0), 1e-3)
    ap.set_xlim(0, t_end * 1.01)
    ap.set_xlabel("time (us)")
    am.set_title(title or f"{tg.model} on {sched.target}, batch {sched.batch}: measured step {m_end:.1f} us")
    ap.set_title(f"predicted ({sched.method}): makespan {sched.makespan:.1f} us")
    handles = [Patch(color=colors[k], label=k) for k in kinds]
    if wait_start is not None:
        handles.append(Patch(color="#c7c7c7", label="wait"))
    ap.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.5 / fig.get_figheight()),
              ncol=len(handles), frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def trace_events(
    tg: TaskGraph,
    start: Sequence[float],
    end: Sequence[float],
    workers: Sequence[int],
    pid: int = 0,
    label: str = "predicted",
    metadata: bool = True,
    extra: dict | None = None,
) -> list[dict]:
    """Chrome trace events: one thread per worker, one complete ("X") event per task, times in us.
    ``metadata=False`` leaves out the process/thread names (a second call into the same process);
    ``extra`` is merged into every event's args. A task whose start or end is NaN is left out."""
    events: list[dict] = []
    if metadata:
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
        for w in sorted(set(workers)):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": w, "args": {"name": f"SM {w}"}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": w, "args": {"sort_index": w}})
    for t in tg.tasks:
        i = t.id
        if start[i] != start[i] or end[i] != end[i]:  # NaN: not measured
            continue
        events.append({
            "name": t.kind,  # Perfetto colours by name: one colour per kind
            "cat": t.kind,
            "ph": "X",
            "pid": pid,
            "tid": workers[i],
            "ts": round(float(start[i]), 3),
            "dur": round(float(end[i]) - float(start[i]), 3),
            "args": {"task": i, "kind": t.kind, "layer": t.layer, "args": list(t.args), **(extra or {})},
        })
    return events


def perfetto_trace(
    tg: TaskGraph,
    sched: Schedule,
    path,
    start: Sequence[float] | None = None,
    end: Sequence[float] | None = None,
    workers: Sequence[int] | None = None,
    label: str | None = None,
) -> Path:
    """Write a trace that opens in ui.perfetto.dev (or chrome://tracing)."""
    start, end, workers = _times(sched, start, end, workers)
    label = label or f"mkc {sched.method} (predicted)"
    doc = {
        "traceEvents": trace_events(tg, start, end, workers, label=label),
        "displayTimeUnit": "ns",
        "otherData": {"model": tg.model, "target": sched.target, "batch": sched.batch, "method": sched.method,
                      "makespan_us": sched.makespan, "lower_bound_us": sched.lower_bound},
    }
    path = Path(path)
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return path
