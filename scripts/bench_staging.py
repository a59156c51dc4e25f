#!/usr/bin/env python3
"""The tensor-core path's input staging alone: how fast ``stage_x_bf16`` (gemv_mma.cuh) moves a GEMV
task's input from L2 into shared memory when every SM stages at once, against the raw rate of
bulk copies of the same bytes.

    python3 scripts/bench_staging.py [--batches 32,8] [--reps 20] [--compile-only DIR | --prebuild]

Why (BENCHMARKS.md, twenty-third and twenty-fourth sessions): at batch 32 a down-proj task spends
~20 of its ~30 us staging h (1 MB of fp32, 8 chunks of 1,024 columns, read by all 128 down tasks of
the layer), qkv 8 us and gate/up 8 us for 256 KB with the norm. 1 MB in 20 us is ~50 GB/s an SM,
~6.6 TB/s over 132 SMs: about what Hopper's L2 is said to deliver, or a latency bound (each warp
stages its 4 batch rows one after another, 8 loads of 16 bytes in flight a lane)? The answer picks
the next step: fewer bytes (bf16 copies of the inputs: lower(h_bf16), lower(attn_bf16)), or more
loads in flight (bulk copies into shared memory, no registers). Each kernel runs on every SM (or
on one, the unloaded rate) over the same input ``reps`` times:

- ``f32``: down's staging, stage_x_bf16 of a [B, I] fp32 input chunk by chunk (as the default);
- ``norm``: qkv's and gate/up's, [B, H] fp32 times the norm's weights, sums of squares;
- ``xb``: down's with lower(h_bf16): [B, I] bf16 copied as it is (half the bytes);
- ``bulk``: the raw rate: every chunk's fp32 rows as 1-D bulk copies into shared memory on one
  mbarrier (all of a chunk in flight at once), nothing converted;
- ``f32-spread``: ``f32`` where SM s reads copy s % 16 of the input (16 MB, still in L2): the same
  bytes from 16x as many addresses, so a line is not requested by every SM at once.

The wrapper is built from the configuration's own prologue (``render.config_header``, llama-3.2-1b's
default CodegenOptions at that batch), one block of the consumer threads per SM. Prints us per
pass, GB/s per SM and over all SMs, and checks one staged chunk against torch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

WRAPPER = """
// stage_x_bf16 over an input already in L2, chunk by chunk, reps times: the staging with nothing around it
template <int KK, bool NORM, bool XB>
__device__ void stage_bench(const float* x, long long copy_elems, int copies, const unsigned short* nw, int reps,
                            long long* cycles, long long* ns, unsigned short* check) {
  constexpr int NCH = (KK + KCB - 1) / KCB;
  Ctx c{};
  Task t{};
  unsigned short* xs = reinterpret_cast<unsigned short*>(mk_smem + OFF_XS);
  float* ssp = smem_f(OFF_SSP);
  for (int i = mk_tid(); i < NW * B; i += NT) ssp[i] = 0.f;
  const float* xb = reinterpret_cast<const float*>(reinterpret_cast<const char*>(x) +
                                                   (XB ? 2 : 4) * copy_elems * (blockIdx.x % copies));
  mk_barrier();
  const long long t0 = clock64();
  const unsigned long long g0 = mk_globaltimer();
  for (int r = 0; r < reps; ++r)
    for (int ch = 0; ch < NCH; ++ch) {
      stage_x_bf16<KK, NORM, false, false, XB>(c, t, -1, xb, ch * KCB, min(KCB, KK - ch * KCB), nw, xs, ssp, true);
      mk_barrier();
    }
  const long long t1 = clock64();
  const unsigned long long g1 = mk_globaltimer();
  if (mk_tid() == 0) { cycles[blockIdx.x] = t1 - t0; ns[blockIdx.x] = (long long)(g1 - g0); }
  // the last chunk as staged, for the check (block 0)
  if (blockIdx.x == 0)
    for (int i = mk_tid(); i < B * XST; i += NT) check[i] = xs[i];
}

extern "C" __global__ void __launch_bounds__(NT, 1)
mk_stage_f32(const float* x, long long copy_elems, int copies, const unsigned short* nw, int reps, long long* cycles,
             long long* ns, unsigned short* check) {
  stage_bench<I, false, false>(x, copy_elems, copies, nw, reps, cycles, ns, check);
}
extern "C" __global__ void __launch_bounds__(NT, 1)
mk_stage_norm(const float* x, long long copy_elems, int copies, const unsigned short* nw, int reps, long long* cycles,
              long long* ns, unsigned short* check) {
  stage_bench<H, true, false>(x, copy_elems, copies, nw, reps, cycles, ns, check);
}
extern "C" __global__ void __launch_bounds__(NT, 1)
mk_stage_xb(const float* x, long long copy_elems, int copies, const unsigned short* nw, int reps, long long* cycles,
            long long* ns, unsigned short* check) {
  stage_bench<I, false, true>(x, copy_elems, copies, nw, reps, cycles, ns, check);
}

// The raw rate: a chunk's B fp32 rows of KCB columns as B bulk copies into shared memory (the pages'
// and the staged input's bytes, which this kernel alone uses), all in flight on one mbarrier.
extern "C" __global__ void __launch_bounds__(NT, 1)
mk_stage_bulk(const float* x, long long copy_elems, int copies, const unsigned short* nw, int reps, long long* cycles,
              long long* ns, unsigned short* check) {
  constexpr int NCH = (I + KCB - 1) / KCB;
  static_assert(OFF_XS >= 0 && 4 * B * KCB <= OFF_OUT, "a chunk of fp32 rows fits below the output block");
  void* bar = mk_smem + OFF_FLAG;
  if (mk_tid() == 0) { mk_mbar_init(bar, 1u); mk_mbar_init_fence(); }
  mk_barrier();
  const float* xb = x + copy_elems * (blockIdx.x % copies);
  const unsigned long long policy = mk_policy_stream();
  const long long t0 = clock64();
  const unsigned long long g0 = mk_globaltimer();
  unsigned phase = 0;
  for (int r = 0; r < reps; ++r)
    for (int ch = 0; ch < NCH; ++ch, phase ^= 1u) {
      if (warp_id() == 0) {
        if (lane_id() == 0) mk_mbar_arrive_tx(bar, (unsigned)(B * KCB * 4));
        mk_syncwarp();
        for (int b = lane_id(); b < B; b += WARP)
          mk_bulk_copy(mk_smem + b * KCB * 4, xb + (size_t)b * I + ch * KCB, (unsigned)(KCB * 4), bar, policy);
      }
      while (!mk_mbar_test(bar, phase)) {}
      mk_barrier();
    }
  const long long t1 = clock64();
  const unsigned long long g1 = mk_globaltimer();
  if (mk_tid() == 0) { cycles[blockIdx.x] = t1 - t0; ns[blockIdx.x] = (long long)(g1 - g0); }
  if (blockIdx.x == 0)
    for (int i = mk_tid(); i < 2 * B * KCB; i += NT) check[i] = reinterpret_cast<const unsigned short*>(mk_smem)[i];
}
"""

KERNELS = ("f32", "norm", "xb", "bulk", "f32-spread")


def config(batch: int):
    from codegen_fixtures import rr_schedule, taskgraph
    from mkc.codegen.render import kernel_config
    from mkc.target import get_target

    t = get_target("h200")
    tg = taskgraph("llama-3.2-1b", batch, 1024, t)
    cfg = kernel_config(tg, rr_schedule(tg, t, "atomic"), t)
    if not cfg.mma_gemv:
        raise SystemExit(f"batch {batch}: no tensor-core GEMV in its default plan")
    return cfg, t


def source(batch: int) -> str:
    from mkc.codegen import source as S
    from mkc.codegen.render import config_header

    cfg, t = config(batch)
    prologue = config_header(cfg, t).removeprefix("#pragma once\n")
    return S.inline(prologue + '#include "mkc/gemv_mma.cuh"\n\nusing namespace mk;\n' + WRAPPER)


def build(batch: int, out_dir=None):
    from mkc.targets.nvidia.compiler import build_cubin

    cfg, _ = config(batch)
    return build_cubin(source(batch), cfg.arch, out_dir=out_dir, verbose=True, name=f"bench_staging_b{batch}")


def run(batch: int, reps: int) -> list[dict]:
    import numpy as np
    import torch

    from mkc.targets.nvidia.driver import CudaDriver

    cfg, t = config(batch)
    c = dict(cfg.consts)
    H, I, kcb, xst = c["H"], c["I"], c["KCB"], c["XST"]
    res = build(batch)
    drv = CudaDriver()
    g = torch.Generator().manual_seed(0)
    copies = 16
    x32 = torch.randn(copies, batch, I, generator=g)
    nwf = 1.0 + 0.1 * torch.randn(H, generator=g)
    xd = x32.cuda()
    xbd = x32.to(torch.bfloat16).view(torch.int16).cuda()
    nwd = nwf.to(torch.bfloat16).view(torch.int16).cuda()
    sms = t.sms
    cycles = torch.zeros(sms, dtype=torch.int64, device="cuda")
    ns = torch.zeros(sms, dtype=torch.int64, device="cuda")
    check = torch.zeros(2 * batch * max(kcb, xst), dtype=torch.int16, device="cuda")
    rows = []
    for name in KERNELS:
        fn = "mk_stage_" + name.removesuffix("-spread")
        kern = drv.load(res.cubin.read_bytes(), fn, cfg.smem_bytes)
        k = H if name == "norm" else I
        inp = xbd if name == "xb" else xd
        # norm reads [B, H] rows of the same buffer: its copies are B * H apart, the others' B * I
        copy_elems = batch * k
        if name == "norm":  # a [copies, B, H] view of the same numbers
            inp = x32[:, :, :H].contiguous().cuda()
        nbytes = batch * k * (2 if name == "xb" else 4)
        for grid in (1, sms):
            args = [("ptr", inp.data_ptr()), ("ptr", copy_elems), ("i32", copies if name.endswith("-spread") else 1),
                    ("ptr", nwd.data_ptr()), ("i32", reps), ("ptr", cycles.data_ptr()), ("ptr", ns.data_ptr()),
                    ("ptr", check.data_ptr())]
            for _ in range(2):  # the first launch warms up (and brings the input into L2)
                drv.launch(kern, grid, cfg.consumer_threads, args)
                drv.synchronize()
            nsv = ns[:grid].cpu().numpy().astype(float) / reps
            cyv = cycles[:grid].cpu().numpy().astype(float) / reps
            us = float(np.median(nsv)) / 1e3
            rows.append(dict(batch=batch, kernel=name, sms=grid, bytes=nbytes, us=us, us_max=float(nsv.max()) / 1e3,
                             gbs_per_sm=nbytes / (us * 1e3), gbs_total=grid * nbytes / (float(nsv.max())),
                             mhz=float(np.median(cyv / nsv)) * 1e3))
        # the check: the last chunk as staged (block 0, copy 0)
        got = check.cpu()
        c0 = ((k + kcb - 1) // kcb - 1) * kcb
        w = min(kcb, k - c0)
        if name == "bulk":
            want = x32[0, :, c0:c0 + w].contiguous().view(torch.int16).reshape(-1)
            ok = torch.equal(got[: want.numel()], want)
        else:
            src = x32[0, :, c0:c0 + w]
            if name == "norm":
                src = src * nwf.to(torch.bfloat16).float()[c0:c0 + w]
            want = src.to(torch.bfloat16).view(torch.int16)
            ok = torch.equal(got[: batch * xst].view(batch, xst)[:, :w], want)
        rows[-1]["check"] = rows[-2]["check"] = bool(ok)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="32,8")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--compile-only", metavar="DIR", help="build the wrappers into DIR and print ptxas's report")
    ap.add_argument("--prebuild", action="store_true", help="build the wrappers into the cubin cache ($MKC_CACHE_DIR)")
    a = ap.parse_args()
    for b in (int(x) for x in a.batches.split(",")):
        if a.prebuild:
            print(f"b{b}: {'cached' if build(b).cached else 'built'}")
            continue
        if a.compile_only:
            res = build(b, Path(a.compile_only) / f"b{b}")
            print(f"b{b}: " + "; ".join(line.strip() for line in res.log.splitlines() if "Used" in line or "spill" in line))
            continue
        print("| batch | kernel | SMs | KB a pass | us a pass (max) | GB/s an SM | TB/s all | SM MHz | check |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in run(b, a.reps):
            print(f"| {r['batch']} | {r['kernel']} | {r['sms']} | {r['bytes'] / 1024:.0f} | {r['us']:.2f} ({r['us_max']:.2f}) | "
                  f"{r['gbs_per_sm']:.1f} | {r['gbs_total'] / 1e3:.2f} | {r['mhz']:.0f} | {'ok' if r['check'] else 'WRONG'} |",
                  flush=True)


if __name__ == "__main__":
    main()
