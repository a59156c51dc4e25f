"""The oracle: runs a schedule symbolically for a few decode steps and reports what goes wrong.

It is the independent judge of the static verifier (``verifier.py``) and shares no code with it.
No tensor math: every buffer is cut into cells at the edges of every region that touches it, and
each cell remembers who wrote it last (task, step) or that it holds the sentinel, and who read it
since. Workers run their queues in order, one action at a time (one wait, or one task body), and a
scheduler picks which worker moves next: random priorities with a few priority drops (PCT) or a
fresh random choice each time, one policy per seed.

Synchronisation is tracked with vector clocks, so a race is found in any interleaving where the
two accesses happen, not only when they collide in time:

- atomic: a signal adds the signaller's clock to the counter's history; a wait that needs
  ``threshold * (step + 1)`` signals passes once that many arrived and acquires the clock of the
  first that many (the weakest value the acquire load may read).
- nan: a poll passes when none of the event's cells (copy ``step % 2`` of double-buffered polled
  activations, caches at ``pos``) holds the sentinel, and acquires the clocks of the writes that
  replaced a sentinel; a word that was never re-armed could have been read before its new value
  arrived, so it gives no order.
- steps are ordered as the kernel orders them (codegen): from the second step of a launch on,
  every ``embed`` task also waits for the loop counter, which each ``argmax`` task bumps once per
  step, to reach ``n_argmax * step`` (the previous step's token is ready). Nothing else orders
  one step after the previous one, besides each worker's queue order.

Violations: deadlock (no worker can move), a read of a cell that holds the sentinel or was never
written, a read of an activation written in another step (stale), a read or write not ordered
after the last write of the cell, a write not ordered after the reads of the old value, and a
cell written twice in one step. Caches start with the prompt at positions below ``prompt_len``;
step s writes position ``prompt_len + s`` and reads ``[0, prompt_len + s]`` (``[0, prompt_len + s)`` for a
read region ending at L - 1, ir.py).

Resources (shared memory, residency, table sizes, device memory) have no dynamic behaviour here: they are judged
by ``resource_problems``, the documented resource model written out on its own.
"""

from __future__ import annotations

import heapq
import itertools
import random
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from mkc.schedule.ir import Schedule
from mkc.backend import for_target
from mkc.target import Target
from mkc.taskgraph.smem import smem_plan
from mkc.taskgraph.ir import TaskGraph
from mkc.taskgraph.kinds import GEMV_KINDS, STEP_END_KINDS, STEP_START_KINDS

SENT, GARBAGE, PREFILL, DATA = 0, 1, 2, 3
SEQ = 2  # the position dimension of a cache [B, nkv, L, hd]


@dataclass(frozen=True)
class Verdict:
    safe: bool
    kind: str  # "" | deadlock | unwritten | stale | race | double write | resources
    problem: str
    runs: int


class Violation(Exception):
    def __init__(self, kind: str, msg: str):
        super().__init__(msg)
        self.kind = kind


def judge(tg: TaskGraph, sched: Schedule, target: Target, seeds: int = 4, steps: int = 3, seed: int = 0) -> Verdict:
    """Unsafe if the resource model rejects it or any of ``seeds`` interleavings misbehaves."""
    res = resource_problems(tg, sched, target)
    if res:
        return Verdict(False, "resources", res[0], 0)
    sim = Simulator(tg, sched, steps)
    for i in range(seeds):
        try:
            sim.run(random.Random(seed * 7919 + i), policy="pct" if i % 2 == 0 else "random")
        except Violation as v:
            return Verdict(False, v.kind, f"{v} (interleaving {i})", i + 1)
    return Verdict(True, "", "", seeds)


# ---- the dynamic model ---------------------------------------------------------------------


class Simulator:
    def __init__(self, tg: TaskGraph, sched: Schedule, steps: int = 3, prompt_len: int | None = None):
        self.tg, self.sched, self.steps = tg, sched, steps
        self.nan = sched.sync == "nan"
        L = tg.max_seq_len
        self.p0 = prompt_len if prompt_len is not None else max(0, min(2, L - steps))
        bufs = {b.name: b for b in tg.buffers}
        written = {r.buffer for t in tg.tasks for r in t.writes}
        tracked = {n for n, b in bufs.items() if b.role in ("act", "output", "cache")} | (written & set(bufs))
        boxes: dict[str, set] = {n: set() for n in tracked}
        for t in tg.tasks:
            for r in t.reads + t.writes:
                if r.buffer in boxes:
                    boxes[r.buffer].add(r.box)
        for e in tg.events:
            for r in e.regions:
                if r.buffer in boxes:
                    boxes[r.buffer].add(r.box)
        self.info: dict[str, tuple] = {}  # name -> (cuts per dim, strides, base, cells, copies, is_cache)
        base = 0
        init: list[int] = []
        for name in sorted(tracked):
            b = bufs[name]
            cache = b.role == "cache"
            cuts = []
            for d, n in enumerate(b.shape):
                edges = {0, n}
                for box in boxes[name]:
                    if len(box) == len(b.shape):
                        edges.update(min(max(x, 0), n) for x in box[d])
                if cache and d == SEQ:
                    edges.update(min(self.p0 + s + k, n) for s in range(steps) for k in (0, 1))
                cuts.append(sorted(edges))
            dims = [len(c) - 1 for c in cuts]
            strides, acc = [], 1
            for k in reversed(dims):
                strides.append(acc)
                acc *= k
            strides.reverse()
            copies = 2 if self.nan and b.polled and not cache else 1
            self.info[name] = (cuts, strides, base, acc, copies, cache)
            for _ in range(copies):
                for idx in itertools.product(*(range(k) for k in dims)):
                    if cache:
                        lo = cuts[SEQ][idx[SEQ]]
                        init.append(PREFILL if lo < self.p0 else (SENT if self.nan and b.polled else GARBAGE))
                    elif name in written:
                        init.append(SENT if copies == 2 else GARBAGE)
                    else:
                        init.append(GARBAGE if b.role in ("act", "output") else PREFILL)
            base += acc * copies
        self.init = init
        self.bufname = [None] * base
        for name, (_, _, b0, cells, copies, _) in self.info.items():
            for i in range(b0, b0 + cells * copies):
                self.bufname[i] = name
        self._memo: dict = {}
        self.n_argmax = sum(1 for t in tg.tasks if t.kind in STEP_END_KINDS)
        self.poll_bufs = [{r.buffer for r in e.regions if r.buffer in self.info} for e in tg.events]

    def cells(self, buffer: str, box, step: int, mode: str, copy: int | None = None) -> list[int]:
        """Global cell ids of ``box`` in step ``step``; mode read | write | poll."""
        info = self.info.get(buffer)
        if info is None:
            return []
        cuts, strides, base, n, copies, cache = info
        if copy is None:
            copy = step % copies
        key = (buffer, box, copy, mode, step if cache else 0)
        got = self._memo.get(key)
        if got is not None:
            return got
        ranges = []
        for d, (lo, hi) in enumerate(box):
            if cache and d == SEQ:
                # reads end relative to the worst case pos = L - 1: (0, L) is [0, pos], (0, L - 1) is [0, pos)
                pos = self.p0 + step
                lo, hi = (lo, pos + 1 - (cuts[d][-1] - hi)) if mode == "read" else (pos, pos + 1)
            c = cuts[d]
            i0, i1 = bisect_right(c, lo) - 1, bisect_left(c, hi)
            ranges.append(range(max(i0, 0), i1) if lo < hi else range(0))
        out = [base + copy * n + sum(i * s for i, s in zip(idx, strides)) for idx in itertools.product(*ranges)]
        self._memo[key] = out
        return out

    def where(self, cell: int) -> str:
        name = self.bufname[cell]
        cuts, strides, base, n, copies, _ = self.info[name]
        off = cell - base
        copy, off = divmod(off, n)
        parts = []
        for c, s in zip(cuts, strides):
            i, off = divmod(off, s)
            parts.append(f"{c[i]}:{c[i + 1]}")
        return f"{name}[{', '.join(parts)}]" + (f" (copy {copy})" if copies > 1 else "")

    # one interleaving ---------------------------------------------------------------------

    def run(self, rng: random.Random, policy: str = "pct") -> None:
        tg, sched, S = self.tg, self.sched, self.steps
        W = sched.num_workers
        queues = [list(q) for q in sched.queues][:W] + [[] for _ in range(W - len(sched.queues))]
        tasks = tg.tasks
        kind = list(self.init)
        wtask = [-1] * len(kind)
        wstep = [-1] * len(kind)
        forced = [False] * len(kind)
        reads: list[list | None] = [None] * len(kind)
        inst: dict[tuple[int, int], tuple[int, int, tuple]] = {}  # (task, step) -> (worker, clock, vc)
        vc = [[0] * W for _ in range(W)]
        hist: list[list[tuple]] = [[] for _ in tg.events]  # per counter: clock after each signal
        loop: list[tuple] = []  # the loop counter: clock after each argmax
        step, idx, wait_i = [0] * W, [0] * W, [0] * W
        blocked_ev: dict[int, set] = {}
        blocked_buf: dict[str, set] = {}
        blocked_loop: set[int] = set()
        why: dict[int, str] = {}
        prio = list(range(W))
        rng.shuffle(prio)
        changes = set(rng.sample(range(1, 4000), 3)) if policy == "pct" else set()
        heap: list = []
        actions = 0

        def push(w: int) -> None:
            heapq.heappush(heap, (-(prio[w] if policy == "pct" else rng.random()), w))

        def who(t: int, s: int) -> str:
            k = tasks[t]
            layer = f"l{k.layer} " if k.layer >= 0 else ""
            return f"task {t} ({layer}{k.kind} {','.join(map(str, k.args))}) in step {s}"

        def join(w: int, other) -> None:
            mine = vc[w]
            for i, x in enumerate(other):
                if x > mine[i]:
                    mine[i] = x

        def finished(w: int) -> bool:
            return step[w] >= S

        def n_waits(t: int, s: int) -> int:
            return len(tasks[t].waits) + (tasks[t].kind in STEP_START_KINDS and s > 0)

        def try_wait(w: int) -> bool:
            """Evaluates the current wait of worker w; True if it passed."""
            s, t = step[w], queues[w][idx[w]]
            if wait_i[w] == len(tasks[t].waits):  # embed: the previous step's argmax
                need = self.n_argmax * s
                if len(loop) < need:
                    blocked_loop.add(w)
                    why[w] = f"{who(t, s)} waits for the argmax of step {s - 1}: {len(loop)} of {need}"
                    return False
                if need > 0:
                    join(w, loop[need - 1])
                return True
            e = tasks[t].waits[wait_i[w]]
            if not 0 <= e < len(tg.events):
                return True
            if not self.nan:
                thr = sched.thresholds[e] if e < len(sched.thresholds) else 0
                need = thr * (s + 1)
                if need <= 0:
                    return True
                if len(hist[e]) < need:
                    blocked_ev.setdefault(e, set()).add(w)
                    why[w] = f"{who(t, s)} waits on event {e} ({tg.events[e].name}): {len(hist[e])} of {need} signals"
                    return False
                join(w, hist[e][need - 1])
                return True
            acquire = set()
            for r in tg.events[e].regions:
                for c in self.cells(r.buffer, r.box, s, "poll"):
                    if kind[c] == SENT:
                        for b in self.poll_bufs[e]:
                            blocked_buf.setdefault(b, set()).add(w)
                        why[w] = f"{who(t, s)} polls event {e} ({tg.events[e].name}): {self.where(c)} holds the sentinel"
                        return False
                    if forced[c]:
                        acquire.add((wtask[c], wstep[c]))
            for key in acquire:
                join(w, inst[key][2])
            return True

        def body(w: int) -> None:
            s, t = step[w], queues[w][idx[w]]
            task = tasks[t]
            mine = vc[w]
            mine[w] += 1
            clock = mine[w]
            me = who(t, s)
            for r in task.reads:
                for c in self.cells(r.buffer, r.box, s, "read"):
                    k = kind[c]
                    if k == SENT:
                        raise Violation("unwritten", f"{me} reads {self.where(c)}, which still holds the sentinel")
                    if k == GARBAGE:
                        raise Violation("unwritten", f"{me} reads {self.where(c)}, which no task has written yet")
                    if k == DATA:
                        ww, wc, _ = inst[(wtask[c], wstep[c])]
                        if mine[ww] < wc:
                            raise Violation("race", f"{me} reads {self.where(c)} written by {who(wtask[c], wstep[c])} "
                                            f"without being ordered after it")
                        if wstep[c] != s and not self.info[self.bufname[c]][5]:
                            raise Violation("stale", f"{me} reads {self.where(c)} holding the data of step {wstep[c]} "
                                            f"(written by {who(wtask[c], wstep[c])})")
                    lst = reads[c]
                    if lst is None:
                        reads[c] = [(w, clock, t, s)]
                    else:
                        lst.append((w, clock, t, s))
            if self.nan and task.rearm:
                for r in task.writes:
                    info = self.info.get(r.buffer)
                    if info is not None and info[4] == 2:
                        for c in self.cells(r.buffer, r.box, s, "write", copy=(s + 1) % 2):
                            store(c, SENT, w, t, s, me)
            for r in task.writes:
                for c in self.cells(r.buffer, r.box, s, "write"):
                    store(c, DATA, w, t, s, me)
            snap = tuple(mine)
            inst[(t, s)] = (w, clock, snap)
            if not self.nan:
                for e in task.signals:
                    if 0 <= e < len(hist):
                        h = hist[e]
                        h.append(snap if not h else tuple(map(max, h[-1], snap)))
                        wake(blocked_ev.pop(e, ()))
            else:
                for b in {r.buffer for r in task.writes}:
                    wake(blocked_buf.pop(b, ()))
            if task.kind in STEP_END_KINDS:
                loop.append(snap if not loop else tuple(map(max, loop[-1], snap)))
                wake(list(blocked_loop))
                blocked_loop.clear()

        def store(c: int, new: int, w: int, t: int, s: int, me: str) -> None:
            mine = vc[w]
            pt, ps = wtask[c], wstep[c]
            if pt >= 0 and (pt, ps) != (t, s):
                ww, wc, _ = inst[(pt, ps)]
                if new == DATA and kind[c] == DATA and ps == s:
                    raise Violation("double write", f"{me} writes {self.where(c)}, already written in this step by "
                                    f"{who(pt, ps)}")
                if mine[ww] < wc:
                    raise Violation("race", f"{me} writes {self.where(c)} not ordered after the write of {who(pt, ps)}")
            for rw, rc, rt, rs in reads[c] or ():
                if mine[rw] < rc and (rt, rs) != (t, s):
                    raise Violation("race", f"{me} overwrites {self.where(c)} while {who(rt, rs)} may still read it")
            forced[c] = new == DATA and kind[c] == SENT
            kind[c] = new
            wtask[c], wstep[c], reads[c] = t, s, None

        def wake(ws) -> None:
            for x in ws:
                push(x)

        for w in range(W):
            if queues[w]:
                push(w)
            else:
                step[w] = S
        while heap:
            _, w = heapq.heappop(heap)
            if finished(w):
                continue
            actions += 1
            if actions in changes:
                prio[w] = -actions  # PCT priority drop
            t = queues[w][idx[w]]
            if not 0 <= t < len(tasks):
                raise Violation("unwritten", f"worker {w} queues task id {t}, which does not exist")
            if wait_i[w] < n_waits(t, step[w]):
                if try_wait(w):
                    wait_i[w] += 1
                    push(w)
                continue
            body(w)
            wait_i[w] = 0
            idx[w] += 1
            if idx[w] == len(queues[w]):
                idx[w] = 0
                step[w] += 1
            if not finished(w):
                push(w)
        stuck = [w for w in range(W) if not finished(w)]
        if stuck:
            shown = "; ".join(why.get(w, f"worker {w}") for w in stuck[:3])
            raise Violation("deadlock", f"deadlock: {len(stuck)} workers cannot move: {shown}")


# ---- the documented resource model, on its own ---------------------------------------------


# attention.cuh's shared-memory regions (OFF_AW, though named alike, is o-proj's: the GEMV layout)
_ATTENTION_SMEM = ("OFF_AQ", "OFF_AK", "OFF_AP", "OFF_AM", "OFF_AKV", "OFF_ARED")


def layout_problems(tg: TaskGraph, target: Target) -> list[str]:
    """The kernel's shared-memory layout painted byte by byte: a block runs one task at a time, so
    the GEMV, the attention and the argmax task's (sampler) regions may share bytes with each other
    but not within their own layout, and the weight pipeline's pages and mbarriers (filled while any
    task runs) and the flag word with nothing."""
    layout = tg.plan
    if layout is None:
        return []
    size = max([o + n for _, o, n in layout.regions] + [layout.smem_bytes])
    if size > target.smem_per_block:
        return [f"the shared-memory layout reaches byte {size} > {target.smem_per_block} per block"]
    shared = ("pipe", "flag")  # bytes no other region may touch
    owner = {g: bytearray(size) for g in ("pipe", "flag", "gemv", "attention", "argmax")}
    out = []
    for name, off, n in layout.regions:
        group = ("pipe" if name in ("OFF_PIPE", "OFF_MBAR") else "flag" if name == "OFF_FLAG" else
                 "argmax" if name == "OFF_SAMPLE" else "attention" if name in _ATTENTION_SMEM else "gemv")
        clash = [g for g, paint in owner.items()
                 if (g == group or g in shared or group in shared) and any(paint[off:off + n])]
        if clash:
            out.append(f"shared-memory region {name} [{off}, {off + n}) overlaps the {', '.join(clash)} layout")
        owner[group][off:off + n] = b"\x01" * n
    return out



def resource_problems(tg: TaskGraph, sched: Schedule, target: Target) -> list[str]:
    """What the kernel's tables and the SM cannot hold (DESIGN.md checks 2, 4 and 6)."""
    plan, out = sched.plan, []
    by_id = {t.id: t for t in tg.tasks}
    entries = sorted(t for q in sched.queues for t in q)
    if entries != sorted(by_id):
        out.append(f"the queue table holds {len(entries)} entries ({len(set(entries))} distinct) for "
                   f"{len(by_id)} tasks: each task must be queued exactly once")
    stage = smem_plan(target, tg.batch, 256)
    for w, q in enumerate(sched.queues):
        if len(q) > plan.max_queue_len:
            out.append(f"worker {w} queue of {len(q)} > table of {plan.max_queue_len}")
        for a, b in zip(q, list(q[1:]) + [None]):
            if a not in by_id:
                continue
            mine = by_id[a].smem
            nxt = stage.stages * stage.stage_bytes if b in by_id and by_id[b].kind in GEMV_KINDS else 0
            if mine + nxt > plan.smem_bytes:
                out.append(f"task {a} on worker {w} needs {mine} + {nxt} B of shared memory > {plan.smem_bytes}")
    for t in tg.tasks:
        if len(t.waits) > plan.max_waits or len(t.signals) > plan.max_signals:
            out.append(f"task {t.id} has {len(t.waits)} waits/{len(t.signals)} signals > table "
                       f"{plan.max_waits}/{plan.max_signals}")
    if plan.smem_bytes > target.smem_per_block:
        out.append(f"{plan.smem_bytes} B shared memory per block > {target.smem_per_block}")
    out += layout_problems(tg, target)
    fit = _resident_blocks(target, plan.threads, plan.regs_per_thread, plan.smem_bytes)
    if sched.num_workers > fit * target.sms:
        out.append(f"{sched.num_workers} workers > {fit} resident per SM x {target.sms}")
    if target.memory_bytes:
        held, have = _device_bytes(tg, sched), target.memory_bytes - (target.memory_bytes * 5 // 100 + 2**30)
        if held > have:
            out.append(f"the build needs {held} B of device memory > {have} B usable of {target.memory_bytes}")
    return out


def _device_bytes(tg: TaskGraph, sched: Schedule) -> int:
    """Everything the runtime allocates, by the documented footprint model: bf16 weights and caches,
    32-bit activations (two parity copies of each polled one in nan mode), the per-position token ids,
    and the tables bounded at 64 words a header, 4 a worker, 32 a task, 8 a wait, 2 a signal, 16 a
    region, 2 an event, 16 B a pointer slot (16 global, 32 per layer) and 192 B a task of trace."""
    width = {"weight": 2, "cache": 2, "act": 4, "output": 4, "const": 4}
    twice = set()
    if sched.sync == "nan":
        for ev in tg.events:
            twice.update(r.buffer for r in ev.regions)
    total = 0
    for buf in tg.buffers:
        if buf.name == "ids" or buf.role not in width:
            continue
        cells = 1
        for d in buf.shape:
            cells *= d
        total += cells * width[buf.role] * (2 if buf.name in twice and buf.role in ("act", "output") else 1)
    d = dict(tg.dims)
    total += 8 * d.get("L", 0) * d.get("B", tg.batch)
    words = 64 + 4 * sched.num_workers + 2 * len(tg.events)
    for task in tg.tasks:
        words += 32 + 8 * len(task.waits) + 2 * len(task.signals) + 16 * len(task.writes)
    words += 16 * sum(len(ev.regions) for ev in tg.events)
    return total + 4 * words + 16 * (16 + 32 * d.get("n_layers", 0)) + 192 * len(tg.tasks)


def _resident_blocks(target: Target, threads: int, regs: int, smem: int) -> int:
    # occupancy is a hardware fact the backend owns (shared with the verifier on purpose: the oracle's
    # independence is in how it reasons about the schedule, not in re-deriving the chip's limits)
    return for_target(target).launch_limits(target).blocks_per_sm(target, threads, regs, smem)[0]
