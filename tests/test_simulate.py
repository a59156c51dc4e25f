"""The CPU simulator runs lowered task graphs in random valid orders and matches the reference executor."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mkc.capture import reference
from mkc.capture.canonical import build_graph, rope_inv_freq
from mkc.capture.graph import ModelInfo
from mkc.target import get_target
from mkc.taskgraph import lower, names, simulate
from mkc.taskgraph.simulate import EventNotReady, SimulationError

L = 24  # max_seq_len of the tiny models
STEPS = 3
SEEDS = 20


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matmuls gain nothing from threads, and on a loaded 2-core machine they lose a lot."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny(family, **kw) -> ModelInfo:
    base = dict(arch={"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                      "mistral": "MistralForCausalLM"}[family],
                family=family, hidden=64, intermediate=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                vocab=97, rms_eps=1e-6, tied_embeddings=False, qkv_bias=False, qk_norm=False)
    base.update(kw)
    return ModelInfo(**base)


def llama3_inv_freq(head_dim: int, theta=500000.0, factor=8.0, low=1.0, high=4.0, original=64) -> tuple[float, ...]:
    """Llama-3 style frequency scaling (transformers' ``_compute_llama3_parameters``), for a short context."""
    inv = torch.tensor(rope_inv_freq(head_dim, theta))
    wavelen = 2 * math.pi / inv
    low_wl, high_wl = original / low, original / high
    scaled = torch.where(wavelen > low_wl, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wl) & (wavelen <= low_wl)
    return tuple(float(x) for x in torch.where(medium, mid, scaled))


def toy(sms: int):
    return dataclasses.replace(get_target("h200"), name=f"toy{sms}", sms=sms)


# (name, ModelInfo, inv_freq, rope scaling, target): few workers make multi-head qkv tiles that
# straddle q/k/v and uneven row tiles; h200 gives qkv tiles of 2-pair head slices and 16-row tiles.
VARIANTS = {
    "llama": (tiny("llama"), rope_inv_freq(16, 10000.0), 1.0, get_target("h200")),
    "llama3_tied": (tiny("llama", tied_embeddings=True), llama3_inv_freq(16), 1.25, toy(5)),
    "qwen2_bias_tied": (tiny("qwen2", qkv_bias=True, tied_embeddings=True), rope_inv_freq(16, 1e6), 1.0, toy(3)),
    "qwen3_qknorm": (tiny("qwen3", qk_norm=True, hidden=80, intermediate=144), rope_inv_freq(16, 1e6), 1.0, toy(3)),
    # 20 workers: every head in two slices of 4 RoPE pairs, with biases
    "qwen2_bias_sliced": (tiny("qwen2", qkv_bias=True), rope_inv_freq(16, 1e6), 1.0, toy(20)),
    "mistral_mqa": (tiny("mistral", n_kv_heads=1), rope_inv_freq(16, 1e6), 1.0, toy(7)),
    # 13 workers: runs of 6 RoPE pairs over 8-pair heads, crossing head boundaries, q|k among them
    "qwen2_bias_cross": (tiny("qwen2", qkv_bias=True), rope_inv_freq(16, 1e6), 1.0, toy(13)),
    "qwen3_qknorm_cross": (tiny("qwen3", qk_norm=True), rope_inv_freq(16, 1e6), 1.0, toy(13)),
}


def weights_for(graph, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for t in graph.params():
        if len(t.shape) == 1 and "norm" in t.name:
            out[t.name] = 1.0 + 0.2 * torch.randn(t.shape, generator=g)
        else:
            scale = 1.0 if len(t.shape) > 1 else 0.1  # biases small
            out[t.name] = torch.randn(t.shape, generator=g) / math.sqrt(t.shape[-1]) * scale
    return out


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    scale = expected.abs().max().item() or 1.0
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale, msg=lambda m: f"{what}: {m}")


def setup(variant: str, batch: int):
    info, inv, scaling, target = VARIANTS[variant]
    graph = build_graph(info, batch, L, inv, rope_scaling=scaling)
    tg = lower(graph, target)
    weights = weights_for(graph, 1)
    g = torch.Generator().manual_seed(2)
    caches = {t.name: torch.randn(t.shape, generator=g) for t in graph.tensors if t.role == "cache"}
    return graph, tg, weights, caches


def reference_steps(graph, weights, caches, ids, pos0):
    caches = {k: v.clone() for k, v in caches.items()}
    steps = []
    for s in range(STEPS):
        env = reference.run_step(graph, weights, caches, ids, pos0 + s)
        steps.append((ids, env["logits"].clone(), env["next_ids"].clone(), {k: v.clone() for k, v in caches.items()}))
        ids = env["next_ids"]
    return steps


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_reference_in_random_orders(variant, batch):
    graph, tg, weights, caches0 = setup(variant, batch)
    ids = torch.arange(batch) * 7 % graph.model.vocab
    pos0 = 9
    expected = reference_steps(graph, weights, caches0, ids, pos0)
    for seed in range(SEEDS):
        caches = {k: v.clone() for k, v in caches0.items()}
        for s, (ids_s, logits, next_ids, ref_caches) in enumerate(expected):
            out = simulate.run_step(tg, weights, caches, ids_s, pos0 + s, seed=1000 * seed + s)
            close(out["logits"], logits, f"{variant} b{batch} seed {seed} step {s} logits")
            assert torch.equal(out["next_ids"], next_ids), (variant, batch, seed, s)
            assert torch.equal(out["next_ids"], torch.argmax(out["logits"], dim=-1))
            for name, ref in ref_caches.items():
                close(caches[name], ref, f"{variant} b{batch} seed {seed} step {s} {name}")


@pytest.mark.parametrize("sms", [1, 3])  # one LM-head tile of 97 tokens (cut at 64), or tiles of 33 and 32
def test_lmhead_candidates_are_each_tiles_largest_logits(sms):
    from mkc.taskgraph.kinds import args_of
    from mkc.taskgraph.lower import LM_CAND, LM_CAND_HEAD, LM_CAND_WORDS, LM_PREF

    info, inv, scaling, _ = VARIANTS["llama"]
    graph = build_graph(info, 3, L, inv, rope_scaling=scaling)
    tg = lower(graph, toy(sms))
    g = torch.Generator().manual_seed(2)
    caches = {t.name: torch.randn(t.shape, generator=g) for t in graph.tensors if t.role == "cache"}
    out = simulate.run_step(tg, weights_for(graph, 1), caches, torch.tensor([1, 5, 9]), 4)
    logits, cand = out["logits"].float(), out[names.LM_CAND]
    tiles = sorted((args_of(t).t, args_of(t).r0, args_of(t).r1) for t in tg.tasks if t.kind == "lmhead")
    assert any(r1 - r0 > LM_CAND for _, r0, r1 in tiles) == (sms == 1)
    for t, r0, r1 in tiles:
        blk = cand[:, LM_CAND_WORDS * t: LM_CAND_WORDS * (t + 1)]
        n = min(LM_CAND, r1 - r0)
        for b in range(3):
            pairs = blk[b, LM_CAND_HEAD:LM_CAND_HEAD + 2 * LM_CAND].view(LM_CAND, 2)
            idx = pairs[:, 1]
            assert int(blk[b, 0]) == n and (idx[:n] >= r0).all() and (idx[:n] < r1).all() and (idx[n:] == -1).all()
            kept = pairs[:n, 0].contiguous().view(torch.float32)
            assert torch.equal(kept, logits[b, idx[:n].long()])  # the bits are the logits at those indices
            assert torch.equal(kept, logits[b, r0:r1].topk(n).values)  # sorted, largest first

            def key(x):
                u = int(x.view(torch.int32)) & 0xFFFFFFFF
                return (~u & 0xFFFFFFFF) if u >> 31 else u | 1 << 31  # sampling.cuh order_key

            # the cuts: the order key of the smallest kept logit, and of the LM_PREF-th
            assert int(blk[b, 1]) & 0xFFFFFFFF == (key(kept[-1]) if r1 - r0 > LM_CAND else 0)
            assert int(blk[b, 2]) & 0xFFFFFFFF == (key(kept[LM_PREF - 1]) if r1 - r0 > LM_PREF else 0)


def test_random_orders_differ_and_respect_events():
    _, tg, _, _ = setup("qwen3_qknorm", 3)
    orders = {tuple(simulate.topo_order(tg, seed)) for seed in range(10)}
    assert len(orders) == 10
    assert simulate.topo_order(tg) == list(range(len(tg.tasks)))  # task ids are a topological order


def test_task_before_its_event_is_caught():
    graph, tg, weights, caches = setup("llama", 3)
    attn = next(t for t in tg.tasks if t.kind == "attn")
    order = [t.id for t in tg.tasks if t.kind == "embed"] + [attn.id]
    with pytest.raises(EventNotReady) as err:
        simulate.run_step(tg, weights, caches, torch.zeros(3, dtype=torch.long), 4, order=order)
    msg = str(err.value)
    assert f"task {attn.id} (attn" in msg and "qkv" in msg and "0 of" in msg


def test_missing_wait_is_caught_by_data_check():
    """Drop oproj's wait on the attention event: some random order reads attn before it is written."""
    graph, tg, weights, caches = setup("llama", 3)
    oproj = next(t for t in tg.tasks if t.kind == "oproj")
    attn_event = next(e for e in oproj.waits if "attn" in tg.events[e].name)
    cut = dataclasses.replace(oproj, waits=tuple(e for e in oproj.waits if e != attn_event))
    broken = dataclasses.replace(tg, tasks=tuple(cut if t.id == oproj.id else t for t in tg.tasks))
    broken.check()
    with pytest.raises(SimulationError, match="reads attn.0.*before it is written"):
        for seed in range(200):
            fresh = {k: v.clone() for k, v in caches.items()}
            simulate.run_step(broken, weights, fresh, torch.zeros(3, dtype=torch.long), 4, seed=seed)


def test_undeclared_read_is_caught():
    graph, tg, weights, caches = setup("llama", 1)
    down = next(t for t in tg.tasks if t.kind == "down")
    shrunk = tuple(dataclasses.replace(r, box=((0, 1), (0, 8))) if r.buffer == "h.0" else r for r in down.reads)
    broken = dataclasses.replace(tg, tasks=tuple(dataclasses.replace(t, reads=shrunk) if t.id == down.id else t
                                                 for t in tg.tasks))
    with pytest.raises(SimulationError, match="outside its declared regions"):
        simulate.run_step(broken, weights, caches, torch.zeros(1, dtype=torch.long), 4)


def test_realistic_tiling_matches_reference():
    """h200 tiling of a mid-size model (4-pair head slices per qkv tile, 16-row tiles, 132 LM-head tiles)."""
    info = tiny("llama", hidden=512, intermediate=1536, n_heads=8, n_kv_heads=2, head_dim=64, vocab=4224)
    graph = build_graph(info, 4, 32, rope_inv_freq(64, 500000.0))
    tg = lower(graph, get_target("h200"))
    assert tg.dim("n_lm_tiles") == 132
    weights = weights_for(graph, 3)
    caches = {t.name: torch.randn(t.shape, generator=torch.Generator().manual_seed(4))
              for t in graph.tensors if t.role == "cache"}
    ids = torch.tensor([3, 1000, 4000, 7])
    expected = reference_steps(graph, weights, caches, ids, 20)[:2]
    for s, (ids_s, logits, next_ids, ref_caches) in enumerate(expected):
        out = simulate.run_step(tg, weights, caches, ids_s, 20 + s, seed=s)
        close(out["logits"], logits, f"step {s} logits")
        assert torch.equal(out["next_ids"], next_ids)
        for name, ref in ref_caches.items():
            close(caches[name], ref, f"step {s} {name}")


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("batch,pos0", [(1, 0), (1, 300), (3, 4), (8, 9)])
@pytest.mark.parametrize("per", [0, 32, 3])
def test_split_attention_matches_reference(family, batch, pos0, per):
    """A long cache splits attention over the sequence (partial softmaxes combined by o-proj), also
    when fewer positions than splits leave some splits empty (pos0 0 and 4), and when the splits
    grow with the context (``attn_split_pos``: 32 positions per split, and 3, so the active count
    changes between the steps)."""
    info = tiny(family, qk_norm=family == "qwen3")
    graph = build_graph(info, batch, 512, rope_inv_freq(16, 1e6))
    tg = lower(graph, get_target("h200"), attn_split_pos=per)
    assert dict(tg.dims).get("attn_split_pos", 0) == per
    S = tg.dim("attn_split")
    assert S == 8 and sum(1 for t in tg.tasks if t.kind == "attn") == 2 * batch * 2 * S
    weights = weights_for(graph, 5)
    g = torch.Generator().manual_seed(6)
    caches0 = {t.name: torch.randn(t.shape, generator=g) for t in graph.tensors if t.role == "cache"}
    ids = torch.arange(batch) * 5 % info.vocab
    for seed in range(3):
        caches = {k: v.clone() for k, v in caches0.items()}
        for s, (ids_s, logits, next_ids, ref_caches) in enumerate(reference_steps(graph, weights, caches0, ids, pos0)):
            out = simulate.run_step(tg, weights, caches, ids_s, pos0 + s, seed=100 * seed + s)
            close(out["logits"], logits, f"{family} b{batch} pos {pos0 + s} logits")
            assert torch.equal(out["next_ids"], next_ids)
            for name, ref in ref_caches.items():
                close(caches[name], ref, f"{family} b{batch} pos {pos0 + s} {name}")


@pytest.mark.parametrize("family,split,sms", [("llama", 2, 132), ("qwen3", 4, 5), ("llama", 16, 3)])
def test_split_k_down_matches_reference(family, split, sms):
    """Down-proj split over chunks of h (``downk``): each chunk adds to the running sum of the ones
    before it, in random valid orders of the tasks (a chunk starts once its gate/up tiles are done)."""
    info = tiny(family, qk_norm=family == "qwen3")
    graph = build_graph(info, 1, L, rope_inv_freq(16, 1e6))
    tg = lower(graph, toy(sms), down_split=split)
    assert tg.dim("down_split") == split and not any(t.kind == "down" for t in tg.tasks)
    assert sum(t.kind == "downk" for t in tg.tasks) == info.n_layers * split * len({t.args[:2] for t in tg.tasks if t.kind == "downk"})
    weights = weights_for(graph, 7)
    g = torch.Generator().manual_seed(8)
    caches0 = {t.name: torch.randn(t.shape, generator=g) for t in graph.tensors if t.role == "cache"}
    ids = torch.tensor([11])
    for seed in range(5):
        caches = {k: v.clone() for k, v in caches0.items()}
        for s, (ids_s, logits, next_ids, ref_caches) in enumerate(reference_steps(graph, weights, caches0, ids, 5)):
            out = simulate.run_step(tg, weights, caches, ids_s, 5 + s, seed=10 * seed + s)
            close(out["logits"], logits, f"{family} split {split} seed {seed} step {s} logits")
            assert torch.equal(out["next_ids"], next_ids)


def test_bf16_h_rounds_only_h():
    """lower(h_bf16=True): the simulator stores h with the bits the device stores (bf16), so its
    down-proj sees rounded inputs; what comes before h is as in the f32 graph."""
    graph, tg, weights, caches0 = setup("llama", 8)
    tgb = lower(graph, VARIANTS["llama"][3], h_bf16=True)
    ids = torch.arange(8) * 7 % graph.model.vocab
    a = simulate.run_step(tg, weights, {k: v.clone() for k, v in caches0.items()}, ids, 9)
    b = simulate.run_step(tgb, weights, {k: v.clone() for k, v in caches0.items()}, ids, 9)
    h = names.h_act(0)
    assert torch.equal(b[h], b[h].to(torch.bfloat16).float())
    assert torch.equal(b[h], a[h].to(torch.bfloat16).float())
    assert torch.equal(a["x0"], b["x0"]) and torch.equal(a["q.0"], b["q.0"])
    torch.testing.assert_close(b["logits"], a["logits"], rtol=2e-2, atol=2e-2 * a["logits"].abs().max().item())


@pytest.mark.parametrize("variant,chunks,xn", [("llama", 2, True), ("qwen3_qknorm_cross", 4, True),
                                                ("qwen2_bias_sliced", 8, False)])
def test_down_partial_sums_match_the_unsplit_graph(variant, chunks, xn):
    """lower(down_sum=N): downp tasks write down's partial products over N chunks of h and dsum tasks
    add them to xa in chunk order (with xn_bf16, also xm's companions); in any valid order every
    step's xm is the unsplit graph's up to the sums' order, and so are the logits."""
    graph, _, weights, caches0 = setup(variant, 8)
    target = VARIANTS[variant][3]
    tg = lower(graph, target, h_bf16=True, xn_bf16=xn)
    tgs = lower(graph, target, h_bf16=True, xn_bf16=xn, down_sum=chunks)
    assert tgs.dim("down_sum") == chunks and not any(t.kind == "down" for t in tgs.tasks)
    n_rows = len({t.args[:2] for t in tgs.tasks if t.kind == "downp"})
    assert sum(t.kind == "downp" for t in tgs.tasks) == graph.model.n_layers * chunks * n_rows
    ids = torch.arange(8) * 3 % graph.model.vocab
    a = simulate.run_step(tg, weights, {k: v.clone() for k, v in caches0.items()}, ids, 6)
    for seed in range(3):
        b = simulate.run_step(tgs, weights, {k: v.clone() for k, v in caches0.items()}, ids, 6, seed=seed)
        for l in range(graph.model.n_layers):
            torch.testing.assert_close(b[f"xm.{l}"], a[f"xm.{l}"], rtol=1e-5, atol=1e-5)
            parts = b[names.down_parts(l)]
            torch.testing.assert_close(b[f"xm.{l}"], b[f"xa.{l}"] + sum(parts[c] for c in range(1, chunks)) + parts[0],
                                       rtol=1e-6, atol=1e-6)
        if xn:
            last = f"xm.{graph.model.n_layers - 1}"
            torch.testing.assert_close(b[names.xss_of(last)], b[last].pow(2).reshape(8, -1, names.XN_GROUP).sum(-1))
        torch.testing.assert_close(b["logits"], a["logits"], rtol=1e-4, atol=1e-4 * a["logits"].abs().max().item())


@pytest.mark.parametrize("variant,chunks", [("llama", 2), ("qwen3_qknorm_cross", 4), ("qwen2_bias_sliced", 8)])
def test_qkv_partial_sums_match_the_unsplit_graph(variant, chunks):
    """lower(qkv_sum=N): qkvp tasks write qkv's partial products over N chunks of the normed input
    and attention adds them (1/rms, bias, q/k norm, RoPE) and appends the key and value itself; in
    any valid order the caches at pos and every layer's attention output are the unsplit graph's up
    to the sums' order, and so are the logits, at two positions (the second over the first's cache)."""
    graph, _, weights, caches0 = setup(variant, 8)
    target = VARIANTS[variant][3]
    tg = lower(graph, target, xn_bf16=True, attn_split=1)
    tgs = lower(graph, target, xn_bf16=True, attn_split=1, qkv_sum=chunks)
    assert tgs.dim("qkv_sum") == chunks and not any(t.kind == "qkv" for t in tgs.tasks)
    assert {names.k_cache(0), names.v_cache(0)} <= {r.buffer for t in tgs.tasks if t.kind == "attn" for r in t.writes}
    ids = torch.arange(8) * 3 % graph.model.vocab
    ca, cb = ({k: v.clone() for k, v in caches0.items()} for _ in range(2))
    for pos in (5, 6):
        a = simulate.run_step(tg, weights, ca, ids, pos)
        for seed in range(2):
            cs = {k: v.clone() for k, v in cb.items()}
            b = simulate.run_step(tgs, weights, cs, ids, pos, seed=seed)
            for l in range(graph.model.n_layers):
                torch.testing.assert_close(b[f"attn.{l}"], a[f"attn.{l}"], rtol=1e-4, atol=1e-4)
                for c in (names.k_cache(l), names.v_cache(l)):
                    torch.testing.assert_close(cs[c][:, :, pos], ca[c][:, :, pos], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(b["logits"], a["logits"], rtol=1e-4, atol=1e-4 * a["logits"].abs().max().item())
        cb = cs


def test_qkv_sum_is_refused_where_it_cannot_run():
    """qkv_sum needs the normed bf16 copies, unsplit attention and chunks of whole 16-byte words."""
    graph, *_ = setup("llama", 8)
    target = VARIANTS["llama"][3]
    for kw in ({"xn_bf16": False, "attn_split": 1}, {"xn_bf16": True, "attn_split": 2}):
        with pytest.raises(ValueError, match="qkv_sum 2"):
            lower(graph, target, qkv_sum=2, **kw)
    with pytest.raises(ValueError, match="multiple of"):
        lower(graph, target, xn_bf16=True, attn_split=1, qkv_sum=graph.model.hidden // 4)


@pytest.mark.parametrize("variant", ["llama", "qwen2_bias_sliced", "qwen3_qknorm_cross"])
def test_normed_bf16_copies_match_the_f32_graph(variant):
    """lower(xn_bf16=True): in any valid order, the companions hold bf16(x * w_norm) and the sums of
    squares of each 8 columns of x, and the logits stay within a bf16 rounding of the f32 graph's."""
    graph, tg, weights, caches0 = setup(variant, 8)
    _, inv, scaling, target = VARIANTS[variant]
    tgx = lower(graph, target, xn_bf16=True)
    ids = torch.arange(8) * 5 % graph.model.vocab
    a = simulate.run_step(tg, weights, {k: v.clone() for k, v in caches0.items()}, ids, 7)
    for seed in range(3):
        b = simulate.run_step(tgx, weights, {k: v.clone() for k, v in caches0.items()}, ids, 7, seed=seed)
        x, w = b["xa.0"], weights[names.layer_weight(0, "post_norm")].float()
        assert torch.equal(b[names.xn_of("xa.0")], (x * w).to(torch.bfloat16).float())
        torch.testing.assert_close(b[names.xss_of("xa.0")], x.pow(2).reshape(8, -1, names.XN_GROUP).sum(-1))
        last = f"xm.{graph.model.n_layers - 1}"
        assert torch.equal(b[names.xn_of(last)], (b[last] * weights[names.FINAL_NORM].float()).to(torch.bfloat16).float())
        torch.testing.assert_close(b["logits"], a["logits"], rtol=2e-2, atol=2e-2 * a["logits"].abs().max().item())
