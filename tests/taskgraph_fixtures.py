"""Synthetic decoder TaskGraphs for scheduler tests (no capture, no lowering needed).

The structure follows the task kinds of ``mkc.taskgraph.ir``: per layer one qkv task per head
(nh + 2*nkv), one attn task per (batch row, kv head) waiting only on its group's q/k/v heads,
then oproj, gateup and down row tiles; gateup signals one event per chunk of the intermediate
and every down tile waits on all chunks (fan-in with several waits). Embed tiles come first,
lmhead tiles and one argmax last. Bytes are weight bytes plus activations, so tiles differ in
time the way real ones do.
"""

from __future__ import annotations

import dataclasses

from mkc.taskgraph.smem import attn_smem, smem_plan
from mkc.target import Target, get_target
from mkc.taskgraph.ir import Buffer, Event, Region, Task, TaskGraph

LLAMA_1B = dict(hidden=2048, intermediate=8192, n_heads=32, n_kv_heads=8, head_dim=64, vocab=128256, n_layers=16)
QWEN3_8B = dict(hidden=4096, intermediate=12288, n_heads=32, n_kv_heads=8, head_dim=128, vocab=151936, n_layers=36)
TINY = dict(hidden=512, intermediate=1536, n_heads=8, n_kv_heads=2, head_dim=64, vocab=4096, n_layers=2)


def toy_target(sms: int = 8, base: str = "h200") -> Target:
    """A made-up target with few workers, so the cumulative constraint binds on small graphs."""
    return dataclasses.replace(get_target(base), name=f"toy{sms}", sms=sms)


def split(n: int, parts: int) -> list[tuple[int, int]]:
    parts = max(1, min(parts, n))
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def decoder_taskgraph(
    target: Target | str = "h200",
    batch: int = 1,
    max_seq_len: int = 512,
    hidden: int = 2048,
    intermediate: int = 8192,
    n_heads: int = 32,
    n_kv_heads: int = 8,
    head_dim: int = 64,
    vocab: int = 128256,
    n_layers: int = 2,
    tiles: int = 128,
    embed_tiles: int = 16,
    lm_tiles: int = 128,
    h_chunks: int = 4,
    smem_extra: int = 0,
) -> TaskGraph:
    target = get_target(target) if isinstance(target, str) else target
    B, H, I, nh, nkv, hd, V, L = batch, hidden, intermediate, n_heads, n_kv_heads, head_dim, vocab, max_seq_len
    n_rep = nh // nkv
    sp = smem_plan(target, B, max(H, I, nh * hd))
    bufs: list[Buffer] = []
    tasks: list[Task] = []
    events: list[Event] = []

    def buf(name, shape, dtype="f32", role="act", polled=False):
        bufs.append(Buffer(name, tuple(shape), dtype, role, polled))
        return name

    def reg(name, *box):
        return Region(name, tuple(box))

    def event(name, regions=()):
        events.append(Event(len(events), name, 0, tuple(regions)))
        return len(events) - 1

    def task(kind, layer, args, reads, writes, waits, signals, smem, nbytes, flops):
        tasks.append(Task(len(tasks), kind, layer, tuple(args), tuple(reads), tuple(writes), tuple(waits),
                          tuple(signals), smem + smem_extra, int(nbytes), int(flops)))

    def gemv(kind, layer, r0, r1, k, wnames, reads, writes, waits, signals, n_mats=1):
        wreads = [reg(w, (r0, r1), (0, k)) for w in wnames]
        nbytes = 2 * n_mats * (r1 - r0) * k + 4 * B * (k + (r1 - r0))
        task(kind, layer, (r0, r1), wreads + reads, writes, waits, signals, sp.gemv_bytes(B, k), nbytes,
             2 * B * n_mats * (r1 - r0) * k)

    ids, pos = buf("ids", (B,), "i64", "input"), buf("pos", (1,), "i64", "input")
    table = buf("model.embed_tokens.weight", (V, H), "bf16", "weight")
    x = buf("x0", (B, H), polled=True)
    ev_x = event("x0", [reg(x, (0, B), (0, H))])
    for c0, c1 in split(H, embed_tiles):
        task("embed", -1, (c0, c1), [reg(ids, (0, B)), reg(table, (0, V), (c0, c1))], [reg(x, (0, B), (c0, c1))],
             [], [ev_x], 1024, 2 * B * (c1 - c0) + 4 * B * (c1 - c0), 0)
    for l in range(n_layers):
        p = f"model.layers.{l}."
        wq = buf(p + "self_attn.q_proj.weight", (nh * hd, H), "bf16", "weight")
        wk = buf(p + "self_attn.k_proj.weight", (nkv * hd, H), "bf16", "weight")
        wv = buf(p + "self_attn.v_proj.weight", (nkv * hd, H), "bf16", "weight")
        wo = buf(p + "self_attn.o_proj.weight", (H, nh * hd), "bf16", "weight")
        wg = buf(p + "mlp.gate_proj.weight", (I, H), "bf16", "weight")
        wu = buf(p + "mlp.up_proj.weight", (I, H), "bf16", "weight")
        wd = buf(p + "mlp.down_proj.weight", (H, I), "bf16", "weight")
        q = buf(f"q.{l}", (B, nh * hd), polled=True)
        kc = buf(f"k_cache.{l}", (B, nkv, L, hd), "bf16", "cache", polled=True)
        vc = buf(f"v_cache.{l}", (B, nkv, L, hd), "bf16", "cache", polled=True)
        at = buf(f"attn.{l}", (B, nh * hd), polled=True)
        xa = buf(f"xa.{l}", (B, H), polled=True)
        hm = buf(f"h.{l}", (B, I), polled=True)
        xm = buf(f"xm.{l}", (B, H), polled=True)

        ev_g = []
        for g in range(nkv):
            qs = (g * n_rep * hd, (g + 1) * n_rep * hd)
            ev_g.append(event(f"qkv.{l}.{g}", [reg(q, (0, B), qs), reg(kc, (0, B), (g, g + 1), (0, L), (0, hd)),
                                               reg(vc, (0, B), (g, g + 1), (0, L), (0, hd))]))
        for j in range(nh + 2 * nkv):
            if j < nh:
                w, r, out, g = wq, j, reg(q, (0, B), (j * hd, (j + 1) * hd)), j // n_rep
            elif j < nh + nkv:
                w, r, g = wk, j - nh, j - nh
                out = reg(kc, (0, B), (g, g + 1), (0, L), (0, hd))
            else:
                w, r, g = wv, j - nh - nkv, j - nh - nkv
                out = reg(vc, (0, B), (g, g + 1), (0, L), (0, hd))
            gemv("qkv", l, j * hd, (j + 1) * hd, H, [], [reg(w, (r * hd, (r + 1) * hd), (0, H)),
                                                         reg(x, (0, B), (0, H)), reg(pos, (0, 1))],
                 [out], [ev_x], [ev_g[g]])
        ev_at = event(f"attn.{l}", [reg(at, (0, B), (0, nh * hd))])
        for b in range(B):
            for g in range(nkv):
                cols = (g * n_rep * hd, (g + 1) * n_rep * hd)
                kv_bytes = 2 * 2 * L * hd
                task("attn", l, (b, g),
                     [reg(q, (b, b + 1), cols), reg(kc, (b, b + 1), (g, g + 1), (0, L), (0, hd)),
                      reg(vc, (b, b + 1), (g, g + 1), (0, L), (0, hd)), reg(pos, (0, 1))],
                     [reg(at, (b, b + 1), cols)], [ev_g[g]], [ev_at], attn_smem(B, n_rep, hd),
                     kv_bytes + 8 * n_rep * hd, 4 * n_rep * L * hd)
        ev_xa = event(f"xa.{l}", [reg(xa, (0, B), (0, H))])
        for r0, r1 in split(H, tiles):
            gemv("oproj", l, r0, r1, nh * hd, [wo], [reg(at, (0, B), (0, nh * hd)), reg(x, (0, B), (r0, r1))],
                 [reg(xa, (0, B), (r0, r1))], [ev_at], [ev_xa])
        chunks = split(I, h_chunks)
        ev_h = [event(f"h.{l}.{k}", [reg(hm, (0, B), c)]) for k, c in enumerate(chunks)]
        for r0, r1 in split(I, tiles):
            mine = [ev_h[k] for k, (c0, c1) in enumerate(chunks) if c0 < r1 and r0 < c1]  # a tile may straddle
            gemv("gateup", l, r0, r1, H, [wg, wu], [reg(xa, (0, B), (0, H))], [reg(hm, (0, B), (r0, r1))],
                 [ev_xa], mine, n_mats=2)
        ev_xm = event(f"xm.{l}", [reg(xm, (0, B), (0, H))])
        for r0, r1 in split(H, tiles):
            gemv("down", l, r0, r1, I, [wd], [reg(hm, (0, B), (0, I)), reg(xa, (0, B), (r0, r1))],
                 [reg(xm, (0, B), (r0, r1))], ev_h, [ev_xm])
        x, ev_x = xm, ev_xm

    logits = buf("logits", (B, V), role="output")
    n_lm = len(split(V, lm_tiles))
    amax = buf("amax_part", (B, 2 * n_lm), role="act")
    nxt = buf("next_ids", (B,), "i64", "output")
    ev_lm = event("logits", [reg(amax, (0, B), (0, 2 * n_lm))])
    for i, (r0, r1) in enumerate(split(V, lm_tiles)):
        gemv("lmhead", -1, r0, r1, H, [table], [reg(x, (0, B), (0, H))],
             [reg(logits, (0, B), (r0, r1)), reg(amax, (0, B), (2 * i, 2 * i + 2))], [ev_x], [ev_lm])
    task("argmax", -1, (), [reg(amax, (0, B), (0, 2 * n_lm))], [reg(nxt, (0, B))], [ev_lm], [], 1024,
         8 * B * n_lm + 8 * B, B * n_lm)

    counts = {}
    for t in tasks:
        for e in t.signals:
            counts[e] = counts.get(e, 0) + 1
    events = [dataclasses.replace(e, triggers=counts.get(e.id, 0)) for e in events]
    dims = (("B", B), ("H", H), ("I", I), ("nh", nh), ("nkv", nkv), ("hd", hd), ("V", V), ("n_layers", n_layers))
    return TaskGraph("synthetic-decoder", target.name, B, L, tuple(bufs), tuple(tasks), tuple(events), dims).check()


def have_lowering() -> bool:
    try:
        import mkc.taskgraph.lower  # noqa: F401
    except ImportError:
        return False
    return True


def real_taskgraph(model: str = "llama-3.2-1b", target: str = "h200", batch: int = 1, max_seq_len: int = 512):
    """A bundled model's config -> canonical Graph -> TaskGraph through the real lowering."""
    from codegen_fixtures import shape_graph

    from mkc.taskgraph.lower import lower

    graph = shape_graph(model, batch, max_seq_len)
    return lower(graph, get_target(target), name=model)


def random_taskgraph(n: int = 30, seed: int = 0, target: Target | str = "h200", max_preds: int = 3,
                     layers: int = 0) -> TaskGraph:
    """A random DAG of GEMV-like tasks (each signals its own event, waits on up to ``max_preds``
    earlier ones), for schedulers' corner cases. ``layers`` > 0 tags tasks with layers in id order."""
    import random

    target = get_target(target) if isinstance(target, str) else target
    rng = random.Random(seed)
    kinds = ("qkv", "attn", "oproj", "gateup", "down")
    bw = target.hbm_bw * 0.875 / target.sms / 1e6  # bytes per us, as the default cost model
    tasks = []
    for i in range(n):
        preds = sorted(rng.sample(range(i), min(i, rng.randint(0, max_preds)))) if i else []
        nbytes = int(bw * rng.choice((1, 2, 3, 5, 8, 13)))
        layer = i * layers // n if layers else -1
        tasks.append(Task(i, rng.choice(kinds), layer, (), (), (), tuple(preds), (i,), 4096, nbytes, 0))
    events = tuple(Event(i, f"t{i}", 1) for i in range(n))
    return TaskGraph("random", target.name, 1, 16, (), tuple(tasks), events).check()


def assert_schedule_valid(tg: TaskGraph, sched, eps: float = 2e-3) -> None:
    """Every task queued once, every start after its producers' ends, queues sorted by start with
    no overlap, and the queues replay (no deadlock) to the recorded times."""
    from mkc.schedule.timeline import Deps, timeline

    sched.check(len(tg.tasks))
    deps = Deps.from_taskgraph(tg)
    for e, ps in enumerate(deps.prod):
        for c in deps.cons[e]:
            for p in ps:
                assert sched.start[c] >= sched.end[p] - eps, (p, c, sched.end[p], sched.start[c])
    for q in sched.queues:
        for a, b in zip(q, q[1:]):
            assert sched.start[b] >= sched.end[a] - eps, (a, b)
    dur = [e - s for s, e in zip(sched.start, sched.end)]
    start, end = timeline(deps, dur, sched.queues)
    for t in range(len(tg.tasks)):
        assert abs(start[t] - sched.start[t]) < 0.05, (t, start[t], sched.start[t])
    assert abs(max(sched.end) - sched.makespan) < eps
    assert sched.makespan >= sched.lower_bound - eps
    assert len(sched.thresholds) == len(tg.events)
