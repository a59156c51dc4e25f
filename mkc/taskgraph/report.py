"""Summary figures of a TaskGraph for report.json: counts per kind, bytes, and critical paths.

The critical path is measured without a cost model: ``critical_path_tasks`` is the longest chain of
dependent tasks from the step's inputs to ``next_ids`` (Hazy counts ~81 for Llama-1B), and
``critical_path_bytes`` the largest sum of task bytes along any chain (the bytes that must move one
after another whatever the schedule).
"""

from __future__ import annotations

import networkx as nx

from mkc.taskgraph.ir import TaskGraph
from mkc.capture.graph import DTYPE_BYTES


def task_dag(tg: TaskGraph) -> nx.DiGraph:
    """Tasks as nodes 0..n-1 and events as nodes ("e", id): task -> event it signals -> task waiting."""
    g = nx.DiGraph()
    g.add_nodes_from(range(len(tg.tasks)))
    for t in tg.tasks:
        g.add_edges_from((t.id, ("e", e)) for e in t.signals)
        g.add_edges_from((("e", e), t.id) for e in t.waits)
    return g


def _longest(g: nx.DiGraph, weight: dict[int, int]) -> int:
    best: dict = {}
    for node in nx.topological_sort(g):
        start = max((best[p] for p in g.predecessors(node)), default=0)
        best[node] = start + weight.get(node, 0) if isinstance(node, int) else start
    return max(best.values(), default=0)


def summary(tg: TaskGraph) -> dict:
    tasks_per_kind: dict[str, int] = {}
    bytes_per_kind: dict[str, int] = {}
    for t in tg.tasks:
        tasks_per_kind[t.kind] = tasks_per_kind.get(t.kind, 0) + 1
        bytes_per_kind[t.kind] = bytes_per_kind.get(t.kind, 0) + t.bytes
    kind = {t.id: t.kind for t in tg.tasks}
    prod = tg.producers()
    waiters: dict[int, set[str]] = {e.id: set() for e in tg.events}
    for t in tg.tasks:
        for e in t.waits:
            waiters[e].add(t.kind)
    events_per_edge: dict[str, int] = {}
    for e in tg.events:
        key = "+".join(sorted({kind[p] for p in prod[e.id]})) + ">" + "+".join(sorted(waiters[e.id]))
        events_per_edge[key] = events_per_edge.get(key, 0) + 1
    dag = task_dag(tg)
    weight_bytes = sum(_nbytes(b) for b in tg.buffers if b.role == "weight")
    return {
        "tasks": len(tg.tasks),
        "events": len(tg.events),
        "tasks_per_kind": tasks_per_kind,
        "events_per_edge": events_per_edge,
        "bytes": sum(t.bytes for t in tg.tasks),
        "bytes_per_kind": bytes_per_kind,
        "weight_bytes": weight_bytes,
        "flops": sum(t.flops for t in tg.tasks),
        "critical_path_tasks": _longest(dag, {t.id: 1 for t in tg.tasks}),
        "critical_path_bytes": _longest(dag, {t.id: t.bytes for t in tg.tasks}),
        "max_waits": max((len(t.waits) for t in tg.tasks), default=0),
        "max_signals": max((len(t.signals) for t in tg.tasks), default=0),
        "max_smem": max((t.smem for t in tg.tasks), default=0),
    }


def _nbytes(buf) -> int:
    n = DTYPE_BYTES[buf.dtype]
    for d in buf.shape:
        n *= d
    return n
