#!/usr/bin/env python3
"""The tensor-core pipeline's page loop alone: how long ``pipe_mma_page`` (gemv_mma.cuh) takes on a
page that is already in shared memory, with no producer, no mbarrier and no other task around it.

    python3 scripts/bench_mma_page.py [--batches 8,32] [--reps 2000] [--compile-only DIR]

Why (BENCHMARKS.md, twenty-third session): in the batch-32 trace gate/up's consumers take ~1.7 us
per 32 KiB page with every page already there, where the loop's instruction counts (per warp and
page: 4 steps of 6 LDS.128 and 8 HMMA) suggest ~0.3-0.4 us. This times the loop by itself, one
block per SM on every SM (as the megakernel runs), each block's 8 consumer warps over the same
pages ``reps`` times; the page alternates among the plan's slots and the staged input shifts by 16
bytes every other repetition, so no load can be hoisted out of the loop. If the loop alone takes
~1.7 us a page, the loop is the bound; if it takes far less, the time goes to what surrounds it in a
task (the page handoff, the barriers, the producer).

The wrapper is built from the configuration's own prologue (``render.config_header``, the default
CodegenOptions of llama-3.2-1b at that batch) and launched with the consumer threads alone under
``__launch_bounds__(NT, 1)``, so ptxas may give the loop more registers than the megakernel's
consumers get (200 or 216). Prints cycles and microseconds per page (at the maximum SM clock
nvidia-smi reports) and checks the dot products against torch once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

WRAPPER = """
// pipe_mma_page over pages already in shared memory: the megakernel's consumer loop with nothing around it
extern "C" __global__ void __launch_bounds__(NT, 1)
mk_bench_mma_page(const unsigned short* w, const unsigned short* x, int reps, long long* cycles, float* acc_out) {
  static_assert(PIPE_SLOTS >= 2 && XST >= PIPE_COLS + 8, "two pages to alternate, room to shift the input");
  for (int s = 0; s < PIPE_SLOTS; ++s) {
    unsigned short* pg = reinterpret_cast<unsigned short*>(pipe_page(s));
    for (int i = mk_tid(); i < PIPE_ROWS * PIPE_LD; i += NT) pg[i] = w[i];
  }
  unsigned short* xs = reinterpret_cast<unsigned short*>(mk_smem + OFF_XS);
  for (int i = mk_tid(); i < B * XST; i += NT) xs[i] = x[i];
  mk_barrier();
  float acc[NTN][4];
#pragma unroll
  for (int n = 0; n < NTN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  // one repetition untimed, for the check: every slot holds the same page, so its sums are one page's
  pipe_mma_page(reinterpret_cast<const unsigned short*>(pipe_page(0)), xs, PIPE_COLS / 8, acc);
  mk_barrier();
  if (blockIdx.x == 0) {
#pragma unroll
    for (int n = 0; n < NTN; ++n)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc_out[(mk_tid() * NTN + n) * 4 + k] = acc[n][k];
  }
  const long long t0 = clock64();
  for (int r = 0; r < reps; ++r)
    pipe_mma_page(reinterpret_cast<const unsigned short*>(pipe_page(r % PIPE_SLOTS)), xs + 8 * (r & 1), PIPE_COLS / 8, acc);
  mk_barrier();
  const long long t1 = clock64();
  if (mk_tid() == 0) cycles[blockIdx.x] = t1 - t0;
  float s = 0.f;
#pragma unroll
  for (int n = 0; n < NTN; ++n) s += acc[n][0] + acc[n][1] + acc[n][2] + acc[n][3];
  if (s == 12345.f) acc_out[0] = s;  // keeps the timed loop's results alive
}

// The same timed loop with one more warp that streams HBM into the last page slot the way the
// producer does (a 16-row page of bulk copies completing on an mbarrier, evict-first), from a
// buffer far larger than L2, while the consumers run: does a page take longer with the weights
// streaming beside it (shared-memory writes, power and clock)? Also returns clock64 and
// globaltimer spans, so the SM clock under that load is measured rather than assumed.
extern "C" __global__ void __launch_bounds__(NT + WARP, 1)
mk_bench_mma_page_stream(const unsigned short* w, const unsigned short* x, int reps, long long* cycles, float* acc_out,
                         const unsigned char* hbm, long long hbm_pages, long long* ns, int stream) {
  static_assert(PIPE_SLOTS >= 3, "two pages to alternate and one for the stream");
  int& s_done = *reinterpret_cast<int*>(pipe_empty(PIPE_SLOTS - 1));  // (no static shared memory: the plan's is all there is)
  void* bar = pipe_full(PIPE_SLOTS - 1);
  if (mk_tid() == 0) { s_done = 0; mk_mbar_init(bar, 1u); mk_mbar_init_fence(); }
  if (mk_tid() < NT) {
    for (int s = 0; s < PIPE_SLOTS - 1; ++s) {
      unsigned short* pg = reinterpret_cast<unsigned short*>(pipe_page(s));
      for (int i = mk_tid(); i < PIPE_ROWS * PIPE_LD; i += NT) pg[i] = w[i];
    }
    unsigned short* xs = reinterpret_cast<unsigned short*>(mk_smem + OFF_XS);
    for (int i = mk_tid(); i < B * XST; i += NT) xs[i] = x[i];
  }
  __syncthreads();
  if (mk_tid() >= NT) {  // the streaming warp
    if (!stream) return;
    const unsigned long long policy = mk_policy_stream();
    const long long row_bytes = PIPE_COLS * 2;
    long long pg = blockIdx.x;
    for (unsigned use = 0;; ++use, pg += gridDim.x) {
      if (use > 0) {
        while (!mk_mbar_test(bar, (use - 1) & 1u)) {}
        if (*(volatile int*)&s_done) return;
      }
      if (pg >= hbm_pages) pg -= hbm_pages;
      if (lane_id() == 0) mk_mbar_arrive_tx(bar, (unsigned)(PIPE_ROWS * row_bytes));
      mk_syncwarp();
      if (lane_id() < PIPE_ROWS)
        mk_bulk_copy(pipe_page(PIPE_SLOTS - 1) + lane_id() * PIPE_LD * 2, hbm + (pg * PIPE_ROWS + lane_id()) * row_bytes,
                     (unsigned)row_bytes, bar, policy);
    }
  }
  unsigned short* xs = reinterpret_cast<unsigned short*>(mk_smem + OFF_XS);
  float acc[NTN][4];
#pragma unroll
  for (int n = 0; n < NTN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  mk_barrier();
  const long long t0 = clock64();
  const unsigned long long g0 = mk_globaltimer();
  for (int r = 0; r < reps; ++r)
    pipe_mma_page(reinterpret_cast<const unsigned short*>(pipe_page(r % (PIPE_SLOTS - 1))), xs + 8 * (r & 1), PIPE_COLS / 8, acc);
  mk_barrier();
  const long long t1 = clock64();
  const unsigned long long g1 = mk_globaltimer();
  if (mk_tid() == 0) { cycles[blockIdx.x] = t1 - t0; ns[blockIdx.x] = (long long)(g1 - g0); s_done = 1; }
  float s = 0.f;
#pragma unroll
  for (int n = 0; n < NTN; ++n) s += acc[n][0] + acc[n][1] + acc[n][2] + acc[n][3];
  if (s == 12345.f) acc_out[0] = s;
}
"""


def config(batch: int):
    from codegen_fixtures import rr_schedule, taskgraph
    from mkc.codegen.render import kernel_config
    from mkc.target import get_target

    t = get_target("h200")
    tg = taskgraph("llama-3.2-1b", batch, 1024, t)
    cfg = kernel_config(tg, rr_schedule(tg, t, "atomic"), t)
    if not (cfg.mma_gemv and dict(cfg.consts)["PIPE_SLOTS"] >= 2):
        raise SystemExit(f"batch {batch}: no tensor-core weight pipeline in its default plan")
    return cfg, t


def source(batch: int) -> str:
    from mkc.codegen import source as S
    from mkc.codegen.render import config_header

    cfg, t = config(batch)
    prologue = config_header(cfg, t).removeprefix("#pragma once\n")
    return S.inline(prologue + '#include "mkc/gemv_mma.cuh"\n#include "mkc/pipe.cuh"\n\nusing namespace mk;\n' + WRAPPER)


def build(batch: int, out_dir=None):
    from mkc.targets.nvidia.compiler import build_cubin

    cfg, _ = config(batch)
    return build_cubin(source(batch), cfg.arch, out_dir=out_dir, verbose=True, name=f"bench_mma_page_b{batch}")


def run(batch: int, reps: int) -> dict:
    import numpy as np
    import torch

    from mkc.targets.nvidia.driver import CudaDriver

    cfg, t = config(batch)
    c = dict(cfg.consts)
    rows, cols, ld, xst, ntn = c["PIPE_ROWS"], c["PIPE_COLS"], c["PIPE_LD"], c["XST"], (batch + 7) // 8  # NTN
    res = build(batch)
    drv = CudaDriver()
    kern = drv.load(res.cubin.read_bytes(), "mk_bench_mma_page", cfg.smem_bytes)
    g = torch.Generator().manual_seed(0)
    wf = torch.randn(rows, cols, generator=g)
    xf = torch.randn(batch, cols, generator=g)
    wb = torch.zeros(rows, ld, dtype=torch.bfloat16)
    wb[:, :cols] = wf.to(torch.bfloat16)
    xb = torch.zeros(batch, xst, dtype=torch.bfloat16)
    xb[:, :cols] = xf.to(torch.bfloat16)
    wd, xd = wb.view(torch.int16).cuda(), xb.view(torch.int16).cuda()
    sms = t.sms
    cycles = torch.zeros(sms, dtype=torch.int64, device="cuda")
    acc = torch.zeros(cfg.consumer_threads * ntn * 4, dtype=torch.float32, device="cuda")
    args = [("ptr", wd.data_ptr()), ("ptr", xd.data_ptr()), ("i32", reps), ("ptr", cycles.data_ptr()), ("ptr", acc.data_ptr())]
    for _ in range(2):  # the first launch warms up
        drv.launch(kern, sms, cfg.consumer_threads, args)
        drv.synchronize()
    # the check: the warps' accumulators summed per (row, batch column) are the page's dot products,
    # the fragment layout of mma.m16n8k16 (row g or g+8, columns 2q, 2q+1 of each 8-column tile)
    a = acc.cpu().view(cfg.consumer_threads, ntn, 4).numpy()
    got = np.zeros((rows, 8 * ntn))
    for tid in range(cfg.consumer_threads):
        lane = tid % 32
        gq, q = lane // 4, lane % 4
        for n in range(ntn):
            for k in range(4):
                got[gq + 8 * (k // 2), 8 * n + 2 * q + (k % 2)] += a[tid, n, k]
    want = (wb[:, :cols].float() @ xb[:, :cols].float().T).numpy()
    err = float(np.abs(got[:, :batch] - want).max() / (np.abs(want).max() + 1e-9))
    cyc = cycles.cpu().numpy().astype(float) / reps
    import subprocess

    # the SM clock under load (the H200 here runs at its maximum, 1980 MHz, in every call so far)
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    mhz = float(out[0]) if out else 1980.0
    out = dict(batch=batch, reps=reps, regs=kern.num_regs if hasattr(kern, "num_regs") else None,
               cycles_per_page_median=float(np.median(cyc)), cycles_per_page_max=float(cyc.max()),
               us_per_page=float(np.median(cyc)) / mhz, sm_mhz=mhz, rel_err=err)
    if c["PIPE_SLOTS"] >= 3:
        # beside a warp that streams 2 GiB of HBM through the last slot, and alone (the same kernel)
        ks = drv.load(res.cubin.read_bytes(), "mk_bench_mma_page_stream", cfg.smem_bytes)
        pages = (2 << 30) // (rows * cols * 2)
        hbm = torch.empty(pages * rows * cols * 2, dtype=torch.uint8, device="cuda")
        ns = torch.zeros(sms, dtype=torch.int64, device="cuda")
        for stream in (0, 1):
            sargs = args + [("ptr", hbm.data_ptr()), ("ptr", pages), ("ptr", ns.data_ptr()), ("i32", stream)]
            for _ in range(2):
                drv.launch(ks, sms, cfg.consumer_threads + 32, sargs)
                drv.synchronize()
            cy = cycles.cpu().numpy().astype(float)
            nsv = ns.cpu().numpy().astype(float)
            key = "streaming" if stream else "alone"
            out[f"{key}_cycles_per_page"] = float(np.median(cy / reps))
            out[f"{key}_us_per_page"] = float(np.median(nsv / reps)) / 1e3
            out[f"{key}_mhz"] = float(np.median(cy / nsv)) * 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="8,32")
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--compile-only", metavar="DIR", help="build the wrappers into DIR and print ptxas's report")
    a = ap.parse_args()
    for b in (int(x) for x in a.batches.split(",")):
        if a.compile_only:
            res = build(b, Path(a.compile_only) / f"b{b}")
            print(f"b{b}: " + "; ".join(line.strip() for line in res.log.splitlines() if "Used" in line or "spill" in line))
            continue
        r = run(b, a.reps)
        print(f"batch {b}: {r['cycles_per_page_median']:.0f} cycles a page (max over SMs {r['cycles_per_page_max']:.0f}), "
              f"{r['us_per_page']:.3f} us at {r['sm_mhz']:.0f} MHz; dot products rel. error {r['rel_err']:.1e}", flush=True)
        for key in ("alone", "streaming"):
            if f"{key}_cycles_per_page" in r:
                print(f"batch {b}, {key} (+1 warp{'' if key == 'alone' else ' streaming HBM'}): "
                      f"{r[key + '_cycles_per_page']:.0f} cycles, {r[key + '_us_per_page']:.3f} us a page, "
                      f"SM clock {r[key + '_mhz']:.0f} MHz", flush=True)


if __name__ == "__main__":
    main()
