"""The megakernel on a GPU: numerics against an fp32 oracle, the one-launch decode loop, failures.

Skipped where CUDA is absent (CI); run on the GPU machine by scripts/gpu_check.sh.
"""

from __future__ import annotations

import time

import pytest

from gpu_fixtures import cuda_ok, hf_models, megakernel, record, rel

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_ok(), reason="needs a CUDA GPU")]

STEPS = 64
TINY = ["tiny-llama", "tiny-qwen2", "tiny-qwen3"]
CASES = [(m, b, s) for m in TINY + ["llama-3.2-1b", "qwen3-0.6b"] for b in (1, 8) for s in ("atomic", "nan")]


@pytest.mark.parametrize("name,batch,sync", CASES)
def test_teacher_forced_logits(name, batch, sync):
    """64 decode steps: each step's logits within 2x HF-bf16's distance from the fp32 oracle, + 1e-3."""
    _teacher_forced(name, batch, sync)


@pytest.mark.parametrize("split,sync,per", [(4, "atomic", None), (4, "nan", None), (16, "atomic", None),
                                            (8, "atomic", 5), (8, "nan", 5), (8, "atomic", 0)])
def test_teacher_forced_logits_other_attention_splits(split, sync, per):
    """The same bound with 4, 8 or 16 attention splits per kv head (lower(attn_split=...); the tests'
    128-position cache gets 2 by default), the splits growing with the context every 5 positions
    (lower(attn_split_pos=5): 1 to 8 of them hold positions over the 64 steps, o-proj reads only
    those), or all of them at every position (0)."""
    kw = {"attn_split": split} | ({} if per is None else {"attn_split_pos": per})
    _teacher_forced("llama-3.2-1b", 1, sync, lower_kw=kw)


@pytest.mark.parametrize("split,sync", [(2, "atomic"), (4, "nan")])
def test_teacher_forced_logits_split_k_down(split, sync):
    """The same bound with down-proj split over 2 or 4 chunks of h (lower(down_split=...), downk tasks
    adding to running sums chunk by chunk)."""
    _teacher_forced("llama-3.2-1b", 1, sync, lower_kw={"down_split": split})


# down's partial products over chunks of h and their sums (lower(down_sum=...): downp and dsum tasks)
DSUM_CASES = [("llama-3.2-1b", 32, 4), ("llama-3.2-1b", 8, 2), ("tiny-qwen3", 16, 8)]


@pytest.mark.parametrize("name,batch,chunks", DSUM_CASES)
def test_teacher_forced_logits_down_partial_sums(name, batch, chunks):
    """The same bound with down-proj as partial products over chunks of h added by dsum tasks."""
    _teacher_forced(name, batch, "atomic", lower_kw={"down_sum": chunks})


# qkv's partial products over chunks of the normed input, added by attention (lower(qkv_sum=...):
# qkvp tasks; attention scales, biases, norms and rotates them and appends the key and value)
QSUM_CASES = [("llama-3.2-1b", 32, 4), ("llama-3.2-1b", 32, 2), ("llama-3.2-1b", 16, 2), ("llama-3.2-1b", 8, 2), ("tiny-qwen3", 16, 8), ("tiny-qwen2", 16, 2)]


@pytest.mark.parametrize("name,batch,chunks", QSUM_CASES)
def test_teacher_forced_logits_qkv_partial_sums(name, batch, chunks):
    """The same bound with qkv as partial products over chunks of its normed input added by attention."""
    _teacher_forced(name, batch, "atomic", lower_kw={"qkv_sum": chunks, "attn_split": 1})


# The tensor-core GEMV's other configurations than CASES' (whose batch 8 takes the weight pipeline
# by default): batch 32 through the pipeline (K-chunks of 1024 beside 3 pages), and the cp.async
# ring the kernel uses without it (CodegenOptions(pipe=False))
MMA_CASES = [("llama-3.2-1b", 32, "atomic", {}), ("llama-3.2-1b", 8, "atomic", {"pipe": False}),
             ("tiny-qwen3", 8, "nan", {"pipe": False}),
             # two tiles' accumulators held across the K-chunks (batch 32's qkv): another order of sums
             ("llama-3.2-1b", 32, "atomic", {"mma_hold_floats": 32})]


@pytest.mark.parametrize("name,batch,sync,opts", MMA_CASES)
def test_teacher_forced_logits_tensor_core_paths(name, batch, sync, opts):
    """The same bound on the tensor-core GEMV's paths CASES leaves out."""
    from mkc.codegen.render import CodegenOptions

    _teacher_forced(name, batch, sync, options=CodegenOptions(**opts))


TILE_SUM_CASES = [("llama-3.2-1b", 32, "atomic"), ("llama-3.2-1b", 8, "nan"), ("tiny-qwen2", 16, "atomic"),
                  ("llama-3.2-1b", 16, "nan")]
# layout options of the tensor-core path that must not change a bit: against the default, each
SAME_BITS_OPTIONS = [{"tile_sum_frag": False}, {"epi_tiles": True}, {"resid_early": True}, {"xss_wide": False},
                     {"out_pad": 0}]


@pytest.mark.parametrize("name,batch,sync", TILE_SUM_CASES)
def test_tile_sums_in_fragment_order_give_the_same_bits(name, batch, sync):
    """CodegenOptions.tile_sum_frag (the default) sums the warps' partials of a tensor-core tile from
    fragment-ordered stores: the same additions in the same order as the row-major layout, so every
    step's logits are the same bits as with tile_sum_frag=False. The same for epi_tiles (the
    epilogues' items in another order), resid_early (o-proj's and down's residual loaded once
    their input is staged) and xss_wide off (xn_bf16's sums of squares added a batch row at a time,
    not from loads all in flight: the same adds; with NaN sentinels there are no copies and it does
    nothing), and out_pad=0 (the output block's rows B floats apart, not B + 2 as by default where
    that leaves the K-chunk as it is: batch 16 and 32; at batch 8 both are B apart)."""
    import torch

    from mkc.codegen.render import CodegenOptions

    hf = hf_models(name)
    mks = [megakernel(hf, batch, sync, options=CodegenOptions(**o)) for o in [{}] + SAME_BITS_OPTIONS]
    assert mks[0].cfg.const("TILE_SUM_FRAG") == 1 and mks[1].cfg.const("TILE_SUM_FRAG") == 0
    assert mks[0].cfg.const("EPI_TILES") == 0 and mks[2].cfg.const("EPI_TILES") == 1
    assert mks[0].cfg.const("RESID_PF") == 0 and mks[3].cfg.const("RESID_PF") > 0
    assert mks[0].cfg.const("XSS_WIDE") == mks[0].cfg.const("XN_BF16") and mks[4].cfg.const("XSS_WIDE") == 0
    assert mks[5].cfg.const("OUT_LD") == batch and mks[5].cfg.const("RESID_RB") == mks[0].cfg.const("RESID_RB")
    g = torch.Generator(device="cuda").manual_seed(3)
    ids = torch.randint(0, hf.vocab, (batch, 12), device="cuda", generator=g)
    for t in range(ids.shape[1]):
        a, *others = (mk(ids[:, t], t).clone() for mk in mks)
        for o, b in zip(SAME_BITS_OPTIONS, others):
            assert torch.equal(a, b), f"step {t}, {o}: {(a != b).sum().item()} logits differ"


RESID_CASES = [("llama-3.2-1b", "atomic"), ("llama-3.2-1b", "nan"), ("qwen3-0.6b", "atomic")]


@pytest.mark.parametrize("name,sync", RESID_CASES)
def test_early_residual_gives_the_same_bits_at_batch_1(name, sync):
    """CodegenOptions.resid_early on the batch-1 FMA path (the weight pipeline; in nan mode its
    staging is the wait's polls, so the residual is loaded after them): every step's logits are the
    same bits as the default's (the same loads, only earlier). The tensor-core batches are in
    SAME_BITS_OPTIONS."""
    import torch

    from mkc.codegen.render import CodegenOptions

    hf = hf_models(name)
    mks = [megakernel(hf, 1, sync, options=CodegenOptions(**o)) for o in ({}, {"resid_early": True})]
    assert mks[0].cfg.const("RESID_PF") == 0 and mks[1].cfg.const("RESID_PF") == 1
    g = torch.Generator(device="cuda").manual_seed(5)
    ids = torch.randint(0, hf.vocab, (1, 12), device="cuda", generator=g)
    for t in range(ids.shape[1]):
        a, b = (mk(ids[:, t], t).clone() for mk in mks)
        assert torch.equal(a, b), f"step {t}: {(a != b).sum().item()} logits differ"


LDGSTS_CASES = [("llama-3.2-1b", 1, "atomic"), ("llama-3.2-1b", 1, "nan"), ("llama-3.2-1b", 8, "atomic")]
QUIET_OPTIONS = ({"pipe_quiet": 0}, {"pipe_quiet": 2})


def _two_kernels_same_bits(name, batch, sync, options, const, values, seed):
    """Two kernels of one model built with ``options`` (CodegenOptions fields each), whose constant
    ``const`` must be ``values``: every step of 12 random tokens gives both the same logits, bit for
    bit. Returns nothing; asserts."""
    import torch

    from mkc.codegen.render import CodegenOptions

    hf = hf_models(name)
    mks = [megakernel(hf, batch, sync, options=CodegenOptions(**o)) for o in options]
    assert [mk.cfg.const(const) for mk in mks] == list(values)
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = torch.randint(0, hf.vocab, (batch, 12), device="cuda", generator=g)
    for t in range(ids.shape[1]):
        a, b = (mk(ids[:, t], t).clone() for mk in mks)
        assert torch.equal(a, b), f"step {t}: {(a != b).sum().item()} logits differ"


@pytest.mark.parametrize("name,batch,sync", LDGSTS_CASES)
def test_pages_by_cp_async_give_the_same_bits(name, batch, sync):
    """CodegenOptions.pipe_ldgsts: the weight pipeline's pages copied by the producer warp's 16-byte
    cp.async instead of bulk copies (the FMA path at batch 1 and the tensor-core path at batch 8):
    the same bytes in the same pages, so every step's logits are the same bits as the default's."""
    _two_kernels_same_bits(name, batch, sync, ({}, {"pipe_ldgsts": True}), "PIPE_LDGSTS", (0, 1), seed=7)


@pytest.mark.parametrize("name,batch,sync", LDGSTS_CASES)
def test_quiet_window_gives_the_same_bits(name, batch, sync):
    """CodegenOptions.pipe_quiet: no page issued while the consumers close a task (the default at
    batch 8). The same bytes in the same pages, so every step's logits are the bits of the kernel
    that issues them at once."""
    _two_kernels_same_bits(name, batch, sync, QUIET_OPTIONS, "PIPE_TAIL", (0, 2), seed=11)


# lower(h_bf16=True, attn_bf16=True): gate/up stores h and unsplit attention its output as bf16, and
# down and o-proj stage them as they are; the tensor-core path rounds its inputs to bf16 when it
# stages them anyway, so the logits must be the same bits (tiny-qwen2 b4: split attention, where
# attn_bf16 does nothing, and the register path)
H_BF16_CASES = [("llama-3.2-1b", 8, {}), ("llama-3.2-1b", 32, {}), ("tiny-qwen2", 4, {"pipe": False})]


@pytest.mark.parametrize("name,batch,opts", H_BF16_CASES)
def test_bf16_h_gives_the_same_logits_bit_for_bit(name, batch, opts):
    import torch

    from mkc.codegen.render import CodegenOptions

    hf = hf_models(name)
    g = torch.Generator(device="cuda").manual_seed(3)
    ids = torch.randint(0, hf.vocab, (batch, 6), device="cuda", generator=g)
    logits = []
    # (down_sum 1 in all three: with bf16 h, batch 32 splits down into partial products by default,
    # another order of sums than f32 h's unsplit down)
    for kw in ({"h_bf16": False, "attn_bf16": False}, {"h_bf16": True, "attn_bf16": False}, {"h_bf16": True, "attn_bf16": True}):
        mk = megakernel(hf, batch, "atomic", lower_kw={**kw, "down_sum": 1}, options=CodegenOptions(**opts))
        assert mk.cfg.const("H_BF16") == int(kw.get("h_bf16", False))
        assert mk.cfg.const("ATTN_BF16") == int(kw.get("attn_bf16", False) and mk.tg.dim("attn_split") == 1)
        logits.append(torch.stack([mk(ids[:, t], t).clone() for t in range(ids.shape[1])]))
        del mk
    for k in (1, 2):
        assert torch.equal(logits[0], logits[k]), f"{(logits[0] != logits[k]).sum().item()} logits differ ({k})"


# lower(xn_bf16=True): the residual stream's producers (embed, o-proj, down) also write bf16(x * w_norm)
# and x's sums of squares by 8 columns; qkv, gate/up and the LM head stage that copy as it is and
# take 1/rms from the sums. The bf16 values are those the staging computed, but the sums of squares
# add in another order, so the bound, not the same bits (qwen3-0.6b: 8-row tiles; tiny-qwen2 b4: the
# cp.async ring and qkv biases)
XN_CASES = [("llama-3.2-1b", 32, {}), ("llama-3.2-1b", 8, {}), ("qwen3-0.6b", 8, {}), ("tiny-qwen2", 4, {"pipe": False})]


@pytest.mark.parametrize("name,batch,opts", XN_CASES)
def test_teacher_forced_logits_normed_bf16_inputs(name, batch, opts):
    from mkc.codegen.render import CodegenOptions

    _teacher_forced(name, batch, "atomic", lower_kw={"xn_bf16": True}, options=CodegenOptions(**opts))


def test_normed_bf16_inputs_give_the_same_bits_run_to_run():
    """lower(xn_bf16=True) at batch 32: its kernel's logits the same bits in two runs, and within a
    bf16 rounding's reach of the kernel without the copies."""
    import torch

    hf = hf_models("llama-3.2-1b")
    g = torch.Generator(device="cuda").manual_seed(5)
    ids = torch.randint(0, hf.vocab, (32, 6), device="cuda", generator=g)
    runs = []
    for kw in ({"xn_bf16": True}, {"xn_bf16": True}, {"xn_bf16": False}):
        mk = megakernel(hf, 32, "atomic", lower_kw=kw)
        assert mk.cfg.const("XN_BF16") == int(kw["xn_bf16"])
        runs.append(torch.stack([mk(ids[:, t], t).clone() for t in range(ids.shape[1])]))
        del mk
    assert torch.equal(runs[0], runs[1]), f"{(runs[0] != runs[1]).sum().item()} logits differ run to run"
    assert rel(runs[0], runs[2]) < 2e-2


def _teacher_forced(name, batch, sync, lower_kw=None, options=None):
    import torch

    hf = hf_models(name)
    mk = megakernel(hf, batch, sync, lower_kw=lower_kw, **({"options": options} if options is not None else {}))
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, hf.vocab, (batch, STEPS), device="cuda", generator=g)
    with torch.no_grad():
        ref = hf.m32(ids, use_cache=False).logits.float()
        h16 = hf.m16(ids, use_cache=False).logits.float()
    worst, worst_ratio, agree = 0.0, 0.0, 0
    t0 = time.perf_counter()
    for t in range(STEPS):
        out = mk(ids[:, t], t)
        d_mk, d_hf = rel(out, ref[:, t]), rel(h16[:, t], ref[:, t])
        assert d_mk <= 2 * d_hf + 1e-3, f"step {t}: mkc {d_mk:.3e} vs HF bf16 {d_hf:.3e}"
        worst = max(worst, d_mk)
        worst_ratio = max(worst_ratio, d_mk / (2 * d_hf + 1e-3))
        agree += int((out.argmax(-1) == ref[:, t].argmax(-1)).sum())
    record(dict(test="teacher_forced", model=name + (f" {lower_kw}" if lower_kw else "") + (f" {options}" if options else ""),
                batch=batch, sync=sync, worst_rel=worst,
                worst_ratio=worst_ratio, argmax_agree=agree / (STEPS * batch),
                s_per_step=(time.perf_counter() - t0) / STEPS))


@pytest.mark.parametrize("name,batch,sync", [("tiny-llama", 1, "atomic"), ("tiny-qwen3", 8, "nan"),
                                             ("tiny-qwen2", 8, "atomic"), ("llama-3.2-1b", 1, "nan"),
                                             ("llama-3.2-1b", 8, "atomic"), ("qwen3-0.6b", 1, "atomic")])
def test_generate_in_one_launch_matches_step_by_step(name, batch, sync):
    import torch

    hf = hf_models(name)
    mk = megakernel(hf, batch, sync)
    P, N = 8, 40
    g = torch.Generator(device="cuda").manual_seed(2)
    prompt = torch.randint(0, hf.vocab, (batch, P), device="cuda", generator=g)
    t0 = time.perf_counter()
    out = mk.generate(prompt, N)
    t_gen = time.perf_counter() - t0
    assert out.shape == (batch, P + N)
    assert torch.equal(out[:, :P], prompt.cpu())
    # the same decode, one launch per step, greedy on the returned logits
    mk.reset()
    for t in range(P):
        logits = mk(prompt[:, t], t)
    steps = [logits.argmax(-1)]
    for k in range(1, N):
        logits = mk(steps[-1], P + k - 1)
        steps.append(logits.argmax(-1))
    ref = torch.stack(steps, 1).cpu()
    assert torch.equal(out[:, P:], ref), f"first mismatch at {(out[:, P:] != ref).nonzero()[:3].tolist()}"
    # prefill in one launch gives bit-identical logits to the step-by-step prompt
    mk.reset()
    for t in range(P):
        last = mk(prompt[:, t], t).clone()  # a step returns a view that the next launch overwrites
    assert torch.equal(mk.prefill(prompt), last)
    record(dict(test="generate", model=name, batch=batch, sync=sync, tokens=N, s_total=t_gen))


def _queue_and_record(mk, pick):
    """(worker, index) of the first queued task for which pick(task) holds."""
    for w, q in enumerate(mk.sched.queues):
        for i, tid in enumerate(q):
            if pick(mk.tg.tasks[tid], i, len(q)):
                return w, i, tid
    raise AssertionError("no such task")


def test_unsatisfiable_wait_raises_kernel_error():
    import torch

    from mkc.codegen import tables as T
    from mkc.errors import KernelError

    hf = hf_models("tiny-llama")
    mk = megakernel(hf, 1, "atomic", spin_limit=1 << 16)
    # the argmax: nothing waits on it within a step, so its own wait is the one that times out
    w, i, tid = _queue_and_record(mk, lambda t, i, n: t.kind == "argmax")
    at = mk.tables.header("HDR_WAITS") + int(mk.tables.record(w, i)[T.RECORD.index("T_WAIT_OFF")]) * len(T.WAIT)
    ev = int(mk.tables.ints[at])
    mk.table[at + 1] += 1000  # threshold no count can reach
    t0 = time.perf_counter()
    with pytest.raises(KernelError) as exc:
        mk(torch.tensor([3]), 0)
        mk.synchronize()  # a step does not wait: its fault is raised at the next synchronisation
    msg = str(exc.value)
    assert f"worker {w}," in msg and f"task {tid} (argmax)" in msg and f"event {ev} " in msg, msg
    mk.table[at + 1] -= 1000
    mk.reset()
    mk(torch.tensor([3]), 0)  # usable again after reset
    record(dict(test="unsatisfiable_wait", sync="atomic", seconds=time.perf_counter() - t0, message=msg[:120]))


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_missing_producer_raises_kernel_error(sync):
    """Drop an LM-head tile from its worker's queue: the argmax can never run; no hang."""
    import torch

    from mkc.errors import KernelError

    hf = hf_models("tiny-qwen3")
    mk = megakernel(hf, 2, sync, spin_limit=1 << 16)
    w, i, tid = _queue_and_record(mk, lambda t, i, n: t.kind == "lmhead" and i == n - 1)
    q = mk.tables.header("HDR_QUEUE") + 2 * w
    mk.table[q + 1] -= 1
    with pytest.raises(KernelError, match=r"task \d+ \(argmax\)"):
        mk(torch.tensor([1, 2]), 0)
        mk.synchronize()
    record(dict(test="missing_producer", sync=sync, message="argmax wait timed out"))


def test_nan_weight_does_not_hang_nan_mode():
    """A genuine NaN in the activations is canonicalised, never mistaken for the sentinel."""
    import torch

    hf = hf_models("tiny-llama")
    w = dict(hf.weights)
    name = "model.layers.0.self_attn.q_proj.weight"
    w[name] = w[name].clone()
    w[name][0, :] = float("nan")
    from gpu_fixtures import graph_of, schedule_for
    from mkc.runtime import Megakernel
    from mkc.target import get_target
    from mkc.taskgraph import lower

    tg = lower(graph_of(hf, 1), get_target("h200"))
    mk = Megakernel(tg, schedule_for(tg, "nan"), w, spin_limit=1 << 18)
    t0 = time.perf_counter()
    for t in range(3):
        out = mk(torch.tensor([5 + t]), t)
    assert torch.isnan(out).any()
    toks = mk.generate(torch.tensor([[1, 2, 3]]), 4)  # argmax of NaN logits stays in range
    assert toks.shape == (1, 7) and int(toks.max()) < hf.vocab and int(toks.min()) >= 0
    record(dict(test="nan_weight", sync="nan", seconds=time.perf_counter() - t0))


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_pipeline_build_dir_end_to_end(tmp_path, sync):
    """mkc compile (capture -> lower -> schedule -> verify -> codegen) -> Megakernel.from_build_dir."""
    import torch

    from mkc.capture import hf_model, load_weights
    from mkc.pipeline import Options, StageLog, compile_model
    from mkc.runtime import Megakernel

    bdir = compile_model("tiny-qwen3", tmp_path / "build", Options(method="list", max_seq_len=64, sync=sync,
                                                                   batches=(2,)), StageLog(quiet=True))
    w = load_weights("tiny-qwen3", device="cuda")
    mk = Megakernel.from_build_dir(bdir / "b2", w)
    ref_model = hf_model("tiny-qwen3", dtype=torch.float32, device="cuda", weights=w)
    ids = torch.randint(0, 256, (2, 16), device="cuda", generator=torch.Generator(device="cuda").manual_seed(3))
    with torch.no_grad():
        ref = ref_model(ids, use_cache=False).logits.float()
    worst = max(rel(mk(ids[:, t], t), ref[:, t]) for t in range(16))
    assert worst < 2e-2, worst
    record(dict(test="pipeline", model="tiny-qwen3", batch=2, sync=sync, worst_rel=worst))


@pytest.mark.parametrize("name,batch,sync", [("tiny-llama", 1, "atomic"), ("tiny-qwen3", 8, "nan")])
def test_trace_stamps_every_task_and_changes_nothing(name, batch, sync, tmp_path):
    """CodegenOptions(trace=True): every task of each traced step has wait_start <= start <= end,
    a worker's stamps follow its queue, and logits and tokens equal the untraced kernel's."""
    import numpy as np
    import torch

    from mkc.codegen.render import CodegenOptions
    from mkc.runtime import TRACE_STEPS
    from mkc.trace import format_summary, write_trace

    hf = hf_models(name)
    mk = megakernel(hf, batch, sync, options=CodegenOptions(trace=True))
    plain = megakernel(hf, batch, sync)
    # one constant tells the two sources apart (the trace arguments are always there, null when off)
    assert mk.cfg.trace and not plain.cfg.trace
    assert plain.source.replace("TRACE = false", "TRACE = true") == mk.source
    P = 6
    g = torch.Generator(device="cuda").manual_seed(4)
    prompt = torch.randint(0, hf.vocab, (batch, P), device="cuda", generator=g)
    assert torch.equal(mk.prefill(prompt), plain.prefill(prompt))
    ws, st, en = mk.trace()
    n = len(mk.tg.tasks)
    assert ws.shape == st.shape == en.shape == (P, n)
    assert np.isfinite(ws).all() and np.isfinite(st).all() and np.isfinite(en).all(), "a task has no stamps"
    assert float(ws.min()) == 0.0  # relative to the launch's first stamp
    assert (ws <= st).all() and (st <= en).all()
    for q in mk.sched.queues:  # one thread stamps a worker's tasks in queue order, step after step
        if q:
            order = np.stack([ws[:, q], en[:, q]], -1).reshape(-1)
            assert (np.diff(order) >= 0).all()
    # a launch longer than the traced steps: the first TRACE_STEPS are stamped, tokens unchanged
    N = TRACE_STEPS + 4
    out = mk.generate(prompt, N)
    assert torch.equal(out, plain.generate(prompt, N))
    ws, st, en = mk.trace()
    assert ws.shape == (TRACE_STEPS, n) and np.isfinite(en).all() and (ws <= st).all() and (st <= en).all()
    summary = write_trace(mk.tg, mk.sched, (ws, st, en), tmp_path / "trace.json")
    assert summary["missing_tasks"] == 0 and (tmp_path / "trace.png").exists()
    print(format_summary(summary))
    record(dict(test="trace", model=name, batch=batch, sync=sync, step_us=summary["step_us"][-1]))
