"""Lowering: structure checks, tiling, buffers, costs, and events that wait exactly on what is read."""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest

from mkc.capture.canonical import build_graph, rope_inv_freq
from mkc.capture.graph import ModelInfo, Op, Tensor
from mkc.errors import UnsupportedModelError
from mkc.target import TARGETS, get_target
from mkc.errors import IRCheckError
from mkc.taskgraph import Region, TaskGraph, lower, summary
from mkc.taskgraph.lower import SAMPLER_ONLY
from mkc.taskgraph.events import OwnerGrid, coalesce
from mkc.taskgraph import names
from mkc.taskgraph.tiling import attn_active_splits, attn_split_range, head_tiles, qkv_segments, qkv_tiles, row_tiles
from codegen_fixtures import shape_graph

LLAMA_1B = ModelInfo("LlamaForCausalLM", "llama", 2048, 8192, 16, 32, 8, 64, 128256, 1e-5, True, False, False)
QWEN3_8B = ModelInfo("Qwen3ForCausalLM", "qwen3", 4096, 12288, 36, 32, 8, 128, 151936, 1e-6, False, False, True)
TINY_QWEN3 = ModelInfo("Qwen3ForCausalLM", "qwen3", 80, 144, 2, 4, 2, 16, 97, 1e-6, False, False, True)
TINY_QWEN2 = ModelInfo("Qwen2ForCausalLM", "qwen2", 64, 128, 2, 4, 2, 16, 97, 1e-6, True, True, False)
ELEM = {"bf16": 2, "f32": 4, "i32": 4, "i64": 8}


def graph_of(info: ModelInfo, batch: int = 1, max_seq_len: int = 256, layers: int | None = None, **kw):
    if layers is not None:
        info = dataclasses.replace(info, n_layers=layers)
    return build_graph(info, batch, max_seq_len, rope_inv_freq(info.head_dim, 500000.0), **kw)


def toy(sms: int):
    return dataclasses.replace(get_target("h200"), name=f"toy{sms}", sms=sms)


def producers_of_waits(tg: TaskGraph) -> list[set[int]]:
    prod = tg.producers()
    return [set().union(*(prod[e] for e in t.waits)) if t.waits else set() for t in tg.tasks]


def brute_force_producers(tg: TaskGraph) -> list[set[int]]:
    writers: dict[str, list] = {}
    for t in tg.tasks:
        for r in t.writes:
            writers.setdefault(r.buffer, []).append((t.id, r))
    return [{p for r in t.reads for p, w in writers.get(r.buffer, ()) if p != t.id and w.overlaps(r)} for t in tg.tasks]


# ---- graph structure ---------------------------------------------------------------------------

def test_flag_mismatch_names_the_op():
    g = graph_of(TINY_QWEN3)
    g = dataclasses.replace(g, model=dataclasses.replace(g.model, qk_norm=False))
    with pytest.raises(UnsupportedModelError, match=r"l0\.q_norm.*Qwen3"):
        lower(g, get_target("h200"))


def test_wrong_kind_names_op_and_source():
    g = graph_of(TINY_QWEN2, sources={"l1.silu_mul": "modeling_qwen2.py:57"})
    ops = tuple(dataclasses.replace(op, kind="add") if op.name == "l1.silu_mul" else op for op in g.ops)
    with pytest.raises(UnsupportedModelError) as err:
        lower(dataclasses.replace(g, ops=ops), get_target("h200"))
    msg = str(err.value)
    assert "l1.silu_mul" in msg and "modeling_qwen2.py:57" in msg and "Qwen2ForCausalLM" in msg and "supports" in msg


def test_extra_and_missing_ops_are_named():
    g = graph_of(TINY_QWEN2)
    extra = dataclasses.replace(
        g, tensors=g.tensors + (Tensor("l0.extra", (1, 64), "f32", "act"),),
        ops=g.ops + (Op("l0.gelu", "add", ("l0.xa", "l0.xa"), ("l0.extra",), layer=0),))
    with pytest.raises(UnsupportedModelError, match=r"op l0\.gelu is not part"):
        lower(extra, get_target("h200"))
    missing = dataclasses.replace(g, ops=tuple(op for op in g.ops if op.name != "l1.k_proj"))
    with pytest.raises(UnsupportedModelError, match=r"no op 'l1\.k_proj'"):
        lower(missing, get_target("h200"))


def test_bias_flag_mismatch():
    g = graph_of(TINY_QWEN2)
    g = dataclasses.replace(g, model=dataclasses.replace(g.model, qkv_bias=False))
    with pytest.raises(UnsupportedModelError, match=r"l0\.q_proj"):
        lower(g, get_target("h200"))


# ---- tiling ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 15, 64, 97, 2048, 4096, 8192, 12288, 128256, 151936])
@pytest.mark.parametrize("workers", [1, 3, 108, 110, 132, 148, 304])
def test_row_tiles_cover_and_balance(n, workers):
    tiles = row_tiles(n, workers)
    assert tiles[0][0] == 0 and tiles[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(tiles, tiles[1:]))
    size = tiles[0][1] - tiles[0][0]
    assert all(hi - lo == size for lo, hi in tiles[:-1])
    if n >= 8:
        assert size % 8 == 0 or size == n
    # never worse than the plain 16-row rule
    plain = -(-(-(-n // 16)) // workers) * 16
    assert -(-len(tiles) // workers) * size <= -(-(-(-n // plain)) // workers) * plain


@pytest.mark.parametrize("S,per", [(8, 32), (8, 3), (4, 1), (8, 0), (1, 32)])
def test_attn_splits_grow_with_the_context(S, per):
    """attn_split_range: at every position the splits' ranges partition [0, pos] in order, the last
    split alone reaches pos, ceil((pos + 1) / per) of them (at most S; all with per 0) hold positions
    and the empty ones come first; with per 0 it is the even partition of every split."""
    for T in range(1, 400):
        act = attn_active_splits(S, T, per)
        assert act == (S if per == 0 else min(S, -(-T // per)))
        ranges = [attn_split_range(s, S, T, per) for s in range(S)]
        assert all(r == (0, 0) for r in ranges[:S - act])
        live = ranges[S - act:]
        assert live[0][0] == 0 and live[-1][1] == T
        assert all(a[1] == b[0] for a, b in zip(live, live[1:]))
        assert all(hi <= T - 1 for _, hi in ranges[:-1])  # only the last split reaches pos
        if per == 0:
            assert ranges == [(s * T // S, (s + 1) * T // S) for s in range(S)]


def test_attn_split_pos_in_the_task_graph():
    """attn_split_pos goes into the dims of a split build, with the same tasks, waits and regions;
    the default (0: measured slower, attn_split_pos_pays) or no split leaves the task graph as it
    was, and a negative count is refused."""
    g = graph_of(LLAMA_1B, layers=2)
    on, off = lower(g, get_target("h200"), attn_split_pos=32), lower(g, get_target("h200"))
    assert on.dim("attn_split_pos") == 32 and "attn_split_pos" not in dict(off.dims)
    assert [t.reads for t in on.tasks] == [t.reads for t in off.tasks]
    assert [(t.waits, t.signals) for t in on.tasks] == [(t.waits, t.signals) for t in off.tasks]
    assert "attn_split_pos" not in dict(lower(g, get_target("h200"), attn_split=1).dims)
    with pytest.raises(ValueError, match="attn_split_pos"):
        lower(g, get_target("h200"), attn_split_pos=-1)


def test_h200_tiles():
    tg = lower(graph_of(LLAMA_1B, layers=2), get_target("h200"))
    per = {}
    for t in tg.tasks:
        per.setdefault((t.layer, t.kind), []).append(t)
    # 48 heads of 32 RoPE pairs: 128 runs of 12 pairs (24 rows) on 132 SMs, a third of them crossing
    # a head boundary, rather than 96 slices of 16 pairs (32 rows)
    assert [t.args for t in per[(0, "qkv")]] == [run_args(s, s + 12, 32) for s in range(0, 48 * 32, 12)]
    # attention: 8 kv heads x 4 splits of the 256-position cache (132 // 8 = 16 would fit; 256 / 64 = 4)
    assert tg.dim("attn_split") == 4 and [t.args for t in per[(0, "attn")]] == [(0, g, s) for g in range(8) for s in range(4)]
    for kind, n in (("oproj", 2048), ("gateup", 8192), ("down", 2048)):
        tiles = [t.args for t in per[(0, kind)]]
        assert len(tiles) == 128 and tiles[-1][1] == n
        assert all((r1 - r0) % 16 == 0 for r0, r1 in tiles)
    lm = per[(-1, "lmhead")]
    assert len(lm) == 132 and [t.args[2] for t in lm] == list(range(132))
    assert tg.dim("n_lm_tiles") == 132
    assert head_tiles(48, 132) == [(i, i + 1) for i in range(48)]
    # fan-in events poll one coalesced box
    ev = {e.name: e for e in tg.events}
    assert sorted((r.buffer, r.box) for r in ev["l1.attn[*]>oproj"].regions) == [
        ("alse.1", ((0, 1), (0, 4), (0, 32))), ("ao.1", ((0, 1), (0, 4), (0, 2048)))]
    assert [(r.buffer, r.box) for r in ev["l0.down[*]>qkv"].regions] == [("xm.0", ((0, 1), (0, 2048)))]
    assert sorted(r.buffer for r in ev["lmhead[*]>argmax"].regions) == ["amax_idx", "amax_part"]


def run_args(s: int, e: int, pairs: int) -> tuple[int, int, int, int]:
    """The (h0, h1, p0, p1) of the run of pairs [s, e) of the head-major pair space."""
    h1 = (e - 1) // pairs + 1
    return s // pairs, h1, s % pairs, e - (h1 - 1) * pairs


@pytest.mark.parametrize("nh,nkv,hd", [(32, 8, 64), (32, 8, 128), (28, 4, 128), (16, 8, 128), (4, 2, 16),
                                        (8, 1, 64), (14, 2, 64), (64, 8, 128)])
@pytest.mark.parametrize("workers", [1, 3, 13, 20, 47, 108, 132, 148, 304])
@pytest.mark.parametrize("cross", [True, False])
def test_qkv_tiles_cover_rows_once_and_fill_workers(nh, nkv, hd, workers, cross):
    tiles = qkv_tiles(nh, nkv, hd, workers, cross=cross)
    n, half = nh + 2 * nkv, hd // 2
    taken = np.zeros((n, hd), int)
    rows = 0
    for h0, h1, p0, p1 in tiles:
        assert 0 <= h0 < h1 <= n and 0 <= p0 < half and 0 < p1 <= half
        segs = qkv_segments(h0, h1, p0, p1, half)
        if (p0, p1) != (0, half):
            assert p0 % 2 == 0 and p1 % 2 == 0  # whole 32-bit cache words
            # a slice of one head, or (cross) a run of at most half pairs over one head boundary
            assert h1 == h0 + 1 or (cross and h1 == h0 + 2 and (half - p0) + p1 <= half)
        assert [(a, b) for a, b, _, _ in segs] == sorted((a, b) for a, b, _, _ in segs)
        assert segs[0][0] == h0 and segs[-1][1] == h1
        rows = max(rows, sum((b - a) * 2 * (pb - pa) for a, b, pa, pb in segs))
        for a, b, pa, pb in segs:
            for h in range(a, b):
                if h < nh + nkv:
                    taken[h, pa:pb] += 1
                    taken[h, half + pa: half + pb] += 1
                else:
                    taken[h, 2 * pa: 2 * pb] += 1
    assert (taken == 1).all()
    if n < workers:
        assert len(tiles) <= workers
        if len(tiles) > n:
            # no other even slice size fits the workers with fewer rows per task: neither slices of
            # a head nor (cross) runs over the pair space
            for size in range(2, half, 2):
                if 2 * size < rows:
                    assert n * -(-half // size) > workers
                    if cross:
                        assert -(-n * half // size) > workers
    else:
        assert tiles == [(h0, h1, 0, half) for h0, h1 in head_tiles(n, workers)]


def test_qkv_tiles_of_real_models():
    # llama-3.2-1b (48 heads of 32 pairs) on 132 SMs: 128 runs of 12 pairs (24 rows) crossing heads;
    # slices within a head only: 16 pairs, 96 tasks of 32 rows
    assert qkv_tiles(32, 8, 64, 132) == [run_args(s, s + 12, 32) for s in range(0, 1536, 12)]
    assert {p1 - p0 for _, _, p0, p1 in qkv_tiles(32, 8, 64, 132, cross=False)} == {16}
    assert len(qkv_tiles(32, 8, 64, 132, cross=False)) == 96
    # qwen3-8b (q/k norm or not): 128 runs of 24 pairs (48 rows) instead of 96 tasks of 64 rows
    assert qkv_tiles(32, 8, 128, 132) == [run_args(s, s + 24, 64) for s in range(0, 3072, 24)]
    assert {p1 - p0 for _, _, p0, p1 in qkv_tiles(32, 8, 128, 132, cross=False)} == {32}
    # qwen3-0.6b (32 heads of 64 pairs): slices of 16 pairs already fill 128 SMs; no run is shorter
    assert qkv_tiles(16, 8, 128, 132) == [(h, h + 1, p, p + 16) for h in range(32) for p in range(0, 64, 16)]
    # 304 CUs: slices of 6 pairs (12 rows) beat the 8-pair ones (16 rows): 288 tasks
    t = qkv_tiles(32, 8, 64, 304)
    assert len(t) == 288 and max(p1 - p0 for _, _, p0, p1 in t) == 6


def test_qkv_runs_cross_heads_where_they_paid():
    from mkc.taskgraph.lower import qkv_cross_pays

    assert qkv_cross_pays(1) and qkv_cross_pays(1, "atomic") and not qkv_cross_pays(1, "nan")
    assert not qkv_cross_pays(8)

    def crossing(tg):
        return sum(t.args[1] - t.args[0] > 1 and t.args[2:] != (0, 32) for t in tg.tasks if t.kind == "qkv")

    assert crossing(lower(graph_of(LLAMA_1B, layers=1), get_target("h200"))) == 32  # the default at batch 1
    assert crossing(lower(graph_of(LLAMA_1B, batch=8, layers=1), get_target("h200"))) == 0
    assert crossing(lower(graph_of(LLAMA_1B, layers=1), get_target("h200"), qkv_cross=False)) == 0


def test_qkv_segments():
    assert qkv_segments(3, 7, 0, 32, 32) == [(3, 7, 0, 32)]  # whole heads
    assert qkv_segments(3, 4, 8, 20, 32) == [(3, 4, 8, 20)]  # a slice
    assert qkv_segments(0, 2, 24, 4, 32) == [(0, 1, 24, 32), (1, 2, 0, 4)]  # a run over one boundary
    assert qkv_segments(0, 4, 24, 4, 32) == [(0, 1, 24, 32), (1, 3, 0, 32), (3, 4, 0, 4)]


def test_qkv_runs_write_exact_regions():
    tg = lower(graph_of(LLAMA_1B, layers=1), get_target("h200"))
    L = tg.max_seq_len
    crossing = 0
    for t in (t for t in tg.tasks if t.kind == "qkv"):
        segs = qkv_segments(*t.args, 32)
        crossing += len(segs) > 1
        want = []
        for h, _, p0, p1 in segs:
            if h < 32:
                want += [("q.0", ((0, 1), (h * 64 + p0, h * 64 + p1))), ("q.0", ((0, 1), (h * 64 + 32 + p0, h * 64 + 32 + p1)))]
            elif h < 40:
                g = h - 32
                want += [("k_cache.0", ((0, 1), (g, g + 1), (L - 1, L), (p0, p1))),
                         ("k_cache.0", ((0, 1), (g, g + 1), (L - 1, L), (32 + p0, 32 + p1)))]
            else:
                g = h - 40
                want += [("v_cache.0", ((0, 1), (g, g + 1), (L - 1, L), (2 * p0, 2 * p1)))]
        assert sorted((r.buffer, r.box) for r in t.writes) == sorted(want)
        weights = [r for r in t.reads if r.buffer.endswith("proj.weight")]
        assert sum(r.size() for r in weights) == 2 * 12 * 2048
    assert crossing == 32  # 47 head boundaries inside the pair space; every third (96, 192 ..) ends a run


def test_qk_norm_models_slice_heads_and_norm_keys_in_attention():
    """Qwen3's q/k norm needs whole heads, so qkv leaves q and k raw (q.l, kr.l) and may slice them
    like any other model; attention norms and rotates them and appends the key at pos, reading the
    cached keys before pos only (no task reads its own write)."""
    tg = lower(graph_of(QWEN3_8B, layers=1), get_target("h200"))
    L = tg.max_seq_len
    qkv = [t for t in tg.tasks if t.kind == "qkv"]
    assert qkv == sorted(qkv, key=lambda t: t.args) and len(qkv) == 128  # runs of 24 pairs, not 48 whole heads
    assert {sum(2 * (b - a) * (pb - pa) for a, b, pa, pb in qkv_segments(*t.args, 64)) for t in qkv} == {48}
    assert not any(r.buffer.startswith("k_cache") for t in qkv for r in t.writes)
    assert not any("norm.weight" in r.buffer and "layernorm" not in r.buffer for t in qkv for r in t.reads)
    kr = {x.name: x for x in tg.buffers}["kr.0"]
    assert kr.shape == (1, 8 * 128) and kr.polled and kr.role == "act"
    S = tg.dim("attn_split")
    for t in (t for t in tg.tasks if t.kind == "attn"):
        b, g, s = t.args
        last = s == S - 1  # the split that reaches pos appends the new key
        reads = {(r.buffer, r.box) for r in t.reads}
        assert ("k_cache.0", ((b, b + 1), (g, g + 1), (0, L - 1), (0, 128))) in reads
        assert ("v_cache.0", ((b, b + 1), (g, g + 1), (0, L if last else L - 1), (0, 128))) in reads
        assert (("kr.0", ((b, b + 1), (g * 128, (g + 1) * 128))) in reads) == last
        assert ("model.layers.0.self_attn.k_norm.weight" in {r.buffer for r in t.reads}) == last
        assert "model.layers.0.self_attn.q_norm.weight" in {r.buffer for r in t.reads}
        assert (("k_cache.0", ((b, b + 1), (g, g + 1), (L - 1, L), (0, 128))) in {
            (r.buffer, r.box) for r in t.writes}) == last
        # it waits for the qkv tasks of its q (and, last, raw k and v) heads, not on itself
        producers = {p for e in t.waits for p in tg.tasks if e in p.signals}
        assert t not in producers and producers and all(p.kind == "qkv" for p in producers)


def test_buffers_and_dims():
    g = graph_of(TINY_QWEN3, batch=3, max_seq_len=32)
    tg = lower(g, get_target("h200"))
    b = {x.name: x for x in tg.buffers}
    assert b["ids"].dtype == "i64" and b["ids"].role == "input" and b["pos"].shape == (1,)
    assert b["inv_freq"].role == "const" and b["inv_freq"].data == g.tensor("rope.inv_freq").data
    for name in ("x0", "q.1", "attn.1", "xa.0", "h.1", "xm.1", "amax_part", "amax_idx", "next_ids"):
        assert b[name].polled, name
    assert b["x0"].shape == (3, 80) and b["h.0"].shape == (3, 144) and b["q.0"].dtype == "f32"
    assert b["k_cache.1"].shape == (3, 2, 32, 16) and b["k_cache.1"].dtype == "bf16" and b["k_cache.1"].polled
    assert not b["logits"].polled and b["amax_idx"].dtype == "i32"
    assert b["model.layers.1.self_attn.q_norm.weight"].role == "weight"
    assert "lm_head.weight" in b
    assert tg.dim("qk_norm") == 1 and tg.dim("qkv_bias") == 0 and tg.dim("tied") == 0 and tg.dim("n_rep") == 2
    assert tg.const("rms_eps") == 1e-6 and tg.const("attn_scale") == 16**-0.5 and tg.const("rope_scaling") == 1.0
    assert tg.batch == 3 and tg.max_seq_len == 32 and tg.target == "h200"


def test_json_roundtrip(tmp_path):
    tg = lower(graph_of(TINY_QWEN2, batch=2), toy(3))
    tg.save(tmp_path / "tasks.json")
    assert TaskGraph.load(tmp_path / "tasks.json") == tg


# ---- events ------------------------------------------------------------------------------------

@pytest.mark.parametrize("info,target,batch", [(LLAMA_1B, "h200", 2), (TINY_QWEN3, 3, 3), (TINY_QWEN2, 5, 4)])
def test_consumers_wait_exactly_on_what_they_read(info, target, batch):
    tgt = get_target(target) if isinstance(target, str) else toy(target)
    tg = lower(graph_of(info, batch=batch, layers=2), tgt)
    assert producers_of_waits(tg) == brute_force_producers(tg)
    # ids are a topological order and every event has a consumer
    prod = tg.producers()
    assert all(p < t.id for t in tg.tasks for e in t.waits for p in prod[e])
    assert all(any(e.id in t.waits for t in tg.tasks) for e in tg.events)


def test_attention_waits_only_for_its_heads():
    m = LLAMA_1B
    tg = lower(graph_of(m, batch=2, layers=2), get_target("h200"), qkv_cross=True)
    nh, nkv, n_rep = m.n_heads, m.n_kv_heads, m.n_heads // m.n_kv_heads
    deps = producers_of_waits(tg)
    for t in tg.tasks:
        if t.kind != "attn":
            continue
        g, s = t.args[1], t.args[2]
        # every split waits for its q heads; only the last (which reaches pos) for this step's k and v
        heads = set(range(g * n_rep, (g + 1) * n_rep))
        if s == tg.dim("attn_split") - 1:
            heads |= {nh + g, nh + nkv + g}
        want = {q.id for q in tg.tasks if q.kind == "qkv" and q.layer == t.layer and set(range(*q.args[:2])) & heads}
        # the runs of 12 pairs that touch those heads' 32 pairs each
        runs = {p // 12 for h in heads for p in range(32 * h, 32 * h + 32)}
        assert deps[t.id] == want and len(want) == len(runs)
        assert len(t.waits) == (2 if s == tg.dim("attn_split") - 1 else 1)


def test_fine_grained_mlp_and_residual_edges():
    tg = lower(graph_of(LLAMA_1B, batch=1, layers=2), get_target("h200"))
    deps = producers_of_waits(tg)
    by = lambda kind, layer: [t for t in tg.tasks if t.kind == kind and t.layer == layer]  # noqa: E731
    gateup1 = {t.id for t in by("gateup", 1)}
    attn1 = {t.id for t in by("attn", 1)}
    for down, oproj in zip(by("down", 1), by("oproj", 1)):
        assert deps[down.id] == gateup1 | {oproj.id}  # its own chunk of xa, all of h
    for oproj, down0 in zip(by("oproj", 1), by("down", 0)):
        assert deps[oproj.id] == attn1 | {down0.id}  # its own residual columns, all of attn
    for qkv in by("qkv", 1):
        assert deps[qkv.id] == {t.id for t in by("down", 0)}


def test_event_regions_are_producer_writes_and_cover_reads():
    tg = lower(graph_of(TINY_QWEN3, batch=3, layers=2), toy(3))
    bufs = {b.name: b for b in tg.buffers}
    prod = tg.producers()

    def mask(regions):
        out: dict[str, np.ndarray] = {}
        for r in regions:
            out.setdefault(r.buffer, np.zeros(bufs[r.buffer].shape, bool))[tuple(slice(*iv) for iv in r.box)] = True
        return out

    polls = {}
    for e in tg.events:
        assert e.regions and all(bufs[r.buffer].polled for r in e.regions), e.name
        writes = [w for p in prod[e.id] for w in tg.tasks[p].writes if bufs[w.buffer].polled]
        got, want = mask(e.regions), mask(writes)
        assert got.keys() == want.keys() and all((got[k] == want[k]).all() for k in got), e.name
        polls[e.id] = got
    for t in tg.tasks:  # NaN mode: what a task polls covers every element it reads from its producers
        deps = [w for e in t.waits for p in prod[e] for w in tg.tasks[p].writes]
        polled = mask([r for e in t.waits for r in tg.events[e].regions])
        for r in t.reads:
            if r.buffer in SAMPLER_ONLY:
                # read through message passing (its writer fences before its polled stores): every
                # writer of it is a producer whose polled words this task polls
                writers = {p for e in t.waits for p in prod[e] if any(w.overlaps(r) for w in tg.tasks[p].writes)}
                assert writers and all(any(polled[w.buffer][tuple(slice(*iv) for iv in w.box)].any()
                                           for w in tg.tasks[p].writes if bufs[w.buffer].polled) for p in writers), (t.id, r)
                continue
            if any(w.overlaps(r) for w in deps):
                sl = tuple(slice(*iv) for iv in r.box)
                need = mask([w for w in deps if w.buffer == r.buffer])[r.buffer][sl]
                assert not (need & ~polled[r.buffer][sl]).any(), (t.id, r)


def test_owner_grid_and_coalesce():
    grid = OwnerGrid("x", (4, 10), [(0, ((0, 4), (0, 3))), (1, ((0, 2), (3, 10))), (2, ((2, 4), (3, 10)))])
    assert grid.writers_of(((0, 4), (2, 4))) == {0, 1, 2}
    assert grid.writers_of(((3, 4), (5, 6))) == {2}
    assert grid.writers_of(((0, 1), (0, 3))) == {0}
    with pytest.raises(IRCheckError, match="tasks 0 and 1 both write x"):
        OwnerGrid("x", (4, 10), [(0, ((0, 4), (0, 5))), (1, ((1, 2), (4, 10)))])
    boxes = [Region("a", ((b, b + 1), (c, c + 4))) for b in range(3) for c in (0, 4, 8)] + [Region("k", ((0, 1),))]
    assert coalesce(boxes) == (Region("a", ((0, 3), (0, 12))), Region("k", ((0, 1),)))
    assert coalesce([Region("a", ((0, 1), (0, 4))), Region("a", ((1, 2), (4, 8)))]) == (
        Region("a", ((0, 1), (0, 4))), Region("a", ((1, 2), (4, 8))))


# ---- costs and summary -------------------------------------------------------------------------

def test_bytes_count_each_weight_once_and_cache_at_context():
    for info in (LLAMA_1B, QWEN3_8B):
        g = graph_of(info, batch=4, layers=2, max_seq_len=1024)
        tg = lower(g, get_target("h200"))
        bufs = {b.name: b for b in tg.buffers}
        # every weight matrix row is streamed by exactly one task (norm vectors are re-read per tile)
        weight_reads = sum(r.size() * ELEM[bufs[r.buffer].dtype] for t in tg.tasks if t.kind != "embed"
                           for r in t.reads if bufs[r.buffer].role == "weight" and len(r.box) == 2)
        table = g.tensor("model.embed_tokens.weight").nbytes
        matrices = sum(t.nbytes for t in g.params() if len(t.shape) == 2)
        assert weight_reads == matrices - (0 if info.tied_embeddings else table)
        assert sum(t.bytes for t in tg.tasks) > weight_reads
        short = lower(g, get_target("h200"), context=100)
        a_long = next(t for t in tg.tasks if t.kind == "attn")
        a_short = next(t for t in short.tasks if t.kind == "attn")
        hd, S = info.head_dim, tg.dim("attn_split")  # each split reads its share of the context
        assert a_long.bytes - a_short.bytes == 2 * 2 * (-(-1024 // S) - -(-100 // S)) * hd
        assert short.dim("context") == 100 and tg.dim("context") == 1024


def test_summary():
    tg = lower(graph_of(LLAMA_1B, batch=2, layers=3), get_target("h200"))
    s = summary(tg)
    json.dumps(s)
    assert s["tasks"] == len(tg.tasks) and s["events"] == len(tg.events)
    assert tg.dim("attn_split") == 4 and s["tasks_per_kind"]["attn"] == 3 * 2 * 8 * 4
    assert s["critical_path_tasks"] == 5 * 3 + 3  # embed, 5 per layer, lmhead, argmax
    assert s["critical_path_bytes"] < s["bytes"]
    # per layer and kv group: its q heads (every split waits) and its k/v heads (the last splits wait)
    assert s["events_per_edge"]["qkv>attn"] == 3 * 8 * 2
    assert s["max_smem"] <= get_target("h200").smem_per_block


# ---- every batch size on every target ----------------------------------------------------------

@pytest.fixture(scope="module")
def one_layer_graphs():
    return {batch: graph_of(LLAMA_1B, batch=batch, layers=1, max_seq_len=512) for batch in range(1, 65)}


@pytest.mark.slow
@pytest.mark.parametrize("target", list(TARGETS))
def test_every_batch_lowers_on_every_target(target, one_layer_graphs):
    tgt = get_target(target)
    for batch, graph in one_layer_graphs.items():
        tg = lower(graph, tgt)
        bufs = {b.name: b for b in tg.buffers}
        assert max(t.smem for t in tg.tasks) <= tgt.smem_per_block
        S = tg.dim("attn_split")
        per = tgt.sms // (batch * 8)
        assert S == (1 if per < 4 else min(8, per, 512 // 64))
        assert sum(t.kind == "attn" for t in tg.tasks) == batch * LLAMA_1B.n_kv_heads * S
        assert max(sum(t.kind == k for t in tg.tasks) for k in ("oproj", "gateup", "down", "lmhead")) <= tgt.sms
        written: dict[str, int] = {}
        for t in tg.tasks:
            for r in t.writes:
                written[r.buffer] = written.get(r.buffer, 0) + r.size()
        for name, b in bufs.items():  # every activation element written exactly once (no overlap is checked)
            if b.role in ("act", "output"):
                assert written[name] == int(np.prod(b.shape)), (target, batch, name)


# ---- speed -------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 64])
def test_lowering_llama_1b_is_fast(batch):
    g = graph_of(LLAMA_1B, batch=batch, max_seq_len=4096)
    t0 = time.perf_counter()
    lower(g, get_target("h200"))
    assert time.perf_counter() - t0 < 10


@pytest.mark.slow
def test_lowering_qwen3_8b_is_fast():
    g = graph_of(QWEN3_8B, batch=64, max_seq_len=4096)
    t0 = time.perf_counter()
    tg = lower(g, get_target("h200"))
    assert time.perf_counter() - t0 < 30
    assert len(tg.tasks) > 30000


@pytest.mark.parametrize("model", ["llama-3.2-1b", "qwen3-8b", "tiny-qwen3"])
@pytest.mark.parametrize("target", ["h200", "mi300x"])
def test_attention_layout_is_small_and_holds_the_preloaded_rows(model, target):
    """Attention's shared memory: q, the new key, scores, softmax state and one region for the K/V
    rows loaded before the wait (later the partial outputs); at batch 1 it stays under 40 KB, and
    the GEMV layout's OFF_AW is not one of its regions (plan.check groups them apart)."""
    from codegen_fixtures import taskgraph
    from mkc.backend import for_target
    from mkc.taskgraph.plan import ATTN_REGIONS, attn_partials, attn_preload

    t = get_target(target)
    tg = taskgraph(model, 1, 1024, t)
    plan = tg.plan
    assert plan.check(t.smem_per_block) == []
    regs = {n: (o, s) for n, o, s in plan.regions}
    assert set(ATTN_REGIONS) <= set(regs) and "OFF_AW" not in ATTN_REGIONS
    # (at batch 1 on the H200 the layout starts after the weight pipeline's pages)
    attn = [(o, s) for n, (o, s) in regs.items() if n in ATTN_REGIONS]
    assert max(o + s for o, s in attn) - min(o for o, _ in attn) < 40 * 1024
    hd, nrep = tg.dim("hd"), tg.dim("nh") // tg.dim("nkv")
    warp = for_target(t).capabilities(t).warp_size
    pre = attn_preload(hd, plan.threads, plan.attn_chunk)
    assert regs["OFF_AKV"][1] == max(2 * 2 * pre * hd, 4 * attn_partials(hd, plan.threads, warp) * nrep * hd)
    # a split loads at most two 16-byte words per thread of each of K and V before its wait
    assert pre * hd // 8 <= 2 * plan.threads


def test_split_k_down_waits_only_for_its_chunk():
    """Split-K down: chunk c of a row tile waits for the gate/up tiles of its columns of h (those
    tiles come chunk by chunk) and for chunk c - 1 of the same rows; the last chunk writes xm."""
    from mkc.taskgraph.lower import check_down_split

    tg = lower(shape_graph("llama-3.2-1b", 1, 128), get_target("h200"), down_split=2)
    gateup = [t for t in tg.tasks if t.kind == "gateup" and t.layer == 0]
    down = [t for t in tg.tasks if t.kind == "downk" and t.layer == 0]
    assert len(gateup) == 256 and len(down) == 256
    assert [a for t in gateup for a in t.args] == sorted(a for t in gateup for a in t.args)  # chunk-major
    prod = {e: {t.id for t in tg.tasks if e in t.signals} for e in range(len(tg.events))}
    for t in down:
        r0, r1, k0, k1 = t.args
        deps = set().union(*(prod[e] for e in t.waits))
        want = {g.id for g in gateup if g.args[0] < k1 and g.args[1] > k0}
        if k0 == 0:
            want |= {o.id for o in tg.tasks if o.kind == "oproj" and o.layer == 0 and o.args[0] < r1 and o.args[1] > r0}
        else:
            want |= {d.id for d in down if d.args[:2] == (r0, r1) and d.args[3] == k0}
        assert deps == want, t
        assert t.writes[0].buffer == ("xm.0" if k1 == 8192 else names.down_partial(0))
    with pytest.raises(ValueError, match="batch 1"):
        check_down_split(2, 8, 8192)
    with pytest.raises(ValueError, match="multiple"):
        check_down_split(3, 1, 8192)


def test_down_partials_wait_only_for_their_chunk_and_sums_for_their_rows():
    """lower(down_sum=4) at batch 32: 128 downp tasks, a chunk's 32 over a quarter of the rows each,
    staging only their chunk of h and waiting only for the gate/up tiles of it; 128 dsum tasks, each
    waiting for its rows' four partials and o-proj's xa, writing xm and its companions; the next
    layer's qkv waits for every dsum."""
    from mkc.taskgraph.lower import check_down_sum

    tg = lower(shape_graph("llama-3.2-1b", 32, 128), get_target("h200"), h_bf16=True, xn_bf16=True, down_sum=4, qkv_sum=1)
    prod = {e: {t.id for t in tg.tasks if e in t.signals} for e in range(len(tg.events))}
    by = lambda kind, l=0: [t for t in tg.tasks if t.kind == kind and t.layer == l]  # noqa: E731
    gateup, parts, sums = by("gateup"), by("downp"), by("dsum")
    assert len(parts) == 128 and len(sums) == 128 and not by("down")
    for t in parts:
        r0, r1, k0, k1 = t.args
        assert k1 - k0 == 2048 and r1 - r0 == 64
        deps = set().union(*(prod[e] for e in t.waits))
        assert deps == {g.id for g in gateup if g.args[0] < k1 and g.args[1] > k0}, t
        assert [r.box for r in t.reads if r.buffer == "h.0"] == [((0, 32), (k0, k1))]
        assert [w.buffer for w in t.writes] == [names.down_parts(0)] and t.writes[0].box[0] == (k0 // 2048, k0 // 2048 + 1)
    for t in sums:
        r0, r1 = t.args
        deps = set().union(*(prod[e] for e in t.waits))
        want = {p.id for p in parts if p.args[0] < r1 and p.args[1] > r0}
        want |= {o.id for o in by("oproj") if o.args[0] < r1 and o.args[1] > r0}
        assert deps == want and len(want) == 5, t
        assert {w.buffer for w in t.writes} == {"xm.0", names.xn_of("xm.0"), names.xss_of("xm.0")}
    qkv_deps = set().union(*(prod[e] for e in by("qkv", 1)[0].waits))
    assert {t.id for t in sums} <= qkv_deps and not {t.id for t in parts} & qkv_deps
    with pytest.raises(ValueError, match="batch >= 2"):
        check_down_sum(2, 1, 8192, 1, True)
    with pytest.raises(ValueError, match="h_bf16"):
        check_down_sum(2, 8, 8192, 1, False)
    with pytest.raises(ValueError, match="multiple"):
        check_down_sum(3, 8, 8192, 1, True)


def test_qkv_partials_wait_only_for_their_columns_and_attention_for_its_heads():
    """lower(qkv_sum=...) by default where qkv stages at least 64 KiB (llama-3.2-1b batch 16 and 32,
    qwen3-8b batch 8, in 2 chunks; not llama batch 8, nor without the normed copies): at batch 32, 4 chunks of
    32 qkvp tasks, 96 rows of the concatenated q | k | v matrix x 512 columns each, that wait only for
    the producers of their chunk's columns of the normed copy; each attention task waits for the
    chunks' tiles that hold its heads' rows (and the sums of squares' producers), appends its key and
    value, and no task writes q (nor is q allocated)."""
    from mkc.taskgraph.lower import qkv_sum_pays

    def tg_of(name, batch, **kw):
        return lower(shape_graph(name, batch, 128), get_target("h200"), h_bf16=True, attn_bf16=True, **kw)

    assert (qkv_sum_pays(32, 2048), qkv_sum_pays(16, 2048), qkv_sum_pays(8, 4096), qkv_sum_pays(8, 2048)) == (2, 2, 2, 1)
    assert (qkv_sum_pays(32, 4096), qkv_sum_pays(4, 2048), qkv_sum_pays(24, 2048)) == (2, 1, 2)  # at most 2; powers of two
    assert dict(tg_of("llama-3.2-1b", 8, xn_bf16=True).dims).get("qkv_sum") is None
    assert dict(tg_of("llama-3.2-1b", 32, xn_bf16=False).dims).get("qkv_sum") is None
    assert tg_of("llama-3.2-1b", 32, xn_bf16=True).dim("qkv_sum") == 2  # the default; 4 chunks below
    tg = tg_of("llama-3.2-1b", 32, xn_bf16=True, qkv_sum=4)
    assert tg.dim("qkv_sum") == 4 and not any(t.kind == "qkv" for t in tg.tasks)
    prod = {e: {t.id for t in tg.tasks if e in t.signals} for e in range(len(tg.events))}
    by = lambda kind, l=1: [t for t in tg.tasks if t.kind == kind and t.layer == l]  # noqa: E731
    parts, sums = by("qkvp"), by("dsum", 0)
    assert len(parts) == 128
    for t in parts:
        r0, r1, k0, k1 = t.args
        assert (r1 - r0, k1 - k0) == (96, 512)
        deps = set().union(*(prod[e] for e in t.waits))
        assert deps == {d.id for d in sums if d.args[0] < k1 and d.args[1] > k0}, t
        assert [w.buffer for w in t.writes] == [names.qkv_parts(1)] and t.writes[0].box[0] == (k0 // 512, k0 // 512 + 1)
    hd, n_rep, QD = tg.dim("hd"), tg.dim("n_rep"), tg.dim("nh") * tg.dim("hd")
    for t in by("attn"):
        b, g, _ = t.args
        KD = tg.dim("nkv") * hd
        rows = [(g * n_rep * hd, (g + 1) * n_rep * hd), (QD + g * hd, QD + (g + 1) * hd), (QD + KD + g * hd, QD + KD + (g + 1) * hd)]
        deps = set().union(*(prod[e] for e in t.waits))
        want = {p.id for p in parts if any(p.args[0] < r1 and p.args[1] > r0 for r0, r1 in rows)}
        assert want <= deps and deps - want <= {d.id for d in sums}, t
        assert {w.buffer for w in t.writes} == {"attn.1", names.k_cache(1), names.v_cache(1)}
    assert not any(r.buffer == "q.1" for t in tg.tasks for r in t.writes)
    # nothing is allocated for q (nor, with q/k norm, the raw keys): attention reads the partials
    have = {b.name for b in tg.buffers}
    assert names.qkv_parts(1) in have and "q.1" not in have and "q.1" in {b.name for b in tg_of("llama-3.2-1b", 8, xn_bf16=True).buffers}
    q8 = tg_of("qwen3-8b", 8, xn_bf16=True)
    assert q8.dim("qkv_sum") == 2 and not {"q.1", names.k_raw(1)} & {b.name for b in q8.buffers}
    assert names.k_raw(1) in {b.name for b in tg_of("qwen3-8b", 8, xn_bf16=True, qkv_sum=1).buffers}


@pytest.mark.parametrize("batch, n", [(1, 1), (8, 8), (8, 1), (8, 3), (32, 32), (5, 2)])
def test_argmax_tasks_split_the_rows(batch, n):
    """One argmax task per row by default at batch > 1; any count in 1..batch takes contiguous runs
    of rows that cover each row once, and each task reads and writes only its rows."""
    from mkc.taskgraph.lower import argmax_rows

    tg = lower(shape_graph("tiny-llama", batch, 64), get_target("h200"), argmax_tasks=n)
    am = [t for t in tg.tasks if t.kind == "argmax"]
    assert [t.args for t in am] == argmax_rows(batch, n) and len(am) == n
    assert [r for t in am for r in range(*t.args)] == list(range(batch))
    assert max(b1 - b0 for b0, b1 in argmax_rows(batch, n)) - min(b1 - b0 for b0, b1 in argmax_rows(batch, n)) <= 1
    for t in am:
        b0, b1 = t.args
        assert {r.buffer for r in t.reads} == {"amax_part", "amax_idx", "logits", names.LM_CAND}
        assert all(r.box[0] == (b0, b1) for r in t.reads) and [w.box for w in t.writes] == [((b0, b1),)]
        # every LM-head tile writes each of its rows' partials: a task waits on all the tiles
        assert len(t.waits) >= 1
    default = lower(shape_graph("tiny-llama", batch, 64), get_target("h200"))
    assert sum(t.kind == "argmax" for t in default.tasks) == batch


@pytest.mark.parametrize("n", [0, 9, -1])
def test_argmax_tasks_out_of_range_are_refused(n):
    with pytest.raises(ValueError, match=f"argmax_tasks {n} must be in 1..batch=8"):
        lower(shape_graph("tiny-llama", 8, 64), get_target("h200"), argmax_tasks=n)


def test_h_bf16_keeps_only_h_in_bf16():
    """lower(h_bf16=True): gate/up's output h (down's input) is the one bf16 activation; down's task
    reads half the bytes of it; batch 1 (the FMA path) is refused."""
    from mkc.taskgraph.lower import h_bf16_pays

    tg = lower(shape_graph("tiny-llama", 8, 64), get_target("h200"), h_bf16=True)
    dt = {b.name: b.dtype for b in tg.buffers if b.role == "act"}
    assert {n for n, d in dt.items() if d == "bf16"} == {names.h_act(l) for l in range(tg.dim("n_layers"))}
    down = next(t for t in tg.tasks if t.kind == "down")
    base = next(t for t in lower(shape_graph("tiny-llama", 8, 64), get_target("h200")).tasks if t.id == down.id)
    assert down.bytes < base.bytes
    with pytest.raises(ValueError, match="h_bf16 needs the tensor-core GEMV"):
        lower(shape_graph("tiny-llama", 1, 64), get_target("h200"), h_bf16=True)
    # attn_bf16: unsplit attention's output too (o-proj's input); with split attention, nothing
    tga = lower(shape_graph("llama-3.2-1b", 32, 64), get_target("h200"), h_bf16=True, attn_bf16=True)
    assert tga.dim("attn_split") == 1
    assert {b.name for b in tga.buffers if b.role == "act" and b.dtype == "bf16"} == \
        {f(l) for l in range(tga.dim("n_layers")) for f in (names.h_act, names.attn_act)}
    tgs = lower(shape_graph("tiny-llama", 2, 64), get_target("h200"), attn_bf16=True, attn_split=2)
    assert tgs.dim("attn_split") > 1 and all(b.dtype != "bf16" for b in tgs.buffers if b.role == "act")
    with pytest.raises(ValueError, match="attn_bf16 needs the tensor-core GEMV"):
        lower(shape_graph("tiny-llama", 1, 64), get_target("h200"), attn_bf16=True)
    # where mkc compile asks for it: counters, batch >= 2, a target with the bf16 tensor-core GEMV
    # (and only once it was measured to pay: H_BF16_PAYS)
    import importlib

    L = importlib.import_module("mkc.taskgraph.lower")  # (the package's `lower` is the function)
    for pays in (False, True):
        old, L.H_BF16_PAYS = L.H_BF16_PAYS, pays
        try:
            assert h_bf16_pays(8, "atomic", get_target("h200")) == pays
            assert not h_bf16_pays(8, "nan", get_target("h200")) and not h_bf16_pays(1, "atomic", get_target("h200"))
            assert not h_bf16_pays(8, "atomic", get_target("mi300x"))
            assert not h_bf16_pays(8, "atomic", get_target("a100"))  # (measured on the bulk-copy pipeline only)
        finally:
            L.H_BF16_PAYS = old


def test_xn_bf16_adds_the_normed_copies_and_halves_the_normed_stagings():
    """lower(xn_bf16=True): embed, o-proj and down also write their output's bf16 copy times the norm
    its reader applies and its sums of squares by 8 columns; qkv, gate/up and the LM head read those
    instead of the f32 stream and the norm's weights (fewer bytes); refused at batch 1."""
    from mkc.taskgraph.lower import xn_bf16_pays

    g = shape_graph("llama-3.2-1b", 32, 64)
    # (qkv_sum 1: with the copies batch 32 splits qkv into partial products by default)
    base, tg = lower(g, get_target("h200"), xn_bf16=False), lower(g, get_target("h200"), xn_bf16=True, qkv_sum=1)
    nl, H, G = tg.dim("n_layers"), tg.dim("H"), names.XN_GROUP
    acts = ["x0"] + [f"{a}.{l}" for l in range(nl) for a in ("xa", "xm")]
    bufs = {b.name: b for b in tg.buffers}
    for a in acts:
        assert bufs[names.xn_of(a)].dtype == "bf16" and bufs[names.xn_of(a)].shape == (32, H)
        assert bufs[names.xss_of(a)].dtype == "f32" and bufs[names.xss_of(a)].shape == (32, H // G)
        assert not bufs[names.xn_of(a)].polled
    assert len(tg.buffers) == len(base.buffers) + 2 * len(acts) and len(tg.tasks) == len(base.tasks)
    for t, b in zip(tg.tasks, base.tasks):
        written = {r.buffer for r in t.writes}
        if t.kind in ("embed", "oproj", "down"):
            out = "x0" if t.kind == "embed" else f"{'xa' if t.kind == 'oproj' else 'xm'}.{t.layer}"
            assert {names.xn_of(out), names.xss_of(out)} <= written
            assert t.bytes > b.bytes
        if t.kind in ("qkv", "gateup", "lmhead"):
            read = {r.buffer for r in t.reads}
            src = names.x_in(t.layer if t.kind == "qkv" else nl) if t.kind != "gateup" else f"xa.{t.layer}"
            assert {names.xn_of(src), names.xss_of(src)} <= read and src not in read
            assert t.bytes < b.bytes
    # the last down's copy is normed with the final norm (the LM head's), the others' with the next layer's
    down_last = [t for t in tg.tasks if t.kind == "down" and t.layer == nl - 1][0]
    assert names.FINAL_NORM in {r.buffer for r in down_last.reads}
    with pytest.raises(ValueError, match="xn_bf16 needs the tensor-core GEMV"):
        lower(shape_graph("tiny-llama", 1, 64), get_target("h200"), xn_bf16=True)
    assert xn_bf16_pays(8, "atomic", get_target("h200")) and not xn_bf16_pays(8, "nan", get_target("h200"))
    assert xn_bf16_pays(4, "atomic", get_target("h200")) and not xn_bf16_pays(2, "atomic", get_target("h200"))
    assert not xn_bf16_pays(1, "atomic", get_target("h200")) and not xn_bf16_pays(8, "atomic", get_target("a100"))
