"""Events from regions: a consumer waits exactly for the producer tiles whose writes it reads.

The rule, in three steps:

1. For every task and every buffer it reads, the *producer set* is the set of tasks whose write
   regions intersect its read regions of that buffer (weights, consts and inputs have no
   producers, so they never create dependencies).
2. Consumers with an identical producer set share one event (triggers = the set's size).
3. Events waited on by exactly the same consumers are merged (the union of their producers):
   waiting on both is the same as waiting on the union, and producers signal fewer counters.
   Steps 2 and 3 repeat until nothing changes.

An event's ``regions`` are its producers' writes to polled buffers, coalesced into as few boxes as
possible: what NaN mode polls. So an event fires in NaN mode when, and only when, every write of
every producer is visible, just as in atomic mode (only the logits, which no task reads, are not
polled).

Producer sets are found with an owner grid per buffer: the writers' box edges cut each dimension
into intervals, a numpy array over the cells records which task writes each cell, and a read box
maps to a slice of it by bisection. Every region lookup is therefore a small slice, never a scan over
all writers, and identical read boxes (e.g. "all of attn.3") are looked up once.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

import numpy as np

from mkc.errors import IRCheckError
from mkc.taskgraph.ir import Buffer, Event, Region

Box = tuple[tuple[int, int], ...]


@dataclass
class Draft:
    """A task before events are known (ids are list positions; ``bytes`` is filled by lowering)."""

    kind: str
    layer: int
    args: tuple[int, ...]
    reads: list[Region]
    writes: list[Region]
    smem: int
    flops: int
    index: int = 0  # position among the tasks of the same (layer, kind), for names
    bytes: int = 0


class OwnerGrid:
    """Which task writes each cell of one buffer (each element is written by one task per step)."""

    def __init__(self, name: str, shape: tuple[int, ...], writers: list[tuple[int, Box]]):
        self.cuts = []
        for d, n in enumerate(shape):
            edges = {0, n}
            for _, box in writers:
                edges.update(box[d])
            self.cuts.append(sorted(edges))
        self.owner = np.full([len(c) - 1 for c in self.cuts], -1, dtype=np.int64)
        index = [{v: i for i, v in enumerate(c)} for c in self.cuts]
        covered = 0
        for tid, box in writers:
            sl = tuple(slice(ix[lo], ix[hi]) for ix, (lo, hi) in zip(index, box))
            self.owner[sl] = tid
            covered += math.prod(s.stop - s.start for s in sl)
        if covered != int((self.owner >= 0).sum()):  # some cell was written twice: find by whom
            seen = np.full(self.owner.shape, -1, dtype=np.int64)
            for tid, box in writers:
                cells = seen[self._slices(box)]
                if (cells >= 0).any():
                    other = int(cells[cells >= 0].flat[0])
                    raise IRCheckError(f"tasks {other} and {tid} both write {name}{list(box)}: "
                                       f"every element must have one writer per step")
                cells[...] = tid

    def _slices(self, box: Box) -> tuple[slice, ...]:
        return tuple(slice(bisect_right(c, lo) - 1, bisect_left(c, hi)) for c, (lo, hi) in zip(self.cuts, box))

    def writers_of(self, box: Box) -> frozenset[int]:
        cells = self.owner[self._slices(box)]
        found = set(cells.ravel().tolist()) if cells.size <= 256 else set(np.unique(cells).tolist())
        found.discard(-1)
        return frozenset(found)


@dataclass
class _Group:
    producers: frozenset[int]
    waiters: set[int] = field(default_factory=set)


def _merge(groups: list[_Group], key) -> list[_Group]:
    out: dict = {}
    for g in groups:
        k = key(g)
        if k in out:
            out[k].producers = out[k].producers | g.producers
            out[k].waiters |= g.waiters
        else:
            out[k] = g
    return list(out.values())


def coalesce(regions: list[Region]) -> tuple[Region, ...]:
    """Union of boxes per buffer, merging boxes that agree on all dimensions but one and touch on it."""
    by_buf: dict[str, set[Box]] = {}
    for r in regions:
        by_buf.setdefault(r.buffer, set()).add(r.box)
    out: list[Region] = []
    for buf, boxes in by_buf.items():
        ndim = len(next(iter(boxes)))
        while True:
            before = len(boxes)
            for d in reversed(range(ndim)):
                rows: dict[Box, list[tuple[int, int]]] = {}
                for b in boxes:
                    rows.setdefault(b[:d] + b[d + 1:], []).append(b[d])
                merged: set[Box] = set()
                for rest, ivals in rows.items():
                    ivals.sort()
                    cur = list(ivals[0])
                    for lo, hi in ivals[1:]:
                        if lo <= cur[1]:
                            cur[1] = max(cur[1], hi)
                        else:
                            merged.add(rest[:d] + (tuple(cur),) + rest[d:])
                            cur = [lo, hi]
                    merged.add(rest[:d] + (tuple(cur),) + rest[d:])
                boxes = merged
            if len(boxes) == before:
                break
        out.extend(Region(buf, b) for b in sorted(boxes))
    return tuple(out)


def _describe(ids: frozenset[int], drafts: list[Draft], counts: dict[tuple[int, str], int]) -> str:
    by_kind: dict[tuple[int, str], list[int]] = {}
    for t in ids:
        d = drafts[t]
        by_kind.setdefault((d.layer, d.kind), []).append(d.index)
    parts = []
    for (layer, kind), idx in sorted(by_kind.items()):
        prefix = f"l{layer}." if layer >= 0 else ""
        if len(idx) == counts[(layer, kind)]:
            parts.append(f"{prefix}{kind}[*]")
            continue
        idx.sort()
        runs, start = [], idx[0]
        for a, b in zip(idx, idx[1:] + [None]):
            if b != a + 1:
                runs.append(str(start) if start == a else f"{start}-{a}")
                start = b
        parts.append(f"{prefix}{kind}[{','.join(runs)}]")
    return "+".join(parts)


def build_events(drafts: list[Draft], buffers: dict[str, Buffer]):
    """Returns (events, waits per task, signals per task) for tasks given in a topological order."""
    writers: dict[str, list[tuple[int, Box]]] = {}
    for tid, d in enumerate(drafts):
        for r in d.writes:
            writers.setdefault(r.buffer, []).append((tid, r.box))
    grids = {name: OwnerGrid(name, buffers[name].shape, w) for name, w in writers.items()}

    memo: dict[tuple[str, Box], tuple[frozenset[int], int]] = {}  # read box -> (writers, last writer)
    groups: dict[frozenset[int], _Group] = {}
    for tid, d in enumerate(drafts):
        per_buf: dict[str, frozenset[int]] = {}
        for r in d.reads:
            grid = grids.get(r.buffer)
            if grid is None:
                continue
            key = (r.buffer, r.box)
            hit = memo.get(key)
            if hit is None:
                found = grid.writers_of(r.box)
                hit = memo[key] = (found, max(found, default=-1))
            prods, last = hit
            if last >= tid:
                raise IRCheckError(f"task {tid} ({d.kind}) reads {r.buffer} written by task {last} "
                                   f"({drafts[last].kind}): a task must come after the tasks whose writes it reads")
            if prods:
                per_buf[r.buffer] = per_buf[r.buffer] | prods if r.buffer in per_buf else prods
        for prods in per_buf.values():
            groups.setdefault(prods, _Group(prods)).waiters.add(tid)

    merged = list(groups.values())
    while True:
        n = len(merged)
        merged = _merge(merged, lambda g: frozenset(g.waiters))
        merged = _merge(merged, lambda g: g.producers)
        if len(merged) == n:
            break
    merged.sort(key=lambda g: (min(g.waiters), min(g.producers), len(g.producers)))

    counts: dict[tuple[int, str], int] = {}
    for d in drafts:
        counts[(d.layer, d.kind)] = counts.get((d.layer, d.kind), 0) + 1
    events: list[Event] = []
    waits: list[list[int]] = [[] for _ in drafts]
    signals: list[list[int]] = [[] for _ in drafts]
    for eid, g in enumerate(merged):
        polled = []
        for p in sorted(g.producers):
            signals[p].append(eid)
            polled += [w for w in drafts[p].writes if buffers[w.buffer].polled]
        for t in g.waiters:
            waits[t].append(eid)
        waiter_kinds = "+".join(sorted({drafts[t].kind for t in g.waiters}))
        name = f"{_describe(g.producers, drafts, counts)}>{waiter_kinds}"
        events.append(Event(eid, name, len(g.producers), coalesce(polled)))
    return events, [tuple(sorted(w)) for w in waits], [tuple(sorted(s)) for s in signals]
