"""Dependencies of a task graph, and the times a set of per-worker queues would run at.

Dependencies stay in event form: a task depends on every producer of every event it waits on, and
a fan-in/fan-out event of P producers and C consumers is P + C entries here, not P * C edges.
Events no task signals are dropped from ``waits`` (always satisfied).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from mkc.errors import ScheduleError
from mkc.taskgraph.ir import TaskGraph


@dataclass(frozen=True)
class Deps:
    n: int
    waits: tuple[tuple[int, ...], ...]  # per task: events (with producers) it waits on
    signals: tuple[tuple[int, ...], ...]  # per task: events it signals
    prod: tuple[tuple[int, ...], ...]  # per event: producer tasks
    cons: tuple[tuple[int, ...], ...]  # per event: consumer tasks

    @staticmethod
    def from_taskgraph(tg: TaskGraph) -> "Deps":
        ne = len(tg.events)
        prod: list[list[int]] = [[] for _ in range(ne)]
        cons: list[list[int]] = [[] for _ in range(ne)]
        for t in tg.tasks:
            for e in t.signals:
                prod[e].append(t.id)
        waits = []
        for t in tg.tasks:
            w = tuple(sorted({e for e in t.waits if prod[e]}))
            for e in w:
                cons[e].append(t.id)
            waits.append(w)
        signals = tuple(tuple(sorted(set(t.signals))) for t in tg.tasks)
        return Deps(len(tg.tasks), tuple(waits), signals, tuple(map(tuple, prod)), tuple(map(tuple, cons)))

    def restrict(self, tasks: Sequence[int]) -> "Deps":
        """The sub-problem on ``tasks`` (renumbered 0..k-1 in the given order); outside producers
        count as done at time 0."""
        local = {t: i for i, t in enumerate(tasks)}
        ev_local: dict[int, int] = {}
        prod: list[list[int]] = []
        for t in tasks:
            for e in self.signals[t]:
                if e not in ev_local:
                    ev_local[e] = len(prod)
                    prod.append([local[p] for p in self.prod[e] if p in local])
        cons: list[list[int]] = [[] for _ in prod]
        waits, signals = [], []
        for i, t in enumerate(tasks):
            w = tuple(sorted(ev_local[e] for e in self.waits[t] if e in ev_local))
            for e in w:
                cons[e].append(i)
            waits.append(w)
            signals.append(tuple(sorted(ev_local[e] for e in self.signals[t])))
        return Deps(len(tasks), tuple(waits), tuple(signals), tuple(map(tuple, prod)), tuple(map(tuple, cons)))

    def preds(self, t: int) -> set[int]:
        return {p for e in self.waits[t] for p in self.prod[e]}

    def edges(self):
        """Task-level dependency edges (producer, consumer); P * C per event, for small graphs."""
        for e, ps in enumerate(self.prod):
            for p in ps:
                for c in self.cons[e]:
                    yield p, c

    def topo_order(self) -> list[int]:
        """Topological order, smallest id first among ready tasks; a cycle is a ScheduleError."""
        need = [len(w) for w in self.waits]
        left = [len(p) for p in self.prod]
        ready = [t for t in range(self.n) if need[t] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            t = heapq.heappop(ready)
            order.append(t)
            for e in self.signals[t]:
                left[e] -= 1
                if left[e] == 0:
                    for c in self.cons[e]:
                        need[c] -= 1
                        if need[c] == 0:
                            heapq.heappush(ready, c)
        if len(order) < self.n:
            stuck = set(range(self.n)) - set(order)
            g = nx.DiGraph((p, c) for e in range(len(self.prod)) for p in self.prod[e] for c in self.cons[e]
                           if p in stuck and c in stuck)
            cycle = [u for u, _ in nx.find_cycle(g)] if g.number_of_edges() else sorted(stuck)[:8]
            raise ScheduleError(f"the task graph has a dependency cycle through tasks {cycle[:12]}")
        return order

    def levels(
        self, dur: Sequence[float], order: Sequence[int] | None = None, num_workers: int | None = None
    ) -> tuple[list[float], list[float]]:
        """(top, bottom): a lower bound on each task's start, and on the time from its start to
        the end of the graph (its own time included).

        Without ``num_workers`` these are the longest paths (unlimited workers). With it, an
        event's producers must also fit on the workers between the earliest of them starting and
        the event firing (``packing``), and likewise its consumers after it fires: on a chain of
        barriers wider than the machine this counts the rounds the critical path ignores.
        """
        order = order if order is not None else self.topo_order()
        ne = len(self.prod)
        top = [0.0] * self.n
        fire = [0.0] * ne
        first = [math.inf] * ne  # earliest top of the event's producers
        left = [len(p) for p in self.prod]
        for t in order:
            top[t] = max((fire[e] for e in self.waits[t]), default=0.0)
            for e in self.signals[t]:
                fire[e] = max(fire[e], top[t] + dur[t])
                first[e] = min(first[e], top[t])
                left[e] -= 1
                if num_workers and left[e] == 0 and len(self.prod[e]) > 1:
                    fire[e] = max(fire[e], first[e] + packing([dur[p] for p in self.prod[e]], num_workers))
        bottom = [0.0] * self.n
        need = [0.0] * ne  # from the event firing to the end of the graph
        tail = [math.inf] * ne  # least time after one of its consumers ends
        left = [len(c) for c in self.cons]
        for t in reversed(order):
            bottom[t] = dur[t] + max((need[e] for e in self.signals[t]), default=0.0)
            for e in self.waits[t]:
                need[e] = max(need[e], bottom[t])
                tail[e] = min(tail[e], bottom[t] - dur[t])
                left[e] -= 1
                if num_workers and left[e] == 0 and len(self.cons[e]) > 1:
                    need[e] = max(need[e], tail[e] + packing([dur[c] for c in self.cons[e]], num_workers))
        return top, bottom


def packing(durs: Sequence[float], num_workers: int) -> float:
    """A lower bound on the time ``durs`` take on ``num_workers`` identical workers."""
    k = -(-len(durs) // num_workers)  # some worker runs at least k of them
    return max(max(durs), sum(durs) / num_workers, sum(sorted(durs)[:k]))


class Replay:
    """Times of tasks placed in an order that already respects dependencies and queue order.

    Each task starts at max(its worker's free time, the firing of every event it waits on) and
    runs for its predicted time. Tasks may be fed in several calls (segment by segment).
    """

    def __init__(self, deps: Deps, dur: Sequence[float], num_workers: int):
        self.deps, self.dur = deps, dur
        self.free = [0.0] * num_workers
        self.left = [len(p) for p in deps.prod]
        self.fire = [0.0] * len(deps.prod)
        self.start = [float("nan")] * deps.n
        self.end = [float("nan")] * deps.n
        self.worker = [-1] * deps.n
        self.queues: list[list[int]] = [[] for _ in range(num_workers)]

    def place(self, t: int, w: int) -> None:
        d = self.deps
        ready = self.free[w]
        for e in d.waits[t]:
            if self.left[e]:
                raise ScheduleError(f"task {t} placed before all producers of event {e} are placed")
            ready = max(ready, self.fire[e])
        self.start[t], self.end[t] = ready, ready + self.dur[t]
        self.free[w] = self.end[t]
        self.worker[t] = w
        self.queues[w].append(t)
        for e in d.signals[t]:
            self.left[e] -= 1
            self.fire[e] = max(self.fire[e], self.end[t])

    @property
    def makespan(self) -> float:
        return max(self.free, default=0.0)


def timeline(
    deps: Deps, dur: Sequence[float], queues: Sequence[Sequence[int]], names=None
) -> tuple[list[float], list[float]]:
    """(start, end) of every task when each worker runs its queue in order.

    A set of queues that can never finish (a worker's head waits on a task queued behind a blocked
    head) is a ScheduleError naming the blocked heads; ``names(t)`` describes a task for it.
    """
    rep = Replay(deps, dur, len(queues))
    head = [0] * len(queues)
    placed = 0
    progress = True
    while progress:
        progress = False
        for w, q in enumerate(queues):
            while head[w] < len(q) and all(rep.left[e] == 0 for e in deps.waits[q[head[w]]]):
                rep.place(q[head[w]], w)
                head[w] += 1
                placed += 1
                progress = True
    total = sum(len(q) for q in queues)
    if placed < total:
        names = names or (lambda t: f"task {t}")
        blocked = []
        for w, q in enumerate(queues):
            if head[w] < len(q):
                t = q[head[w]]
                e = next(e for e in deps.waits[t] if rep.left[e])
                blocked.append(f"worker {w} at {names(t)} waits on event {e} "
                               f"({len(deps.prod[e]) - rep.left[e]}/{len(deps.prod[e])} signalled)")
        raise ScheduleError("the queues deadlock:\n  " + "\n  ".join(blocked[:12]))
    return rep.start, rep.end
