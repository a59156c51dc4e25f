"""The token end of the megakernel on a GPU: per-row prompts, stop tokens and the early exit,
sampling (statistics against the warped torch distribution, sets, seeds), the host-mapped token
stream, and cheap steps. Skipped where CUDA is absent; run on the GPU machine.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

import sampling_ref as ref
from gpu_fixtures import cuda_ok, hf_models, megakernel, record

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_ok(), reason="needs a CUDA GPU")]


def _walks(mk) -> bool:
    """Whether mk's filtered sampler walks the Gumbel order (top-p and/or min-p draw the exact path's
    token, no rejection rounds): CodegenOptions.pdraw_walk, on by default where a block has a
    thread per LM-head tile."""
    from mkc.codegen.render import pdraw_walks

    c = dict(mk.cfg.consts)
    return pdraw_walks(mk._options, c["NTILES"], c["NT"])


def _rows(vocab: int, lengths, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, n).tolist() for n in lengths]


@pytest.mark.parametrize("name,batch,sync", [("tiny-llama", 4, "atomic"), ("tiny-qwen3", 4, "nan"),
                                             ("tiny-qwen2", 2, "atomic")])
def test_per_row_prompts_equal_each_row_alone(name, batch, sync):
    """Rows of different prompt lengths in one launch give, row by row, what the row gives alone
    (at the same batch index, the other rows padding); equal lengths give generate()'s tokens."""
    hf = hf_models(name)
    mk = megakernel(hf, batch, sync)
    rows = _rows(hf.vocab, [3, 7, 1, 5][:batch])
    N = 12
    together = mk.decode(rows, N)
    assert [len(r) for r in together] == [N] * batch
    for b in range(batch):
        alone_rows = [[1]] * batch
        alone_rows[b] = rows[b]
        alone = mk.decode(alone_rows, [N if i == b else 0 for i in range(batch)])
        assert alone[b] == together[b], f"row {b}"
        assert all(alone[i] == [] for i in range(batch) if i != b)
    import torch

    same = _rows(hf.vocab, [6] * batch, seed=1)
    gen = mk.generate(torch.tensor(same), N)[:, 6:].tolist()
    assert mk.decode(same, N) == gen
    record(dict(test="per_row_prompts", model=name, batch=batch, sync=sync))


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_eos_stops_rows_and_the_launch_ends_early(sync):
    hf = hf_models("tiny-llama")
    mk = megakernel(hf, 4, sync)
    rows = _rows(hf.vocab, [4, 2, 6, 3], seed=2)
    free = mk.decode(rows, 40)  # no stop token: the budgets
    eos = free[0][5]  # row 0 stops at its 6th new token (or earlier, where it appeared before)
    first = free[0].index(eos)
    out = mk.decode(rows, [40, 3, 2, 4], eos_token_id=[eos])
    want = []
    for r, m in zip(free, [40, 3, 2, 4]):
        cut = r[:m]
        want.append(cut[: cut.index(eos) + 1] if eos in cut else cut)
    assert out == want and out[0] == free[0][: first + 1]
    # every row stopped after step k0 = the last row's stop step: the launch ran k0 + 2 steps, not 43
    plens, last = [4, 2, 6, 3], []
    for b, r in enumerate(out):
        last.append(plens[b] - 1 + len(r) - 1)
    k0 = max(last)
    nsteps = max(p + m - 1 for p, m in zip(plens, [40, 3, 2, 4]))
    assert mk.step == min(k0 + 2, nsteps), (mk.step, k0)
    # padding rows (rows 2 and 3 left out) are stopped from the start; the given rows are unchanged
    assert mk.decode(rows[:2], 5) == [r[:5] for r in free[:2]]
    t0 = time.perf_counter()
    mk.decode(rows, 100, eos_token_id=[eos, free[1][0], free[2][0], free[3][0]])
    t_early = time.perf_counter() - t0
    t0 = time.perf_counter()
    mk.decode(rows, 100)
    t_full = time.perf_counter() - t0
    assert t_early < t_full
    record(dict(test="eos_early_exit", sync=sync, s_early=t_early, s_full=t_full))


def _draws(mk, hf, smp_kw, launches, P=4):
    """Draws of the first new token over many seeds, every batch row the same prompt, and the
    logits they were drawn from (identical every launch: the kernel is deterministic)."""
    from mkc.sampling import Sampling

    prompt = _rows(hf.vocab, [P], seed=5)[0]
    counts, logits = None, None
    for s in range(launches):
        out = mk.decode([prompt] * mk.B, 1, sampling=Sampling(seed=1000 + s, **smp_kw))
        lg = mk.logits().float().cpu().numpy()
        if logits is None:
            logits = lg.copy()
            counts = np.zeros((mk.B, hf.vocab))
        assert np.array_equal(lg, logits)
        for b, r in enumerate(out):
            counts[b, r[0]] += 1
    return counts, logits


FILTERS = [dict(temperature=1.0), dict(temperature=0.05), dict(temperature=1.0, top_k=20),
           dict(temperature=0.05, top_p=0.9),
           dict(temperature=1.0, top_p=0.6), dict(temperature=0.8, min_p=0.1),
           dict(temperature=1.0, top_k=50, top_p=0.9, min_p=0.02)]


@pytest.mark.parametrize("smp", FILTERS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_sampling_follows_the_torch_distribution(smp):
    """Chi-square of 8 x 600 draws against HF's warped softmax of the very logits; never outside the set."""
    hf = hf_models("tiny-llama")
    mk = megakernel(hf, 8, "atomic")
    counts, logits = _draws(mk, hf, smp, 600)
    T_ = smp["temperature"]
    filt = {k: v for k, v in smp.items() if k != "temperature"}
    expected = np.zeros(hf.vocab)
    for b in range(mk.B):
        p = ref.torch_distribution(logits[b], T_, **filt)
        expected += p
        # a top-p / min-p boundary token may differ by expf/logf's last place: a slightly wider set is the bound
        wider = dict(filt)
        if "top_p" in filt:
            wider["top_p"] = min(1.0, filt["top_p"] + 1e-3)
        if "min_p" in filt:
            wider["min_p"] = filt["min_p"] * (1 - 1e-3)
        loose = ref.torch_distribution(logits[b], T_, **wider)
        outside = np.flatnonzero((counts[b] > 0) & (loose == 0))
        assert outside.size == 0, f"row {b} drew {outside[:5].tolist()} outside the set"
    total = counts.sum(0)
    assert ref.chi2_ok(total, expected / expected.sum()), "draws do not follow the distribution"
    record(dict(test="sampling_chi2", **smp, support=int((expected > 0).sum())))


@pytest.mark.parametrize("walk", [None, False])
def test_sampling_matches_the_numpy_reference_draw_for_draw(walk):
    """The kernel's draw is the reference's (Philox, Gumbel, thresholds), up to last-place expf/logf
    differences: at least 99 % of the draws agree exactly. ``walk`` False: the rejection rounds
    (CodegenOptions.pdraw_walk off, the MI300X's path) instead of the default walk."""
    import dataclasses

    from mkc.codegen.render import CodegenOptions
    from mkc.sampling import Sampling

    hf = hf_models("tiny-llama")
    mk = megakernel(hf, 4, "atomic", **({} if walk is None else dict(options=CodegenOptions(pdraw_walk=walk))))
    prompt = _rows(hf.vocab, [3], seed=7)[0]
    agree = total = 0
    for smp in (Sampling(temperature=0.9, seed=3), Sampling(temperature=1.0, top_k=10, top_p=0.8, seed=4),
                Sampling(temperature=1.0, top_p=0.6, seed=8), Sampling(temperature=1.2, top_p=0.7, min_p=0.05, seed=9)):
        for s in range(50):
            smp_s = dataclasses.replace(smp, seed=smp.seed + 17 * s)
            out = mk.decode([prompt] * 4, 1, sampling=smp_s)
            lg = mk.logits().float().cpu().numpy()
            for b in range(4):
                want = ref.sample_row(lg[b], smp_s.temperature, smp_s.seed, pos=len(prompt) - 1, b=b,
                                      top_k=smp_s.top_k, top_p=smp_s.top_p, min_p=smp_s.min_p, walk=_walks(mk))
                agree += int(out[b][0] == want)
                total += 1
    assert agree >= 0.99 * total, f"{agree} of {total}"


@pytest.mark.parametrize("walk", [None, False])
def test_candidate_path_on_a_full_vocabulary_matches_the_numpy_reference(walk):
    """llama-3.2-1b's LM-head tiles hold ~972 tokens each, so a top-k <= 64 takes the candidate path
    with cut tiles (tiny models' tiles hold 8: nothing is cut; with a top-p too, CodegenOptions.held_p's
    threshold over the top-k set where it is on), and without a top-k the walk (or,
    ``walk`` False, the rejection sampler) runs over 128,256 tokens (top-p 0.5 of a flat row: about
    half the draws are not the row's winner): the draws equal the reference's over the whole row,
    up to last-place expf/logf differences."""
    import dataclasses

    from mkc.codegen.render import CodegenOptions
    from mkc.sampling import Sampling

    hf = hf_models("llama-3.2-1b")
    mk = megakernel(hf, 1, "atomic", **({} if walk is None else dict(options=CodegenOptions(pdraw_walk=walk))))
    prompt = _rows(hf.vocab, [3], seed=11)[0]
    agree = total = later = 0
    for smp in (Sampling(temperature=1.0, top_k=50, seed=5), Sampling(temperature=0.7, top_k=64, top_p=0.9, seed=6),
                Sampling(temperature=1.3, top_k=1, seed=7), Sampling(temperature=0.8, top_p=0.5, seed=8),
                Sampling(temperature=0.8, min_p=0.3, seed=9), Sampling(temperature=0.6, top_k=50, top_p=0.5, min_p=0.05, seed=10)):
        for s in range(12):
            smp_s = dataclasses.replace(smp, seed=smp.seed + 31 * s)
            out = mk.decode([prompt], 1, sampling=smp_s)
            lg = mk.logits().float().cpu().numpy()
            want = ref.sample_row(lg[0], smp_s.temperature, smp_s.seed, pos=len(prompt) - 1, b=0,
                                  top_k=smp_s.top_k, top_p=smp_s.top_p, min_p=smp_s.min_p, walk=_walks(mk))
            agree += int(out[0][0] == want)
            total += 1
            if smp_s.top_p == 0.5:  # drawn by a later round or the walk: not the row's Gumbel-max winner
                z = (lg[0] / np.float32(smp_s.temperature)).astype(np.float32)
                winner = int(np.argmax(z + ref.gumbel(smp_s.seed, len(prompt) - 1, 0, np.arange(hf.vocab))))
                later += int(want != winner)
    assert agree >= total - 1, f"{agree} of {total}"
    assert later >= 2, f"only {later} of 12 top-p 0.5 draws were not the row's winner"


def test_walk_draws_the_exact_paths_token_on_a_full_vocabulary():
    """CodegenOptions.pdraw_walk: top-p, min-p and both over llama-3.2-1b's 128,256 tokens draw the
    exact path's token (Gumbel-max over the set), including the draws where the row's winner lies
    outside the set (top-p 0.5 on a flat row: about half), up to last-place expf/logf differences."""
    import dataclasses

    from mkc.codegen.render import CodegenOptions
    from mkc.sampling import Sampling

    hf = hf_models("llama-3.2-1b")
    mk = megakernel(hf, 1, "atomic", options=CodegenOptions(pdraw_walk=True))
    prompt = _rows(hf.vocab, [3], seed=11)[0]
    agree = total = outside = 0
    for smp in (Sampling(temperature=0.8, top_p=0.5, seed=8), Sampling(temperature=1.0, top_p=0.9, seed=3),
                Sampling(temperature=0.8, min_p=0.05, seed=5), Sampling(temperature=0.8, top_p=0.9, min_p=0.05, seed=2)):
        for s in range(12):
            smp_s = dataclasses.replace(smp, seed=smp.seed + 31 * s)
            out = mk.decode([prompt], 1, sampling=smp_s)
            lg = mk.logits().float().cpu().numpy()
            want = ref.sample_row(lg[0], smp_s.temperature, smp_s.seed, pos=len(prompt) - 1, b=0,
                                  top_p=smp_s.top_p, min_p=smp_s.min_p, walk=True)
            agree += int(out[0][0] == want)
            total += 1
            z = (lg[0] / np.float32(smp_s.temperature)).astype(np.float32)
            winner = int(np.argmax(z + ref.gumbel(smp_s.seed, len(prompt) - 1, 0, np.arange(hf.vocab))))
            outside += int(want != winner)
    assert agree >= total - 1, f"{agree} of {total}"
    assert outside >= 2, f"only {outside} of {total} draws had the row's winner outside the set"


@pytest.mark.parametrize("batch,hist", [(1, False), (2, False), (1, True), (2, True)])
def test_lmhead_tiles_candidates_are_their_largest_logits(batch, hist):
    """The candidate block every LM-head tile writes for a top-k step (sampling.cuh
    lm_candidates_block: a row at a time below batch 4, with block barriers) on llama-3.2-1b's
    ~972-token tiles: how many, the tile's 64 largest logits sorted (their bits and indices), the
    order keys of the 64th and the 16th. With CodegenOptions.tile_hist (the default) the count is
    its numpy twin's (16 to 64, sampling_ref.tile_hist_cut), those largest, word 1 the last one's
    key; without it (the radix select, also its fallback) always 64."""
    import torch

    from mkc.codegen.render import CodegenOptions
    from mkc.sampling import Sampling
    from mkc.taskgraph import names
    from mkc.taskgraph.kinds import args_of
    from mkc.taskgraph.lower import LM_CAND, LM_CAND_HEAD, LM_CAND_WORDS, LM_PREF

    hf = hf_models("llama-3.2-1b")
    mk = megakernel(hf, batch, "atomic", options=CodegenOptions(tile_hist=hist))
    mk.decode(_rows(hf.vocab, [3] * batch, seed=17), 1, sampling=Sampling(temperature=1.0, top_k=50, seed=3))
    lg = mk.logits().float().cpu()
    b = mk.plan[names.LM_CAND]
    cand = mk.driver.tensor(mk.buffers[names.LM_CAND], 0, b.shape).cpu()  # (one copy: written every sampling step)

    def key(x):  # sampling.cuh order_key of an fp32 value
        u = int(x.view(torch.int32)) & 0xFFFFFFFF
        return (~u & 0xFFFFFFFF) if u >> 31 else u | 1 << 31

    tiles = sorted((args_of(t).t, args_of(t).r0, args_of(t).r1) for t in mk.tg.tasks if t.kind == "lmhead")
    assert all(r1 - r0 > LM_CAND for _, r0, r1 in tiles)
    for t, r0, r1 in tiles:
        for row in range(batch):
            blk = cand[row, LM_CAND_WORDS * t: LM_CAND_WORDS * (t + 1)]
            pairs = blk[LM_CAND_HEAD:LM_CAND_HEAD + 2 * LM_CAND].view(LM_CAND, 2)
            m = ref.tile_hist_cut(lg[row, r0:r1].numpy(), LM_CAND, LM_PREF) if hist else None
            m = LM_CAND if m is None else m  # (the radix select where the cut falls back)
            kept = pairs[:m, 0].contiguous().view(torch.float32)
            want = lg[row, r0:r1].topk(m)
            assert int(blk[0]) == m, (t, row)
            assert torch.equal(kept, want.values), (t, row)  # sorted, largest first
            assert torch.equal(kept, lg[row, pairs[:m, 1].long()]), (t, row)  # the bits are the logits at those indices
            assert bool((pairs[m:, 1] == -1).all()), (t, row)  # unused slots
            assert int(blk[1]) & 0xFFFFFFFF == key(kept[-1]) and int(blk[2]) & 0xFFFFFFFF == key(kept[LM_PREF - 1]), (t, row)


def test_candidate_path_at_batch_8_with_a_warp_per_row():
    """From batch 4 each LM-head tile selects its candidates with a warp per row (sampling.cuh
    lm_candidates_warps): on llama-3.2-1b's cut tiles, every row's top-k draw equals the reference's."""
    import dataclasses

    from mkc.sampling import Sampling

    from mkc.codegen.render import CodegenOptions

    hf = hf_models("llama-3.2-1b")
    mk = megakernel(hf, 8, "atomic", options=CodegenOptions(lm_rows_at_once=True))
    rows = _rows(hf.vocab, [3] * 8, seed=13)
    agree = total = 0
    for smp in (Sampling(temperature=1.0, top_k=50, seed=5), Sampling(temperature=0.7, top_k=64, top_p=0.9, seed=6),
                Sampling(temperature=1.3, top_k=1, seed=7)):
        for s in range(4):
            smp_s = dataclasses.replace(smp, seed=smp.seed + 31 * s)
            out = mk.decode(rows, 1, sampling=smp_s)
            lg = mk.logits().float().cpu().numpy()
            for b in range(8):
                want = ref.sample_row(lg[b], smp_s.temperature, smp_s.seed, pos=2, b=b,
                                      top_k=smp_s.top_k, top_p=smp_s.top_p, min_p=smp_s.min_p, walk=_walks(mk))
                agree += int(out[b][0] == want)
                total += 1
    assert agree >= total - 2, f"{agree} of {total}"


def test_same_seed_same_tokens_different_seed_different_and_steps_equal_one_launch():
    import torch

    from mkc.sampling import Sampling

    hf = hf_models("tiny-qwen3")
    mk = megakernel(hf, 2, "atomic")
    rows = _rows(hf.vocab, [4, 4], seed=8)
    smp = Sampling(temperature=1.0, top_p=0.95, seed=42)
    a = mk.decode(rows, 32, sampling=smp)
    assert mk.decode(rows, 32, sampling=smp) == a
    assert mk.decode(rows, 32, sampling=Sampling(temperature=1.0, top_p=0.95, seed=43)) != a
    # one launch per step with the same seed: the noise is keyed by position, so the same tokens
    mk.reset()
    ids = torch.tensor(rows, device="cuda")
    for t in range(4):
        mk(ids[:, t], t, sampling=smp)
    steps = [mk.tokens_of_last_step().clone()]
    for k in range(1, 32):
        mk(steps[-1], 4 + k - 1, sampling=smp)
        steps.append(mk.tokens_of_last_step().clone())
    assert torch.stack(steps, 1).cpu().tolist() == a


def test_streaming_calls_on_step_while_the_kernel_runs():
    hf = hf_models("llama-3.2-1b")
    mk = megakernel(hf, 1, "atomic")
    calls, stamps = [], []

    def on_step(toks):
        calls.append([list(r) for r in toks])
        stamps.append(time.perf_counter())

    t0 = time.perf_counter()
    out = mk.decode(_rows(hf.vocab, [5]), 100, on_step=on_step)
    t_end = time.perf_counter()
    assert calls[-1] == out and len(out[0]) == 100
    assert len(calls) >= 3, len(calls)  # some while it ran, one at the end
    for a, b in zip(calls, calls[1:]):
        assert b[0][: len(a[0])] == a[0] and len(b[0]) >= len(a[0])  # each a prefix of the next
    first_partial = next(s for c, s in zip(calls, stamps) if 0 < len(c[0]) < 100)
    assert first_partial - t0 < 0.7 * (t_end - t0)  # tokens arrive before the launch ends
    record(dict(test="streaming", calls=len(calls), s_total=t_end - t0))


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_decode_from_start_pos_continues_the_cache(sync):
    """decode 10 tokens, then 10 more from start_pos (the cache kept, nan mode re-armed past it):
    the 20 tokens of one decode. The continuation feeds each row's 10th token at position P + 9."""
    hf = hf_models("tiny-llama")
    mk = megakernel(hf, 2, sync)
    P = 4
    same = _rows(hf.vocab, [P, P], seed=10)
    whole = mk.decode(same, 20)
    head = mk.decode(same, 10)
    tail = mk.decode([[r[-1]] for r in head], 10, start_pos=P + 10 - 1)
    assert [h + t for h, t in zip(head, tail)] == whole


def test_cheap_step_overhead():
    """mk(ids, pos) against the in-loop step: at most ~30 us more per step (lenient bound 60 us)."""
    import torch

    hf = hf_models("llama-3.2-1b")
    mk = megakernel(hf, 1, "atomic")
    P = 4
    ids = torch.tensor(_rows(hf.vocab, [P]), device="cuda")
    N = 120  # positions < MAX_SEQ (128)
    mk.decode(ids.tolist(), N)  # warm up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    mk.decode(ids.tolist(), N)
    in_loop = (time.perf_counter() - t0) / (P + N - 1)
    mk.reset()
    tok = ids[:, 0]
    for t in range(10):  # warm up
        mk(tok, t)
    mk.reset()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for t in range(N):
        mk(tok, t)
    host = (time.perf_counter() - t0) / N  # the host's cost of a call: no wait for the GPU
    mk.synchronize()
    per_call = (time.perf_counter() - t0) / N
    record(dict(test="cheap_step", us_in_loop=in_loop * 1e6, us_per_call=per_call * 1e6, us_host=host * 1e6))
    assert per_call - in_loop < 60e-6, f"{(per_call - in_loop) * 1e6:.1f} us over the in-loop step"


def test_step_ids_are_refused_on_the_host_and_faults_are_raised_at_the_next_sync():
    import torch

    from mkc.errors import MkcError

    hf = hf_models("tiny-llama")
    mk = megakernel(hf, 1, "atomic")
    with pytest.raises(MkcError, match=f"token id {hf.vocab} of row 0"):
        mk(torch.tensor([hf.vocab]), 0)
    out = mk(torch.tensor([3]), 0)
    assert out.is_cuda and out.data_ptr() == mk.logits().data_ptr()  # a view, no copy
    mk.synchronize()


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_a_step_captured_in_a_cuda_graph_replays_as_the_next_steps(sync):
    """Capture mk(tok, pos) once; each replay is the next step (step and position from the device
    clock), its logits bit-identical to ordinary steps; synchronize() brings the host's count along."""
    import torch

    hf = hf_models("tiny-llama")
    mk = megakernel(hf, 2, sync)
    g = torch.Generator(device="cuda").manual_seed(4)
    ids = torch.randint(0, hf.vocab, (2, 12), device="cuda", generator=g).to(torch.int32)
    ref = [mk(ids[:, t], t).clone() for t in range(12)]
    mk.reset()
    for t in range(2):  # ordinary steps first
        mk(ids[:, t], t)
    tok = ids[:, 2].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # nothing runs while capturing
        out = mk(tok, 0)
    assert mk.step == 2
    for t in range(2, 12):
        tok.copy_(ids[:, t])
        graph.replay()
        assert torch.equal(out, ref[t]), f"replay at step {t}"
    mk.synchronize()
    assert mk.step == 12
