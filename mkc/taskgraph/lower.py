"""Lowering: a Graph of one decode step -> a TaskGraph of tiled, fused tasks joined by events.

    match_graph   check the op structure, read eps / RoPE / attention constants   (pattern.py)
    make_buffers  activations, caches, weights, inputs under their fixed names
    make_tasks    fuse roles into task kinds and tile them over the target's workers (tiling.py):
                  one lower_<kind> per kind of kinds.py, in the order the tasks are numbered
    cost          bytes each task moves
    build_events  producer sets from regions, shared and merged into events       (events.py)

Byte counts: weights and activations as read/written; a KV-cache read counts ``context``
positions (default ``max_seq_len``, the worst case pos = L - 1; pass ``context`` to cost a typical
decode instead). Regions are always the worst case, as ir.py says.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

from mkc.capture.graph import DTYPE_BYTES, Graph
from mkc.errors import ScheduleError

# The module, not its names: smem.py takes GEMV_KINDS from this package's kinds.py, so an
# ``import mkc.taskgraph.smem`` that comes first reaches this line while smem.py is still half-run.
from mkc.taskgraph import smem as device_smem
from mkc.target import Target, get_target
from mkc.taskgraph import names
from mkc.taskgraph.events import Draft, build_events
from mkc.taskgraph.ir import Buffer, Region, Task, TaskGraph
from mkc.taskgraph.kinds import KIND, SMEM_ATTN, SMEM_GEMV, SMEM_SMALL
from mkc.taskgraph.pattern import ModelSpec, match_graph
from mkc.taskgraph.plan import device_plan
from mkc.taskgraph.tiling import attn_splits, embed_tiles, qkv_segments, qkv_tiles, row_tiles

SMALL_SMEM = 1024  # embed and argmax stage nothing but a few reduction slots

# Candidates per LM-head tile and batch row for the filtered sampler's top-k path: the tile's
# LM_CAND largest logits as (fp32 bits, vocabulary index) pairs sorted by key after the header
# words (how many, the order key of the smallest kept logit when the tile had more, that of the
# LM_PREF-th when it had more than LM_PREF: argmax tries the first LM_PREF of each tile first;
# sampling.cuh lm_candidates), then LM_PREF words: the Gumbel noise of the first LM_PREF, in
# their order, where the kernel's tiles write it (CodegenOptions.cand_noise; else unused)
LM_CAND = 64
LM_PREF = 16
LM_CAND_HEAD = 4  # three header words and one unused: the pairs and blocks 16-byte aligned
LM_CAND_NOISE = LM_CAND_HEAD + 2 * LM_CAND
LM_CAND_WORDS = LM_CAND_NOISE + LM_PREF
assert LM_CAND_WORDS % 4 == 0  # the blocks 16-byte aligned
# what argmax reads only when it samples with a filter (not in the cost model's bytes)
SAMPLER_ONLY = frozenset({"logits", names.LM_CAND})


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


def lower(graph: Graph, target: Target | str, *, context: int | None = None, name: str | None = None,
          qkv_cross: bool | None = None, attn_split: int | None = None, down_split: int | None = None,
          argmax_tasks: int | None = None, attn_split_pos: int | None = None, h_bf16: bool = False,
          attn_bf16: bool = False, xn_bf16: bool = False, down_sum: int | None = None,
          qkv_sum: int | None = None) -> TaskGraph:
    """Fuse and tile ``graph`` for ``target``; batch and max_seq_len come from the graph.

    ``context``: the cache positions an attention task is costed at (default max_seq_len, the worst
    case); ``name``: the model name recorded in the TaskGraph (default the transformers class);
    ``qkv_cross``: qkv tiles may cross a head boundary where that shortens the phase (``qkv_tiles``),
    default ``qkv_cross_pays(batch)``;
    ``attn_split``: attention splits per (batch row, kv head), default ``attn_splits``'s choice;
    ``attn_split_pos``: with splits, the positions per active split as the context grows (at pos,
    ceil((pos + 1) / P) of them hold positions, ``attn_split_range``; 0: all of them at every pos),
    default ``attn_split_pos_pays``;
    ``down_split``: chunks of the intermediate dimension down-proj is split over (``downk`` tasks,
    batch 1 only; default 1, none: ``down_split_pays``);
    ``argmax_tasks``: tasks the rows' argmax (and sampling) is spread over, default one per row
    (``argmax_tasks_pay``);
    ``down_sum``: chunks of h down-proj's partial products are split over at batch >= 2 (``downp``
    tasks, each staging a chunk of h, then ``dsum`` tasks adding them to the residual; 1: none);
    with a bf16 h only (tensor-core path, atomic counters; codegen refuses it elsewhere); default
    ``down_sum_pays`` where h is bf16, else 1;
    ``qkv_sum``: chunks of the normed input qkv's partial products are split over (``qkvp`` tasks,
    each staging a chunk of xn_bf16's copy; attention adds them, with the norm's scale, the bias, the
    q/k norm and RoPE, and appends the key and value itself: no extra phase). Needs ``xn_bf16`` and
    unsplit attention; default ``qkv_sum_pays`` where xn_bf16 is on and attention unsplit, else 1;
    ``h_bf16``: gate/up's output h (down's input) in bf16, which down stages as it is: half the L2
    bytes of its staging, the same bits (the tensor-core staging rounds h to bf16 anyway); atomic
    counters and the tensor-core path only (codegen refuses it elsewhere). Default False: the sync
    mode is not known here; ``mkc compile`` asks ``h_bf16_pays(batch, sync, target)``;
    ``attn_bf16``: the same for attention's output (o-proj's input) where attention is not split
    (o-proj then stages it as it is; with splits it does nothing); ``mkc compile`` asks
    ``attn_bf16_pays``;
    ``xn_bf16``: the residual stream's producers (embed, o-proj, down) also write each output as
    bf16(x * w_norm) and its sums of squares by 8 columns (names.xn_of, names.xss_of), and qkv,
    gate/up and the LM head stage that bf16 copy as it is and take 1/rms from the sums: half the L2
    bytes of their staging and no norm in it. Atomic counters and the tensor-core path only, as
    ``h_bf16``; ``mkc compile`` asks ``xn_bf16_pays``.
    """
    if isinstance(target, str):
        target = get_target(target)
    if qkv_cross is None:
        qkv_cross = qkv_cross_pays(graph.batch)
    if down_split is None:
        down_split = down_split_pays(graph.batch)
    if down_sum is None:
        down_sum = down_sum_pays(graph.batch, graph.model.intermediate) if h_bf16 and down_split == 1 else 1
    if argmax_tasks is None:
        argmax_tasks = argmax_tasks_pay(graph.batch)
    if attn_split_pos is None:
        attn_split_pos = attn_split_pos_pays(graph.batch)
    if attn_split_pos < 0:
        raise ValueError(f"attn_split_pos {attn_split_pos} must be >= 0 (0: every split at every position)")
    check_down_sum(down_sum, graph.batch, graph.model.intermediate, down_split, h_bf16)
    if h_bf16 and (graph.batch < 2 or down_split != 1):
        raise ValueError(f"h_bf16 needs the tensor-core GEMV (batch >= 2, not {graph.batch}) and an unsplit down-proj "
                         f"(down_split 1, not {down_split})")
    if attn_bf16 and graph.batch < 2:
        raise ValueError(f"attn_bf16 needs the tensor-core GEMV (batch >= 2, not {graph.batch})")
    if xn_bf16 and (graph.batch < 2 or down_split != 1 or graph.model.hidden % names.XN_GROUP):
        raise ValueError(f"xn_bf16 needs the tensor-core GEMV (batch >= 2, not {graph.batch}), an unsplit down-proj "
                         f"(down_split 1, not {down_split}) and a hidden size that is a multiple of {names.XN_GROUP} "
                         f"(not {graph.model.hidden})")
    with _no_gc():
        return _lower(graph, target, context, name, qkv_cross, attn_split, down_split, argmax_tasks, attn_split_pos,
                      bool(h_bf16), bool(attn_bf16), bool(xn_bf16), down_sum, qkv_sum)


def _bf16_acts_default(batch: int, sync: str | None, target: Target) -> bool:
    """Where an activation is kept in bf16 for the tensor-core staging by default: atomic counters at
    batch >= 2 on a target with the bf16 tensor-core GEMV and the bulk-copy weight pipeline, the
    path it was measured on (H100, twenty-sixth session). The A100's cp.async ring and register
    paths can take bf16 activations too (``lower(h_bf16=True)``), unmeasured: there batch 32's kernel
    spills 24 bytes with them and none without."""
    from mkc.backend import for_target

    caps = for_target(target).capabilities(target)
    return batch >= 2 and sync == "atomic" and caps.mma_bf16 and caps.bulk_copy


def h_bf16_pays(batch: int, sync: str | None, target: Target) -> bool:
    """Whether a build keeps h in bf16 (``lower(h_bf16=...)``): where it can and where it was
    measured to pay (``H_BF16_PAYS``; BENCHMARKS.md, twenty-fourth session)."""
    return H_BF16_PAYS and _bf16_acts_default(batch, sync, target)


H_BF16_PAYS = True  # set by measurement (h_bf16_pays; BENCHMARKS.md, twenty-fifth and twenty-sixth sessions)


def attn_bf16_pays(batch: int, sync: str | None, target: Target) -> bool:
    """Whether a build keeps unsplit attention's output in bf16 (``lower(attn_bf16=...)``), as
    ``h_bf16_pays`` with ``ATTN_BF16_PAYS``."""
    return ATTN_BF16_PAYS and _bf16_acts_default(batch, sync, target)


ATTN_BF16_PAYS = True  # set by measurement (attn_bf16_pays; the same sessions)


def xn_bf16_pays(batch: int, sync: str | None, target: Target) -> bool:
    """Whether a build has the residual stream's producers write the normed bf16 copies
    (``lower(xn_bf16=...)``), as ``h_bf16_pays`` with ``XN_BF16_PAYS``, from batch ``XN_BF16_MIN_B``."""
    return XN_BF16_PAYS and batch >= XN_BF16_MIN_B and _bf16_acts_default(batch, sync, target)


XN_BF16_PAYS = True  # set by measurement (xn_bf16_pays; BENCHMARKS.md, forty-third session, H100: b32 -4.1 / -4.8 %,
# b16 -3.0 / -4.1 %, b8 -0.7 / -0.7 %, b4 -1.0 %, qwen3-8b b8 0.0 %; b2 +2.1 %: the producers' extra epilogue
# on the chain costs more than batch 2's small stagings save)
XN_BF16_MIN_B = 4


def attn_split_pos_pays(batch: int) -> int:
    """Positions per active attention split by default: 0, every split at every position. Fewer
    active splits at short contexts measured slower on the H200 (BENCHMARKS.md, eighteenth session,
    same call, llama-3.2-1b b1, positions 0..127): P = 0 0.8388 ms, 16 0.8470, 32 0.8494, 64 0.8544;
    0..1023: 0.8585 against 0.8625 (P = 32); qwen3-8b b1 4.1646 against 4.2094 (P = 32): a split's
    positions run in series in its task, so fewer splits make attention longer than o-proj's combine
    of fewer partials saves."""
    return 0


def down_split_pays(batch: int) -> int:
    """Chunks of split-K down-proj by default: 1 (not split). Measured on the H200 (BENCHMARKS.md,
    ninth session, same call): llama-3.2-1b b1 0.837 -> 0.935 / 1.128 ms with 2 / 4 chunks, qwen3-8b b1
    +3.8 / +12.0 %, NaN mode +12 %: each extra task costs an SM ~3 us the weight pipeline does not hide."""
    return 1


def down_sum_pays(batch: int, intermediate: int) -> int:
    """Chunks of h down-proj's partial products are split over by default where h is bf16
    (``lower(down_sum=...)``): DOWN_SUM_CHUNKS from batch DOWN_SUM_MIN_B, else 1 (none). H100,
    forty-fifth session (llama-3.2-1b, 128 steps, alternated): batch 32 with 8 chunks -2.2 / -3.3 /
    -3.7 / -3.5 %, 4 chunks -0.6 / -2.1 / -2.1 %, 2 chunks +0.4 %; batch 16 with 4 chunks +3.1 %,
    batch 8 with 2 +2.7 %, qwen3-8b batch 8 with 4 +1.8 %: the sums' phase costs more than the
    smaller stagings save until batch 32."""
    if batch >= DOWN_SUM_MIN_B and intermediate % (DOWN_SUM_CHUNKS * DOWN_SPLIT_ALIGN) == 0:
        return DOWN_SUM_CHUNKS
    return 1


DOWN_SUM_CHUNKS, DOWN_SUM_MIN_B = 8, 32


def qkv_sum_pays(batch: int, hidden: int) -> int:
    """Chunks of the normed input qkv's partial products are split over by default
    (``lower(qkv_sum=...)``): one per QKV_SUM_BH elements of qkv's staged input (B x H bf16, so each
    qkvp task stages 32 KiB), a power of two of at most QKV_SUM_MAX; 1 (none) below two. H100
    (BENCHMARKS.md): forty-sixth session (CALL=108), 4 chunks: llama-3.2-1b b32 -2.5 / -2.8 %, b16
    -2.3 %, qwen3-8b b8 -3.4 %; 8 chunks at b32 +2.9 %; llama b8 (32 KiB staged) with 2 chunks
    +0.2 %. Forty-seventh (CALL=110, against 4 chunks): llama b16 with 2 -2.6 / -3.1 %, with 8
    +7.5 / +7.6 %; qwen3-8b b8 with 2 0.0 / -0.4 %, with 8 +6.1 / +5.9 %; llama b8 with 4 +1.6 /
    +2.8 % (against none). Forty-eighth (CALL=111, two alternated passes): llama b32 with 2 -1.7 /
    -1.4 % against 4, so at most 2; llama b16 with 2 -2.0 / -2.6 % against 4 again; qwen3-8b b8 with
    4 -0.1 / +0.2 % against 2."""
    c = min(QKV_SUM_MAX, batch * hidden // QKV_SUM_BH)
    c = 1 << (c.bit_length() - 1) if c >= 2 else 1
    while c > 1 and hidden % (c * DOWN_SPLIT_ALIGN):
        c //= 2
    return c


QKV_SUM_BH, QKV_SUM_MAX = 16384, 2


def check_qkv_sum(chunks: int, batch: int, hidden: int, xn_bf16: bool, attn_split: int) -> None:
    """``qkvp`` tasks stage a chunk of xn_bf16's bf16 copy of whole 16-byte words (the tensor-core
    path), and attention, unsplit, adds the chunks and appends the key and value."""
    if chunks == 1:
        return
    if chunks < 1 or batch < 2 or not xn_bf16 or attn_split != 1 or hidden % (chunks * DOWN_SPLIT_ALIGN):
        raise ValueError(f"qkv_sum {chunks}: qkv's partial products over chunks of the normed input need batch >= 2 "
                         f"(not {batch}), the normed bf16 copies (xn_bf16, not {xn_bf16}), unsplit attention "
                         f"(attn_split 1, not {attn_split}) and a hidden size ({hidden}) that is a multiple of "
                         f"{chunks} x {DOWN_SPLIT_ALIGN}")


def check_down_sum(chunks: int, batch: int, intermediate: int, down_split: int, h_bf16: bool) -> None:
    """``downp`` tasks stage a bf16 chunk of h of whole 16-byte words (the tensor-core path, from
    batch 2) and replace unsplit down (not with ``down_split``)."""
    if chunks == 1:
        return
    if chunks < 1 or batch < 2 or not h_bf16 or down_split != 1 or intermediate % (chunks * DOWN_SPLIT_ALIGN):
        raise ValueError(f"down_sum {chunks}: down's partial products over chunks of h need batch >= 2 (not {batch}), "
                         f"h in bf16 (h_bf16, not {h_bf16}), no down_split (not {down_split}) and an intermediate "
                         f"size ({intermediate}) that is a multiple of {chunks} x {DOWN_SPLIT_ALIGN}")


DOWN_SPLIT_ALIGN = 8  # a chunk of a weight row starts on a 16-byte boundary (bulk copies, 16-byte loads)


def check_down_split(split: int, batch: int, intermediate: int) -> None:
    """Split-K down needs one batch row (its chunk of h is a contiguous run of the staged input)
    and chunks of whole 16-byte words of a weight row."""
    if split == 1:
        return
    if split < 1 or batch != 1 or intermediate % (split * DOWN_SPLIT_ALIGN):
        raise ValueError(f"down_split {split}: split-K down-proj needs batch 1 (not {batch}) and an intermediate "
                         f"size ({intermediate}) that is a multiple of {split} x {DOWN_SPLIT_ALIGN}")


def qkv_cross_pays(batch: int, sync: str | None = None) -> bool:
    """Where qkv runs crossing a head boundary measured faster on the H200 (BENCHMARKS.md, sixth
    session, same calls): batch 1 with counters (llama-3.2-1b 0.868 -> 0.854 ms, qwen3-8b 4.402 ->
    4.229); not with NaN sentinels (llama-3.2-1b 1.517-1.527 -> 1.572-1.595; not traced: each
    attention task then has 11-12 qkv producers instead of 8), not at batch 8 (1.326-1.352 either
    way)."""
    return batch == 1 and sync != "nan"


def _lower(graph: Graph, target: Target, context: int | None, name: str | None, qkv_cross: bool,
           attn_split: int | None, down_split: int = 1, argmax_tasks: int = 1,
           attn_split_pos: int = 0, h_bf16: bool = False, attn_bf16: bool = False, xn_bf16: bool = False,
           down_sum: int = 1, qkv_sum: int | None = 1) -> TaskGraph:
    spec = match_graph(graph)
    ctx = graph.max_seq_len if context is None else int(context)
    if not 1 <= ctx <= graph.max_seq_len:
        raise ValueError(f"context {ctx} must be in 1..max_seq_len={graph.max_seq_len}")
    split = attn_splits(graph.batch, graph.model.n_kv_heads, graph.max_seq_len, target.sms) if attn_split is None else attn_split
    if not 1 <= split <= graph.max_seq_len:
        raise ValueError(f"attn_split {split} must be in 1..max_seq_len={graph.max_seq_len}")
    check_down_split(down_split, graph.batch, graph.model.intermediate)
    if qkv_sum is None:
        qkv_sum = qkv_sum_pays(graph.batch, graph.model.hidden) if xn_bf16 and split == 1 else 1
    check_qkv_sum(qkv_sum, graph.batch, graph.model.hidden, xn_bf16, split)
    attn_bf16 = attn_bf16 and split == 1  # (split attention's partial outputs stay f32: o-proj combines them)
    argmax_rows(graph.batch, argmax_tasks)  # a ValueError for a count outside 1..batch
    drafts, plan = make_tasks(graph, spec, target, ctx, split, qkv_cross, down_split, argmax_tasks, xn_bf16, down_sum,
                              qkv_sum)
    n_lm_tiles = sum(1 for d in drafts if d.kind == "lmhead")
    buffers = make_buffers(graph, spec, n_lm_tiles, split, down_split, h_bf16, attn_bf16, xn_bf16, down_sum, qkv_sum)
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
    if down_split > 1:  # absent otherwise: the task graphs of unsplit builds stay as they were
        dims["down_split"] = down_split
    if down_sum > 1:  # absent otherwise, as down_split
        dims["down_sum"] = down_sum
    if qkv_sum > 1:  # absent otherwise, as down_split
        dims["qkv_sum"] = qkv_sum
    if split > 1 and attn_split_pos > 0:  # absent otherwise, as down_split
        dims["attn_split_pos"] = attn_split_pos
    consts = (("rms_eps", spec.rms_eps), ("rope_scaling", spec.rope_scaling), ("attn_scale", spec.attn_scale))
    return TaskGraph(
        model=name or info.arch, target=target.name, batch=graph.batch, max_seq_len=graph.max_seq_len,
        buffers=tuple(buffers), tasks=tasks, events=tuple(events), dims=tuple(dims.items()), consts=consts,
        plan=device_plan(dims, target),
    ).check()


def make_buffers(graph: Graph, spec: ModelSpec, n_lm_tiles: int, split: int = 1, down_split: int = 1,
                 h_bf16: bool = False, attn_bf16: bool = False, xn_bf16: bool = False, down_sum: int = 1,
                 qkv_sum: int = 1) -> list[Buffer]:
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

    def companions(act: str) -> None:  # xn_bf16: the normed bf16 copy and the sums of squares (never polled)
        if xn_bf16:
            bufs.append(Buffer(names.xn_of(act), (B, H), "bf16", "act", polled=False))
            bufs.append(Buffer(names.xss_of(act), (B, H // names.XN_GROUP), "f32", "act", polled=False))

    companions("x0")
    for i in range(info.n_layers):
        for nm, n in (("q", nh * hd), ("attn", nh * hd), ("xa", H), ("h", I), ("xm", H)):
            if nm == "q" and qkv_sum > 1:  # attention adds qkv's partial products (qkv_parts) instead
                continue
            if nm == "attn" and split > 1:  # split attention: partial outputs and their log-sum-exp
                bufs.append(Buffer(names.attn_out(i), (B, split, nh * hd), "f32", "act", polled=True))
                bufs.append(Buffer(names.attn_lse(i), (B, split, nh), "f32", "act", polled=True))
                continue
            # (a bf16 activation is never polled: NaN-sentinel mode, which polls, keeps them f32)
            bf16 = (nm == "h" and h_bf16) or (nm == "attn" and attn_bf16)
            bufs.append(Buffer(f"{nm}.{i}", (B, n), "bf16" if bf16 else "f32", "act", polled=not bf16))
            if nm in ("xa", "xm"):
                companions(f"{nm}.{i}")
        if down_split > 1:  # split-K down's running sums, chunk by chunk
            bufs.append(Buffer(names.down_partial(i), (down_split - 1, B, H), "f32", "act", polled=True))
        if down_sum > 1:  # down's partial products, chunk by chunk of h (lower_downp)
            bufs.append(Buffer(names.down_parts(i), (down_sum, B, H), "f32", "act", polled=True))
        if qkv_sum > 1:  # qkv's partial products, chunk by chunk of the normed input (lower_qkvp)
            bufs.append(Buffer(names.qkv_parts(i), (qkv_sum, B, (nh + 2 * nkv) * hd), "f32", "act", polled=True))
        if info.qk_norm and qkv_sum == 1:  # raw keys: attention norms and rotates them into the cache
            bufs.append(Buffer(names.k_raw(i), (B, nkv * hd), "f32", "act", polled=True))
        for cname in (names.k_cache(i), names.v_cache(i)):
            bufs.append(Buffer(cname, (B, nkv, L, hd), tmap[cname].dtype, "cache", polled=True))
    # The logits and the LM-head tiles' candidates are read on the device only by argmax when it
    # samples with a filter, ordered by the partials it waits on (the message is the partial), so
    # they are not polled and not double-buffered: the host reads one copy of the logits.
    bufs += [
        Buffer("logits", (B, V), "f32", "output"),
        Buffer(names.LM_CAND, (B, n_lm_tiles * LM_CAND_WORDS), "i32", "output"),
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
            if r.buffer in SAMPLER_ONLY:  # moved only when argmax samples with a filter
                continue
            n = r.size()
            if buf.role == "cache":
                n = n // (r.box[2][1] - r.box[2][0]) * -(-context // split)
            elif d.kind == "embed" and r.buffer == names.EMBED:
                n = batch * (r.box[1][1] - r.box[1][0])
            total += n * DTYPE_BYTES[buf.dtype]
        total += sum(r.size() * DTYPE_BYTES[bufs[r.buffer].dtype] for r in d.writes if r.buffer != names.LM_CAND)
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


class _Lowering:
    """What every ``lower_<kind>`` needs: the model's sizes, the target's workers, the drafts so far."""

    def __init__(self, graph: Graph, spec: ModelSpec, target: Target, context: int, S: int, qkv_cross: bool,
                 down_split: int = 1, xn_bf16: bool = False, down_sum: int = 1, qkv_sum: int = 1):
        info = graph.model
        self.graph, self.spec, self.info, self.context, self.S = graph, spec, info, context, S
        self.B, self.H, self.I, self.V, self.L = graph.batch, info.hidden, info.intermediate, info.vocab, graph.max_seq_len
        self.nh, self.nkv, self.hd = info.n_heads, info.n_kv_heads, info.head_dim
        self.n_rep, self.QD, self.NS = self.nh // self.nkv, self.nh * self.hd, target.sms
        self.plan = device_smem.smem_plan(target, self.B, max(self.H, self.I, self.QD))
        self.drafts: list[Draft] = []
        self.qkv_cross = qkv_cross  # qkv tiles may cross a head boundary (tiling.qkv_tiles)
        self.down_split = down_split  # split-K down over chunks of h (lower_downk)
        self.down_sum = down_sum  # down's partial products over chunks of h (lower_downp, lower_dsum)
        self.qkv_sum = qkv_sum  # qkv's partial products over chunks of the normed input (lower_qkvp)
        self.xn = xn_bf16  # the residual stream's normed bf16 companions (names.xn_of)
        self._index: dict[tuple[int, str], int] = {}

    def add(self, kind: str, layer: int, args, reads, writes, flops, k: int | None = None) -> None:
        """One draft; ``k``: the input width a GEMV kind stages."""
        K = KIND[kind]
        args = K.Args(*args)  # the kind's argument count, or a TypeError here rather than on the device
        i = self._index.get((layer, kind), 0)
        self._index[(layer, kind)] = i + 1
        smem = SMEM_RULES[K.smem](self, k)
        self.drafts.append(Draft(kind, layer, tuple(args), reads, writes, smem, int(flops), index=i))

    def full(self, buf, *shape):
        return Region(buf, _box(*((0, n) for n in shape)))

    def rows(self, buf, r0, r1, k):
        return Region(buf, _box((r0, r1), (0, k)))

    def cols(self, buf, c0, c1):
        return Region(buf, _box((0, self.B), (c0, c1)))

    def normed_in(self, act: str, norm: str) -> list[Region]:
        """What a GEMV that normalises residual-stream activation ``act`` with weight ``norm`` reads:
        the activation and the norm's weights, or with xn_bf16 the activation's two companions."""
        if self.xn:
            G = names.XN_GROUP
            return [self.full(names.xn_of(act), self.B, self.H), self.full(names.xss_of(act), self.B, self.H // G)]
        return [self.full(act, self.B, self.H), Region(norm, _box((0, self.H)))]

    def qkv_sum_reads(self, l: int, b: int, g: int) -> list[Region]:
        """What attention reads of row b, kv head g in place of q with lower(qkv_sum=C): the C
        chunks' partial products of its query heads, key and value, the input's sums of squares
        (1/rms), the bias, the q/k norms, inv_freq and pos."""
        hd, n_rep, C, QD, KD = self.hd, self.n_rep, self.qkv_sum, self.nh * self.hd, self.nkv * self.hd
        W = names.layer_weight
        qp = names.qkv_parts(l)
        rows = ((g * n_rep * hd, (g + 1) * n_rep * hd), (QD + g * hd, QD + (g + 1) * hd),
                (QD + KD + g * hd, QD + KD + (g + 1) * hd))
        reads = [Region(qp, _box((0, C), (b, b + 1), r)) for r in rows]
        reads.append(Region(names.xss_of(names.x_in(l)), _box((b, b + 1), (0, self.H // names.XN_GROUP))))
        if self.info.qkv_bias:
            reads += [Region(W(l, "q_bias"), _box(rows[0])), Region(W(l, "k_bias"), _box((g * hd, (g + 1) * hd))),
                      Region(W(l, "v_bias"), _box((g * hd, (g + 1) * hd)))]
        if self.info.qk_norm:
            reads += [Region(W(l, "q_norm"), _box((0, hd))), Region(W(l, "k_norm"), _box((0, hd)))]
        return reads + [self.full("inv_freq", hd // 2), self.full("pos", 1)]

    def normed_out(self, act: str, norm: str, c0: int, c1: int) -> tuple[list[Region], list[Region]]:
        """(reads, writes) a producer of columns [c0, c1) of ``act`` adds for its companions: the
        norm's weights over those columns; the bf16 copy and the sums of their 8-column groups."""
        if not self.xn:
            return [], []
        G = names.XN_GROUP
        assert c0 % G == 0 and c1 % G == 0, (act, c0, c1)
        return ([Region(norm, _box((c0, c1)))],
                [self.cols(names.xn_of(act), c0, c1), self.cols(names.xss_of(act), c0 // G, c1 // G)])


# Shared memory of a task, by its kind's ``smem`` rule (kinds.py).
SMEM_RULES = {
    SMEM_GEMV: lambda cx, k: cx.plan.gemv_bytes(cx.B, k),
    SMEM_ATTN: lambda cx, k: device_smem.attn_smem(cx.B, cx.n_rep, cx.hd),
    SMEM_SMALL: lambda cx, k: SMALL_SMEM,
}


def make_tasks(graph: Graph, spec: ModelSpec, target: Target, context: int, S: int = 1, qkv_cross: bool = True,
               down_split: int = 1, argmax_tasks: int = 1, xn_bf16: bool = False, down_sum: int = 1,
               qkv_sum: int = 1):
    """Drafts of every task and the shared-memory plan; ``S``: attention splits (``attn_splits``)."""
    cx = _Lowering(graph, spec, target, context, S, qkv_cross, down_split, xn_bf16, down_sum, qkv_sum)
    lower_embed(cx)
    for l in range(cx.info.n_layers):
        (lower_qkvp if cx.qkv_sum > 1 else lower_qkv)(cx, l)
        lower_attn(cx, l)
        lower_oproj(cx, l)
        lower_gateup(cx, l)
        if cx.down_sum > 1:
            lower_downp(cx, l)
            lower_dsum(cx, l)
        else:
            (lower_downk if cx.down_split > 1 else lower_down)(cx, l)
    lower_lmhead(cx)
    lower_argmax(cx, argmax_tasks)
    return cx.drafts, cx.plan


def lower_embed(cx: _Lowering) -> None:
    B = cx.B
    for c0, c1 in embed_tiles(B, cx.H, cx.NS, DTYPE_BYTES[cx.graph.tensor(names.EMBED).dtype]):
        n_reads, n_writes = cx.normed_out("x0", names.norm_into(0, cx.info.n_layers), c0, c1)
        cx.add("embed", -1, (c0, c1), [cx.full("ids", B), Region(names.EMBED, _box((0, cx.V), (c0, c1)))] + n_reads,
               [cx.cols("x0", c0, c1)] + n_writes, 0)


def lower_qkv(cx: _Lowering, l: int) -> None:
    """RMSNorm + QKV + RoPE + KV append: whole heads, a pair slice of one head, or a run of pairs over
    one head boundary (tiling.qkv_tiles). With q/k norm (a norm over the whole head) q and k leave
    raw and attention norms and rotates them."""
    B, H, L, nh, nkv, hd = cx.B, cx.H, cx.L, cx.nh, cx.nkv, cx.hd
    W = names.layer_weight
    x_in = names.x_in(l)
    kc, vc = names.k_cache(l), names.v_cache(l)
    qkn = bool(cx.info.qk_norm)
    for h0, h1, p0, p1 in qkv_tiles(nh, nkv, hd, cx.NS, cross=cx.qkv_cross):
        reads = cx.normed_in(x_in, W(l, "input_norm"))
        writes = []
        n_rows = roped = 0  # rows the task streams; rows RoPE rotates
        for ha, hb, pa, pb in qkv_segments(h0, h1, p0, p1, hd // 2):
            n_rows += (hb - ha) * 2 * (pb - pa)
            for role, s0, s1 in (("q", 0, nh), ("k", nh, nh + nkv), ("v", nh + nkv, nh + 2 * nkv)):
                a, b = max(ha, s0) - s0, min(hb, s1) - s0
                if a >= b:
                    continue
                spans = qkv_rows(a, b, pa, pb, hd, rotary=role != "v")  # row ranges within the role's matrix
                reads += [cx.rows(W(l, role), r0, r1, H) for r0, r1 in spans]
                if cx.info.qkv_bias:
                    reads += [Region(W(l, role + "_bias"), _box((r0, r1))) for r0, r1 in spans]
                if role != "v" and not qkn:
                    roped += (b - a) * 2 * (pb - pa)
                for r0, r1 in spans:
                    if role == "q":
                        writes.append(cx.cols(f"q.{l}", r0, r1))
                        continue
                    if role == "k" and qkn:
                        writes.append(cx.cols(names.k_raw(l), r0, r1))
                        continue
                    # whole kv heads, or columns of one kv head, at pos
                    g0, g1 = r0 // hd, -(-r1 // hd)
                    d0, d1 = (0, hd) if r0 % hd == 0 and r1 % hd == 0 else (r0 - g0 * hd, r1 - g0 * hd)
                    cache = kc if role == "k" else vc
                    writes.append(Region(cache, _box((0, B), (g0, g1), (L - 1, L), (d0, d1))))
        if roped > 0:
            reads.append(cx.full("inv_freq", hd // 2))
        reads.append(cx.full("pos", 1))
        flops = 2 * B * n_rows * H + 4 * B * H + 12 * B * roped
        cx.add("qkv", l, (h0, h1, p0, p1), reads, writes, flops, k=H)


def lower_qkvp(cx: _Lowering, l: int) -> None:
    """qkv's partial products over C = ``qkv_sum`` chunks of the normed input: chunk c's tasks tile
    the rows of the concatenated (q | k | v) matrix over a C-th of the workers, each staging only its
    chunk of xn_bf16's bf16 copy (at batch 32 unsplit qkv stages more bytes than its weights a task).
    No epilogue: attention adds the chunks (lower_attn), so the sums cost no phase of their own."""
    B, H, C, hd = cx.B, cx.H, cx.qkv_sum, cx.hd
    W = names.layer_weight
    n = H // C
    spans = (("q", 0, cx.nh * hd), ("k", cx.nh * hd, (cx.nh + cx.nkv) * hd), ("v", (cx.nh + cx.nkv) * hd, (cx.nh + 2 * cx.nkv) * hd))
    xn = names.xn_of(names.x_in(l))
    for c in range(C):
        k0, k1 = c * n, (c + 1) * n
        for r0, r1 in row_tiles(spans[-1][2], max(1, cx.NS // C)):
            reads = [cx.cols(xn, k0, k1)]
            for role, s0, s1 in spans:
                if max(r0, s0) < min(r1, s1):
                    reads.append(Region(W(l, role), _box((max(r0, s0) - s0, min(r1, s1) - s0), (k0, k1))))
            cx.add("qkvp", l, (r0, r1, k0, k1), reads, [Region(names.qkv_parts(l), _box((c, c + 1), (0, B), (r0, r1)))],
                   2 * B * (r1 - r0) * n, k=n)


def lower_attn(cx: _Lowering, l: int) -> None:
    """The n_rep query heads of one kv head for one batch row, over split s of the positions
    [0, pos]: [s T / S, (s + 1) T / S) with T = pos + 1, or with dims["attn_split_pos"] the last
    ceil(T / P) splits share them and the others are empty (``tiling.attn_split_range``). Only the
    last split reaches pos (so only it waits for this step's keys and values); the regions below
    are every split's worst case. With S > 1 each split writes its normalised output and
    log-sum-exp (an empty split: zeros and -inf), and o-proj combines them."""
    B, L, nkv, hd, n_rep, S, context = cx.B, cx.L, cx.nkv, cx.hd, cx.n_rep, cx.S, cx.context
    W = names.layer_weight
    kc, vc = names.k_cache(l), names.v_cache(l)
    qkn = bool(cx.info.qk_norm)
    for b in range(B):
        for g in range(nkv):
            for s in range(S):
                last = s == S - 1
                qbox = _box((b, b + 1), (g * n_rep * hd, (g + 1) * n_rep * hd))
                reads = [Region(f"q.{l}", qbox), cx.full("pos", 1)] if cx.qkv_sum == 1 else cx.qkv_sum_reads(l, b, g)
                if S == 1:
                    writes = [Region(f"attn.{l}", qbox)]
                else:
                    writes = [Region(names.attn_out(l), _box((b, b + 1), (s, s + 1), qbox[1])),
                              Region(names.attn_lse(l), _box((b, b + 1), (s, s + 1), (g * n_rep, (g + 1) * n_rep)))]
                kv_end = L if last else L - 1  # cache reads end relative to pos (ir.py); L > 1 when S > 1
                reads.append(Region(vc, _box((b, b + 1), (g, g + 1), (0, kv_end), (0, hd))))
                flops = (4 * n_rep * context * hd + 5 * n_rep * context) // S
                if cx.qkv_sum > 1:
                    # the cached keys and values before pos; the new ones it appends itself (unsplit)
                    reads.pop()
                    if L > 1:
                        reads += [Region(cache, _box((b, b + 1), (g, g + 1), (0, L - 1), (0, hd))) for cache in (kc, vc)]
                    writes += [Region(cache, _box((b, b + 1), (g, g + 1), (L - 1, L), (0, hd))) for cache in (kc, vc)]
                    flops += 10 * (n_rep + 1) * hd + 2 * cx.qkv_sum * (n_rep + 2) * hd
                elif qkn:
                    # the cached keys before pos; the last split also the new one, from its raw projection
                    if L > 1:
                        reads.append(Region(kc, _box((b, b + 1), (g, g + 1), (0, L - 1), (0, hd))))
                    reads += [Region(W(l, "q_norm"), _box((0, hd))), cx.full("inv_freq", hd // 2)]
                    if last:
                        reads += [Region(names.k_raw(l), _box((b, b + 1), (g * hd, (g + 1) * hd))),
                                  Region(W(l, "k_norm"), _box((0, hd)))]
                        writes.append(Region(kc, _box((b, b + 1), (g, g + 1), (L - 1, L), (0, hd))))
                    flops += 10 * (n_rep + 1) * hd
                else:
                    reads.append(Region(kc, _box((b, b + 1), (g, g + 1), (0, kv_end), (0, hd))))
                cx.add("attn", l, (b, g, s), reads, writes, flops)


def lower_oproj(cx: _Lowering, l: int) -> None:
    """O-proj + residual, combining the attention splits while it stages its input."""
    B, S, QD = cx.B, cx.S, cx.QD
    attn_in = ([cx.full(f"attn.{l}", B, QD)] if S == 1 else
               [cx.full(names.attn_out(l), B, S, QD), cx.full(names.attn_lse(l), B, S, cx.nh)])
    for r0, r1 in row_tiles(cx.H, cx.NS):
        reads = attn_in + [cx.cols(names.x_in(l), r0, r1), cx.rows(names.layer_weight(l, "o"), r0, r1, QD)]
        n_reads, n_writes = cx.normed_out(f"xa.{l}", names.layer_weight(l, "post_norm"), r0, r1)
        cx.add("oproj", l, (r0, r1), reads + n_reads, [cx.cols(f"xa.{l}", r0, r1)] + n_writes,
               2 * B * (r1 - r0) * QD + B * (r1 - r0), k=QD)


def lower_gateup(cx: _Lowering, l: int) -> None:
    """RMSNorm + gate/up + SiLU * up. Under split-K down, each chunk of h is tiled over the workers
    on its own, chunk by chunk (so a chunk is done before the last of its layer's gate/up tiles)."""
    B, H, W = cx.B, cx.H, names.layer_weight
    C = cx.down_split
    n = cx.I // C
    tiles = [(c * n + r0, c * n + r1) for c in range(C) for r0, r1 in row_tiles(n, cx.NS)]
    for r0, r1 in tiles:
        reads = cx.normed_in(f"xa.{l}", W(l, "post_norm")) + [cx.rows(W(l, "gate"), r0, r1, H), cx.rows(W(l, "up"), r0, r1, H)]
        cx.add("gateup", l, (r0, r1), reads, [cx.cols(f"h.{l}", r0, r1)],
               4 * B * (r1 - r0) * H + 4 * B * H + 6 * B * (r1 - r0), k=H)


def lower_down(cx: _Lowering, l: int) -> None:
    """Down-proj + residual."""
    B, I = cx.B, cx.I
    for r0, r1 in row_tiles(cx.H, cx.NS):
        reads = [cx.full(f"h.{l}", B, I), cx.cols(f"xa.{l}", r0, r1), cx.rows(names.layer_weight(l, "down"), r0, r1, I)]
        n_reads, n_writes = cx.normed_out(f"xm.{l}", names.norm_into(l + 1, cx.info.n_layers), r0, r1)
        cx.add("down", l, (r0, r1), reads + n_reads, [cx.cols(f"xm.{l}", r0, r1)] + n_writes,
               2 * B * (r1 - r0) * I + B * (r1 - r0), k=I)


def lower_downk(cx: _Lowering, l: int) -> None:
    """Down-proj + residual split over C = ``down_split`` chunks of h: chunk c of a row tile adds
    its partial product to the running sum of chunks < c (xa first) and waits only for the gate/up
    tiles of its chunk and for the previous chunk of its rows, so it can start while later gate/up
    tiles still run; the sums go chunk by chunk in a fixed order (deterministic)."""
    B, H, C = cx.B, cx.H, cx.down_split
    n = cx.I // C
    part = names.down_partial(l)
    for c in range(C):
        k0, k1 = c * n, (c + 1) * n
        for r0, r1 in row_tiles(H, cx.NS):
            prev = cx.cols(f"xa.{l}", r0, r1) if c == 0 else Region(part, _box((c - 1, c), (0, B), (r0, r1)))
            out = cx.cols(f"xm.{l}", r0, r1) if c == C - 1 else Region(part, _box((c, c + 1), (0, B), (r0, r1)))
            reads = [cx.cols(f"h.{l}", k0, k1), prev, Region(names.layer_weight(l, "down"), _box((r0, r1), (k0, k1)))]
            cx.add("downk", l, (r0, r1, k0, k1), reads, [out], 2 * B * (r1 - r0) * n + B * (r1 - r0), k=n)


def lower_downp(cx: _Lowering, l: int) -> None:
    """Down-proj's partial products over C = ``down_sum`` chunks of h: chunk c's tasks tile the rows
    over a C-th of the workers, each staging only its chunk of h (at batch 32 unsplit down stages
    twice its weight bytes a task, all of h), so the phase's L2 bytes are a C-th; they wait only for
    the gate/up tiles of their chunk."""
    B, H, C = cx.B, cx.H, cx.down_sum
    n = cx.I // C
    for c in range(C):
        k0, k1 = c * n, (c + 1) * n
        for r0, r1 in row_tiles(H, max(1, cx.NS // C)):
            reads = [cx.cols(f"h.{l}", k0, k1), Region(names.layer_weight(l, "down"), _box((r0, r1), (k0, k1)))]
            cx.add("downp", l, (r0, r1, k0, k1), reads, [Region(names.down_parts(l), _box((c, c + 1), (0, B), (r0, r1)))],
                   2 * B * (r1 - r0) * n, k=n)


def lower_dsum(cx: _Lowering, l: int) -> None:
    """xm = xa + the chunks' partial products (lower_downp) in chunk order, with xm's companions."""
    B, C = cx.B, cx.down_sum
    for r0, r1 in row_tiles(cx.H, cx.NS):
        reads = [Region(names.down_parts(l), _box((0, C), (0, B), (r0, r1))), cx.cols(f"xa.{l}", r0, r1)]
        n_reads, n_writes = cx.normed_out(f"xm.{l}", names.norm_into(l + 1, cx.info.n_layers), r0, r1)
        cx.add("dsum", l, (r0, r1), reads + n_reads, [cx.cols(f"xm.{l}", r0, r1)] + n_writes, B * (r1 - r0) * C)


def lower_lmhead(cx: _Lowering) -> None:
    """Final RMSNorm + LM head + per-tile (max, argmax) partials."""
    B, H = cx.B, cx.H
    x_last = names.x_in(cx.info.n_layers)
    w_lm = names.lm_head_weight(cx.spec.tied)
    for t, (r0, r1) in enumerate(row_tiles(cx.V, cx.NS)):
        reads = cx.normed_in(x_last, names.FINAL_NORM) + [cx.rows(w_lm, r0, r1, H)]
        writes = [cx.cols("logits", r0, r1), cx.cols("amax_part", t, t + 1), cx.cols("amax_idx", t, t + 1),
                  cx.cols(names.LM_CAND, LM_CAND_WORDS * t, LM_CAND_WORDS * (t + 1))]
        cx.add("lmhead", -1, (r0, r1, t), reads, writes, 2 * B * (r1 - r0) * H + 4 * B * H + 2 * B * (r1 - r0), k=H)


def argmax_rows(batch: int, n_tasks: int) -> list[tuple[int, int]]:
    """The rows each of ``n_tasks`` argmax tasks takes: contiguous, sizes differing by at most one."""
    if not 1 <= n_tasks <= batch:
        raise ValueError(f"argmax_tasks {n_tasks} must be in 1..batch={batch}")
    return [(batch * i // n_tasks, batch * (i + 1) // n_tasks) for i in range(n_tasks)]


def argmax_tasks_pay(batch: int) -> int:
    """Argmax tasks by default: one per row. A task samples its rows one after another (the filtered
    sampler is block-wide), so at batch 8 one task for all rows made a top-p 0.9 step 47 % dearer than
    a greedy one (BENCHMARKS.md, tenth session, call 6); per row the rows sample at once on as many
    SMs, for one more loop-counter bump each."""
    return batch


def lower_argmax(cx: _Lowering, n_tasks: int) -> None:
    """Argmax tasks reduce the LM head's per-tile partials (and sample), each for a run of rows."""
    B, T = cx.B, len(row_tiles(cx.V, cx.NS))
    for b0, b1 in argmax_rows(B, n_tasks):
        rows = (b0, b1)
        reads = [Region("amax_part", _box(rows, (0, T))), Region("amax_idx", _box(rows, (0, T))),
                 Region("logits", _box(rows, (0, cx.V))), Region(names.LM_CAND, _box(rows, (0, LM_CAND_WORDS * T)))]
        cx.add("argmax", -1, rows, reads, [Region("next_ids", _box(rows))], 2 * (b1 - b0) * T)
