"""The static verifier: proves a Schedule safe for its TaskGraph on a target, or says why not.

Execution model (docs/sync.md, and the kernel's decode loop in codegen). Worker w runs
``queues[w]`` in order once per decode step. From the second step of a launch on, ``embed`` tasks
also wait until every ``argmax`` of the previous step has bumped the loop counter; nothing else
orders step s+1 after step s. So every task must happen before the step's argmax and after the
step's embed tasks: then all of step s happens before all of step s+1 (docs/sync.md's parity
argument). The decode launch's early exit (tokens.cuh ``stop_launch``) relies on the second half:
every block stops after the same step, so a launch is still a prefix of these steps. Within a step a wait orders its task after:

- atomic: every signaler of the event, when the schedule's threshold equals the number of
  signalers. A lower threshold fires early and, because counters never reset (``count >=
  threshold * (step + 1)``), in the long run does not wait at all: it orders nothing. A higher one
  never fires: a hang.
- nan: the tasks that write the polled words of the event's regions (polled buffers only; other
  buffers never hold the sentinel, so polling them does not wait). From step 2 on, words whose
  writer does not re-arm still hold that writer's data of step s-2, so they order nothing either;
  cache words are filled with the sentinel by the host and written once, so they always order.

Attention tasks also load cache rows before ``pos`` before they wait (docs/sync.md "Attention's loads
before its wait"). No task writes those rows in a step (caches are written at ``pos`` only, which
the race check sees), and they come after every task of earlier steps by the checks below: a
worker's earlier task of the step descends from the step's embed tasks, and the first task of a
queue (``TF_STEP_FIRST`` in the tables) waits for the loop counter itself.

Happens-before is the transitive closure of those edges and queue order. It is computed as
ancestor/descendant bitsets (Python ints) over the order in which the deadlock check's
simulation of step 0 completes the tasks, so the race check asks one bitset question per pair of
(writer, distinct box). The first six checks are those of DESIGN.md "Static verification"; the
seventh, device memory, is the footprint model of mkc.verify.memory. Each diagnostic names tasks,
events, workers and buffer regions. Warnings do not fail a check: they describe inconsistencies
that are harmless in this schedule (e.g. a threshold below the trigger count whose waiter is
ordered after every producer it reads through other paths).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import networkx as nx

from mkc.errors import VerificationError
from mkc.verify.boxes import Box, BoxIndex, fmt_box, intersect, overlap, uncovered
from mkc.schedule.ir import KernelPlan, Schedule
from mkc.backend import for_target
from mkc.schedule.cost import launched_smem, plan_of, prefetch_bytes, stream_bytes
from mkc.target import Target
from mkc.taskgraph.ir import TaskGraph
from mkc.taskgraph.kinds import STEP_END_KINDS, STEP_START_KINDS

CHECKS = (
    ("events", "events and thresholds"),
    ("deadlock", "deadlock and residency"),
    ("race", "races"),
    ("smem", "shared memory"),
    ("nan", "NaN sentinel"),
    ("tables", "queue and table sizes"),
    ("memory", "device memory"),
)
MAX_LISTED = 12  # diagnostics kept per check; the rest are counted
CACHE_SEQ_DIM = 2  # caches are [B, nkv, L, hd]; the sequence position is decided at run time


# ---- the report ----------------------------------------------------------------------------


@dataclass
class Check:
    name: str
    title: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    summary: str = ""
    skipped: bool = False
    more: int = 0  # errors beyond MAX_LISTED
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)  # numbers a report shows (the memory budget)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.skipped

    def error(self, msg: str) -> None:
        if len(self.errors) < MAX_LISTED:
            self.errors.append(msg)
        else:
            self.more += 1

    def warn(self, msg: str) -> None:
        if len(self.warnings) < MAX_LISTED:
            self.warnings.append(msg)

    @property
    def status(self) -> str:
        return "SKIP" if self.skipped and not self.errors else ("PASS" if self.ok else "FAIL")


@dataclass
class VerifyReport:
    checks: list[Check]
    sync: str
    tasks: int
    workers: int
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.ok]

    def verdict(self) -> str:
        n_ok = sum(c.ok for c in self.checks)
        head = "SAFE" if self.ok else "UNSAFE"
        tail = "" if self.ok else f"; failed: {', '.join(self.failed())}"
        return (f"{head}: {n_ok}/{len(self.checks)} checks pass ({self.tasks} tasks, {self.workers} workers, "
                f"sync {self.sync}, {self.seconds:.2f} s){tail}")

    def text(self) -> str:
        rows = [f"{'#':>2} {'check':<26} {'result':<6} detail"]
        for i, c in enumerate(self.checks, 1):
            rows.append(f"{i:>2} {c.title:<26} {c.status:<6} {c.summary}")
        for c in self.checks:
            for e in c.errors:
                rows.append(f"  [{c.name}] error: {e}")
            if c.more:
                rows.append(f"  [{c.name}] ... and {c.more} more errors")
            for w in c.warnings:
                rows.append(f"  [{c.name}] warning: {w}")
        rows.append(self.verdict())
        return "\n".join(rows)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "verdict": self.verdict(), "seconds": round(self.seconds, 3),
                "checks": [{"name": c.name, "title": c.title, "status": c.status, "summary": c.summary,
                            "errors": c.errors, "more_errors": c.more, "warnings": c.warnings,
                            "seconds": round(c.seconds, 3), **({"figures": c.figures} if c.figures else {})}
                           for c in self.checks]}

    def raise_if_unsafe(self) -> "VerifyReport":
        if not self.ok:
            raise VerificationError(self.text())
        return self


# ---- the residency model -------------------------------------------------------------------


def blocks_per_sm(target: Target, plan: KernelPlan, smem_bytes: int | None = None) -> tuple[int, str]:
    """Blocks of ``plan`` one SM/CU holds at once, and what limits it: the occupancy rules of the
    target's backend (``mkc.backend.LaunchLimits``), with ``smem_bytes`` (default the plan's) per block."""
    limits = for_target(target).launch_limits(target)
    smem = plan.smem_bytes if smem_bytes is None else smem_bytes
    return limits.blocks_per_sm(target, plan.threads, plan.regs_per_thread, smem)


# ---- the analysis --------------------------------------------------------------------------


class _Analysis:
    def __init__(self, tg: TaskGraph, sched: Schedule, target: Target):
        self.tg, self.sched, self.target = tg, sched, target
        self.n = len(tg.tasks)
        self.nan = sched.sync == "nan"
        self.bufs = {b.name: b for b in tg.buffers}
        self.worker: dict[int, int] = {}
        self.slot: dict[int, int] = {}
        for w, q in enumerate(sched.queues):
            for i, t in enumerate(q):
                if 0 <= t < self.n and t not in self.worker:
                    self.worker[t], self.slot[t] = w, i
        self.signalers: list[list[int]] = [[] for _ in tg.events]
        for t in tg.tasks:
            for e in t.signals:
                if 0 <= e < len(tg.events) and t.id in self.worker:
                    self.signalers[e].append(t.id)
        self.waiters: list[list[int]] = [[] for _ in tg.events]
        for t in tg.tasks:
            for e in set(t.waits):
                if 0 <= e < len(tg.events):
                    self.waiters[e].append(t.id)
        self.writes: dict[str, list[tuple[int, Box]]] = {}
        for t in tg.tasks:
            if t.id in self.worker:
                for r in t.writes:
                    self.writes.setdefault(r.buffer, []).append((t.id, r.box))
        self.reads: dict[str, list[tuple[int, Box]]] = {}
        for t in tg.tasks:
            if t.id in self.worker:
                for r in t.reads:
                    self.reads.setdefault(r.buffer, []).append((t.id, r.box))
        self.windex = {b: BoxIndex([box for _, box in ws]) for b, ws in self.writes.items()}

    # words a user can act on
    def task(self, t: int) -> str:
        k = self.tg.tasks[t]
        layer = f"l{k.layer} " if k.layer >= 0 else ""
        where = f"worker {self.worker[t]} #{self.slot[t]}" if t in self.worker else "not queued"
        return f"task {t} ({layer}{k.kind} {','.join(map(str, k.args))}; {where})"

    def event(self, e: int) -> str:
        ev = self.tg.events[e]
        thr = self.sched.thresholds[e] if e < len(self.sched.thresholds) else "?"
        return f"event {e} '{ev.name}' (triggers {ev.triggers}, threshold {thr})"

    def writers_of(self, buffer: str, box: Box) -> list[int]:
        idx = self.windex.get(buffer)
        if idx is None:
            return []
        ws = self.writes[buffer]
        return sorted({ws[i][0] for i in idx.query(box)})

    def coverage_gap(self, buffer: str, box: Box) -> list[Box]:
        """Parts of ``box`` no task writes in a step (caches: whatever the position)."""
        idx = self.windex.get(buffer)
        if idx is None:
            return [box]
        cache = self.bufs[buffer].role == "cache"

        def flat(b: Box) -> Box:
            return tuple((0, 1) if cache and d == CACHE_SEQ_DIM else iv for d, iv in enumerate(b))

        # a cache read of positions before pos (ir.py) needs those positions written in earlier steps,
        # so writers anywhere along the sequence count
        query = tuple((0, self.bufs[buffer].shape[d]) if cache and d == CACHE_SEQ_DIM else iv
                      for d, iv in enumerate(box))
        return uncovered(flat(box), [flat(self.writes[buffer][i][1]) for i in idx.query(query)])



def _event_edges(a: _Analysis, ev_check: Check, nan_check: Check):
    """Per event: the tasks whose completion its wait counts in step 0, how many it needs (None:
    never satisfied), and the tasks a wait on it orders before the waiter in every step."""
    tg, sched = a.tg, a.sched
    members: list[list[int]] = []
    need: list[int | None] = []
    order: list[list[int]] = []
    for e, ev in enumerate(tg.events):
        ws = a.waiters[e]
        first = (f"{a.task(ws[0])}" + (f" and {len(ws) - 1} more tasks" if len(ws) > 1 else "")) if ws else ""
        thr = sched.thresholds[e] if e < len(sched.thresholds) else None
        sig = a.signalers[e]
        if not a.nan:
            members.append(sig)
            if thr is None or thr < 0:
                need.append(None if ws else 0)
                order.append([])
                continue
            if thr > len(sig):
                if ws:
                    why = "no queued task signals it" if not sig else f"only {len(sig)} queued tasks signal it"
                    ev_check.error(f"{a.event(e)} can never fire: {why}, so {first} hang "
                                   f"(the threshold must equal the number of signalers)")
                need.append(None if ws else 0)
                order.append(sig)
                continue
            need.append(thr)
            order.append(sig if thr == len(sig) else [])
            if ws and thr == 0:
                ev_check.warn(f"{a.event(e)} has threshold 0 (or no signalers): waiting on it orders nothing")
            if ws and thr == len(sig) != ev.triggers:
                ev_check.warn(f"{a.event(e)}: {len(sig)} queued tasks signal it but its trigger count is "
                              f"{ev.triggers}; the kernel uses the threshold, which matches")
            continue
        # nan: a poll of a region waits for the writers of its words (all of them in step 0)
        blockers: set[int] = set()
        orderers: set[int] = set()
        stuck = False
        for r in ev.regions:
            buf = a.bufs.get(r.buffer)
            if buf is None:
                nan_check.error(f"{a.event(e)} polls unknown buffer {r.buffer}")
                continue
            if not buf.polled:
                if ws:
                    nan_check.warn(f"{a.event(e)} polls {fmt_box(r.buffer, r.box)}, but {r.buffer} is not a "
                                   f"polled buffer (never holds the sentinel): that poll does not wait")
                continue
            writers = a.writers_of(r.buffer, r.box)
            blockers.update(writers)
            cache = buf.role == "cache"
            orderers.update(w for w in writers if cache or tg.tasks[w].rearm)
            gap = a.coverage_gap(r.buffer, r.box)
            if gap and ws:
                stuck = True
                nan_check.error(f"{a.event(e)} polls {fmt_box(r.buffer, r.box)} but no queued task writes "
                                f"{fmt_box(r.buffer, gap[0])}: the sentinel stays there and {first} hang")
        members.append(sorted(blockers))
        need.append(None if stuck else len(blockers))
        order.append(sorted(orderers))
    return members, need, order


def _deadlock(a: _Analysis, block, need_in, check: Check) -> list[int] | None:
    """Simulates step 0 (waits count completed tasks exactly); returns the completion order, or
    None after reporting why some worker stops. Later steps wait for no more than step 0 does."""
    tg, queues = a.tg, a.sched.queues
    need = [-1 if k is None else k for k in need_in]
    have = [0] * len(block)
    feeds: dict[int, list[int]] = {}
    for e, b in enumerate(block):
        for t in b:
            feeds.setdefault(t, []).append(e)
    waits = [sorted({e for e in t.waits if 0 <= e < len(block)}) for t in tg.tasks]
    ptr = [0] * len(queues)
    done = bytearray(a.n)
    order: list[int] = []
    head_of: dict[int, list[int]] = {}  # event -> workers whose head task waits on it

    def ready(t: int) -> bool:
        return all(need[e] >= 0 and have[e] >= need[e] for e in waits[t])

    stack = list(range(len(queues)))
    while stack:
        w = stack.pop()
        q = queues[w]
        while ptr[w] < len(q):
            t = q[ptr[w]]
            if not 0 <= t < a.n:
                ptr[w] += 1
                continue
            if not ready(t):
                for e in waits[t]:
                    head_of.setdefault(e, []).append(w)
                break
            ptr[w] += 1
            if done[t]:
                continue
            done[t] = 1
            order.append(t)
            for e in feeds.get(t, ()):
                have[e] += 1
                if have[e] == need[e]:
                    stack.extend(head_of.pop(e, ()))
    stuck = [w for w, q in enumerate(queues) if ptr[w] < len(q)]
    if not stuck:
        missing = a.n - len(order)
        if missing:
            check.error(f"{missing} tasks never run (not queued), e.g. {a.task(next(t for t in range(a.n) if not done[t]))}")
            return None
        return order
    # explain: a cycle through the stuck tasks, or the waits that can never be met
    g = nx.DiGraph()
    heads = {queues[w][ptr[w]] for w in stuck}
    for w in stuck:
        q = queues[w]
        for i in range(ptr[w] + 1, len(q)):
            g.add_edge(q[i - 1], q[i], why=f"queued after it on worker {w}")
    for w in stuck:
        t = queues[w][ptr[w]]
        for e in waits[t]:
            if need[e] >= 0 and have[e] >= need[e]:
                continue
            for p in block[e]:
                if not done[p]:
                    g.add_edge(p, t, why=f"{a.event(e)} waits for it")
    try:
        cyc = nx.find_cycle(g, source=sorted(h for h in heads if h in g)) if any(h in g for h in heads) else []
        if not cyc:
            raise nx.NetworkXNoCycle
        steps = "; ".join(f"{a.task(v)} needs {a.task(u)} ({g.edges[u, v]['why']})" for u, v in cyc)
        check.error(f"deadlock: {len(stuck)} workers stop in step 0; a cycle of {len(cyc)} dependencies: {steps}")
    except nx.NetworkXNoCycle:
        for w in stuck[:3]:
            t = queues[w][ptr[w]]
            bad = [e for e in waits[t] if need[e] < 0 or have[e] < need[e]]
            for e in bad[:1]:
                if need[e] < 0:
                    why = "it can never be satisfied (see the events/nan checks)"
                else:
                    lost = [p for p in block[e] if p not in a.worker]
                    why = (f"its producer {a.task(lost[0])} is not queued" if lost
                           else f"{have[e]} of {need[e]} producers finish")
                check.error(f"deadlock: worker {w} stops at {a.task(t)}, waiting on {a.event(e)}: {why}")
    return None


class _HB:
    """Ancestor and descendant bitsets of the happens-before DAG within one step."""

    def __init__(self, a: _Analysis, order: list[int], orderers: list[list[int]]):
        tg, queues = a.tg, a.sched.queues
        waits = [sorted({e for e in t.waits if 0 <= e < len(orderers) and orderers[e]}) for t in tg.tasks]
        consumers: list[list[int]] = [[] for _ in orderers]
        for t in order:
            for e in waits[t]:
                consumers[e].append(t)
        feeds: dict[int, list[int]] = {}
        for e, ps in enumerate(orderers):
            for p in ps:
                feeds.setdefault(p, []).append(e)
        prev: dict[int, int] = {}
        nxt: dict[int, int] = {}
        for w, q in enumerate(queues):
            qq = [t for t in q if a.worker.get(t) == w]
            for u, v in zip(qq, qq[1:]):
                prev[v], nxt[u] = u, v
        anc = [0] * a.n
        ev_anc: dict[int, int] = {}
        for t in order:
            m = 0
            if t in prev:
                p = prev[t]
                m |= anc[p] | (1 << p)
            for e in waits[t]:
                if e not in ev_anc:
                    x = 0
                    for p in orderers[e]:
                        x |= anc[p] | (1 << p)
                    ev_anc[e] = x
                m |= ev_anc[e]
            anc[t] = m
        desc = [0] * a.n
        ev_desc: dict[int, int] = {}
        for t in reversed(order):
            m = 0
            if t in nxt:
                s = nxt[t]
                m |= desc[s] | (1 << s)
            for e in feeds.get(t, ()):
                if e not in ev_desc:
                    x = 0
                    for c in consumers[e]:
                        x |= desc[c] | (1 << c)
                    ev_desc[e] = x
                m |= ev_desc[e]
            desc[t] = m
        self.anc, self.desc = anc, desc

    def ordered(self, t: int) -> int:
        return self.anc[t] | self.desc[t] | (1 << t)


def _races(a: _Analysis, hb: _HB, check: Check) -> tuple[list[tuple[int, int, str, Box]], int]:
    """Unordered or doubled accesses within a step; returns (writer, other, buffer, box) pairs."""
    tg = a.tg
    pairs: list[tuple[int, int, str, Box]] = []
    seen: set[tuple[int, int]] = set()
    n_checked = 0
    for buffer, ws in a.writes.items():
        role = a.bufs[buffer].role if buffer in a.bufs else "act"
        groups: dict[Box, list[int]] = {}  # box -> [readers bitset, writers bitset]
        for t, box in ws:
            groups.setdefault(box, [0, 0])[1] |= 1 << t
        for t, box in a.reads.get(buffer, ()):
            groups.setdefault(box, [0, 0])[0] |= 1 << t
        boxes = list(groups)
        index = BoxIndex(boxes)
        for wbox in {box for _, box in ws}:
            wset = groups[wbox][1]
            for i in index.query(wbox):
                rset, oset = groups[boxes[i]]
                for w in _bits(wset):
                    n_checked += ((rset | oset) & ~(1 << w)).bit_count()
                    where = intersect(wbox, boxes[i])
                    for o in _bits(oset & ~(1 << w)):
                        if (o, w) not in seen and (w, o) not in seen:
                            seen.add((w, o))
                            pairs.append((w, o, buffer, where))
                            check.error(f"{fmt_box(buffer, where)} is written by both {a.task(w)} and {a.task(o)} "
                                        f"in one step (one writer per element)")
                    # a task that reads what it writes itself reads it before it is written (an
                    # activation has one writer per step; caches are by position: not here)
                    if (rset >> w) & 1 and role != "cache" and (w, w) not in seen:
                        seen.add((w, w))
                        pairs.append((w, w, buffer, where))
                        check.error(f"{a.task(w)} reads {fmt_box(buffer, where)}, which it writes itself in the "
                                    f"step: it reads the previous step's data{' or the sentinel' if a.nan else ''}")
                    # a reader must happen after the writer: one that happens before it reads the
                    # previous step's data (nan mode: the sentinel), one unordered with it races
                    for r in _bits(rset & ~(hb.desc[w] | (1 << w))):
                        if (w, r) not in seen:
                            seen.add((w, r))
                            pairs.append((w, r, buffer, where))
                            check.error(_race_msg(a, w, r, buffer, where, before=bool((hb.anc[w] >> r) & 1)))
        # every read of a produced buffer must be fully written in the step
        if role in ("act", "output", "cache"):
            for box, (rset, _) in groups.items():
                if rset:
                    gap = a.coverage_gap(buffer, box)
                    if gap:
                        r = next(iter(_bits(rset)))
                        check.error(f"{a.task(r)} reads {fmt_box(buffer, box)} but no task writes "
                                    f"{fmt_box(buffer, gap[0])} in a step: it reads stale or unwritten data")
    for t in tg.tasks:  # reads of activations nobody writes
        if t.id in a.worker:
            for r in t.reads:
                b = a.bufs.get(r.buffer)
                if b is not None and b.role in ("act", "output", "cache") and r.buffer not in a.writes:
                    check.error(f"{a.task(t.id)} reads {fmt_box(r.buffer, r.box)}, which no task writes")
    return pairs, n_checked


def _race_msg(a: _Analysis, w: int, r: int, buffer: str, box: Box, before: bool = False) -> str:
    if before:
        return (f"{a.task(r)} reads {fmt_box(buffer, box)} before {a.task(w)} writes it in the same step (the "
                f"writer waits, directly or through tasks before it, for the reader): it reads the previous "
                f"step's data{' or the sentinel' if a.nan else ''}")
    how = ("no region it polls (directly or through tasks before it) covers it" if a.nan
           else "no event it waits on (directly or through tasks before it) orders it after the writer")
    if r in a.worker and w in a.worker:
        return (f"race on {fmt_box(buffer, box)}: {a.task(r)} reads what {a.task(w)} writes in the same step, "
                f"but neither happens before the other: {how}")
    return f"race on {fmt_box(buffer, box)} between {a.task(w)} and {a.task(r)}"


def _bits(x: int):
    while x:
        low = x & -x
        yield low.bit_length() - 1
        x ^= low


def _step_order(a: _Analysis, hb: _HB, check: Check) -> int:
    """Every task must happen before the step's argmax tasks and after its embed tasks (which the
    next step's embed tasks wait for, through the loop counter): otherwise a task of one step may
    run while the other step overwrites (nan: or re-arms) what it uses."""
    finals = [t.id for t in a.tg.tasks if t.kind in STEP_END_KINDS]
    starts = [t.id for t in a.tg.tasks if t.kind in STEP_START_KINDS]
    if not finals or not starts:
        missing = STEP_END_KINDS if not finals else STEP_START_KINDS
        check.error(f"the graph has no {' or '.join(missing)} task: nothing orders one decode step "
                    f"after the previous one in the kernel's decode loop")
        return 0
    before = after = 0
    for f in finals:
        if f in a.worker:
            before |= hb.anc[f] | (1 << f)
    for s in starts:
        if s in a.worker:
            after |= hb.desc[s] | (1 << s)
    bad = 0
    for t in sorted(a.worker):
        if not (before >> t) & 1:
            bad += 1
            check.error(f"{a.task(t)} does not happen before the step's argmax ({a.task(finals[0])}), so the next "
                        f"step may overwrite{' or re-arm' if a.nan else ''} what it reads or writes while it runs")
        if not (after >> t) & 1:
            bad += 1
            check.error(f"{a.task(t)} does not happen after the step's embed tasks (which wait for the previous "
                        f"step's argmax), so it may run while the previous step still uses what it overwrites")
    return bad


# ---- the checks ----------------------------------------------------------------------------


def verify(tg: TaskGraph, sched: Schedule, target: Target) -> VerifyReport:
    t0 = time.perf_counter()
    checks = {name: Check(name, title) for name, title in CHECKS}
    a = _Analysis(tg, sched, target)
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        checks[name].seconds += now - clock
        clock = now

    _tables(a, checks["tables"])
    lap("tables")
    block, need, orderers = _event_edges(a, checks["events"], checks["nan"])
    lap("events")
    order = _deadlock(a, block, need, checks["deadlock"])
    _residency(a, checks["deadlock"])
    if order is not None:
        checks["deadlock"].summary = (f"no cycle through {len(order)} tasks on {sched.num_workers} workers; "
                                      + checks["deadlock"].summary)
    lap("deadlock")
    pairs: list = []
    if order is None:
        for name in ("race", "nan") if a.nan else ("race",):
            checks[name].skipped = True
            checks[name].summary = "skipped: happens-before needs a schedule without deadlock"
    else:
        hb = _HB(a, order, orderers)
        pairs, n_checked = _races(a, hb, checks["race"])
        late = _step_order(a, hb, checks["nan" if a.nan else "race"])
        checks["race"].summary = (f"{n_checked} conflicting task pairs (a write and an overlapping access), "
                                  f"{len(pairs)} unordered" + (f"; {late} tasks out of step order" if late else ""))
        lap("race")
        blamed = _attribute(a, pairs, orderers, checks)
    _smem(a, checks["smem"])
    lap("smem")
    _nan_rules(a, checks["nan"], blamed if order is not None else set())
    lap("nan")
    _memory(a, checks["memory"])
    lap("memory")
    if not checks["events"].summary:
        checks["events"].summary = f"{len(tg.events)} events, thresholds {'unused (nan)' if a.nan else 'checked'}"
    return VerifyReport(list(checks.values()), sched.sync, len(tg.tasks), sched.num_workers, time.perf_counter() - t0)


def _attribute(a: _Analysis, pairs, orderers, checks) -> set[int]:
    """Names the cause of a race when it is an early-firing threshold or a skipped re-arm;
    returns the writers whose missing re-arm caused one."""
    tg, sched = a.tg, a.sched
    early: set[int] = set()
    no_rearm: set[int] = set()
    racy_readers = {r for _, r, _, _ in pairs}
    for w, r, buffer, box in pairs:
        for e in sorted(set(tg.tasks[r].waits)):
            if not 0 <= e < len(tg.events) or w in orderers[e]:
                continue
            if not a.nan and w in a.signalers[e] and e not in early:
                early.add(e)
                checks["events"].error(
                    f"{a.event(e)} fires early: {len(a.signalers[e])} tasks signal it but the threshold is "
                    f"{sched.thresholds[e]}, so {a.task(r)} may read {fmt_box(buffer, box)} before "
                    f"{a.task(w)} writes it")
            if a.nan and not tg.tasks[w].rearm and (w, e) not in no_rearm and any(
                    reg.buffer == buffer and len(reg.box) == len(box) and overlap(reg.box, box)
                    for reg in tg.events[e].regions):
                no_rearm.add((w, e))
                checks["nan"].error(
                    f"{a.task(w)} writes {fmt_box(buffer, box)} without re-arming it (rearm=False): from step 2 on "
                    f"{a.task(r)} polls it through {a.event(e)}, finds the data of two steps ago and reads it")
    if a.nan:  # check 5's view of the same races: what the reader should have polled
        blamed = {w for w, _ in no_rearm}
        for w, r, buffer, box in pairs:
            buf = a.bufs.get(buffer)
            if w in blamed or buf is None or not buf.polled or not any(
                    x.buffer == buffer and overlap(x.box, box) for x in tg.tasks[r].reads):
                continue
            polled = ", ".join(str(e) for e in sorted(set(tg.tasks[r].waits))) or "none"
            checks["nan"].error(f"{a.task(r)} reads {fmt_box(buffer, box)}, written by {a.task(w)} in the same step, "
                                f"but no region it polls (events {polled}) covers it and no earlier poll orders it")
    else:
        for e, ws in enumerate(a.waiters):
            if ws and e < len(sched.thresholds) and 0 < sched.thresholds[e] < len(a.signalers[e]) \
                    and e not in early and not racy_readers.intersection(ws):
                checks["events"].warn(f"{a.event(e)} has a threshold below its {len(a.signalers[e])} signalers; "
                                      f"harmless here: its waiters are ordered after what they read through other paths")
    return {w for w, _ in no_rearm}


def _tables(a: _Analysis, check: Check) -> None:
    tg, sched, plan = a.tg, a.sched, a.sched.plan
    if len(sched.queues) != sched.num_workers:
        check.error(f"{len(sched.queues)} queues for {sched.num_workers} workers")
    count: dict[int, int] = {}
    for w, q in enumerate(sched.queues):
        if len(q) > plan.max_queue_len:
            check.error(f"worker {w} has {len(q)} tasks but the queue table holds {plan.max_queue_len} per worker")
        for t in q:
            count[t] = count.get(t, 0) + 1
            if not 0 <= t < a.n:
                check.error(f"worker {w} queues task id {t}, which does not exist")
    for t, c in count.items():
        if c > 1 and 0 <= t < a.n:
            check.error(f"{a.task(t)} is queued {c} times (it would run {c} times per step)")
    missing = [t for t in range(a.n) if t not in count]
    if missing:
        check.error(f"{len(missing)} tasks are not queued on any worker, e.g. {a.task(missing[0])}")
    for t in tg.tasks:
        if len(t.waits) > plan.max_waits:
            check.error(f"{a.task(t.id)} waits on {len(t.waits)} events but a descriptor holds {plan.max_waits}")
        if len(t.signals) > plan.max_signals:
            check.error(f"{a.task(t.id)} signals {len(t.signals)} events but a descriptor holds {plan.max_signals}")
    if len(sched.thresholds) != len(tg.events):
        check.error(f"the threshold table has {len(sched.thresholds)} entries for {len(tg.events)} events")
    longest = max((len(q) for q in sched.queues), default=0)
    check.summary = (f"longest queue {longest}/{plan.max_queue_len}, waits {max((len(t.waits) for t in tg.tasks), default=0)}"
                     f"/{plan.max_waits}, signals {max((len(t.signals) for t in tg.tasks), default=0)}/{plan.max_signals}")


def _layout_bytes(tg: TaskGraph, target: Target) -> int:
    layout = plan_of(tg, target)
    return layout.smem_bytes if layout is not None else 0


def _residency(a: _Analysis, check: Check) -> None:
    plan, target, W = a.sched.plan, a.target, a.sched.num_workers
    smem = launched_smem(_layout_bytes(a.tg, target), plan, target)
    per_sm, limiter = blocks_per_sm(target, plan, smem)
    room = per_sm * target.sms
    if W > room:
        check.error(f"{W} workers cannot all be resident: {target.name} holds {per_sm} block(s) of {plan.threads} "
                    f"threads, {plan.regs_per_thread} registers/thread and {smem} B shared memory per SM "
                    f"(limited by {limiter}) x {target.sms} SMs = {room}; a persistent worker that never starts hangs "
                    f"the ones waiting on it")
    if plan.smem_bytes > target.smem_per_block:
        check.error(f"the kernel asks for {plan.smem_bytes} B of shared memory per block but {target.name} allows "
                    f"{target.smem_per_block}")
    check.summary = f"{W} workers <= {per_sm}/SM x {target.sms} SMs ({limiter})" if W <= room else ""


def _smem(a: _Analysis, check: Check) -> None:
    tg, plan, target = a.tg, a.sched.plan, a.target
    # the kernel's own layout (the device plan's regions, as codegen prints them) must be sound and fit
    layout = plan_of(tg, target)
    for problem in layout.check(target.smem_per_block) if layout is not None else ():
        check.error(problem)
    stream = stream_bytes(tg, target)
    worst = 0
    for w, q in enumerate(a.sched.queues):
        for i, t in enumerate(q):
            if not 0 <= t < a.n:
                continue
            task = tg.tasks[t]
            nxt = q[i + 1] if i + 1 < len(q) and 0 <= q[i + 1] < a.n else None
            pre = prefetch_bytes(tg.tasks[nxt], stream) if nxt is not None else 0
            worst = max(worst, task.smem + pre)
            if task.smem > plan.smem_bytes:
                check.error(f"{a.task(t)} needs {task.smem} B of shared memory but the kernel allocates "
                            f"{plan.smem_bytes} B per block")
            elif task.smem + pre > plan.smem_bytes:
                check.error(f"{a.task(t)} needs {task.smem} B plus {pre} B to prefetch the weights of the next "
                            f"task on worker {w} ({a.task(nxt)}) = {task.smem + pre} B, over the kernel's "
                            f"{plan.smem_bytes} B")
    check.summary = f"peak {worst} B of {plan.smem_bytes} B (task + next task's weight stages)"
    if layout is not None:
        check.summary += (f"; kernel layout {layout.smem_bytes} B in {len(layout.regions)} regions, launched with "
                          f"{launched_smem(_layout_bytes(tg, target), plan, target)} B")


def _memory(a: _Analysis, check: Check) -> None:
    from mkc.verify import memory

    parts = memory.need(a.tg, a.sched)
    fig = memory.budget(parts, a.target)
    check.figures = fig
    if not a.target.memory_bytes:
        check.summary = f"{memory.gb(parts['total'])} needed; {a.target.name} states no device memory, not checked"
        return
    if not fig["fits"]:
        check.error(memory.explain(parts, a.target, a.tg.batch, dict(a.tg.dims).get("L", 0)))
    check.summary = (f"{memory.gb(parts['total'])} (weights {memory.gb(parts['weights'])}, KV cache "
                     f"{memory.gb(parts['kv_cache'])}, activations {memory.gb(parts['activations'])}, tables "
                     f"{memory.gb(parts['tables'])}) of {memory.gb(fig['usable'])} usable on {a.target.name}")


def _nan_rules(a: _Analysis, check: Check, blamed: set[int]) -> None:
    if not a.nan:
        check.summary = "not used (sync atomic)"
        return
    n_rearm, quiet = 0, set()
    for t in a.tg.tasks:
        for r in t.writes:
            b = a.bufs.get(r.buffer)
            if b is not None and b.polled and b.role != "cache":
                n_rearm += 1
                if not t.rearm and t.id not in blamed and t.id not in quiet and not check.skipped:
                    quiet.add(t.id)
                    check.warn(f"{a.task(t.id)} writes polled buffer {r.buffer} without re-arming it; harmless "
                               f"here: every reader is ordered after it through other polls")
    if not check.skipped and check.ok:
        check.summary = (f"{n_rearm} writes of polled activations, {n_rearm - len(quiet)} re-armed; polled regions "
                         f"covered; every task before argmax")
