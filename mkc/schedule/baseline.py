"""The two baselines: round robin (what MPK does) and a critical-path list scheduler.

Both return a placement: an order of all tasks that respects the dependencies, and a worker per
task; ``Replay`` turns a placement into times. The list schedule is CP-SAT's warm start and the
fallback when CP-SAT does not beat it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from mkc.schedule.timeline import Deps


def round_robin(deps: Deps, num_workers: int) -> tuple[list[int], list[int]]:
    """Tasks in topological order (lowest id first, i.e. layer order) dealt to workers cyclically."""
    order = deps.topo_order()
    worker = [0] * deps.n
    for i, t in enumerate(order):
        worker[t] = i % num_workers
    return order, worker


def solo_producers(deps: Deps) -> list[int | None]:
    """Per task, the producer of the first event it waits on that has exactly one producer (None if
    none has): the task a same-worker placement would follow without a hop."""
    out: list[int | None] = [None] * deps.n
    for t in range(deps.n):
        for e in deps.waits[t]:
            if len(deps.prod[e]) == 1:
                out[t] = deps.prod[e][0]
                break
    return out


def list_schedule(
    deps: Deps, dur: Sequence[float], num_workers: int, priority: Sequence[float] | None = None
) -> tuple[list[int], list[int], list[float]]:
    """Graham list scheduling: whenever a worker is free, it takes the ready task of highest
    priority (default: longest path to the end of the graph; ties: a task whose only producer of
    some event ran on this worker, then lowest id: a chain such as split-K down's chunks of one row
    tile stays on one worker, where its hop costs no trip through another SM).

    Returns (order, worker, start) with order sorted by start.
    """
    n = deps.n
    if priority is None:
        _, priority = deps.levels(dur)
    solo = solo_producers(deps)
    need = [len(w) for w in deps.waits]
    left = [len(p) for p in deps.prod]
    fire = [0.0] * len(deps.prod)
    pending = [(0.0, t) for t in range(n) if need[t] == 0]  # (ready time, id): inputs all placed
    heapq.heapify(pending)
    avail: list[tuple[float, int]] = []  # (-priority, id): ready by now
    workers = [(0.0, w) for w in range(num_workers)]
    start = [0.0] * n
    worker = [0] * n
    order = []
    clock = 0.0  # never goes back: a worker free earlier than the clock idles until it
    while len(order) < n:
        free, w = heapq.heappop(workers)
        now = clock = max(clock, free)
        if not avail and pending and pending[0][0] > now:
            now = clock = pending[0][0]  # nothing ready: idle until something is
        while pending and pending[0][0] <= now:
            _, t = heapq.heappop(pending)
            heapq.heappush(avail, (-priority[t], t))
        _, t = heapq.heappop(avail)
        if solo[t] is not None and worker[solo[t]] != w:  # a tie whose chain ran here goes first
            ties = []
            while avail and avail[0][0] == -priority[t]:
                u = heapq.heappop(avail)[1]
                if solo[u] is not None and worker[solo[u]] == w:
                    ties.append(t)
                    t = u
                    break
                ties.append(u)
            for u in ties:
                heapq.heappush(avail, (-priority[u], u))
        start[t], worker[t] = now, w
        order.append(t)
        end = now + dur[t]
        heapq.heappush(workers, (end, w))
        for e in deps.signals[t]:
            left[e] -= 1
            fire[e] = max(fire[e], end)
            if left[e] == 0:
                for c in deps.cons[e]:
                    need[c] -= 1
                    if need[c] == 0:
                        ready = max(fire[x] for x in deps.waits[c])
                        heapq.heappush(pending, (ready, c))
    return order, worker, start
