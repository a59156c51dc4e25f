"""Lowering a Graph into a TaskGraph of tiled, fused per-SM tasks; its summary; a CPU simulator.

    from mkc.taskgraph import lower, summary
    tg = lower(graph, get_target("h200"))
    from mkc.taskgraph import simulate      # imports torch
    out = simulate.run_step(tg, weights, caches, input_ids, pos, seed=0)
"""

from mkc.taskgraph.ir import Buffer, Event, Region, Task, TaskGraph
from mkc.taskgraph.lower import lower
from mkc.taskgraph.report import summary

__all__ = ["Buffer", "Event", "Region", "Task", "TaskGraph", "lower", "summary"]
