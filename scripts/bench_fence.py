#!/usr/bin/env python3
"""What a task's signal costs, alone and beside the weight pipeline's copies in flight (issue #13).

    python3 scripts/bench_fence.py [--reps 400] [--gap-ns 3000] [--compile-only DIR]

Why (BENCHMARKS.md, thirty-fifth session): in a traced llama-3.2-1b batch-1 step every GEMV task
ends 1.7-3.4 us after its epilogues, on each of a layer's five phases, where the signal is a block
barrier and one ``red.release.gpu`` (SASS: MEMBAR.ALL.CTA, MEMBAR.ALL.GPU, ERRBAR, then the add).
Is that the release's fence waiting for the SM's other memory traffic (the producer's bulk copies,
up to 11 pages of 16 KiB in flight) or something else?

One block per SM on every SM, as the megakernel runs: 256 threads write a word each to global
memory (an epilogue's stores), a block barrier, then thread 0 times one signal with clock64:
``release``: red.release.gpu (the megakernel's); ``fence``: fence.acq_rel.gpu alone; ``relaxed``:
red.relaxed.gpu (no fence; not a valid signal, the floor); ``bulk store, wait, relaxed``: 256 bytes
written by a bulk copy from shared memory, waited for (cp.async.bulk.wait_group 0: the write
complete), then red.relaxed.gpu (the hand-written megakernel's signal); ``fence.sc.gpu, then relaxed``:
a release pattern too (fence.sc is at least acq_rel), but its SASS is MEMBAR.SC.GPU where every
release the compiler emits (fence.acq_rel, fence.release, red.release) is MEMBAR.ALL.GPU: does it
wait for the SM's bulk copies as well (``--only sc``, thirty-ninth session)? Beside them one more warp streams HBM
into the plan's page slots the way the producer does (8 rows of 2 KiB a page, bulk copies on an
mbarrier, evict-first), keeping N pages in flight (0: no stream). Between signals thread 0 spins
``gap_ns`` (a task's length). Prints the median over SMs of each mode's mean and worst cycles, and
the rate the stream reached over all SMs meanwhile (how many pages in flight saturate HBM).

Then the hop (``mk_bench_poll``): one block adds to a counter, every other SM polls it as a task's
wait does; how long after the add the first, the median and the last poller see it, with the
megakernel's backoff, without sleeping, with 32 ns sleeps at most, and with the counter in 8 or 32
replicas (each poller on its own, the adder adding to all): is the last consumer's ~1 us (trace)
the hot spot of 128 SMs polling one word? And the same hop with each polling SM streaming HBM
beside its poll (0, 3 or 11 pages in flight; ``mk_bench_poll_stream``): does a poll queue behind
its SM's copies, as the release's fence does? Polled with acquire loads (the megakernel's default),
with relaxed loads and one acquire fence after the last (``CodegenOptions.acquire_once``), and with
relaxed loads alone (no acquire: the floor, not a valid wait).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

WRAPPER = r"""
__device__ __forceinline__ void bench_red_relaxed(unsigned* p) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" :: "l"(p) : "memory");
}
__device__ __forceinline__ void bench_fence_acq_rel() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
// sm_90a SASS: MEMBAR.SC.GPU (fence.acq_rel.gpu and every .release op: MEMBAR.ALL.GPU)
__device__ __forceinline__ void bench_fence_sc() { asm volatile("fence.sc.gpu;" ::: "memory"); }
// 256 bytes of shared memory to global by the bulk-copy engine, then wait until the write is complete
__device__ __forceinline__ void bench_bulk_store_wait(void* dst, const void* src) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 256;" :: "l"(dst), "r"(mk_smem_addr(src)) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// One warp streams HBM into the plan's page slots as the producer does: page n into slot n %
// PIPE_SLOTS (8 rows of 2 KiB, bulk copies on the slot's mbarrier, evict-first), issued once page
// n - inflight has landed, until s_done; then every copy lands. Returns the pages issued.
// With ahead > 0 the warp also prefetches into L2 (cp.async.bulk.prefetch.L2, no completion) the
// page `ahead` pages past each page it copies, as CodegenOptions.l2_ahead's second warp does.
// With kind 1 the page is copied by 16-byte cp.async (LDGSTS, generic proxy) instead: every lane
// issues its share and arrives on the slot's mbarrier once its copies have landed
// (cp.async.mbarrier.arrive.noinc; the slot's mbarrier then counts WARP arrivals).
__device__ unsigned bench_stream(const unsigned char* hbm, long long hbm_pages, int inflight, volatile int& s_done,
                                 int ahead = 0, int kind = 0) {
  const unsigned long long policy = mk_policy_stream();
  constexpr long long row_bytes = PIPE_COLS * 2;
  long long pg = blockIdx.x;
  unsigned n = 0;
  for (;; ++n, pg += gridDim.x) {
    if (n >= (unsigned)inflight) {
      const unsigned m = n - inflight;
      while (!mk_mbar_test(pipe_full((int)(m % PIPE_SLOTS)), (m / PIPE_SLOTS) & 1u)) {}
    }
    if (s_done) break;
    if (pg >= hbm_pages) pg -= hbm_pages;
    const int slot = (int)(n % PIPE_SLOTS);
    if (kind == 1) {
      constexpr int units = (int)(PIPE_ROWS * row_bytes / 16), per_row = (int)(row_bytes / 16);
      const unsigned char* src = hbm + pg * PIPE_ROWS * row_bytes;
      for (int u = lane_id(); u < units; u += WARP)
        mk_cp_async16(pipe_page(slot) + (u / per_row) * PIPE_LD * 2 + (u % per_row) * 16,
                      src + (u / per_row) * row_bytes + (u % per_row) * 16, true);
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(mk_smem_addr(pipe_full(slot))) : "memory");
      continue;
    }
    if (lane_id() == 0) mk_mbar_arrive_tx(pipe_full(slot), (unsigned)(PIPE_ROWS * row_bytes));
    mk_syncwarp();
    if (lane_id() < PIPE_ROWS)
      mk_bulk_copy(pipe_page(slot) + lane_id() * PIPE_LD * 2, hbm + (pg * PIPE_ROWS + lane_id()) * row_bytes,
                   (unsigned)row_bytes, pipe_full(slot), policy);
    if (ahead > 0 && lane_id() < PIPE_ROWS) {
      long long pf = pg + (long long)ahead * gridDim.x;
      while (pf >= hbm_pages) pf -= hbm_pages;
      mk_bulk_prefetch_l2(hbm + (pf * PIPE_ROWS + lane_id()) * row_bytes, (unsigned)row_bytes);
    }
  }
  for (unsigned m = n > (unsigned)inflight ? n - inflight : 0u; m < n; ++m)  // drain: every copy lands
    while (!mk_mbar_test(pipe_full((int)(m % PIPE_SLOTS)), (m / PIPE_SLOTS) & 1u)) {}
  return n;
}

// thread 0 clears the done flag and sets up the slots' mbarriers (kind 1: 32 arrivals each, one a
// lane), then the block's barrier
__device__ void bench_init(volatile int& s_done, int kind) {
  if (mk_tid() == 0) {
    s_done = 0;
    for (int s = 0; s < PIPE_SLOTS; ++s) mk_mbar_init(pipe_full(s), kind == 1 ? (unsigned)WARP : 1u);
    mk_mbar_init_fence();
  }
  __syncthreads();
}

extern "C" __global__ void __launch_bounds__(NT + WARP, 1)
mk_bench_fence(const unsigned char* hbm, long long hbm_pages, int reps, int mode, int inflight, long long gap_ns,
               float* outs, unsigned* counters, long long* cyc_sum, long long* cyc_max, long long* pages_ns,
               int ahead, int kind) {
  static_assert(PIPE_SLOTS >= 2, "page slots to stream into");
  // (no static shared memory: the plan's is all there is; the first slot's empty mbarrier word,
  // unused here, holds the done flag)
  volatile int& s_done = *reinterpret_cast<volatile int*>(pipe_empty(0));
  const int tid = mk_tid();
  bench_init(s_done, kind);
  if (tid >= NT) {  // the streaming warp
    if (tid >= NT + WARP || inflight <= 0) return;
    const unsigned n = bench_stream(hbm, hbm_pages, inflight, s_done, ahead, kind);
    if (lane_id() == 0) pages_ns[2 * blockIdx.x] = n;  // pages streamed while the signals ran
    return;
  }
  const unsigned long long g_start = mk_globaltimer();
  long long sum = 0, mx = 0;
  unsigned* ctr = counters + blockIdx.x * 32;
  for (int r = 0; r < reps; ++r) {
    outs[(size_t)blockIdx.x * NT + tid] = (float)r;  // the epilogue's stores
    mk_barrier();
    if (tid == 0) {
      const long long c0 = clock64();
      if (mode == 0) mk_red_release_add(ctr, 1u);
      else if (mode == 1) bench_fence_acq_rel();
      else if (mode == 2) bench_red_relaxed(ctr);
      else if (mode == 3) { bench_bulk_store_wait(outs + (size_t)blockIdx.x * NT, mk_smem + OFF_XS); bench_red_relaxed(ctr); }
      else { bench_fence_sc(); bench_red_relaxed(ctr); }
      const long long c1 = clock64();
      if (r > 0) { sum += c1 - c0; mx = c1 - c0 > mx ? c1 - c0 : mx; }
      const unsigned long long g = mk_globaltimer();
      while (mk_globaltimer() - g < (unsigned long long)gap_ns) {}
    }
    mk_barrier();
  }
  if (tid == 0) {
    cyc_sum[blockIdx.x] = sum; cyc_max[blockIdx.x] = mx;
    pages_ns[2 * blockIdx.x + 1] = (long long)(mk_globaltimer() - g_start);
    s_done = 1;
  }
}

// The hop: block 0 adds 1 to the counters (red.release.gpu, `copies` replicas 256 bytes apart)
// every gap_ns; every other block polls its replica (blockIdx % copies) as spin_geq does (relaxed
// loads here, hot for `hot` polls, then sleeping 32 ns doubling to max_ns) until it sees the new
// count, and stamps the global timer. seen[r * grid + b] - seen[r * grid] is how long after the add
// block b saw it: their spread is what the last consumer of an event waits beyond the first.
extern "C" __global__ void __launch_bounds__(NT, 1)
mk_bench_poll(unsigned* counters, int reps, long long gap_ns, int copies, int hot, int max_ns, long long* seen) {
  const int b = blockIdx.x;
  if (threadIdx.x != 0) return;
  for (int r = 0; r < reps; ++r) {
    if (b == 0) {
      const unsigned long long g = mk_globaltimer();
      while (mk_globaltimer() - g < (unsigned long long)gap_ns) {}
      const unsigned long long t = mk_globaltimer();
      for (int k = 0; k < copies; ++k) mk_red_release_add(counters + 64 * k, 1u);
      seen[(size_t)r * gridDim.x] = (long long)t;
    } else {
      const unsigned* p = counters + 64 * (b % copies);
      unsigned ns = 32;
      for (int it = 0; mk_ld_relaxed(p) < (unsigned)(r + 1); ++it)
        if (it >= hot) { mk_sleep(ns); if (ns < (unsigned)max_ns) ns <<= 1; }
      seen[(size_t)r * gridDim.x + b] = (long long)mk_globaltimer();
    }
  }
}

// N relaxed polls of p in flight, a new one ~GAP cycles after the last, until one sees >= want
template <int N, int GAP>
__device__ __forceinline__ void bench_poll_pipe(const unsigned* p, unsigned want) {
  unsigned v[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    v[k] = mk_ld_relaxed(p);
    const long long c0 = clock64();
    while (clock64() - c0 < GAP) {}
  }
  for (;;) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (v[k] >= want) return;
      v[k] = mk_ld_relaxed(p);
      const long long c0 = clock64();
      while (clock64() - c0 < GAP) {}
    }
  }
}

// The hop beside the weight stream: as mk_bench_poll (one replica, the megakernel's backoff), but
// the pollers spin on acquire loads (poll_counter's) while one more warp of each polling block
// streams HBM into the page slots with `inflight` pages in flight (block 0, the adder, streams
// nothing, so its release does not wait): does a poll's round trip queue behind the copies?
extern "C" __global__ void __launch_bounds__(NT + WARP, 1)
mk_bench_poll_stream(unsigned* counters, int reps, long long gap_ns, const unsigned char* hbm, long long hbm_pages,
                     int inflight, int mode, long long* seen, int ahead, int kind) {
  volatile int& s_done = *reinterpret_cast<volatile int*>(pipe_empty(0));
  const int tid = mk_tid(), b = blockIdx.x;
  bench_init(s_done, kind);
  if (tid >= NT) {  // the streaming warp (not on the adder's block)
    if (tid >= NT + WARP || inflight <= 0 || b == 0) return;
    bench_stream(hbm, hbm_pages, inflight, s_done, ahead, kind);
    return;
  }
  if (tid == 0) {
    for (int r = 0; r < reps; ++r) {
      if (b == 0) {
        const unsigned long long g = mk_globaltimer();
        while (mk_globaltimer() - g < (unsigned long long)gap_ns) {}
        const unsigned long long t = mk_globaltimer();
        mk_red_release_add(counters, 1u);
        seen[(size_t)r * gridDim.x] = (long long)t;
      } else {
        if (mode >= 3) {
          // relaxed polls kept in flight, a new one every ~gap cycles (a poll's round trip queues
          // behind the SM's copies: several in flight see the add sooner), one acquire fence after
          if (mode == 3) bench_poll_pipe<4, 300>(counters, (unsigned)(r + 1));
          else bench_poll_pipe<8, 150>(counters, (unsigned)(r + 1));
          mk_acquire_fence();
          seen[(size_t)r * gridDim.x + b] = (long long)mk_globaltimer();
          continue;
        }
        unsigned ns = 32;
        for (int it = 0;; ++it) {
          unsigned v;
          if (mode == 0) asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counters) : "memory");
          else v = mk_ld_relaxed(counters);
          if (v >= (unsigned)(r + 1)) break;
          if (it >= 64) { mk_sleep(ns); if (ns < 256u) ns <<= 1; }
        }
        if (mode == 1) mk_acquire_fence();  // acquire_once's pattern: relaxed polls, one acquire fence
        seen[(size_t)r * gridDim.x + b] = (long long)mk_globaltimer();
      }
    }
    s_done = 1;
  }
}

// The stream beside shared-memory readers: one warp streams HBM into the page slots (kind 0: bulk
// copies, 1: 16-byte cp.async) with `inflight` pages in flight for `dur_ns`, while the NT consumer
// threads (readers > 0) read the slots' bytes as the K-split consumers do (8 rows of 8 bytes a lane,
// summed, the slots one after another) without waiting for them: do the cp.async copies' writes into
// shared memory slow the stream, or the readers, where bulk copies' do not? out[b]: the pages
// streamed, out[grid + b]: the bytes the block's readers read, sink: the readers' sums (kept live).
extern "C" __global__ void __launch_bounds__(NT + WARP, 1)
mk_bench_stream_read(const unsigned char* hbm, long long hbm_pages, int inflight, int kind, int readers,
                     long long dur_ns, long long* out, float* sink) {
  volatile int& s_done = *reinterpret_cast<volatile int*>(pipe_empty(0));
  const int tid = mk_tid();
  bench_init(s_done, kind);
  if (tid >= NT) {
    if (tid >= NT + WARP) return;
    const unsigned n = bench_stream(hbm, hbm_pages, inflight, s_done, 0, kind);
    if (lane_id() == 0) out[blockIdx.x] = n;
    return;
  }
  const unsigned long long t0 = mk_globaltimer();
  float acc = 0.f;
  long long bytes = 0;
  if (readers) {
    const int w = warp_id(), lane = lane_id();
    const int col = w * (PIPE_COLS / NW) + 4 * lane;
    for (int it = 0; mk_globaltimer() - t0 < (unsigned long long)dur_ns; ++it) {
      const unsigned char* pg = pipe_page(it % PIPE_SLOTS) + col * 2;
#pragma unroll
      for (int r = 0; r < PIPE_ROWS; ++r) {
        const uint2 v = *reinterpret_cast<const uint2*>(pg + r * PIPE_LD * 2);
        acc += __uint_as_float(v.x) + __uint_as_float(v.y);
      }
      bytes += PIPE_ROWS * 8;
    }
  } else {
    while (mk_globaltimer() - t0 < (unsigned long long)dur_ns) {}
  }
  mk_barrier();
  if (tid == 0) s_done = 1;
  sink[blockIdx.x * NT + tid] = acc;
  atomicAdd(reinterpret_cast<unsigned long long*>(out + gridDim.x + blockIdx.x), (unsigned long long)bytes);
}
"""

MODES = ("release", "fence", "relaxed", "bulk store, wait, relaxed", "fence.sc.gpu, then relaxed")


def config():
    from codegen_fixtures import rr_schedule, taskgraph
    from mkc.codegen.render import kernel_config
    from mkc.target import get_target

    t = get_target("h200")
    tg = taskgraph("llama-3.2-1b", 1, 1024, t)
    cfg = kernel_config(tg, rr_schedule(tg, t, "atomic"), t)
    if dict(cfg.consts).get("PIPE_SLOTS", 0) < 2:
        raise SystemExit("batch 1: no weight pipeline in its default plan")
    return cfg, t


def source() -> str:
    from mkc.codegen import source as S
    from mkc.codegen.render import config_header

    cfg, t = config()
    prologue = config_header(cfg, t).removeprefix("#pragma once\n")
    return S.inline(prologue + '#include "mkc/pipe.cuh"\n\nusing namespace mk;\n' + WRAPPER)


def build(out_dir=None):
    from mkc.targets.nvidia.compiler import build_cubin

    cfg, _ = config()
    return build_cubin(source(), cfg.arch, out_dir=out_dir, verbose=True, name="bench_fence")


def stream_setup(kernel: str):
    """What a kernel beside the weight stream needs: the plan, its consts, the driver, the kernel
    loaded with the plan's shared memory, the SM count, the page shape and 2 GiB of HBM to stream."""
    import torch

    from mkc.targets.nvidia.driver import CudaDriver

    cfg, _ = config()
    c = dict(cfg.consts)
    drv = CudaDriver()
    kern = drv.load(build().cubin.read_bytes(), kernel, cfg.smem_bytes)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, cols = c["PIPE_ROWS"], c["PIPE_COLS"]
    pages = (2 << 30) // (rows * cols * 2)
    hbm = torch.empty(pages * rows * cols * 2, dtype=torch.uint8, device="cuda")
    return cfg, drv, kern, sms, rows, cols, pages, hbm


def run(reps: int, gap_ns: int, inflights=(0, 1, 2, 4, 11), aheads=(0,), modes=MODES, kind=0) -> list[dict]:
    import subprocess

    import numpy as np
    import torch

    cfg, drv, kern, sms, rows, cols, pages, hbm = stream_setup("mk_bench_fence")
    c = dict(cfg.consts)
    outs = torch.zeros(sms * cfg.consumer_threads, dtype=torch.float32, device="cuda")
    counters = torch.zeros(sms * 32, dtype=torch.int32, device="cuda")
    csum = torch.zeros(sms, dtype=torch.int64, device="cuda")
    cmax = torch.zeros(sms, dtype=torch.int64, device="cuda")
    pns = torch.zeros(2 * sms, dtype=torch.int64, device="cuda")
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    mhz = float(out[0]) if out else 1980.0
    rows_out = []
    for inflight, ahead in ((i, a) for i in inflights for a in aheads):
        if inflight > c["PIPE_SLOTS"]:
            continue
        for mode, name in enumerate(MODES):
            if name not in modes:
                continue
            args = [("ptr", hbm.data_ptr()), ("ptr", pages), ("i32", reps), ("i32", mode), ("i32", inflight),
                    ("ptr", gap_ns), ("ptr", outs.data_ptr()), ("ptr", counters.data_ptr()), ("ptr", csum.data_ptr()),
                    ("ptr", cmax.data_ptr()), ("ptr", pns.data_ptr()), ("i32", ahead), ("i32", kind)]
            for _ in range(2):  # the first launch warms up
                drv.launch(kern, sms, cfg.consumer_threads + 32, args)
                drv.synchronize()
            mean = csum.cpu().numpy().astype(float) / (reps - 1)
            worst = cmax.cpu().numpy().astype(float)
            pn = pns.cpu().numpy().astype(float).reshape(sms, 2)
            tbps = pn[:, 0].sum() * rows * cols * 2 / np.median(pn[:, 1]) / 1e3 if inflight else 0.0
            rows_out.append(dict(mode=name, inflight=inflight, ahead=ahead, kind=kind, cycles_mean=float(np.median(mean)),
                                 cycles_worst=float(np.median(worst)), us_mean=float(np.median(mean)) / mhz,
                                 us_worst=float(np.median(worst)) / mhz, mhz=mhz, tbps=float(tbps)))
    return rows_out


def run_poll(reps: int, gap_ns: int) -> list[dict]:
    import numpy as np
    import torch

    from mkc.targets.nvidia.driver import CudaDriver

    cfg, _ = config()
    drv = CudaDriver()
    kern = drv.load(build().cubin.read_bytes(), "mk_bench_poll", 0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for copies, hot, max_ns in ((1, 64, 256), (1, 1 << 30, 256), (1, 64, 32), (8, 64, 256), (32, 64, 256)):
        counters = torch.zeros(64 * 32, dtype=torch.int32, device="cuda")
        seen = torch.zeros(reps * sms, dtype=torch.int64, device="cuda")
        args = [("ptr", counters.data_ptr()), ("i32", reps), ("ptr", gap_ns), ("i32", copies), ("i32", hot),
                ("i32", max_ns), ("ptr", seen.data_ptr())]
        drv.launch(kern, sms, cfg.consumer_threads, args)
        drv.synchronize()
        s = seen.cpu().numpy().astype(float).reshape(reps, sms)[reps // 10:]
        d = (s[:, 1:] - s[:, :1]) / 1e3  # us after the add, each polling block
        rows.append(dict(copies=copies, hot=hot, max_ns=max_ns, first=float(np.median(d.min(1))),
                         median=float(np.median(np.median(d, 1))), last=float(np.median(d.max(1)))))
    return rows


POLL_MODES = ("acquire polls", "relaxed polls, one acquire fence", "relaxed polls (no acquire: the floor)",
              "4 relaxed polls in flight, 300 cycles apart, one acquire fence",
              "8 relaxed polls in flight, 150 cycles apart, one acquire fence")


def run_poll_stream(reps: int, gap_ns: int, inflights=(0, 3, 11), aheads=(0,), modes=POLL_MODES, kind=0) -> list[dict]:
    import torch

    cfg, drv, kern, sms, _, _, pages, hbm = stream_setup("mk_bench_poll_stream")
    rows = []
    for inflight, ahead, (mode, mname) in ((i, a, m) for i in inflights for a in aheads for m in enumerate(POLL_MODES)):
        if mname not in modes:
            continue
        counters = torch.zeros(64, dtype=torch.int32, device="cuda")
        seen = torch.zeros(reps * sms, dtype=torch.int64, device="cuda")
        args = [("ptr", counters.data_ptr()), ("i32", reps), ("ptr", gap_ns), ("ptr", hbm.data_ptr()), ("ptr", pages),
                ("i32", inflight), ("i32", mode), ("ptr", seen.data_ptr()), ("i32", ahead), ("i32", kind)]
        drv.launch(kern, sms, cfg.consumer_threads + 32, args)
        drv.synchronize()
        s = seen.cpu().numpy().astype(float).reshape(reps, sms)[reps // 10:]
        d = (s[:, 1:] - s[:, :1]) / 1e3
        rows.append(dict(inflight=inflight, ahead=ahead, mode=mname, first=float(d.min(1).mean()), mean=float(d.mean()),
                         last=float(d.max(1).mean())))
    return rows


def run_stream_read(dur_ns: int = 2_000_000) -> list[dict]:
    import torch

    cfg, drv, kern, sms, rows_, cols, pages, hbm = stream_setup("mk_bench_stream_read")
    sink = torch.zeros(sms * cfg.consumer_threads, dtype=torch.float32, device="cuda")
    rows = []
    for inflight in (3, 11):
        for kind in (0, 1):
            for readers in (0, 1):
                out = torch.zeros(2 * sms, dtype=torch.int64, device="cuda")
                args = [("ptr", hbm.data_ptr()), ("ptr", pages), ("i32", inflight), ("i32", kind), ("i32", readers),
                        ("ptr", dur_ns), ("ptr", out.data_ptr()), ("ptr", sink.data_ptr())]
                for _ in range(2):  # the first launch warms up
                    out.zero_()
                    drv.launch(kern, sms, cfg.consumer_threads + 32, args)
                    drv.synchronize()
                o = out.cpu().numpy().astype(float)
                rows.append(dict(inflight=inflight, kind=KINDS[kind], readers=bool(readers),
                                 stream_tbps=float(o[:sms].sum() * rows_ * cols * 2 / dur_ns / 1e3),
                                 read_tbps=float(o[sms:].sum() / dur_ns / 1e3)))
    return rows


def stream_read_table(a) -> None:
    print("\n| pages in flight | streamed by | consumers reading the slots | the stream, TB/s (all SMs) | "
          "the reads, TB/s of shared memory (all SMs) |")
    print("|---|---|---|---|---|")
    for r in run_stream_read():
        print(f"| {r['inflight']} | {r['kind']} | {'yes' if r['readers'] else 'no'} | {r['stream_tbps']:.2f} | "
              f"{r['read_tbps']:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--gap-ns", type=int, default=3000)
    ap.add_argument("--compile-only", metavar="DIR", help="build the wrapper into DIR and print ptxas's report")
    ap.add_argument("--only", choices=("fence", "poll", "poll-stream", "ahead", "ldgsts", "stream-read", "sc"),
                    help="one of the tables (ahead: the release and the poll beside 3 copies in flight with the "
                         "page 0/8/16/32 pages past each copy prefetched into L2, as CodegenOptions.l2_ahead does; "
                         "ldgsts: the release and the poll beside pages streamed by bulk copies and by 16-byte "
                         "cp.async; stream-read: the stream's rate both ways with the consumer warps reading the "
                         "page slots as the K-split consumers do, and without; sc: the release against "
                         "fence.sc.gpu + a relaxed add, beside 0, 3 and 11 pages in flight)")
    a = ap.parse_args()
    if a.compile_only:
        res = build(Path(a.compile_only))
        print("; ".join(line.strip() for line in res.log.splitlines() if "Used" in line or "spill" in line))
        return
    if a.only in (None, "fence"):
        fence_table(a)
    if a.only in (None, "poll"):
        poll_table(a)
    if a.only in (None, "poll-stream"):
        print("\n| pages in flight on each polling SM | the poll | first poller done, us (mean over rounds) | mean | last |")
        print("|---|---|---|---|---|")
        for r in run_poll_stream(a.reps, a.gap_ns):
            print(f"| {r['inflight']} | {r['mode']} | {r['first']:.3f} | {r['mean']:.3f} | {r['last']:.3f} |", flush=True)
    if a.only == "ahead":
        ahead_tables(a)
    if a.only == "ldgsts":
        ldgsts_tables(a)
    if a.only == "stream-read":
        stream_read_table(a)
    if a.only == "sc":
        print("| signal | pages in flight beside it | cycles, mean (median over SMs) | worst | us, mean | us, worst | "
              "the stream, TB/s |")
        print("|---|---|---|---|---|---|---|")
        for r in run(a.reps, a.gap_ns, inflights=(0, 3, 11), modes=("release", "fence.sc.gpu, then relaxed", "relaxed")):
            print(f"| {r['mode']} | {r['inflight']} | {r['cycles_mean']:.0f} | {r['cycles_worst']:.0f} | "
                  f"{r['us_mean']:.3f} | {r['us_worst']:.3f} | {r['tbps']:.2f} |", flush=True)


KINDS = ("bulk copies", "16-byte cp.async")


def ldgsts_tables(a) -> None:
    """Does the release's fence (and a poll) wait for pages in flight when they are 16-byte cp.async
    (LDGSTS) copies of one warp rather than bulk copies?"""
    print("| signal | pages in flight | streamed by | us, mean | us, worst | the stream, TB/s |")
    print("|---|---|---|---|---|---|")
    for inflight in (0, 1, 3, 4, 11):
        for kind in (0, 1):
            if inflight == 0 and kind:
                continue
            for r in run(a.reps, a.gap_ns, inflights=(inflight,), modes=("release",), kind=kind):
                print(f"| {r['mode']} | {r['inflight']} | {KINDS[kind]} | {r['us_mean']:.3f} | {r['us_worst']:.3f} | "
                      f"{r['tbps']:.2f} |", flush=True)
    print("\n| pages in flight on each polling SM | streamed by | the poll | first poller, us | mean | last |")
    print("|---|---|---|---|---|---|")
    for inflight in (3, 11):
        for kind in (0, 1):
            for r in run_poll_stream(a.reps, a.gap_ns, inflights=(inflight,), modes=POLL_MODES[:1], kind=kind):
                print(f"| {r['inflight']} | {KINDS[kind]} | {r['mode']} | {r['first']:.3f} | {r['mean']:.3f} | "
                      f"{r['last']:.3f} |", flush=True)


def ahead_tables(a) -> None:
    aheads = (0, 8, 16, 32)
    print("| signal | copies in flight | L2 prefetch, pages ahead | us, mean | us, worst | the stream, TB/s |")
    print("|---|---|---|---|---|---|")
    for r in run(a.reps, a.gap_ns, inflights=(3,), aheads=aheads, modes=("release",)):
        print(f"| {r['mode']} | {r['inflight']} | {r['ahead']} | {r['us_mean']:.3f} | {r['us_worst']:.3f} | "
              f"{r['tbps']:.2f} |", flush=True)
    print("\n| copies in flight on each polling SM | L2 prefetch, pages ahead | the poll | first poller, us | mean | last |")
    print("|---|---|---|---|---|---|")
    for r in run_poll_stream(a.reps, a.gap_ns, inflights=(0, 3), aheads=(0,), modes=POLL_MODES):
        print(f"| {r['inflight']} | {r['ahead']} | {r['mode']} | {r['first']:.3f} | {r['mean']:.3f} | {r['last']:.3f} |",
              flush=True)
    for r in run_poll_stream(a.reps, a.gap_ns, inflights=(3,), aheads=aheads[1:], modes=POLL_MODES[:1]):
        print(f"| {r['inflight']} | {r['ahead']} | {r['mode']} | {r['first']:.3f} | {r['mean']:.3f} | {r['last']:.3f} |",
              flush=True)


def fence_table(a) -> None:
    print("| signal | pages in flight beside it | cycles, mean (median over SMs) | worst | us, mean | us, worst | "
          "the stream, TB/s |")
    print("|---|---|---|---|---|---|---|")
    for r in run(a.reps, a.gap_ns):
        print(f"| {r['mode']} | {r['inflight']} | {r['cycles_mean']:.0f} | {r['cycles_worst']:.0f} | "
              f"{r['us_mean']:.3f} | {r['us_worst']:.3f} | {r['tbps']:.2f} |", flush=True)


def poll_table(a) -> None:
    print("\n| counter replicas | hot polls | longest sleep, ns | first poller sees the add, us | median | last |")
    print("|---|---|---|---|---|---|")
    for r in run_poll(a.reps, a.gap_ns):
        hot = "all" if r["hot"] >= 1 << 30 else r["hot"]
        print(f"| {r['copies']} | {hot} | {r['max_ns']} | {r['first']:.3f} | {r['median']:.3f} | {r['last']:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()
