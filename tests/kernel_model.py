"""A CPU model of the megakernel's control flow, driven by the real int32 tables.

It walks every worker's queue the way the device code does (``kernel.j2``): read the record,
wait (atomic: ``counter >= threshold * (step + 1)``; nan: no sentinel word in the event's regions,
decoded from the region descriptors), re-arm the other parity (nan), run, signal. Workers are
interleaved at random, task by task. Instead of arithmetic a task checks what it reads and
stamps what it writes with the step number, so the model catches:

- a task that runs before the data it reads was written in this step (a missing or early event);
- a write (or nan re-arm) while a reader of the previous step has not run yet (a WAR race);
- a deadlock (no worker can make progress);
- region descriptors that do not address the words of their region.
"""

from __future__ import annotations

import random

import numpy as np

from mkc.codegen import tables as T
from mkc.taskgraph.ir import TaskGraph

SENT = np.uint32(T.SENTINEL)
F = {k: i for i, k in enumerate(T.RECORD)}
WT = {k: i for i, k in enumerate(T.WAIT)}
RG = {k: i for i, k in enumerate(T.REGION)}


class ModelError(AssertionError):
    pass


# kinds that load the cache rows before pos before waiting on their events (attention.cuh)
EARLY_KINDS = ("attn",)


def region_words(desc, pos: int, hd: int) -> np.ndarray:
    """The word offsets a region descriptor addresses (as the kernel's region_word computes them)."""
    slot, flags, base, run, n1, s1, n2, s2 = (int(x) for x in desc)
    i2, i1, j = np.meshgrid(np.arange(n2), np.arange(n1), np.arange(run), indexing="ij")
    off = base + i2 * s2 + i1 * s1 + j
    if flags & T.RF_CACHE:
        off = off + pos * (hd // 2)
    return off.reshape(-1)


def box_words(box, shape, dtype: str, pos: int | None = None) -> np.ndarray:
    """Independent reference: the 32-bit words of a box (a cache box taken at ``pos``)."""
    box = list(box)
    if pos is not None:
        box[2] = (pos, pos + 1)
    idx = np.indices([hi - lo for lo, hi in box]).reshape(len(box), -1)
    idx = idx + np.array([lo for lo, _ in box])[:, None]
    flat = np.ravel_multi_index(tuple(idx), shape)
    return np.unique(flat // 2) if dtype == "bf16" else np.sort(flat)


class KernelModel:
    def __init__(self, tg: TaskGraph, sched, seed: int = 0):
        self.tg, self.sched = tg, sched
        self.tab = T.build_tables(tg, sched)
        self.ints = self.tab.ints
        self.sync = sched.sync
        self.rng = random.Random(seed)
        self.hd = tg.dim("hd")
        self.dbuf = set(self.tab.double_buffered)
        self.bufs = {b.name: b for b in tg.buffers}
        self.slot_buf = {}
        for b in tg.buffers:
            s = T.slot_of(b.name)
            if s is not None:
                self.slot_buf[s] = b.name
        self.mem: dict[str, np.ndarray] = {}
        for b in tg.buffers:
            if b.role in ("act", "output", "cache"):
                words = int(np.prod(b.shape)) // (2 if b.dtype == "bf16" else 1)
                copies = 2 if b.name in self.dbuf else 1
                init = SENT if (self.sync == "nan" and (b.role == "cache" or b.name in self.dbuf)) else np.uint32(0)
                self.mem[b.name] = np.full((copies, words), init, dtype=np.uint32)
        self.counters = np.zeros(self.tab.n_events + 1, dtype=np.int64)
        self.last_run = np.full(len(tg.tasks), -1, dtype=np.int64)  # step each task last completed
        # readers of each task's writes (for the WAR check), found per buffer
        by_buf: dict[str, list] = {}
        for r in tg.tasks:
            for x in r.reads:
                by_buf.setdefault(x.buffer, []).append((r.id, x))
        self.readers_of: dict[int, set[int]] = {t.id: set() for t in tg.tasks}
        for t in tg.tasks:
            for w in t.writes:
                if self.bufs[w.buffer].role in ("act", "output"):
                    self.readers_of[t.id].update(rid for rid, x in by_buf.get(w.buffer, ()) if rid != t.id and x.overlaps(w))
        self.step = 0

    # ---- table access, as the device code does it ----
    def _rec(self, w: int, i: int) -> np.ndarray:
        return self.tab.record(w, i)

    def _region(self, k: int) -> np.ndarray:
        at = self.tab.header("HDR_REGIONS") + k * len(T.REGION)
        return self.ints[at: at + len(T.REGION)]

    def _words(self, desc, par: int, pos: int):
        name = self.slot_buf[int(desc[RG["RG_SLOT"]])]
        copy = par if int(desc[RG["RG_FLAGS"]]) & T.RF_PARITY else 0
        return name, copy, region_words(desc, pos, self.hd)

    def _ready(self, rec, step: int, step0: int, pos: int) -> bool:
        par = step & 1 if self.sync == "nan" else 0
        if (rec[F["T_FLAGS"]] & T.TF_WAIT_LOOP) and step > step0:
            if self.counters[self.tab.n_events] < self.tab.n_argmax * step:
                return False
        w0, n = int(rec[F["T_WAIT_OFF"]]), int(rec[F["T_N_WAIT"]])
        at = self.tab.header("HDR_WAITS")
        for k in range(w0, w0 + n):
            ev, thr, r0, nr = (int(x) for x in self.ints[at + 4 * k: at + 4 * k + 4])
            if self.sync == "atomic":
                if self.counters[ev] < thr * (step + 1):
                    return False
            else:
                for r in range(r0, r0 + nr):
                    name, copy, words = self._words(self._region(r), par, pos)
                    if (self.mem[name][copy, words] == SENT).any():
                        return False
        return True

    # ---- loads a task issues before its waits (attention: the cache rows before pos) ----
    def _early_gate(self, rec, step: int, step0: int) -> bool:
        """The first task of a worker's step waits for the loop counter before its early loads (only
        the kinds that load early look at the flag)."""
        if self.tg.tasks[int(rec[F["T_ID"]])].kind not in EARLY_KINDS:
            return True
        if (rec[F["T_FLAGS"]] & T.TF_STEP_FIRST) and step > step0:
            return self.counters[self.tab.n_events] >= self.tab.n_argmax * step
        return True

    def _early(self, rec, step: int, pos: int) -> None:
        tid = int(rec[F["T_ID"]])
        task = self.tg.tasks[tid]
        if task.kind not in EARLY_KINDS or pos == 0:
            return
        stamp = np.uint32(1000 + step)
        for r in task.reads:
            b = self.bufs[r.buffer]
            if b.role == "cache":
                got = self.mem[r.buffer][0, box_words(r.box, b.shape, b.dtype, pos - 1)]
                if not ((got >= np.uint32(1000)) & (got < stamp)).all():
                    raise ModelError(f"task {tid} ({task.kind}) read {r.buffer} at pos {pos - 1} before an earlier "
                                     f"step wrote it (a load before its wait)")

    def _run(self, rec, step: int, step0: int, pos: int) -> None:
        tid = int(rec[F["T_ID"]])
        task = self.tg.tasks[tid]
        par = step & 1 if self.sync == "nan" else 0
        stamp = np.uint32(1000 + step)
        if task.kind == "embed" and step > step0:  # the token is the previous step's argmax
            if not (self.mem["next_ids"][0] == np.uint32(1000 + step - 1)).all():
                raise ModelError(f"embed task {tid} read next_ids at step {step} before the previous argmax wrote it")
        # WAR: every reader of what we write (or re-arm) finished the previous step
        for r in self.readers_of[tid]:
            if self.last_run[r] < step - 1:
                raise ModelError(f"task {tid} ({task.kind}) writes at step {step} before reader {r} "
                                 f"({self.tg.tasks[r].kind}) ran step {step - 1}")
        if self.sync == "nan":
            a0, n = int(rec[F["T_REARM_OFF"]]), int(rec[F["T_N_REARM"]])
            for k in range(a0, a0 + n):
                name, copy, words = self._words(self._region(k), par ^ 1, pos)
                self.mem[name][copy, words] = SENT
        # reads: polled activations must hold this step's stamp; caches this step's at pos
        for r in task.reads:
            b = self.bufs[r.buffer]
            if b.role == "act":
                words = box_words(r.box, b.shape, b.dtype)
                got = self.mem[r.buffer][par if r.buffer in self.dbuf else 0, words]
                if not (got == stamp).all():
                    raise ModelError(f"task {tid} ({task.kind} l{task.layer}) read {r.buffer}{list(r.box)} at "
                                     f"step {step} before it was written (found {sorted(set(got.tolist()))[:3]})")
            elif b.role == "cache":
                if r.box[2][1] < b.shape[2]:  # positions before pos only (ir.py): an earlier step wrote pos - 1
                    if pos > 0:
                        got = self.mem[r.buffer][0, box_words(r.box, b.shape, b.dtype, pos - 1)]
                        if not ((got >= np.uint32(1000)) & (got < stamp)).all():
                            raise ModelError(f"task {tid} ({task.kind}) read {r.buffer} at pos {pos - 1} before "
                                             f"an earlier step wrote it")
                    continue
                words = box_words(r.box, b.shape, b.dtype, pos)
                if not (self.mem[r.buffer][0, words] == stamp).all():
                    raise ModelError(f"task {tid} ({task.kind}) read {r.buffer} at pos {pos} before it was written")
        for w in task.writes:
            b = self.bufs[w.buffer]
            if b.role in ("act", "output"):
                words = box_words(w.box, b.shape, b.dtype)
                self.mem[w.buffer][par if w.buffer in self.dbuf else 0, words] = stamp
            elif b.role == "cache":
                self.mem[w.buffer][0, box_words(w.box, b.shape, b.dtype, pos)] = stamp
        s0, ns = int(rec[F["T_SIG_OFF"]]), int(rec[F["T_N_SIG"]])
        at = self.tab.header("HDR_SIGS")
        if self.sync == "atomic":
            for k in range(s0, s0 + ns):
                self.counters[int(self.ints[at + k])] += 1
        if rec[F["T_FLAGS"]] & T.TF_SIGNAL_LOOP:
            self.counters[self.tab.n_events] += 1
        self.last_run[tid] = step

    def launch(self, nsteps: int, pos0: int) -> None:
        """One launch of ``nsteps`` steps from ``self.step``; workers interleaved at random."""
        step0 = self.step
        W = self.sched.num_workers
        qlen = [len(q) for q in self.sched.queues]
        state = [(step0, 0) for _ in range(W)]  # (step, queue index)
        early = [False] * W  # the current task's early loads are done
        end = step0 + nsteps
        while True:
            live = [w for w in range(W) if state[w][0] < end]
            if not live:
                break
            self.rng.shuffle(live)
            progressed = False
            for w in live:
                s, i = state[w]
                if qlen[w] == 0:
                    state[w] = (end, 0)
                    progressed = True
                    break
                rec = self._rec(w, i)
                pos = pos0 + s - step0
                if not early[w]:
                    # as early as the device may: when the worker reaches the task (past its gate)
                    if self._early_gate(rec, s, step0):
                        self._early(rec, s, pos)
                        early[w] = True
                        progressed = True
                        break
                    continue
                if self._ready(rec, s, step0, pos):
                    self._run(rec, s, step0, pos)
                    i += 1
                    state[w] = (s + 1, 0) if i == qlen[w] else (s, i)
                    early[w] = False
                    if state[w][0] < end:  # the next task's early loads right away, if its gate is open
                        s2, i2 = state[w]
                        rec2 = self._rec(w, i2)
                        if self._early_gate(rec2, s2, step0):
                            self._early(rec2, s2, pos0 + s2 - step0)
                            early[w] = True
                    progressed = True
                    break
            if not progressed:
                stuck = {w: (state[w], int(self._rec(w, state[w][1])[F["T_ID"]])) for w in live[:4]}
                raise ModelError(f"deadlock: no worker can progress; e.g. {stuck}")
        self.step = end
