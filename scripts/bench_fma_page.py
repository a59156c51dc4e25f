#!/usr/bin/env python3
"""Batch 1's page loop alone: how long ``pipe_rows_ks`` (pipe.cuh, the chain's qkv / o-proj / down
consumers) takes a 16 KiB page when the pages are handed over at once (issue #13).

    python3 scripts/bench_fma_page.py [--reps 400] [--compile-only DIR]

Why (BENCHMARKS.md, thirty-fifth session): in the traced llama-3.2-1b b1 step, qkv's consumers take
~2.5 us for their 6 pages, every page already landed (~0.42 us, ~830 cycles a page), where the
loop's instructions (a warp per page: one 16-byte load of the input, 8 8-byte loads of weights, 64
conversions and FMAs) suggest ~200-300 cycles. This runs the megakernel's own ``pipe_rows_ks`` on
every SM, one block each as the megakernel runs (256 consumer threads and one producer warp),
over rows of qkv's shape (24 rows, 2,048 columns: 6 pages a task) ``reps`` times. The producer
warp either only hands each freed slot back (``mode`` 0: an mbarrier arrival with no bytes, so
the loop and the page handoff alone are timed) or fills it with a bulk copy of the same page from a
buffer L2 holds (``mode`` 1: the copies' shared-memory writes beside the loop). Prints cycles and
microseconds a page (median over SMs) and checks the dot products against torch once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

ROWS, COLS = 24, 2048  # qkv's task at llama-3.2-1b b1: 24 rows of H = 2048 columns

WRAPPER = r"""
// The producer's side, without HBM: each page n waits for its slot's release, then arrives on the
// slot's full barrier with no bytes (mode 0) or with a bulk copy of page (n % pages) of w (mode 1)
__device__ void bench_hand_pages(const unsigned char* w, int pages, int total, int mode) {
  const unsigned long long policy = mk_policy_stream();
  for (int n = 0; n < total; ++n) {
    const int slot = n % PIPE_NS;
    const unsigned use = (unsigned)(n / PIPE_NS);
    if (use > 0) while (!mk_mbar_test(pipe_empty(slot), (use - 1) & 1u)) {}
    if (mode == 0) {
      if (lane_id() == 0) mk_mbar_arrive(pipe_full(slot));
    } else {
      const int p = n % pages;
      if (lane_id() == 0) mk_mbar_arrive_tx(pipe_full(slot), (unsigned)(PIPE_ROWS * PIPE_COLS * 2));
      mk_syncwarp();
      if (lane_id() < PIPE_ROWS)
        mk_bulk_copy(pipe_page(slot) + lane_id() * PIPE_LD * 2, w + ((size_t)p * PIPE_ROWS + lane_id()) * PIPE_COLS * 2,
                     (unsigned)(PIPE_COLS * 2), pipe_full(slot), policy);
    }
    mk_syncwarp();
  }
}

// w: the task's pages in the producer's order (row group, K-slice), each 8 rows x PIPE_COLS bf16;
// x: the input, K floats. out: the first repetition's dot products (block 0).
extern "C" __global__ void __launch_bounds__(NT + WARP, 1)
mk_bench_fma_page(const unsigned char* w, const float* x, int reps, int mode, long long* cycles, float* out_g) {
  constexpr int NR = BENCH_ROWS, K = BENCH_K;
  constexpr int PAGES = (NR + PIPE_ROWS - 1) / PIPE_ROWS * ((K + PIPE_COLS - 1) / PIPE_COLS);
  if (mk_tid() == 0) pipe_init();
  __syncthreads();
  if (mk_tid() >= NT) {
    if (mk_tid() < NT + WARP) bench_hand_pages(w, PAGES, PAGES * (reps + 1), mode);
    return;
  }
  float* xs = smem_f(OFF_XS);
  for (int i = mk_tid(); i < K; i += NT) xs[i] = x[i];
  mk_barrier();
  Ctx c;
  c.ws = nullptr;
  c.pipe_n = 0;
  c.pipe_late_ns = 0;
  float* out = smem_f(OFF_OUT);
  pipe_rows_ks<K>(c, NR, xs, out, smem_f(OFF_PART));  // untimed: the check (mode 1's pages are w's)
  mk_barrier();
  if (blockIdx.x == 0)
    for (int j = mk_tid(); j < NR; j += NT) out_g[j] = out[j];
  mk_barrier();
  const long long t0 = clock64();
  for (int r = 0; r < reps; ++r) {
    pipe_rows_ks<K>(c, NR, xs, out, smem_f(OFF_PART));
    mk_barrier();
  }
  const long long t1 = clock64();
  if (mk_tid() == 0) cycles[blockIdx.x] = t1 - t0;
}
"""


def config():
    from codegen_fixtures import rr_schedule, taskgraph
    from mkc.codegen.render import kernel_config
    from mkc.target import get_target

    t = get_target("h200")
    tg = taskgraph("llama-3.2-1b", 1, 1024, t)
    cfg = kernel_config(tg, rr_schedule(tg, t, "atomic"), t)
    c = dict(cfg.consts)
    if cfg.mma_gemv or c.get("PIPE_SLOTS", 0) < 2 or not c.get("PIPE_KSPLIT"):
        raise SystemExit("batch 1: no K-split FMA weight pipeline in its default plan")
    return cfg, t


def source() -> str:
    from mkc.codegen import source as S
    from mkc.codegen.render import config_header

    cfg, t = config()
    prologue = config_header(cfg, t).removeprefix("#pragma once\n")
    return S.inline(prologue + f"constexpr int BENCH_ROWS = {ROWS}, BENCH_K = {COLS};\n"
                    '#include "mkc/pipe.cuh"\n\nusing namespace mk;\n' + WRAPPER)


def build(out_dir=None):
    from mkc.targets.nvidia.compiler import build_cubin

    cfg, _ = config()
    return build_cubin(source(), cfg.arch, out_dir=out_dir, verbose=True, name="bench_fma_page")


def run(reps: int) -> list[dict]:
    import subprocess

    import numpy as np
    import torch

    from mkc.targets.nvidia.driver import CudaDriver

    cfg, _ = config()
    c = dict(cfg.consts)
    prow, pcol = c["PIPE_ROWS"], c["PIPE_COLS"]
    res = build()
    drv = CudaDriver()
    kern = drv.load(res.cubin.read_bytes(), "mk_bench_fma_page", cfg.smem_bytes)
    g = torch.Generator().manual_seed(0)
    wf = torch.randn(ROWS, COLS, generator=g).to(torch.bfloat16)
    x = torch.randn(COLS, generator=g)
    # the pages in the producer's order: row group, then K-slice; each 8 rows x PIPE_COLS
    groups = (ROWS + prow - 1) // prow
    pages = []
    for gi in range(groups):
        for sl in range(COLS // pcol):
            pg = torch.zeros(prow, pcol, dtype=torch.bfloat16)
            blk = wf[gi * prow:(gi + 1) * prow, sl * pcol:(sl + 1) * pcol]
            pg[: blk.shape[0]] = blk
            pages.append(pg)
    wd = torch.stack(pages).contiguous().view(torch.uint8).cuda()
    xd = x.cuda()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cycles = torch.zeros(sms, dtype=torch.int64, device="cuda")
    out = torch.zeros(ROWS, dtype=torch.float32, device="cuda")
    smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    mhz = float(smi[0]) if smi else 1980.0
    want = wf.float() @ x
    rows = []
    for mode, name in enumerate(("handed over, no bytes", "bulk copies from L2")):
        args = [("ptr", wd.data_ptr()), ("ptr", xd.data_ptr()), ("i32", reps), ("i32", mode), ("ptr", cycles.data_ptr()),
                ("ptr", out.data_ptr())]
        for _ in range(2):
            drv.launch(kern, sms, cfg.consumer_threads + 32, args)
            drv.synchronize()
        per_page = cycles.cpu().numpy().astype(float) / (reps * len(pages))
        got = out.cpu()
        # mode 0 hands over slots never written: only mode 1's first repetition reads w's pages
        err = float((got - want).abs().max() / (want.abs().max() + 1e-9)) if mode == 1 else float("nan")
        rows.append(dict(mode=name, cycles=float(np.median(per_page)), us=float(np.median(per_page)) / mhz,
                         rel_err=err, pages=len(pages)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--compile-only", metavar="DIR", help="build the wrapper into DIR and print ptxas's report")
    a = ap.parse_args()
    if a.compile_only:
        res = build(Path(a.compile_only))
        print("; ".join(line.strip() for line in res.log.splitlines() if "Used" in line or "spill" in line))
        return
    print(f"| pages ({ROWS} rows x {COLS} columns, qkv's task) | cycles a page (median over SMs) | us a page | "
          "dot products, rel. error |")
    print("|---|---|---|---|")
    for r in run(a.reps):
        print(f"| {r['mode']} | {r['cycles']:.0f} | {r['us']:.3f} | {r['rel_err']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
