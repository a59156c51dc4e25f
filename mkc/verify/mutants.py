"""Mutation testing of the verifier: break real schedules on purpose and compare verdicts.

Each mutant is a real schedule (tiny Llama/Qwen2/Qwen3/Mistral shapes, a few batch sizes, both
sync modes, real and small targets) with one change of a kind a compiler bug could make. The
oracle (``oracle.judge``: the dynamic simulation plus the documented resource model) says whether
the mutant is really unsafe; the verifier must reject exactly those. A mutant that stays safe
(e.g. a dropped wait whose order another path still gives) must be accepted.

``run_campaign(n)`` returns a ``CampaignSummary``: counts per mutation kind of unsafe accepted
and safe rejected (both must be 0), printable with ``.text()``.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mkc.schedule.ir import Schedule
from mkc.verify.oracle import judge
from mkc.verify.verifier import verify
from mkc.target import Target, get_target
from mkc.taskgraph.ir import TaskGraph


@dataclass(frozen=True)
class Base:
    label: str
    tg: TaskGraph
    sched: Schedule
    target: Target


@dataclass(frozen=True)
class Mutant:
    kind: str
    what: str
    tg: TaskGraph
    sched: Schedule
    target: Target | None = None  # None: the base's target


# ---- real schedules of tiny models ---------------------------------------------------------


def tiny_info(family: str, layers: int = 1):
    from mkc.capture.graph import ModelInfo

    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "mistral": "MistralForCausalLM"}[family]
    shape = {  # hidden, inter, heads, kv heads, head_dim, vocab, tied
        "llama": (64, 128, 4, 2, 16, 128, True),
        "qwen2": (48, 96, 6, 2, 8, 96, True),
        "qwen3": (64, 128, 4, 2, 16, 128, True),
        "mistral": (64, 160, 8, 2, 8, 128, False),
    }[family]
    H, I, nh, nkv, hd, V, tied = shape
    return ModelInfo(arch, family, H, I, layers, nh, nkv, hd, V, 1e-5, tied, family == "qwen2", family == "qwen3")


def real_schedule(family: str, batch: int, sync: str, target: Target | str, layers: int = 1,
                  method: str = "list", max_seq_len: int = 16, down_split: int = 1, xn_bf16: bool = False,
                  down_sum: int = 1, qkv_sum: int = 1):
    """(TaskGraph, Schedule, Target) through the real capture graph, lowering and scheduler
    (``down_split``: split-K down's chunks, ``lower(down_split=...)``; ``xn_bf16``: the residual
    stream's normed bf16 copies, ``lower(xn_bf16=...)``; ``down_sum``: down's partial products over
    chunks of h and their sums, ``lower(down_sum=...)``, with h in bf16; ``qkv_sum``: qkv's partial
    products over chunks of the normed input, added by unsplit attention, ``lower(qkv_sum=...)``)."""
    from mkc.capture.canonical import build_graph, rope_inv_freq
    from mkc.schedule.stage import schedule
    from mkc.taskgraph.lower import lower

    target = get_target(target) if isinstance(target, str) else target
    info = tiny_info(family, layers)
    graph = build_graph(info, batch, max_seq_len, rope_inv_freq(info.head_dim, 10000.0))
    tg = lower(graph, target, down_split=down_split, xn_bf16=xn_bf16, down_sum=down_sum, h_bf16=down_sum > 1,
               qkv_sum=qkv_sum, **({"attn_split": 1} if qkv_sum > 1 else {}))
    return tg, schedule(tg, target, sync, method, time_limit=2.0), target


def small_target(base: str, sms: int) -> Target:
    """A real target with fewer SMs, so tiny models put several tasks on each worker's queue."""
    return dataclasses.replace(get_target(base), name=f"{base}-{sms}sm", sms=sms)


def default_bases(progress: Callable[[str], None] | None = None) -> list[Base]:
    configs = [  # family, layers, batch, target, scheduling method, split-K down's chunks
        ("llama", 2, 1, small_target("h200", 8), "list", 1), ("llama", 1, 2, get_target("h200"), "cpsat", 1),
        ("qwen2", 1, 1, small_target("mi300x", 12), "cpsat", 1), ("qwen2", 2, 3, small_target("h200", 16), "list", 1),
        ("qwen3", 1, 2, small_target("h200", 6), "round_robin", 1), ("qwen3", 2, 1, get_target("mi300x"), "list", 1),
        ("mistral", 1, 4, small_target("mi300x", 10), "list", 1), ("mistral", 2, 1, small_target("h200", 24), "cpsat", 1),
        # split-K down: chains of running sums, chunks waiting on part of gate/up
        ("llama", 2, 1, small_target("h200", 8), "list", 4), ("qwen3", 1, 1, small_target("h200", 12), "cpsat", 2),
    ]
    # the residual stream's normed bf16 copies (lower(xn_bf16=True)): their producers and readers,
    # with atomic counters only (render refuses them with NaN sentinels)
    xn_configs = [("llama", 2, 4, small_target("h200", 8), "list"), ("qwen3", 1, 8, get_target("h200"), "cpsat")]
    runs = [(c, sync, False) for c in configs for sync in ("atomic", "nan")]
    runs += [((*c, 1), "atomic", True) for c in xn_configs]
    bases = []
    for (family, layers, batch, target, method, down_split), sync, xn in runs:
        tg, sched, tgt = real_schedule(family, batch, sync, target, layers, method, down_split=down_split, xn_bf16=xn)
        label = (f"{family} L{layers} b{batch} {target.name} {sync} {sched.method}"
                 + (f" down split {down_split}" if down_split > 1 else "") + (" xn" if xn else ""))
        bases.append(Base(label, tg, sched, tgt))
        if progress:
            progress(f"base {label}: {len(tg.tasks)} tasks, {len(tg.events)} events")
    return bases


# ---- mutation operators --------------------------------------------------------------------


def _with_task(tg: TaskGraph, tid: int, **changes) -> TaskGraph:
    tasks = list(tg.tasks)
    tasks[tid] = dataclasses.replace(tasks[tid], **changes)
    return dataclasses.replace(tg, tasks=tuple(tasks))


def _with_queues(sched: Schedule, queues) -> Schedule:
    return dataclasses.replace(sched, queues=tuple(tuple(q) for q in queues), num_workers=len(queues))


def _with_threshold(sched: Schedule, e: int, value: int) -> Schedule:
    thr = list(sched.thresholds)
    thr[e] = value
    return dataclasses.replace(sched, thresholds=tuple(thr))


def _waited(tg: TaskGraph) -> list[int]:
    return sorted({e for t in tg.tasks for e in t.waits})


def _deps(tg: TaskGraph) -> dict[int, set[int]]:
    sig: dict[int, set[int]] = {}
    for t in tg.tasks:
        for e in t.signals:
            sig.setdefault(e, set()).add(t.id)
    return {t.id: set().union(*(sig.get(e, set()) for e in t.waits)) if t.waits else set() for t in tg.tasks}


def m_drop_wait(b: Base, rng: random.Random):
    cands = [t for t in b.tg.tasks if t.waits]
    if not cands:
        return None
    t = rng.choice(cands)
    i = rng.randrange(len(t.waits))
    return _with_task(b.tg, t.id, waits=t.waits[:i] + t.waits[i + 1:]), b.sched, \
        f"task {t.id} ({t.kind}) no longer waits on event {t.waits[i]}"


def m_move_wait(b: Base, rng: random.Random):
    cands = [t for t in b.tg.tasks if t.waits]
    if not cands or len(b.tg.events) < 2:
        return None
    t = rng.choice(cands)
    i = rng.randrange(len(t.waits))
    near = [e.id for e in b.tg.events if e.id not in t.waits and any(
        b.tg.tasks[p].layer == t.layer for p in _signalers(b.tg, e.id))]
    pool = near if near and rng.random() < 0.6 else [e.id for e in b.tg.events if e.id not in t.waits]
    if not pool:
        return None
    e2 = rng.choice(pool)
    waits = t.waits[:i] + (e2,) + t.waits[i + 1:]
    return _with_task(b.tg, t.id, waits=waits), b.sched, f"task {t.id} ({t.kind}) waits on event {e2} instead of {t.waits[i]}"


def _signalers(tg: TaskGraph, e: int) -> list[int]:
    return [t.id for t in tg.tasks if e in t.signals]


def m_swap_queue(b: Base, rng: random.Random):
    qs = [list(q) for q in b.sched.queues]
    multi = [w for w, q in enumerate(qs) if len(q) >= 2]
    if not multi:
        return None
    deps = _deps(b.tg)
    pairs = [(w, i, j) for w in multi for i in range(len(qs[w])) for j in range(i + 1, len(qs[w]))
             if qs[w][i] in deps[qs[w][j]]]
    if pairs and rng.random() < 0.6:
        w, i, j = rng.choice(pairs)
    else:
        w = rng.choice(multi)
        i, j = sorted(rng.sample(range(len(qs[w])), 2))
    qs[w][i], qs[w][j] = qs[w][j], qs[w][i]
    return b.tg, _with_queues(b.sched, qs), f"worker {w}: swapped tasks {qs[w][j]} and {qs[w][i]} (positions {i}, {j})"


def m_requeue(b: Base, rng: random.Random):
    qs = [list(q) for q in b.sched.queues]
    src = [w for w, q in enumerate(qs) if q]
    if len(qs) < 2 or not src:
        return None
    w = rng.choice(src)
    t = qs[w].pop(rng.randrange(len(qs[w])))
    w2 = rng.choice([x for x in range(len(qs)) if x != w])
    pos = rng.randrange(len(qs[w2]) + 1)
    qs[w2].insert(pos, t)
    return b.tg, _with_queues(b.sched, qs), f"task {t} moved from worker {w} to worker {w2} position {pos}"


def m_lower_trigger(b: Base, rng: random.Random):
    cands = [e for e in _waited(b.tg) if b.tg.events[e].triggers >= 1]
    if not cands:
        return None
    e = rng.choice(cands)
    ev = b.tg.events[e]
    d = 1 if rng.random() < 0.7 else rng.randint(1, ev.triggers)
    events = list(b.tg.events)
    events[e] = dataclasses.replace(ev, triggers=ev.triggers - d)
    tg = dataclasses.replace(b.tg, events=tuple(events))
    return tg, _with_threshold(b.sched, e, max(0, b.sched.thresholds[e] - d)), \
        f"event {e} ({ev.name}) counted {ev.triggers - d} triggers instead of {ev.triggers} (threshold too)"


def m_raise_threshold(b: Base, rng: random.Random):
    waited = _waited(b.tg)
    pool = waited if waited and rng.random() < 0.85 else list(range(len(b.tg.events)))
    if not pool:
        return None
    e = rng.choice(pool)
    d = 1 if rng.random() < 0.7 else rng.randint(2, 4)
    return b.tg, _with_threshold(b.sched, e, b.sched.thresholds[e] + d), f"threshold of event {e} raised by {d}"


def m_lower_threshold(b: Base, rng: random.Random):
    pool = [e for e in range(len(b.tg.events)) if b.sched.thresholds[e] > 0]
    waited = [e for e in _waited(b.tg) if b.sched.thresholds[e] > 0]
    if waited and rng.random() < 0.85:
        pool = waited
    if not pool:
        return None
    e = rng.choice(pool)
    d = 1 if rng.random() < 0.7 else rng.randint(1, b.sched.thresholds[e])
    return b.tg, _with_threshold(b.sched, e, b.sched.thresholds[e] - d), f"threshold of event {e} lowered by {d}"


def m_overlap_write(b: Base, rng: random.Random):
    bufs = {x.name: x for x in b.tg.buffers}
    cands = []
    for t in b.tg.tasks:
        for i, r in enumerate(t.writes):
            buf = bufs[r.buffer]
            dims = [d for d, (lo, hi) in enumerate(r.box) if (lo, hi) != (0, buf.shape[d])
                    and not (buf.role == "cache" and d == 2)]
            if dims:
                cands.append((t, i, dims))
    if not cands:
        return None
    t, i, dims = rng.choice(cands)
    r = t.writes[i]
    n = bufs[r.buffer].shape
    d = rng.choice(dims)
    lo, hi = r.box[d]
    if rng.random() < 0.5:  # shift the box
        k = rng.choice([x for x in range(-lo, n[d] - hi + 1) if x != 0] or [0])
        if k == 0:
            return None
        new, how = (lo + k, hi + k), f"shifted by {k}"
    else:  # grow it onto a neighbour
        grow = [(max(0, lo - rng.randint(1, hi - lo)), hi)] if lo > 0 else []
        grow += [(lo, min(n[d], hi + rng.randint(1, hi - lo)))] if hi < n[d] else []
        if not grow:
            return None
        new = rng.choice(grow)
        how = f"grown to {new[0]}:{new[1]}"
    box = r.box[:d] + (new,) + r.box[d + 1:]
    writes = t.writes[:i] + (dataclasses.replace(r, box=box),) + t.writes[i + 1:]
    return _with_task(b.tg, t.id, writes=writes), b.sched, f"task {t.id} ({t.kind}) writes {r.buffer} dim {d} {how}"


def m_resize_smem(b: Base, rng: random.Random):
    plan = b.sched.plan
    if rng.random() < 0.6:
        new = plan.smem_bytes - rng.randint(1, max(1, plan.smem_bytes // 2))
    else:
        new = plan.smem_bytes + rng.randint(1, max(1, b.target.smem_per_block - plan.smem_bytes + 8192))
    sched = dataclasses.replace(b.sched, plan=dataclasses.replace(plan, smem_bytes=max(0, new)))
    return b.tg, sched, f"kernel shared memory {plan.smem_bytes} -> {new} B"


def m_grow_task_smem(b: Base, rng: random.Random):
    t = rng.choice(b.tg.tasks)
    slack = max(0, b.sched.plan.smem_bytes - t.smem)
    d = rng.randint(1, 2 * slack + 1024)
    return _with_task(b.tg, t.id, smem=t.smem + d), b.sched, f"task {t.id} ({t.kind}) needs {d} B more shared memory"


def m_pipe_layout(b: Base, rng: random.Random):
    """The weight pipeline's pages moved or grown onto the task layouts (or shrunk off them: safe)."""
    plan = b.tg.plan
    if plan is None or not plan.pipe_slots:
        return None
    regs = dict((n, (o, k)) for n, o, k in plan.regions)
    off, n = regs["OFF_PIPE"]
    choice = rng.random()
    if choice < 0.4:  # one more page than the space before the task layouts
        new, how = (off, n + rng.choice([16, 4096, 16384])), "grown past its space"
    elif choice < 0.8:  # onto the first bytes of the attention or the GEMV layout
        tgt = regs[rng.choice(["OFF_AQ", "OFF_XS", "OFF_OUT"])]
        new, how = (tgt[0] - n // 2, n), "moved half onto a task region"
    else:  # one page fewer: still disjoint
        new, how = (off, n - 16384), "one page fewer"
    regions = tuple((nm, *new) if nm == "OFF_PIPE" else (nm, o, k) for nm, o, k in plan.regions)
    tg = dataclasses.replace(b.tg, plan=dataclasses.replace(plan, regions=regions))
    return tg, b.sched, f"the weight pipeline's pages {how} ([{off}, {off + n}) -> [{new[0]}, {new[0] + new[1]}))"


def m_sample_layout(b: Base, rng: random.Random):
    """The argmax task's sampler scratch moved onto the pipeline's pages or the flag word (a race
    with the producer or with every task), or onto the GEMV layout (safe: one task at a time)."""
    plan = b.tg.plan
    if plan is None or "OFF_SAMPLE" not in plan.offsets():
        return None
    regs = dict((n, (o, k)) for n, o, k in plan.regions)
    off, n = regs["OFF_SAMPLE"]
    choice = rng.random()
    if choice < 0.4 and plan.pipe_slots:
        new, how = (regs["OFF_PIPE"][0] + rng.choice([0, 16384]), n), "onto the pipeline's pages"
    elif choice < 0.7:
        new, how = (regs["OFF_FLAG"][0] - n + rng.choice([16, 1024]), n), "over the flag word"
    else:
        new, how = (regs[rng.choice(["OFF_OUT", "OFF_PART"])][0], n), "onto the GEMV layout"
    regions = tuple((nm, *new) if nm == "OFF_SAMPLE" else (nm, o, k) for nm, o, k in plan.regions)
    tg = dataclasses.replace(b.tg, plan=dataclasses.replace(plan, regions=regions))
    return tg, b.sched, f"the sampler's scratch moved {how} ([{off}, {off + n}) -> [{new[0]}, {new[0] + new[1]}))"


def m_skip_rearm(b: Base, rng: random.Random):
    if b.sched.sync != "nan":
        return None
    bufs = {x.name: x for x in b.tg.buffers}
    cands = [t for t in b.tg.tasks if t.rearm and any(
        bufs[r.buffer].polled and bufs[r.buffer].role != "cache" for r in t.writes)]
    if not cands:
        return None
    t = rng.choice(cands)
    return _with_task(b.tg, t.id, rearm=False), b.sched, f"task {t.id} ({t.kind}) skips its re-arm"


def m_workers(b: Base, rng: random.Random):
    plan = b.sched.plan
    qs = [list(q) for q in b.sched.queues]
    roll = rng.random()
    if roll < 0.5:  # more workers than SMs, some tasks moved onto them
        extra = rng.randint(1, max(1, len(qs) // 4))
        qs += [[] for _ in range(extra)]
        for _ in range(extra):
            w = rng.choice([x for x, q in enumerate(qs) if q])
            qs[-1 - rng.randrange(extra)].append(qs[w].pop())
        return b.tg, _with_queues(b.sched, qs), f"{extra} extra workers with tasks"
    if roll < 0.75:  # a fatter block
        plan2 = dataclasses.replace(plan, threads=plan.threads * rng.choice([2, 4, 8]))
        what = f"{plan2.threads} threads per block"
    else:  # fewer registers (may let two blocks share an SM) and twice the workers
        plan2 = dataclasses.replace(plan, regs_per_thread=rng.choice([32, 64, 96, 128]))
        qs += [[] for _ in range(len(qs))]
        movers = rng.sample(range(len(qs) // 2), k=min(len(qs) // 2, 3))
        for i, w in enumerate(movers):
            if qs[w]:
                qs[len(qs) // 2 + i].append(qs[w].pop())
        what = f"{plan2.regs_per_thread} registers per thread and {len(qs)} workers"
    return b.tg, dataclasses.replace(_with_queues(b.sched, qs), plan=plan2), what


def m_small_table(b: Base, rng: random.Random):
    plan = b.sched.plan
    field_ = rng.choice(["max_queue_len", "max_waits", "max_signals"])
    old = getattr(plan, field_)
    d = rng.choice([-2, -1, -1, -1, 1]) if old > 0 else 1
    sched = dataclasses.replace(b.sched, plan=dataclasses.replace(plan, **{field_: max(0, old + d)}))
    return b.tg, sched, f"{field_} {old} -> {max(0, old + d)}"


def m_drop_signal(b: Base, rng: random.Random):
    cands = [t for t in b.tg.tasks if t.signals]
    if not cands:
        return None
    t = rng.choice(cands)
    i = rng.randrange(len(t.signals))
    return _with_task(b.tg, t.id, signals=t.signals[:i] + t.signals[i + 1:]), b.sched, \
        f"task {t.id} ({t.kind}) no longer signals event {t.signals[i]}"


def m_shrink_poll(b: Base, rng: random.Random):
    cands = [e for e in _waited(b.tg) if b.tg.events[e].regions]
    if not cands:
        return None
    e = rng.choice(cands)
    ev = b.tg.events[e]
    i = rng.randrange(len(ev.regions))
    r = ev.regions[i]
    dims = [d for d, (lo, hi) in enumerate(r.box) if hi - lo >= 2]
    if len(ev.regions) > 1 and (not dims or rng.random() < 0.5):
        regions, how = ev.regions[:i] + ev.regions[i + 1:], f"drops region {r.buffer}{list(r.box)}"
    elif dims:
        d = rng.choice(dims)
        lo, hi = r.box[d]
        cut = rng.randint(lo + 1, hi - 1)
        half = (lo, cut) if rng.random() < 0.5 else (cut, hi)
        regions = ev.regions[:i] + (dataclasses.replace(r, box=r.box[:d] + (half,) + r.box[d + 1:]),) + ev.regions[i + 1:]
        how = f"polls only {half[0]}:{half[1]} of dim {d} of {r.buffer}"
    else:
        return None
    events = list(b.tg.events)
    events[e] = dataclasses.replace(ev, regions=regions)
    return dataclasses.replace(b.tg, events=tuple(events)), b.sched, f"event {e} ({ev.name}) {how}"


def m_grow_read(b: Base, rng: random.Random):
    bufs = {x.name: x for x in b.tg.buffers}
    cands = [(t, i, d) for t in b.tg.tasks for i, r in enumerate(t.reads)
             if bufs[r.buffer].role in ("act", "cache")
             for d, (lo, hi) in enumerate(r.box) if (lo, hi) != (0, bufs[r.buffer].shape[d])
             and not (bufs[r.buffer].role == "cache" and d == 2)]
    if not cands:
        return None
    t, i, d = rng.choice(cands)
    r = t.reads[i]
    lo, hi = r.box[d]
    n = bufs[r.buffer].shape[d]
    new = (max(0, lo - rng.randint(1, hi - lo)), hi) if lo > 0 and (hi == n or rng.random() < 0.5) \
        else (lo, min(n, hi + rng.randint(1, hi - lo)))
    reads = t.reads[:i] + (dataclasses.replace(r, box=r.box[:d] + (new,) + r.box[d + 1:]),) + t.reads[i + 1:]
    return _with_task(b.tg, t.id, reads=reads), b.sched, \
        f"task {t.id} ({t.kind}) reads {r.buffer} dim {d} {new[0]}:{new[1]} instead of {lo}:{hi}"


def m_extra_signal(b: Base, rng: random.Random):
    waited = _waited(b.tg)
    if not waited:
        return None
    e = rng.choice(waited)
    others = [t for t in b.tg.tasks if e not in t.signals]
    if not others:
        return None
    t = rng.choice(others)
    return _with_task(b.tg, t.id, signals=t.signals + (e,)), b.sched, f"task {t.id} ({t.kind}) also signals event {e}"


def m_queue_entry(b: Base, rng: random.Random):
    qs = [list(q) for q in b.sched.queues]
    src = [w for w, q in enumerate(qs) if q]
    w = rng.choice(src)
    if rng.random() < 0.5:
        t = qs[w].pop(rng.randrange(len(qs[w])))
        what = f"task {t} dropped from worker {w}'s queue"
    else:
        t = rng.choice(qs[w])
        w2 = rng.randrange(len(qs))
        qs[w2].insert(rng.randrange(len(qs[w2]) + 1), t)
        what = f"task {t} queued again on worker {w2}"
    return b.tg, _with_queues(b.sched, qs), what


def m_memory(b: Base, rng: random.Random):
    """The same build on a device whose memory is near what it needs, on either side and at the edge."""
    from mkc.verify import memory

    need = memory.need(b.tg, b.sched)["total"]
    # the smallest device whose usable part (memory less 5 % and 1 GiB) holds the build
    lo, hi = need, 2 * (need + memory.RESERVE_FIXED) + 64
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if memory.usable(dataclasses.replace(b.target, memory_bytes=mid)) < need else (lo, mid)
    delta = rng.choice([0, -1, 1, -rng.randint(1, need), rng.randint(1, need)])
    target = dataclasses.replace(b.target, memory_bytes=lo + delta)
    return b.tg, b.sched, f"a {target.name} with {lo + delta} B of device memory ({delta:+d} from the least)", target


DYNAMIC = ("drop_wait", "move_wait", "swap_queue", "requeue", "lower_trigger", "raise_threshold", "lower_threshold",
           "overlap_write", "skip_rearm", "drop_signal", "extra_signal", "shrink_poll", "grow_read")


def m_compound(b: Base, rng: random.Random):
    """Two or three of the behavioural mutations at once (e.g. a lowered threshold plus a swap)."""
    whats = []
    cur = b
    for kind in rng.sample(DYNAMIC, rng.randint(2, 3)):
        got = MUTATORS[kind](cur, rng)
        if got is None:
            continue
        tg, sched, what = got
        cur = Base(cur.label, tg, sched, cur.target)
        whats.append(what)
    return (cur.tg, cur.sched, "; ".join(whats)) if len(whats) >= 2 else None


MUTATORS: dict[str, Callable] = {
    "drop_wait": m_drop_wait,
    "move_wait": m_move_wait,
    "swap_queue": m_swap_queue,
    "requeue": m_requeue,
    "lower_trigger": m_lower_trigger,
    "raise_threshold": m_raise_threshold,
    "lower_threshold": m_lower_threshold,
    "overlap_write": m_overlap_write,
    "resize_smem": m_resize_smem,
    "grow_task_smem": m_grow_task_smem,
    "pipe_layout": m_pipe_layout,
    "sample_layout": m_sample_layout,
    "skip_rearm": m_skip_rearm,
    "workers": m_workers,
    "small_table": m_small_table,
    "drop_signal": m_drop_signal,
    "extra_signal": m_extra_signal,
    "shrink_poll": m_shrink_poll,
    "grow_read": m_grow_read,
    "queue_entry": m_queue_entry,
    "memory": m_memory,
    "compound": m_compound,
}


def mutate(base: Base, kind: str, rng: random.Random) -> Mutant | None:
    got = MUTATORS[kind](base, rng)
    if got is None:
        return None
    tg, sched, what, *target = got
    return Mutant(kind, f"{base.label}: {what}", tg, sched, target[0] if target else None)


# ---- the campaign --------------------------------------------------------------------------


@dataclass
class KindRow:
    total: int = 0
    unsafe: int = 0
    rejected: int = 0
    unsafe_accepted: int = 0
    safe_rejected: int = 0


@dataclass
class CampaignSummary:
    rows: dict[str, KindRow] = field(default_factory=dict)
    disagreements: list[str] = field(default_factory=list)
    bases: list[str] = field(default_factory=list)
    base_problems: list[str] = field(default_factory=list)
    oracle_kinds: dict[str, int] = field(default_factory=dict)
    by_sync: dict[str, list[int]] = field(default_factory=dict)  # sync -> [mutants, unsafe]
    seconds: float = 0.0
    verify_seconds: float = 0.0
    oracle_seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(r.total for r in self.rows.values())

    @property
    def unsafe_accepted(self) -> int:
        return sum(r.unsafe_accepted for r in self.rows.values()) + len(self.base_problems)

    @property
    def safe_rejected(self) -> int:
        return sum(r.safe_rejected for r in self.rows.values())

    def text(self) -> str:
        lines = [f"{'mutation':<17}{'mutants':>8}{'unsafe':>8}{'safe':>7}{'rejected':>9}{'unsafe acc.':>12}"
                 f"{'safe rej.':>10}"]
        tot = KindRow()
        order = list(MUTATORS)
        for kind, r in sorted(self.rows.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99):
            lines.append(f"{kind:<17}{r.total:>8}{r.unsafe:>8}{r.total - r.unsafe:>7}{r.rejected:>9}"
                         f"{r.unsafe_accepted:>12}{r.safe_rejected:>10}")
            for f_ in dataclasses.fields(KindRow):
                setattr(tot, f_.name, getattr(tot, f_.name) + getattr(r, f_.name))
        lines.append(f"{'total':<17}{tot.total:>8}{tot.unsafe:>8}{tot.total - tot.unsafe:>7}{tot.rejected:>9}"
                     f"{tot.unsafe_accepted:>12}{tot.safe_rejected:>10}")
        found = ", ".join(f"{k} {v}" for k, v in sorted(self.oracle_kinds.items(), key=lambda kv: -kv[1]))
        lines.append(f"oracle findings: {found}")
        lines.append("by sync mode: " + ", ".join(f"{k} {n} mutants ({u} unsafe)" for k, (n, u) in self.by_sync.items()))
        lines.append(f"{len(self.bases)} real schedules, all unmutated accepted by verifier and oracle: "
                     f"{'yes' if not self.base_problems else 'NO'}; {self.seconds:.0f} s "
                     f"(verify {self.verify_seconds:.0f} s, oracle {self.oracle_seconds:.0f} s)")
        for p in self.base_problems + self.disagreements[:20]:
            lines.append(f"  ! {p}")
        ok = self.unsafe_accepted == 0 and self.safe_rejected == 0
        lines.append(f"{'PASS' if ok else 'FAIL'}: {self.unsafe_accepted} unsafe accepted, {self.safe_rejected} safe "
                     f"rejected of {self.total} mutants")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"rows": {k: dataclasses.asdict(v) for k, v in self.rows.items()}, "bases": self.bases,
                "base_problems": self.base_problems, "disagreements": self.disagreements,
                "oracle_kinds": self.oracle_kinds, "by_sync": self.by_sync, "unsafe_accepted": self.unsafe_accepted,
                "safe_rejected": self.safe_rejected, "total": self.total, "seconds": round(self.seconds, 1)}


def run_campaign(n: int, seed: int = 0, progress: Callable[[str], None] | None = None,
                 bases: list[Base] | None = None, oracle_seeds: int = 6,
                 kinds: tuple[str, ...] | None = None) -> CampaignSummary:
    """``n`` mutants of real schedules, each judged by the oracle and by the verifier."""
    t0 = time.perf_counter()
    say = progress or (lambda msg: None)
    bases = bases if bases is not None else default_bases(say)
    out = CampaignSummary(bases=[b.label for b in bases])
    for b in bases:  # the unmutated schedules: both must accept
        rep, truth = verify(b.tg, b.sched, b.target), judge(b.tg, b.sched, b.target, oracle_seeds, seed=seed)
        if not rep.ok or not truth.safe:
            out.base_problems.append(f"{b.label}: verifier {rep.verdict()}; oracle {truth.problem or 'safe'}")
    rng = random.Random(seed)
    kinds = kinds or tuple(MUTATORS)
    made = 0
    attempts = 0
    while made < n and attempts < 50 * n + 100:
        attempts += 1
        base = bases[attempts % len(bases)]
        kind = kinds[(attempts // len(bases)) % len(kinds)] if rng.random() < 0.8 else rng.choice(kinds)
        m = mutate(base, kind, rng)
        if m is None:
            continue
        made += 1
        t1 = time.perf_counter()
        target = m.target or base.target
        rep = verify(m.tg, m.sched, target)
        t2 = time.perf_counter()
        truth = judge(m.tg, m.sched, target, oracle_seeds, seed=seed + made)
        t3 = time.perf_counter()
        out.verify_seconds += t2 - t1
        out.oracle_seconds += t3 - t2
        row = out.rows.setdefault(kind, KindRow())
        row.total += 1
        row.unsafe += not truth.safe
        row.rejected += not rep.ok
        sync = out.by_sync.setdefault(m.sched.sync, [0, 0])
        sync[0] += 1
        sync[1] += not truth.safe
        if not truth.safe:
            out.oracle_kinds[truth.kind] = out.oracle_kinds.get(truth.kind, 0) + 1
        if rep.ok and not truth.safe:
            row.unsafe_accepted += 1
            out.disagreements.append(f"unsafe accepted [{kind}] {m.what}: oracle: {truth.problem}")
        elif not rep.ok and truth.safe:
            row.safe_rejected += 1
            first = next((e for c in rep.checks for e in c.errors), rep.verdict())
            out.disagreements.append(f"safe rejected [{kind}] {m.what}: verifier: {first}")
        if made % 250 == 0:
            say(f"{made}/{n} mutants, {out.unsafe_accepted} unsafe accepted, {out.safe_rejected} safe rejected, "
                f"{time.perf_counter() - t0:.0f} s")
    out.seconds = time.perf_counter() - t0
    return out
