"""Lowering: a Graph of one decode step -> a TaskGraph of tiled, fused tasks joined by events.

    match_graph   check the op structure, read eps / RoPE / attention constants   (pattern.py)
    make_buffers  activations, caches, weights, inputs under their fixed names
    make_tasks    fuse roles into task kinds and tile them over the target's workers (tiling.py)
    cost          bytes each task moves
    build_events  producer sets from regions, shared and merged into events       (events.py)

Byte counts: weights and activations as read/written; a KV-cache read counts ``context``
positions (default ``max_seq_len``, the worst case pos = L - 1; pass ``context`` to cost a typical
decode instead). Regions are always the worst case, as ir.py says.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

from mkc.capture.graph import Graph
from mkc.errors import ScheduleError
from mkc.targets.smem import attn_smem, smem_plan
from mkc.target import Target, get_target
from mkc.taskgraph import names
from mkc.taskgraph.events import Draft, build_events
from mkc.taskgraph.ir import Buffer, Region, Task, TaskGraph
from mkc.taskgraph.pattern import ModelSpec, match_graph
from mkc.taskgraph.plan import device_plan
from mkc.taskgraph.tiling import attn_splits, embed_tiles, qkv_tiles, row_tiles

ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "i64": 8}
SMALL_SMEM = 1024  # embed and argmax stage nothing but a few reduction slots


@contextmanager
def _no_gc():
    """Lowering allocates ~10 objects per task and frees none: the cyclic GC would only rescan them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def lower(graph: Graph, target: Target | str, *, context: int | None = None, name: str | None = None) -> TaskGraph:
    """Fuse and tile ``graph`` for ``target``; batch and max_seq_len come from the graph.

    ``context``: the cache positions an attention task is costed at (default max_seq_len, the worst
    case); ``name``: the model name recorded in the TaskGraph (default the transformers class).
    """
    if isinstance(target, str):
        target = get_target(target)
    with _no_gc():
        return _lower(graph, target, context, name)


def _lower(graph: Graph, target: Target, context: int | None, name: str | None) -> TaskGraph:
    spec = match_graph(graph)
    ctx = graph.max_seq_len if context is None else int(context)
    if not 1 <= ctx <= graph.max_seq_len:
        raise ValueError(f"context {ctx} must be in 1..max_seq_len={graph.max_seq_len}")
    split = attn_splits(graph.batch, graph.model.n_kv_heads, graph.max_seq_len, target.sms)
    drafts, plan = make_tasks(graph, spec, target, ctx, split)
    n_lm_tiles = sum(1 for d in drafts if d.kind == "lmhead")
    buffers = make_buffers(graph, spec, n_lm_tiles, split)
    cost(drafts, {b.name: b for b in buffers}, graph.batch, ctx, split)
    events, waits, signals = build_events(drafts, {b.name: b for b in buffers})
    tasks = tuple(
        Task(i, d.kind, d.layer, d.args, tuple(d.reads), tuple(d.writes), waits[i], signals[i],
             d.smem, d.bytes, d.flops)
        for i, d in enumerate(drafts)
    )
    too_big = [t for t in tasks if t.smem > target.smem_per_block]
    if too_big:
        t = too_big[0]
        raise ScheduleError(f"task {t.id} ({t.kind}) needs {t.smem} B of shared memory, more than the "
                            f"{target.smem_per_block} B a block may use on {target.name}")
    info = graph.model
    dims = dict(
        B=graph.batch, H=info.hidden, I=info.intermediate, nh=info.n_heads, nkv=info.n_kv_heads,
        hd=info.head_dim, V=info.vocab, L=graph.max_seq_len, n_layers=info.n_layers,
        n_rep=info.n_heads // info.n_kv_heads, n_lm_tiles=n_lm_tiles, qkv_bias=int(info.qkv_bias),
        qk_norm=int(info.qk_norm), tied=int(spec.tied), context=ctx, smem_kc=plan.kc,
        smem_stages=plan.stages, smem_stage_bytes=plan.stage_bytes, attn_split=split,
    )
    consts = (("rms_eps", spec.rms_eps), ("rope_scaling", spec.rope_scaling), ("attn_scale", spec.attn_scale))
    return TaskGraph(
        model=name or info.arch, target=target.name, batch=graph.batch, max_seq_len=graph.max_seq_len,
        buffers=tuple(buffers), tasks=tasks, events=tuple(events), dims=tuple(dims.items()), consts=consts,
        plan=device_plan(dims, target),
    ).check()


def make_buffers(graph: Graph, spec: ModelSpec, n_lm_tiles: int, split: int = 1) -> list[Buffer]:
    info = graph.model
    B, H, I, V, L = graph.batch, info.hidden, info.intermediate, info.vocab, graph.max_seq_len
    nh, nkv, hd = info.n_heads, info.n_kv_heads, info.head_dim
    tmap = graph.tensor_map()
    bufs = [
        Buffer("ids", (B,), "i64", "input"),
        Buffer("pos", (1,), "i64", "input"),
        Buffer("inv_freq", (hd // 2,), "f32", "const", data=spec.inv_freq),
    ]
    bufs += [Buffer(t.name, t.shape, t.dtype, "weight") for t in graph.params()]
    bufs.append(Buffer("x0", (B, H), "f32", "act", polled=True))
    for i in range(info.n_layers):
        for nm, n in (("q", nh * hd), ("attn", nh * hd), ("xa", H), ("h", I), ("xm", H)):
            if nm == "attn" and split > 1:  # split attention: partial outputs and their log-sum-exp
                bufs.append(Buffer(names.attn_out(i), (B, split, nh * hd), "f32", "act", polled=True))
                bufs.append(Buffer(names.attn_lse(i), (B, split, nh), "f32", "act", polled=True))
                continue
            bufs.append(Buffer(f"{nm}.{i}", (B, n), "f32", "act", polled=True))
        if info.qk_norm:  # raw keys: attention norms and rotates them into the cache
            bufs.append(Buffer(names.k_raw(i), (B, nkv * hd), "f32", "act", polled=True))
        for cname in (names.k_cache(i), names.v_cache(i)):
            bufs.append(Buffer(cname, (B, nkv, L, hd), tmap[cname].dtype, "cache", polled=True))
    # Nothing on the device reads the logits (argmax reads the partials), so they are not polled
    # and not double-buffered: the host reads one copy.
    bufs += [
        Buffer("logits", (B, V), "f32", "output"),
        Buffer("amax_part", (B, n_lm_tiles), "f32", "act", polled=True),
        Buffer("amax_idx", (B, n_lm_tiles), "i32", "act", polled=True),
        Buffer("next_ids", (B,), "i64", "output", polled=True),
    ]
    return bufs


def cost(drafts: list[Draft], bufs: dict[str, Buffer], batch: int, context: int, split: int = 1) -> None:
    """Bytes each task moves: its regions, except a cache read moves ``context`` positions (over
    ``split`` attention tasks) and the embedding gather reads ``batch`` rows of its columns, not the
    whole table."""
    for d in drafts:
        total = 0
        for r in d.reads:
            buf = bufs[r.buffer]
            n = r.size()
            if buf.role == "cache":
                n = n // (r.box[2][1] - r.box[2][0]) * -(-context // split)
            elif d.kind == "embed" and buf.role == "weight":
                n = batch * (r.box[1][1] - r.box[1][0])
            total += n * ELEM_BYTES[buf.dtype]
        total += sum(r.size() * ELEM_BYTES[bufs[r.buffer].dtype] for r in d.writes)
        d.bytes = total


def _box(*ivals) -> tuple[tuple[int, int], ...]:
    return tuple(ivals)


def qkv_rows(a: int, b: int, p0: int, p1: int, hd: int, rotary: bool) -> list[tuple[int, int]]:
    """Row ranges of one projection matrix that heads [a, b) (of that matrix) take for pairs [p0, p1):
    rotary heads rows p0..p1 and hd/2+p0..hd/2+p1 of each head, v heads rows 2*p0..2*p1."""
    half = hd // 2
    if (p0, p1) == (0, half):
        return [(a * hd, b * hd)]
    if rotary:
        return [(h * hd + o + p0, h * hd + o + p1) for h in range(a, b) for o in (0, half)]
    return [(h * hd + 2 * p0, h * hd + 2 * p1) for h in range(a, b)]


def make_tasks(graph: Graph, spec: ModelSpec, target: Target, context: int, S: int = 1):
    """Drafts of every task and the shared-memory plan; ``S``: attention splits (``attn_splits``)."""
    info = graph.model
    B, H, I, V, L = graph.batch, info.hidden, info.intermediate, info.vocab, graph.max_seq_len
    nh, nkv, hd = info.n_heads, info.n_kv_heads, info.head_dim
    n_rep, QD, NS = nh // nkv, nh * hd, target.sms
    plan = smem_plan(target, B, max(H, I, QD))
    drafts: list[Draft] = []
    index: dict[tuple[int, str], int] = {}

    def add(kind, layer, args, reads, writes, smem, flops):
        i = index.get((layer, kind), 0)
        index[(layer, kind)] = i + 1
        drafts.append(Draft(kind, layer, tuple(args), reads, writes, smem, int(flops), index=i))

    def full(buf, *shape):
        return Region(buf, _box(*((0, n) for n in shape)))

    def rows(buf, r0, r1, k):
        return Region(buf, _box((r0, r1), (0, k)))

    def cols(buf, c0, c1):
        return Region(buf, _box((0, B), (c0, c1)))

    for c0, c1 in embed_tiles(B, H, NS, ELEM_BYTES[graph.tensor(names.EMBED).dtype]):
        add("embed", -1, (c0, c1), [full("ids", B), Region(names.EMBED, _box((0, V), (c0, c1)))],
            [cols("x0", c0, c1)], SMALL_SMEM, 0)

    W = names.layer_weight
    for l in range(info.n_layers):
        x_in = names.x_in(l)
        kc, vc = names.k_cache(l), names.v_cache(l)
        # RMSNorm + QKV + RoPE + KV append: whole heads, or a pair slice of one head. With q/k norm
        # (a norm over the whole head) q and k leave raw and attention norms and rotates them.
        qkn = bool(info.qk_norm)
        for h0, h1, p0, p1 in qkv_tiles(nh, nkv, hd, NS):
            reads = [full(x_in, B, H), Region(W(l, "input_norm"), _box((0, H)))]
            writes = []
            for role, s0, s1 in (("q", 0, nh), ("k", nh, nh + nkv), ("v", nh + nkv, nh + 2 * nkv)):
                a, b = max(h0, s0) - s0, min(h1, s1) - s0
                if a >= b:
                    continue
                spans = qkv_rows(a, b, p0, p1, hd, rotary=role != "v")  # row ranges within the role's matrix
                reads += [rows(W(l, role), r0, r1, H) for r0, r1 in spans]
                if info.qkv_bias:
                    reads += [Region(W(l, role + "_bias"), _box((r0, r1))) for r0, r1 in spans]
                for r0, r1 in spans:
                    if role == "q":
                        writes.append(cols(f"q.{l}", r0, r1))
                        continue
                    if role == "k" and qkn:
                        writes.append(cols(names.k_raw(l), r0, r1))
                        continue
                    # whole kv heads, or columns of one kv head, at pos
                    g0, g1 = r0 // hd, -(-r1 // hd)
                    d0, d1 = (0, hd) if r0 % hd == 0 and r1 % hd == 0 else (r0 - g0 * hd, r1 - g0 * hd)
                    cache = kc if role == "k" else vc
                    writes.append(Region(cache, _box((0, B), (g0, g1), (L - 1, L), (d0, d1))))
            roped = 0 if qkn else min(h1, nh + nkv) - h0
            if roped > 0:
                reads.append(full("inv_freq", hd // 2))
            reads.append(full("pos", 1))
            n_rows = (h1 - h0) * 2 * (p1 - p0)
            flops = 2 * B * n_rows * H + 4 * B * H + 12 * B * max(roped, 0) * 2 * (p1 - p0)
            add("qkv", l, (h0, h1, p0, p1), reads, writes, plan.gemv_bytes(B, H), flops)
        # Attention: the n_rep query heads of one kv head for one batch row, over split s of the
        # positions [0, pos]: [s T / S, (s + 1) T / S) with T = pos + 1. Only the last split
        # reaches pos (so only it waits for this step's keys and values); with S > 1 each split
        # writes its normalised output and log-sum-exp, and o-proj combines them.
        for b in range(B):
            for g in range(nkv):
                for s in range(S):
                    last = s == S - 1
                    qbox = _box((b, b + 1), (g * n_rep * hd, (g + 1) * n_rep * hd))
                    reads = [Region(f"q.{l}", qbox), full("pos", 1)]
                    if S == 1:
                        writes = [Region(f"attn.{l}", qbox)]
                    else:
                        writes = [Region(names.attn_out(l), _box((b, b + 1), (s, s + 1), qbox[1])),
                                  Region(names.attn_lse(l), _box((b, b + 1), (s, s + 1), (g * n_rep, (g + 1) * n_rep)))]
                    kv_end = L if last else L - 1  # cache reads end relative to pos (ir.py); L > 1 when S > 1
                    reads.append(Region(vc, _box((b, b + 1), (g, g + 1), (0, kv_end), (0, hd))))
                    flops = (4 * n_rep * context * hd + 5 * n_rep * context) // S
                    if qkn:
                        # the cached keys before pos; the last split also the new one, from its raw projection
                        if L > 1:
                            reads.append(Region(kc, _box((b, b + 1), (g, g + 1), (0, L - 1), (0, hd))))
                        reads += [Region(W(l, "q_norm"), _box((0, hd))), full("inv_freq", hd // 2)]
                        if last:
                            reads += [Region(names.k_raw(l), _box((b, b + 1), (g * hd, (g + 1) * hd))),
                                      Region(W(l, "k_norm"), _box((0, hd)))]
                            writes.append(Region(kc, _box((b, b + 1), (g, g + 1), (L - 1, L), (0, hd))))
                        flops += 10 * (n_rep + 1) * hd
                    else:
                        reads.append(Region(kc, _box((b, b + 1), (g, g + 1), (0, kv_end), (0, hd))))
                    add("attn", l, (b, g, s), reads, writes, attn_smem(B, n_rep, hd), flops)
        # O-proj + residual (combining the attention splits while it stages its input).
        attn_in = ([full(f"attn.{l}", B, QD)] if S == 1 else
                   [full(names.attn_out(l), B, S, QD), full(names.attn_lse(l), B, S, nh)])
        for r0, r1 in row_tiles(H, NS):
            reads = attn_in + [cols(x_in, r0, r1), rows(W(l, "o"), r0, r1, QD)]
            add("oproj", l, (r0, r1), reads, [cols(f"xa.{l}", r0, r1)], plan.gemv_bytes(B, QD),
                2 * B * (r1 - r0) * QD + B * (r1 - r0))
        # RMSNorm + gate/up + SiLU * up.
        for r0, r1 in row_tiles(I, NS):
            reads = [full(f"xa.{l}", B, H), Region(W(l, "post_norm"), _box((0, H))),
                     rows(W(l, "gate"), r0, r1, H), rows(W(l, "up"), r0, r1, H)]
            add("gateup", l, (r0, r1), reads, [cols(f"h.{l}", r0, r1)], plan.gemv_bytes(B, H),
                4 * B * (r1 - r0) * H + 4 * B * H + 6 * B * (r1 - r0))
        # Down-proj + residual.
        for r0, r1 in row_tiles(H, NS):
            reads = [full(f"h.{l}", B, I), cols(f"xa.{l}", r0, r1), rows(W(l, "down"), r0, r1, I)]
            add("down", l, (r0, r1), reads, [cols(f"xm.{l}", r0, r1)], plan.gemv_bytes(B, I),
                2 * B * (r1 - r0) * I + B * (r1 - r0))

    # Final RMSNorm + LM head + per-tile (max, argmax) partials; then one argmax task.
    x_last = names.x_in(info.n_layers)
    w_lm = names.lm_head_weight(spec.tied)
    lm_tiles = row_tiles(V, NS)
    T = len(lm_tiles)
    for t, (r0, r1) in enumerate(lm_tiles):
        reads = [full(x_last, B, H), Region(names.FINAL_NORM, _box((0, H))), rows(w_lm, r0, r1, H)]
        writes = [cols("logits", r0, r1), cols("amax_part", t, t + 1), cols("amax_idx", t, t + 1)]
        add("lmhead", -1, (r0, r1, t), reads, writes, plan.gemv_bytes(B, H),
            2 * B * (r1 - r0) * H + 4 * B * H + 2 * B * (r1 - r0))
    add("argmax", -1, (), [full("amax_part", B, T), full("amax_idx", B, T)], [full("next_ids", B)],
        SMALL_SMEM, 2 * B * T)
    return drafts, plan
