"""Small task graphs and schedules for the verifier and oracle tests.

``tiny_decoder`` writes a decoder task graph by hand, following the task kinds and buffer names of
``mkc.taskgraph.ir`` (embed, qkv per head, attn per (batch row, kv head), oproj/gateup/down row
tiles, lmhead tiles, argmax), with events derived the contract's way: a consumer waits on one event
per distinct producer set, and an event's regions are the producers' writes its waiters read.
``round_robin`` deals the tasks in id (topological) order to workers, thresholds = triggers.

``real_case`` uses the real lowering and scheduler when they exist, so tests move to real schedules
without changing.
"""

from __future__ import annotations

import dataclasses

from mkc.schedule.ir import KernelPlan, Schedule
from mkc.taskgraph.smem import GEMV_KINDS, attn_smem, smem_plan
from mkc.target import Target, get_target
from mkc.taskgraph.ir import Buffer, Event, Region, Task, TaskGraph


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    parts = max(1, min(parts, n))
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def tiny_decoder(target: Target | str = "h200", batch: int = 1, layers: int = 1, hidden: int = 64,
                 inter: int = 128, n_heads: int = 4, n_kv: int = 2, head_dim: int = 16, vocab: int = 96,
                 seq: int = 16, tiles: int = 4) -> TaskGraph:
    target = get_target(target) if isinstance(target, str) else target
    B, H, I, nh, nkv, hd, V, L = batch, hidden, inter, n_heads, n_kv, head_dim, vocab, seq
    rep = nh // nkv
    sp = smem_plan(target, B, max(H, I, nh * hd))
    bufs: dict[str, Buffer] = {}
    drafts: list[dict] = []

    def buf(name, shape, dtype="f32", role="act"):
        bufs[name] = Buffer(name, tuple(shape), dtype, role, polled=role in ("act", "output", "cache"))
        return name

    def reg(name, *box):
        return Region(name, tuple(box))

    def task(kind, layer, args, reads, writes, smem):
        drafts.append(dict(kind=kind, layer=layer, args=tuple(args), reads=tuple(reads), writes=tuple(writes),
                           smem=smem))

    ids, pos = buf("ids", (B,), "i64", "input"), buf("pos", (1,), "i64", "input")
    table = buf("model.embed_tokens.weight", (V, H), "bf16", "weight")
    x = buf("x0", (B, H))
    for c0, c1 in _split(H, 2):
        task("embed", -1, (c0, c1), [reg(ids, (0, B)), reg(table, (0, V), (c0, c1))], [reg(x, (0, B), (c0, c1))], 1024)
    for l in range(layers):
        w = {k: buf(f"model.layers.{l}.{k}.weight", s, "bf16", "weight")
             for k, s in (("q", (nh * hd, H)), ("k", (nkv * hd, H)), ("v", (nkv * hd, H)), ("o", (H, nh * hd)),
                          ("gate", (I, H)), ("up", (I, H)), ("down", (H, I)))}
        q, at = buf(f"q.{l}", (B, nh * hd)), buf(f"attn.{l}", (B, nh * hd))
        kc = buf(f"k_cache.{l}", (B, nkv, L, hd), "bf16", "cache")
        vc = buf(f"v_cache.{l}", (B, nkv, L, hd), "bf16", "cache")
        xa, hm, xm = buf(f"xa.{l}", (B, H)), buf(f"h.{l}", (B, I)), buf(f"xm.{l}", (B, H))
        for j in range(nh + 2 * nkv):  # one head per qkv task
            if j < nh:
                wr, out = reg(w["q"], (j * hd, (j + 1) * hd), (0, H)), reg(q, (0, B), (j * hd, (j + 1) * hd))
            else:
                g = (j - nh) % nkv
                which, cache = ("k", kc) if j < nh + nkv else ("v", vc)
                wr = reg(w[which], (g * hd, (g + 1) * hd), (0, H))
                out = reg(cache, (0, B), (g, g + 1), (L - 1, L), (0, hd))
            task("qkv", l, (j, j + 1), [wr, reg(x, (0, B), (0, H)), reg(pos, (0, 1))], [out], sp.gemv_bytes(B, H))
        for b in range(B):
            for g in range(nkv):
                cols = (g * rep * hd, (g + 1) * rep * hd)
                task("attn", l, (b, g), [reg(q, (b, b + 1), cols), reg(kc, (b, b + 1), (g, g + 1), (0, L), (0, hd)),
                                         reg(vc, (b, b + 1), (g, g + 1), (0, L), (0, hd)), reg(pos, (0, 1))],
                     [reg(at, (b, b + 1), cols)], attn_smem(B, rep, hd))
        for r0, r1 in _split(H, tiles):
            task("oproj", l, (r0, r1), [reg(w["o"], (r0, r1), (0, nh * hd)), reg(at, (0, B), (0, nh * hd)),
                                        reg(x, (0, B), (r0, r1))], [reg(xa, (0, B), (r0, r1))], sp.gemv_bytes(B, nh * hd))
        for r0, r1 in _split(I, tiles):
            task("gateup", l, (r0, r1), [reg(w["gate"], (r0, r1), (0, H)), reg(w["up"], (r0, r1), (0, H)),
                                         reg(xa, (0, B), (0, H))], [reg(hm, (0, B), (r0, r1))], sp.gemv_bytes(B, H))
        for r0, r1 in _split(H, tiles):
            task("down", l, (r0, r1), [reg(w["down"], (r0, r1), (0, I)), reg(hm, (0, B), (0, I)),
                                       reg(xa, (0, B), (r0, r1))], [reg(xm, (0, B), (r0, r1))], sp.gemv_bytes(B, I))
        x = xm
    lm = _split(V, tiles)
    logits = buf("logits", (B, V), role="output")
    amax, amax_idx = buf("amax_part", (B, len(lm))), buf("amax_idx", (B, len(lm)), "i32")
    nxt = buf("next_ids", (B,), "i64", "output")
    for t, (r0, r1) in enumerate(lm):
        task("lmhead", -1, (r0, r1, t), [reg(table, (r0, r1), (0, H)), reg(x, (0, B), (0, H))],
             [reg(logits, (0, B), (r0, r1)), reg(amax, (0, B), (t, t + 1)), reg(amax_idx, (0, B), (t, t + 1))],
             sp.gemv_bytes(B, H))
    task("argmax", -1, (), [reg(amax, (0, B), (0, len(lm))), reg(amax_idx, (0, B), (0, len(lm)))],
         [reg(nxt, (0, B))], 1024)
    events, waits, signals = _events(drafts)
    tasks = tuple(Task(i, d["kind"], d["layer"], d["args"], d["reads"], d["writes"], waits[i], signals[i], d["smem"],
                       4096, 1024) for i, d in enumerate(drafts))
    dims = (("B", B), ("H", H), ("I", I), ("nh", nh), ("nkv", nkv), ("hd", hd), ("V", V), ("n_layers", layers))
    return TaskGraph("tiny-decoder", target.name, B, L, tuple(bufs.values()), tasks, events, dims).check()


def _events(drafts):
    """One event per distinct producer set; regions = the producers' writes some waiter reads."""
    groups: dict[frozenset, list[int]] = {}
    for i, d in enumerate(drafts):
        prods = frozenset(j for j in range(i) for w in drafts[j]["writes"] for r in d["reads"] if w.overlaps(r))
        if prods:
            groups.setdefault(prods, []).append(i)
    events, waits, signals = [], [[] for _ in drafts], [[] for _ in drafts]
    for eid, (prods, waiters) in enumerate(groups.items()):
        regions = []
        for p in sorted(prods):
            signals[p].append(eid)
            for w in drafts[p]["writes"]:
                if w not in regions and any(w.overlaps(r) for c in waiters for r in drafts[c]["reads"]):
                    regions.append(w)
        for c in waiters:
            waits[c].append(eid)
        events.append(Event(eid, f"e{eid}", len(prods), tuple(regions)))
    return tuple(events), [tuple(w) for w in waits], [tuple(s) for s in signals]


def round_robin(tg: TaskGraph, target: Target | str, sync: str = "atomic", workers: int | None = None) -> Schedule:
    """Tasks in id order dealt to workers cyclically; the kernel plan sized to fit exactly."""
    target = get_target(target) if isinstance(target, str) else target
    W = workers or target.sms
    queues: list[list[int]] = [[] for _ in range(W)]
    for t in tg.tasks:
        queues[t.id % W].append(t.id)
    sp = smem_plan(target, tg.batch, 256)
    pre = lambda t: sp.stages * sp.stage_bytes if t.kind in GEMV_KINDS else 0  # noqa: E731
    smem = max(tg.tasks[t].smem + (pre(tg.tasks[q[i + 1]]) if i + 1 < len(q) else 0)
               for q in queues for i, t in enumerate(q))
    plan = KernelPlan(256, smem, 255 if target.vendor == "nvidia" else 128, max(map(len, queues)),
                      max(len(t.waits) for t in tg.tasks), max(len(t.signals) for t in tg.tasks))
    n = len(tg.tasks)
    return Schedule(target.name, tg.batch, sync, W, tuple(map(tuple, queues)), tuple(float(i) for i in range(n)),
                    tuple(float(i + 1) for i in range(n)), tuple(e.triggers for e in tg.events), plan, "round_robin",
                    float(n), 1.0).check(n)


def have_real_pipeline() -> bool:
    try:
        import mkc.schedule.stage  # noqa: F401
        import mkc.taskgraph.lower  # noqa: F401
    except ImportError:
        return False
    return True


def real_case(family: str = "llama", batch: int = 1, sync: str = "atomic", target: Target | str | None = None,
              layers: int = 1, method: str = "list"):
    """(TaskGraph, Schedule, Target) from the real lowering + scheduler on a tiny model (default: an
    8-SM H200, so queues hold several tasks), or the hand-written fixture with a round-robin
    schedule where those are not there."""
    if target is None:
        import dataclasses as dc

        target = dc.replace(get_target("h200"), name="h200-8sm", sms=8)
    tgt = get_target(target) if isinstance(target, str) else target
    if not have_real_pipeline():
        tg = tiny_decoder(tgt, batch, layers, n_heads=4 if family != "qwen2" else 6)
        return tg, round_robin(tg, tgt, sync), tgt
    from mkc.verify.mutants import real_schedule

    return real_schedule(family, batch, sync, tgt, layers, method)


def replace_task(tg: TaskGraph, tid: int, **changes) -> TaskGraph:
    tasks = list(tg.tasks)
    tasks[tid] = dataclasses.replace(tasks[tid], **changes)
    return dataclasses.replace(tg, tasks=tuple(tasks))
