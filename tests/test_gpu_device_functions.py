"""Device functions on their own: small wrapper kernels around one header's functions, against torch.

Each wrapper is a self-contained translation unit: the rendered prologue of a real configuration
(``render.config_header``: dialect, constants, enums), the header under test and its includes
(inlined by ``mkc.codegen.source``), and an ``extern "C" __global__`` wrapper that calls the device
function the way the megakernel does. The GPU tests (marked ``gpu``, skipped without CUDA) load the
cubin with ``cuda.core`` and compare with torch; ``test_wrappers_compile`` builds every wrapper with
nvcc on a CPU machine, so they are known to compile before a GPU sees them.
"""

from __future__ import annotations

import re
import shutil
from functools import lru_cache

import numpy as np
import pytest

from codegen_fixtures import rr_schedule, taskgraph
from gpu_fixtures import cuda_ok
from mkc.codegen import source as S
from mkc.codegen import tables as T
from mkc.codegen.render import CodegenOptions, config_header, kernel_config
from mkc.target import get_target



def on_gpu(test):
    """A GPU test: marked gpu, skipped without CUDA (the compile test of this module runs anywhere)."""
    return pytest.mark.gpu(pytest.mark.skipif(not cuda_ok(), reason="needs a CUDA GPU")(test))


# configurations the wrappers are compiled for: (model, batch, target, sync, options)
CONFIGS = {
    # FMA GEMV, attention split over the sequence; without the weight pipeline (batch 1 and 2-32 by
    # default), whose producer warp these single-function wrappers do not run (its consumers would
    # wait for pages forever): the tensor-core configurations test the ring and register paths
    "b1": ("llama-3.2-1b", 1, "h200", "atomic", {"pipe": False}),
    "b2-nan": ("llama-3.2-1b", 2, "h200", "nan", {"pipe": False}),  # polled 3-D regions (batch x split x columns), caches
    "fma-b4": ("llama-3.2-1b", 4, "h200", "atomic", {"mma": False}),
    "mma-ring-b8": ("llama-3.2-1b", 8, "h200", "atomic", {"pipe": False}),
    "mma-reg-b8": ("llama-3.2-1b", 8, "h200", "atomic", {"ring_stages": 0, "pipe": False}),
    "mma-b3": ("llama-3.2-1b", 3, "h200", "atomic", {"pipe": False}),  # batch columns past B in the MMA tile
    "qkn-b1": ("qwen3-0.6b", 1, "h200", "atomic", {"pipe": False}),  # q/k norm in attention, head_dim 128
    "qkn-tiny-nan": ("tiny-qwen3", 1, "h200", "nan", {"pipe": False}),  # q/k norm, head_dim 32 (rotary pairs across lanes)
    "qkn-late": ("qwen3-0.6b", 1, "h200", "atomic", {"attn_early": False, "pipe": False}),  # attention loads after its wait
}


@lru_cache(maxsize=None)
def setup(key: str):
    model, batch, target, sync, opts = CONFIGS[key]
    t = get_target(target)
    tg = taskgraph(model, batch, 512, t)
    sched = rr_schedule(tg, t, sync)
    cfg = kernel_config(tg, sched, t, CodegenOptions(**opts))
    # a wrapper runs no producer warp: a configuration with the pipeline needs pipe=False (else its barriers
    # count 256 of the 288 threads launched and the wrapper hangs)
    assert cfg.threads == cfg.consumer_threads, f"{key}: give it pipe=False"
    return tg, sched, cfg, t


def unit(key: str, headers: tuple[str, ...], body: str) -> str:
    """Prologue of configuration ``key`` + ``headers`` (with their includes) + ``body``, as one source."""
    _, _, cfg, t = setup(key)
    prologue = config_header(cfg, t).removeprefix("#pragma once\n")
    return S.inline(prologue + "".join(f'#include "{h}"\n' for h in headers) + "\nusing namespace mk;\n" + body)


# ---- the wrappers ---------------------------------------------------------------------------------
ARGMAX = """
// rows of n values, one warp per row, reduced as LmHeadKind's epilogue reduces a tile
extern "C" __global__ void mk_test_argmax(const float* v, int n, int rows, float* out_v, int* out_i) {
  for (int r = warp_id(); r < rows; r += NW) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int j = lane_id(); j < n; j += WARP) argmax_merge(bv, bi, v[(size_t)r * n + j], j);
    warp_argmax(bv, bi);
    if (lane_id() == 0) { out_v[r] = bv; out_i[r] = bi; }
  }
}
"""

BF16 = """
extern "C" __global__ void mk_test_bf16(const float* x, int n, unsigned short* one, unsigned* pairs, unsigned* mma_pairs) {
  for (int i = mk_tid(); i < n; i += NT) one[i] = mk_f32_to_bf16(x[i]);
  for (int i = mk_tid(); i < n / 2; i += NT) {
    put_bf16x2(pairs + i, x[2 * i], x[2 * i + 1]);
#if MKC_HAS_MMA_BF16
    mma_pairs[i] = mk_pack_bf16x2(x[2 * i], x[2 * i + 1]);
#endif
  }
}
"""

REGION = """
extern "C" __global__ void mk_test_region(const int* rg, const unsigned long long* ptrs, int pos, int par,
                                          unsigned* n_out, unsigned long long* addr, unsigned cap) {
  Ctx c{};
  c.ptrs = ptrs;
  c.pos = pos;
  const unsigned n = region_words(rg);
  if (mk_tid() == 0) *n_out = n;
  for (unsigned i = mk_tid(); i < n && i < cap; i += NT) addr[i] = (unsigned long long)region_word(c, rg, par, i);
}
"""

ROWS = """
struct TestRows {  // weight rows [nr][H], as a GEMV kind's row()
  const unsigned short* w;
  __device__ const unsigned short* row(int j) const { return w + (size_t)j * H; }
};
"""

GEMV_FMA = ROWS + """
// y[j][b] = sum_k x[b][k] W[j][k] over the first chunk, as gemv_task_fma runs it
extern "C" __global__ void mk_test_gemv_fma(const unsigned short* w, const float* x, int nr, int have_pre, float* y) {
  constexpr int KCH = H < KC ? H : KC;
  const TestRows rows{w};
  float* xs = smem_f(OFF_XS);
  uint4 pre[G][U];
  gemv_preload(rows, nr, KCH, pre);
  stage_x<H, KCH, false, false>(x, 0, KCH, nullptr, xs, smem_f(OFF_SSP), false);
  mk_barrier();
  gemv_chunk<KCH>(rows, nr, 0, KCH, xs, smem_f(OFF_OUT), smem_f(OFF_PART), false, pre, have_pre != 0);
  for (int i = mk_tid(); i < nr * B; i += NT) y[i] = smem_f(OFF_OUT)[i / B * OUT_LD + i % B];  // (rows OUT_LD apart)
}
"""

GEMV_MMA = ROWS + """
// the same on tensor cores: x staged as bf16, weights through the ring (RING > 0) or registers
extern "C" __global__ void mk_test_gemv_mma(const unsigned short* w, const float* x, int nr, int kch, float* y) {
  const TestRows rows{w};
  unsigned short* xs = reinterpret_cast<unsigned short*>(mk_smem + OFF_XS);
  [[maybe_unused]] uint4 pre[2][U];
  if constexpr (RING > 0) ring_prologue(rows, nr, 0, kch);
  else mma_preload(rows, nr, 0, kch, pre);
  const Ctx c{};
  const Task t{};
  stage_x_bf16<H, false, false>(c, t, -1, x, 0, kch, nullptr, xs, smem_f(OFF_SSP), false);
  mk_barrier();
  if constexpr (RING > 0) mma_chunk_ring(rows, nr, 0, kch, xs, smem_f(OFF_OUT), smem_f(OFF_PART), false);
  else mma_chunk(rows, nr, 0, kch, xs, smem_f(OFF_OUT), smem_f(OFF_PART), false, pre);
  for (int i = mk_tid(); i < nr * B; i += NT) y[i] = smem_f(OFF_OUT)[i / B * OUT_LD + i % B];  // (rows OUT_LD apart)
}
"""

ATTN = """
// one attention task as run_task runs it, with no events to wait on (n_wait 0, not its worker's first)
extern "C" __global__ void mk_test_attn(const unsigned long long* ptrs, int b, int g, int split, int pos, float scale,
                                        float eps, float rope_scaling) {
  Ctx c{};
  c.ptrs = ptrs;
  c.pos = pos;
  c.attn_scale = scale;
  c.eps = eps;
  c.rope_scaling = rope_scaling;
  Task t{};
  t.a0 = b; t.a1 = g; t.a2 = split;
  int* s_abort = smem_i(OFF_FLAG);
  if (mk_tid() == 0) *s_abort = 0;
  mk_barrier();
  task_attn(c, t, s_abort);
}
"""

# name: (configuration, headers, wrapper)
WRAPPERS = {
    "argmax": ("b1", ("mkc/common.cuh",), ARGMAX),
    "bf16": ("mma-ring-b8", ("mkc/common.cuh",), BF16),
    "region": ("b2-nan", ("mkc/sync.cuh",), REGION),
    "gemv-fma": ("fma-b4", ("mkc/gemv_fma.cuh",), GEMV_FMA),
    "gemv-fma-b1": ("b1", ("mkc/gemv_fma.cuh",), GEMV_FMA),
    "gemv-mma-ring": ("mma-ring-b8", ("mkc/gemv_mma.cuh",), GEMV_MMA),
    "gemv-mma-reg": ("mma-reg-b8", ("mkc/gemv_mma.cuh",), GEMV_MMA),
    "gemv-mma-b3": ("mma-b3", ("mkc/gemv_mma.cuh",), GEMV_MMA),
    "attn-split": ("b1", ("mkc/attention.cuh",), ATTN),
    "attn-b4": ("fma-b4", ("mkc/attention.cuh",), ATTN),
    "attn-b2-nan": ("b2-nan", ("mkc/attention.cuh",), ATTN),
    "attn-qkn": ("qkn-b1", ("mkc/attention.cuh",), ATTN),
    "attn-qkn-tiny": ("qkn-tiny-nan", ("mkc/attention.cuh",), ATTN),
    "attn-qkn-late": ("qkn-late", ("mkc/attention.cuh",), ATTN),
}


def wrapper_source(name: str) -> str:
    key, headers, body = WRAPPERS[name]
    return unit(key, headers, body)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", list(WRAPPERS))
def test_wrappers_compile(name, tmp_path):
    from mkc.targets.nvidia.compiler import build_cubin

    cfg = setup(WRAPPERS[name][0])[2]
    res = build_cubin(wrapper_source(name), cfg.arch, out_dir=tmp_path, verbose=True, name=name)
    assert res.cubin.stat().st_size > 0 and res.warnings == [], res.log
    assert all(int(x) == 0 for x in re.findall(r"(\d+) bytes spill stores", res.log)), res.log


# ---- on the GPU -----------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _driver():
    from mkc.targets.nvidia.driver import CudaDriver

    return CudaDriver()


@lru_cache(maxsize=None)
def _module(name: str, kernel: str):
    from mkc.targets.nvidia.compiler import build_cubin

    cfg = setup(WRAPPERS[name][0])[2]
    res = build_cubin(wrapper_source(name), cfg.arch, name=name)
    return _driver().load(res.cubin.read_bytes(), kernel, cfg.smem_bytes)


def _launch(name: str, kernel: str, args: tuple, grid: int = 1) -> None:
    """Launch a wrapper through the NVIDIA driver: numpy int32 arguments by value, ints as pointers."""
    cfg = setup(WRAPPERS[name][0])[2]
    def typed(a):
        if isinstance(a, np.floating):
            return ("f32", float(a))
        if isinstance(a, np.unsignedinteger):
            return ("u32", int(a))
        return ("i32", int(a)) if isinstance(a, np.integer) else ("ptr", int(a))

    typed = [typed(a) for a in args]
    _driver().launch(_module(name, kernel), grid, cfg.threads, typed)
    _driver().synchronize()


def _i32(x):
    return np.int32(x)


def _argmax_model(row: np.ndarray) -> int:
    """torch.argmax on a row: NaN is the largest value, and the first of equal maxima wins."""
    nan = np.flatnonzero(np.isnan(row))
    return int(nan[0]) if nan.size else int(np.flatnonzero(row == row.max())[0])


@on_gpu
@pytest.mark.parametrize("n", [1, 31, 32, 1000, 4099])
def test_warp_argmax_matches_torch(n):
    import torch

    g = torch.Generator().manual_seed(n)
    rows = torch.randn(12, n, generator=g)
    rows[1] = 3.0  # all tied: index 0
    rows[2, n // 2:] = rows[2].max() + 1  # ties in the upper half: its first
    rows[3, n - 1] = float("nan")  # NaN is the maximum
    rows[4, ::2] = float("nan")  # several NaN: the first
    rows[5] = float("-inf")  # nothing above -inf: index 0
    rows[6, n // 3] = float("inf")
    rows[7, -(n // 4 or 1):] = float("inf")  # tied +inf
    rows[8] = torch.round(rows[8])  # many ties
    v = rows.cuda()
    out_v = torch.empty(12, device="cuda")
    out_i = torch.empty(12, dtype=torch.int32, device="cuda")
    _launch("argmax", "mk_test_argmax", (v.data_ptr(), _i32(n), _i32(12), out_v.data_ptr(), out_i.data_ptr()))
    want = [_argmax_model(r) for r in rows.numpy()]
    assert out_i.cpu().tolist() == want
    nonan = ~torch.isnan(rows).any(1)
    assert torch.equal(torch.argmax(rows[nonan], 1).int(), out_i.cpu()[nonan])  # torch agrees where defined
    got_v = out_v.cpu()
    for r in range(12):
        ref = rows[r, want[r]]
        assert (torch.isnan(ref) and torch.isnan(got_v[r])) or got_v[r] == ref


@on_gpu
def test_bf16_packing_rounds_like_torch():
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1 << 16, generator=g) * 3
    bits = torch.randint(0, 2**31 - 1, (4096,), generator=g, dtype=torch.int64).to(torch.int32)
    x[:4096] = bits.view(torch.float32)  # every exponent, halfway cases among them
    x[4096:4200] = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8,
                                 3.3895e38, -3.3895e38, 1e-40] * 10 + [float("nan")] * 4)
    xd = x.cuda()
    n = x.numel()
    one = torch.empty(n, dtype=torch.int16, device="cuda")
    pairs = torch.empty(n // 2, dtype=torch.int32, device="cuda")
    mma = torch.zeros(n // 2, dtype=torch.int32, device="cuda")
    _launch("bf16", "mk_test_bf16", (xd.data_ptr(), _i32(n), one.data_ptr(), pairs.data_ptr(), mma.data_ptr()))
    want = x.to(torch.bfloat16).view(torch.int16)
    got = one.cpu()
    nan = torch.isnan(x)
    assert torch.equal(got[~nan], want[~nan])
    gb = got.view(torch.bfloat16)
    assert torch.isnan(gb[nan].float()).all()  # NaN stays NaN (quiet: bit 6 of the bf16 set)
    assert ((got[nan].int() & 0x40) != 0).all()
    for packed in (pairs.cpu(), mma.cpu()):
        lo = (packed & 0xFFFF).to(torch.int32)
        hi = ((packed >> 16) & 0xFFFF).to(torch.int32)
        w16 = want.int() & 0xFFFF
        ok_lo = ~nan[0::2]
        ok_hi = ~nan[1::2]
        assert torch.equal(lo[ok_lo], w16[0::2][ok_lo]) and torch.equal(hi[ok_hi], w16[1::2][ok_hi])
        assert ((lo[~ok_lo] & 0x7F80) == 0x7F80).all() and ((lo[~ok_lo] & 0x7F) != 0).all()


def _regions(tg, sched):
    """Every region descriptor the tables of (tg, sched) hold for waits and re-arms, deduplicated."""
    tab = T.build_tables(tg, sched)
    ints = tab.ints
    at_w, at_r = tab.header("HDR_WAITS"), tab.header("HDR_REGIONS")
    idx = set()
    for wk in range(sched.num_workers):
        q = tab.header("HDR_QUEUE") + 2 * wk
        first, n = int(ints[q]), int(ints[q + 1])
        for i in range(n):
            rec = ints[tab.header("HDR_RECORDS") + (first + i) * T.T_SIZE:][: T.T_SIZE]
            f = dict(zip(T.RECORD, rec))
            for w in range(f["T_N_WAIT"]):
                wt = ints[at_w + (f["T_WAIT_OFF"] + w) * len(T.WAIT):][: len(T.WAIT)]
                idx.update(range(wt[2], wt[2] + wt[3]))
            idx.update(range(f["T_REARM_OFF"], f["T_REARM_OFF"] + f["T_N_REARM"]))
    return [ints[at_r + k * len(T.REGION):][: len(T.REGION)].copy() for k in sorted(idx)]


@on_gpu
def test_region_words_decode_as_the_model():
    import torch
    from kernel_model import region_words

    tg, sched, cfg, _ = setup("b2-nan")
    descs = _regions(tg, sched)
    assert descs and any(d[1] & T.RF_CACHE for d in descs) and any(d[6] > 1 for d in descs)  # cache and 3-D ones
    rng = np.random.default_rng(0)
    nslot = T.n_slots(tg.dim("n_layers"))
    ptrs = (np.arange(2 * nslot, dtype=np.uint64) + 1) << np.uint64(24)  # distinct, 16 MiB apart
    ptrs_d = torch.from_numpy(ptrs.view(np.int64)).cuda()
    cap = 1 << 16
    addr = torch.zeros(cap, dtype=torch.int64, device="cuda")
    n_out = torch.zeros(1, dtype=torch.int32, device="cuda")
    for d in [descs[i] for i in rng.choice(len(descs), min(64, len(descs)), replace=False)]:
        for pos, par in ((0, 0), (37, 1), (cfg.const("L") - 1, 0)):
            rg = torch.from_numpy(d.astype(np.int32)).cuda()
            _launch("region", "mk_test_region", (rg.data_ptr(), ptrs_d.data_ptr(), _i32(pos), _i32(par), n_out.data_ptr(),
                                                 addr.data_ptr(), np.uint32(cap)))
            words = region_words(d, pos, tg.dim("hd"))
            assert int(n_out.item()) == words.size
            slot, flags = int(d[0]), int(d[1])
            base = int(ptrs[2 * slot + (par if flags & T.RF_PARITY else 0)])
            m = min(words.size, cap)
            assert np.array_equal(addr[:m].cpu().numpy().view(np.uint64), base + 4 * words[:m].astype(np.uint64))


def _bf16(t):
    import torch

    return t.to(torch.bfloat16)


@on_gpu
@pytest.mark.parametrize("name,have_pre", [("gemv-fma", 1), ("gemv-fma", 0), ("gemv-fma-b1", 1)])
def test_gemv_fma_chunk_matches_torch(name, have_pre):
    import torch

    cfg = setup(WRAPPERS[name][0])[2]
    B, H, KC = cfg.B, cfg.const("H"), cfg.const("KC")
    nr = 43  # not a multiple of G: the last row group is partial
    g = torch.Generator().manual_seed(1)
    w = _bf16(torch.randn(nr, H, generator=g) * 0.05)
    x = torch.randn(B, H, generator=g)
    y = torch.empty(nr * B, device="cuda")
    wd, xd = w.cuda().view(torch.int16), x.cuda()  # held: a temporary's memory goes back to the allocator
    _launch(name, "mk_test_gemv_fma", (wd.data_ptr(), xd.data_ptr(), _i32(nr), _i32(have_pre), y.data_ptr()))
    kch = min(H, KC)
    want = (x[:, :kch].double() @ w[:, :kch].double().T).T.float()  # [nr][B]
    torch.testing.assert_close(y.cpu().view(nr, B), want, rtol=1e-4, atol=1e-4)


@on_gpu
@pytest.mark.parametrize("name", ["gemv-mma-ring", "gemv-mma-reg", "gemv-mma-b3"])
def test_gemv_mma_chunk_matches_torch(name):
    import torch

    cfg = setup(WRAPPERS[name][0])[2]
    B, H, KCB = cfg.B, cfg.const("H"), cfg.const("KCB")
    assert cfg.mma_gemv and (name != "gemv-mma-reg") == (cfg.ring > 0)
    kch = min(KCB, H)
    nr = 70  # five 16-row tiles, the last partial
    g = torch.Generator().manual_seed(2)
    w = _bf16(torch.randn(nr, H, generator=g) * 0.05)
    x = torch.randn(B, H, generator=g)
    y = torch.empty(nr * B, device="cuda")
    wd, xd = w.cuda().view(torch.int16), x.cuda()  # held: a temporary's memory goes back to the allocator
    _launch(name, "mk_test_gemv_mma", (wd.data_ptr(), xd.data_ptr(), _i32(nr), _i32(kch), y.data_ptr()))
    xb = _bf16(x[:, :kch]).double()  # the MMA path stages x as bf16
    want = (xb @ w[:, :kch].double().T).T.float()
    torch.testing.assert_close(y.cpu().view(nr, B), want, rtol=1e-3, atol=1e-3)


@on_gpu
@pytest.mark.parametrize("pos", [0, 5, 63, 64, 65, 300, 511])
@pytest.mark.parametrize("name", ["attn-split", "attn-b4", "attn-b2-nan", "attn-qkn", "attn-qkn-tiny", "attn-qkn-late"])
def test_attention_split_matches_torch_softmax(name, pos):
    """Every split of one (batch row, kv head) against torch, at positions around the rows a split
    loads before its wait (ATT_PRE) and past them; with q/k norm also the norm, RoPE and the new key
    the last split appends to the cache."""
    import torch

    tg, _, cfg, _ = setup(WRAPPERS[name][0])
    B, NH, NKV, HD, L = cfg.B, cfg.const("NH"), cfg.const("NKV"), cfg.const("HD"), cfg.const("L")
    S_, NREP = cfg.const("ATT_SPLIT"), NH // NKV
    qkn = cfg.qk_norm
    g = torch.Generator().manual_seed(3 + pos)
    q = torch.randn(B, NH, HD, generator=g)
    kc = _bf16(torch.randn(B, NKV, L, HD, generator=g))
    vc = _bf16(torch.randn(B, NKV, L, HD, generator=g))
    kr = torch.randn(B, NKV * HD, generator=g)  # q/k norm: this step's raw keys
    qnorm = _bf16(1 + 0.1 * torch.randn(HD, generator=g))
    knorm = _bf16(1 + 0.1 * torch.randn(HD, generator=g))
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    ao = torch.full((B, max(S_, 1), NH, HD), 7.0)  # R_ATTN [B][NH][HD] when ATT_SPLIT == 1; 7: not written
    alse = torch.full((B, max(S_, 1), NH), 7.0)
    host = dict(q=q, kc=kc.view(torch.int16), vc=vc.view(torch.int16), ao=ao, alse=alse, kr=kr,
                qnorm=qnorm.view(torch.int16), knorm=knorm.view(torch.int16), inv_freq=inv_freq)
    dev = {k: v.cuda() for k, v in host.items()}
    ptrs = np.zeros((T.n_slots(tg.dim("n_layers")), 2), dtype=np.uint64)
    for role, key in (("q", "q"), ("kc", "kc"), ("vc", "vc"), ("ao", "ao"), ("alse", "alse"), ("attn", "ao"),
                      ("kr", "kr"), ("qnorm", "qnorm"), ("knorm", "knorm")):
        ptrs[T.layer_slot(0, role)] = dev[key].data_ptr()
    ptrs[T.GLOBAL_SLOTS.index("inv_freq")] = dev["inv_freq"].data_ptr()
    ptrs_d = torch.from_numpy(ptrs.reshape(-1).view(np.int64)).cuda()
    scale, eps = HD ** -0.5, 1e-6
    b, gkv = B - 1, NKV - 1
    for split in range(S_):
        _launch(name, "mk_test_attn", (ptrs_d.data_ptr(), _i32(b), _i32(gkv), _i32(split), _i32(pos), np.float32(scale),
                                       np.float32(eps), np.float32(1.0)))
    keys = kc[b, gkv].double().clone()
    qh = q[b].double()
    if qkn:
        def norm_rope(x, w):
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()
            ang = pos * inv_freq.double()
            cs, sn = torch.cos(ang), torch.sin(ang)
            x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
            return torch.cat([x1 * cs - x2 * sn, x2 * cs + x1 * sn], -1)

        qh = norm_rope(qh, qnorm)
        knew = _bf16(norm_rope(kr[b, gkv * HD:(gkv + 1) * HD].double(), knorm).float())
        got_k = dev["kc"].cpu().view(torch.bfloat16).view(B, NKV, L, HD)[b, gkv, pos].float()
        torch.testing.assert_close(got_k, knew.float(), rtol=1e-2, atol=1e-2)  # within a bf16 ulp (fp32 on the device)
        keys[pos] = got_k.double()  # the scores use the key as the cache holds it
    T_ = pos + 1
    for split in range(S_):
        lo, hi = split * T_ // S_, (split + 1) * T_ // S_
        for h in range(NREP):
            head = gkv * NREP + h
            if hi == lo:  # an empty split writes zeros and -inf
                assert (dev["ao"].cpu()[b, split, head] == 0).all()
                assert dev["alse"].cpu()[b, split, head] == -float("inf")
                continue
            s = (keys[lo:hi] @ qh[head]) * scale
            p = torch.softmax(s, 0)
            o = p @ vc[b, gkv, lo:hi].double()
            if S_ == 1:
                got = dev["ao"].cpu().view(B, NH, HD)[b, head]
                torch.testing.assert_close(got, o.float(), rtol=1e-4, atol=1e-4)
            else:
                torch.testing.assert_close(dev["ao"].cpu()[b, split, head], o.float(), rtol=1e-4, atol=1e-4)
                lse = torch.logsumexp(s, 0).float()
                torch.testing.assert_close(dev["alse"].cpu()[b, split, head], lse, rtol=1e-4, atol=1e-4)
