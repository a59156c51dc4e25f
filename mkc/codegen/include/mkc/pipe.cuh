// The cross-task weight pipeline (DevicePlan.pipe_slots; batch 1, FMA path, bulk copies).
//
// A producer warp beside the NT consumer threads walks the worker's queue, step after step, and
// copies the weight rows of every GEMV task into PIPE_SLOTS pages of shared memory: a page holds
// PIPE_ROWS rows of PIPE_COLS columns (rows PIPE_LD elements apart), each row one bulk asynchronous
// copy completing on the page's `full` mbarrier. On the FMA path (batch 1) a page is 8 rows, one
// per consumer warp; on the tensor-core path one 16-row MMA tile whose columns the warps split.
// Weights never depend on anything, so the producer waits only for a free page (its `empty` mbarrier, one arrival per consumer warp), never for an
// event: while a task waits for its inputs, and while it runs its epilogue and signals, the next
// pages keep streaming. Consumers take the pages in the same order: a GEMV task's row blocks, each
// block's K-chunks of KCH columns (one chunk of all K on the FMA path), each chunk's rows in groups
// of PIPE_ROWS, each group's K-slices of PIPE_COLS in order (so a warp sums a row's slices in
// registers). Both sides count pages in Ctx::pipe_n; page n is slot n % PIPE_NS, in its
// (n / PIPE_NS)-th use, whose phase parity is that use's parity.
#pragma once
#include "mkc/common.cuh"

namespace mk {

#if MKC_HAS_BULK_COPY
// slots of the ring (1 where a build has no pipeline: its code is compiled, never run)
constexpr int PIPE_NS = PIPE_SLOTS > 0 ? PIPE_SLOTS : 1;
__device__ __forceinline__ unsigned char* pipe_page(int slot) { return mk_smem + OFF_PIPE + slot * PIPE_ROWS * PIPE_LD * 2; }
__device__ __forceinline__ void* pipe_full(int slot) { return mk_smem + OFF_MBAR + 8 * slot; }
__device__ __forceinline__ void* pipe_empty(int slot) { return mk_smem + OFF_MBAR + 8 * (PIPE_NS + slot); }

// A page that never fills or frees is a bug in mkc (both sides walk the same tasks), never a slow
// producer elsewhere: after PIPE_TIMEOUT_NS the block raises the abort flag and traps, so the
// launch fails with an error instead of hanging the GPU.
constexpr unsigned long long PIPE_TIMEOUT_NS = 2000000000ull;
__device__ __forceinline__ void pipe_wait_phase(const Ctx& c, void* bar, unsigned parity) {
  // (traced: a non-blocking first test, so the time a page took to land is counted)
  if (TRACE ? mk_mbar_test_now(bar, parity) : mk_mbar_test(bar, parity)) return;
  const unsigned long long t0 = mk_globaltimer();
  while (!mk_mbar_test(bar, parity)) {
    if (mk_globaltimer() - t0 > PIPE_TIMEOUT_NS) {
      mk_st_relaxed(c.ws + WS_ABORT, 1u);
      mk_trap();
    }
  }
  if constexpr (TRACE) c.pipe_late_ns += mk_globaltimer() - t0;
}

// PIPE_TAIL (CodegenOptions.pipe_quiet): the block's flag words 2 and 3. Word 2 is set while the
// consumers close a GEMV task (from the wait for one of its last PIPE_TAIL pages to the end of its
// signal); word 3 has bit s set while slot s holds such a page. The producer issues no copy while
// word 2 is set, so that the task's release fence, which waits for the SM's bulk copies in flight,
// finds none issued since its last pages. That pays where the ring is ahead of the consumers (the
// tensor-core path at batch 8); where the stream is HBM-bound (batch 1) the held copies are the next
// task's first pages, which then start late (BENCHMARKS.md, thirty-eighth session). Only a choice of
// when to issue: which bytes land in which page, and when the consumers may read them (the page's
// full mbarrier), are the same. (pipe_closing and pipe_tail_slots: common.cuh)
static_assert(PIPE_TAIL == 0 || PIPE_NS <= 32, "the tail bits of the slots are one word: at most 32 slots");

// a consumer's wait for page n (slot n % PIPE_NS, in the phase of its use's parity)
__device__ __forceinline__ void pipe_wait(const Ctx& c, unsigned n) {
  const int slot = (int)(n % PIPE_NS);
  pipe_wait_phase(c, pipe_full(slot), (n / PIPE_NS) & 1u);
  if constexpr (PIPE_TAIL > 0) {
    if ((*pipe_tail_slots() >> slot) & 1u) *pipe_closing() = 1u;
  }
}

// one thread, before the block's first barrier
__device__ void pipe_init() {
  for (int s = 0; s < PIPE_NS; ++s) {
    // the producer's arrival (with the page's bytes), or with PIPE_LDGSTS each producer lane's once
    // its cp.async copies have landed
    mk_mbar_init(pipe_full(s), PIPE_LDGSTS ? (unsigned)WARP : 1u);
    mk_mbar_init(pipe_empty(s), (unsigned)NW);  // one arrival per consumer warp
  }
  mk_mbar_init_fence();
}

// The consumers have left the step loop (an early exit of decode, or an abort) and will free no
// more pages: wait until the copies already issued (pages n - PIPE_NS .. n - 1, each its slot's
// latest use) have landed, so none is in flight when the block exits.
__device__ void pipe_drain(const Ctx& c, unsigned n) {
  for (unsigned m = n > (unsigned)PIPE_NS ? n - PIPE_NS : 0u; m < n; ++m)
    pipe_wait_phase(c, pipe_full((int)(m % PIPE_NS)), (m / PIPE_NS) & 1u);
}

// The K-chunk of a GEMV task of K columns both sides walk: all of K on the FMA path (the whole
// input is staged), else balanced chunks of whole pages, at most KCB (the staged input's columns)
template <int K>
__device__ constexpr int pipe_kch() {
  if constexpr (!MMA_GEMV) {
    return K;
  } else {
    constexpr int kcb = KCB > 0 ? KCB : PIPE_COLS, nch = (K + kcb - 1) / kcb;
    return ((K + nch - 1) / nch + PIPE_COLS - 1) / PIPE_COLS * PIPE_COLS;
  }
}

// The copying producer's count of pages issued, for the L2 prefetcher (PIPE_L2_AHEAD): word 1 of
// the block's flag region (word 0 is the abort flag), zeroed at launch with it.
__device__ __forceinline__ volatile unsigned* pipe_issued(volatile int* s_abort) {
  return reinterpret_cast<volatile unsigned*>(s_abort) + 1;
}

// The producer's side of one GEMV task: kd's rows (Kind: blocks/begin/row as kinds.cuh), K columns
// each. False when the consumers stopped (an abort, or decode's early exit: they free no more pages).
// PF (the L2 prefetcher, PIPE_L2_AHEAD > 0): the same walk over the same pages, but each page's rows
// are only prefetched into L2, at most PIPE_L2_AHEAD pages past what the copier has issued; it
// waits only for the copier, which never waits for it (so while the ring is full and the consumers
// wait on an event, HBM keeps streaming the next pages into L2, and their copies find them there).
template <int K, class Kind, bool PF = false>
__device__ bool pipe_issue(const Ctx& c, Kind& kd, unsigned long long policy, volatile int* s_abort) {
  constexpr int KCH = pipe_kch<K>();
  const int lane = lane_id();
  const int nblk = kd.blocks();
  const unsigned n_first = c.pipe_n;  // (PIPE_TAIL: the task's first page)
  for (int blk = 0; blk < nblk; ++blk) {
    const int nr = kd.begin(blk);
    for (int c0 = 0; c0 < K; c0 += KCH) {
      const int nsl = (min(KCH, K - c0) + PIPE_COLS - 1) / PIPE_COLS;
      for (int r0 = 0; r0 < nr; r0 += PIPE_ROWS) {
        const int rows = min(PIPE_ROWS, nr - r0);
        for (int sl = 0; sl < nsl; ++sl) {
          const unsigned n = c.pipe_n++;
          if constexpr (PF) {
            // d: how far page n is past the copier (negative: copied already, nothing to prefetch)
            int d;
            // (bounded as the copier's wait for a free page is: the copier's count moves whenever the
            // consumers free pages, and when they stop, the block's abort flag ends this loop)
            while ((d = (int)(n - *pipe_issued(s_abort))) >= PIPE_L2_AHEAD) {
              if (*s_abort) { return false; }
              mk_sleep(64);
            }
            const int k0 = c0 + sl * PIPE_COLS;
            if (d >= 0 && lane < rows)
              mk_bulk_prefetch_l2(kd.row(r0 + lane) + k0, (unsigned)(min(PIPE_COLS, K - k0) * 2), policy);
            continue;
          }
          const int slot = (int)(n % PIPE_NS);
          const unsigned use = n / PIPE_NS;
          if (use > 0) {
            // the consumers' release of this slot's previous use
            // No time bound here: the consumers free this page once their task's waits end, and those
            // waits are bounded (spin_limit); when one gives up, the block's abort flag tells this
            // loop to drain and stop. (A trap here would kill the launch before the consumers could
            // report which wait timed out.)
            while (!mk_mbar_test(pipe_empty(slot), (use - 1) & 1u)) {
              if (*s_abort) { pipe_drain(c, n); return false; }
            }
          }
          if constexpr (PIPE_INFLIGHT > 0) {
            // at most PIPE_INFLIGHT copies in flight: page n - PIPE_INFLIGHT has landed (its slot's
            // use is still that page's: the slot is refilled only at page n - PIPE_INFLIGHT + PIPE_NS > n)
            constexpr unsigned PIF = PIPE_INFLIGHT > 0 ? PIPE_INFLIGHT : 1;  // (no comparison with 0 to warn about)
            if (n >= PIF) {
              const unsigned m = n - PIF;
              while (!mk_mbar_test(pipe_full((int)(m % PIPE_NS)), (m / PIPE_NS) & 1u)) {
                if (*s_abort) { pipe_drain(c, n); return false; }
              }
            }
          }
          const int k0 = c0 + sl * PIPE_COLS, kw = min(PIPE_COLS, K - k0);
          if constexpr (PIPE_TAIL > 0) {
            // a slot's tail bit describes its latest page: cleared as the page is issued (its
            // consumers have freed the slot's previous page, reading its bit before that)
            if (lane == 0) *pipe_tail_slots() &= ~(1u << slot);
            // no copy while a task closes (the consumers then need no page that is not issued
            // already: the closing task's pages all are, and its signal ends the wait)
            while (*pipe_closing()) {
              if (*s_abort) { pipe_drain(c, n); return false; }
            }
          }
          if constexpr (PIPE_LDGSTS) {
            // 16 bytes a copy; each lane's arrival comes once its own copies have landed (the page's
            // rows start 16-byte aligned: K and PIPE_COLS are multiples of 8 columns, as for the bulk
            // copies). A whole slice: each row's copies spread over the lanes, unrolled, with no
            // index arithmetic (a loop dividing by the row's length made the producer issue a page
            // in ~3 us: the kernels ran 3x slower, thirty-seventh session). No L2 policy: with
            // `.L2::cache_hint` (the bulk copies' evict-first) the first launch on an H100 died of an
            // illegal instruction.
            unsigned char* pg = pipe_page(slot);
            if (kw == PIPE_COLS) {
              static_assert(PIPE_COLS % (8 * WARP) == 0, "a slice is whole 16-byte copies, the same number each lane");
              constexpr int PER_LANE = PIPE_COLS / (8 * WARP);
              // lane r finds row r once (qkv's row() walks the task's heads); the others get it by shuffles
              const unsigned pg_s = mk_smem_addr(pg);
              const unsigned long long mine =
                  lane < rows ? reinterpret_cast<unsigned long long>(kd.row(r0 + lane) + k0) : 0ull;
#pragma unroll
              for (int r = 0; r < PIPE_ROWS; ++r) {
                if (r < rows) {
                  const unsigned long long rp = (unsigned long long)mk_shfl_u32((unsigned)(mine >> 32), r) << 32 |
                                                mk_shfl_u32((unsigned)mine, r);
                  const auto* src = reinterpret_cast<const unsigned short*>(rp) + lane * 8;
                  const unsigned dst = pg_s + r * PIPE_LD * 2 + lane * 16;
#pragma unroll
                  for (int q = 0; q < PER_LANE; ++q) mk_cp_async16_s(dst + q * WARP * 16, src + q * WARP * 8);
                }
              }
            } else {
              const int per_row = kw / 8;
              for (int u = lane; u < rows * per_row; u += WARP) {
                const int r = u / per_row, q = u - r * per_row;
                mk_cp_async16(pg + r * PIPE_LD * 2 + q * 16, kd.row(r0 + r) + k0 + q * 8, true);
              }
            }
            mk_cp_async_mbar_arrive(pipe_full(slot));
            if (PIPE_L2_AHEAD > 0 && lane == 0) *pipe_issued(s_abort) = n + 1;
            continue;
          }
          if (lane == 0) mk_mbar_arrive_tx(pipe_full(slot), (unsigned)(rows * kw * 2));
          mk_syncwarp();
          if (lane < rows)
            mk_bulk_copy(pipe_page(slot) + lane * PIPE_LD * 2, kd.row(r0 + lane) + k0, (unsigned)(kw * 2),
                         pipe_full(slot), policy);
          if (PIPE_L2_AHEAD > 0 && lane == 0) *pipe_issued(s_abort) = n + 1;
        }
      }
    }
  }
  if constexpr (PIPE_TAIL > 0 && !PF) {
    // the task's last PIPE_TAIL pages (issued already; a consumer past one of them finds the
    // next, or misses the window, which costs only speed)
    if (lane == 0) {
      unsigned bits = 0u;
      for (unsigned m = c.pipe_n - min(c.pipe_n - n_first, (unsigned)PIPE_TAIL); m < c.pipe_n; ++m) bits |= 1u << (m % PIPE_NS);
      *pipe_tail_slots() |= bits;
    }
  }
  return true;
}

// The consumers' side: out[j] = <row j, xs> for the nr rows of the current block (B = 1), in
// the producer's page order; warp w takes row w of every page. xs is staged in two planes where
// PL (gemv_fma.cuh xs_at4): lane l's inputs of its word s are float4 s of each plane.
template <int K, bool PL>
__device__ __forceinline__ void pipe_rows(const Ctx& c, int nr, const float* xs, float* out) {
  constexpr int NSL = (K + PIPE_COLS - 1) / PIPE_COLS;
  const int lane = lane_id(), w = warp_id();
  for (int r0 = 0; r0 < nr; r0 += PIPE_ROWS) {
    float acc = 0.f;
    const bool mine = r0 + w < nr;
    for (int sl = 0; sl < NSL; ++sl) {
      const unsigned n = c.pipe_n++;
      const int slot = (int)(n % PIPE_NS);
      pipe_wait(c, n);
      if (mine) {
        const int kw = min(PIPE_COLS, K - sl * PIPE_COLS);
        const uint4* wp = reinterpret_cast<const uint4*>(pipe_page(slot) + w * PIPE_COLS * 2);
        if constexpr (PL) {
          static_assert(K % 8 == 0 && PIPE_COLS % 8 == 0, "two planes of whole 8-column words");
          const float4* xa = reinterpret_cast<const float4*>(xs + sl * PIPE_COLS / 2);
          const float4* xb = reinterpret_cast<const float4*>(xs + K / 2 + sl * PIPE_COLS / 2);
#pragma unroll 4
          for (int s = lane; s < kw / 8; s += WARP) acc = dot8(wp[s], xa[s], xb[s], acc);
        } else {
          const float4* xp = reinterpret_cast<const float4*>(xs + sl * PIPE_COLS);
#pragma unroll 4
          for (int s = lane; s < kw / 8; s += WARP) acc = dot8(wp[s], xp[2 * s], xp[2 * s + 1], acc);
        }
      }
      mk_syncwarp();
      if (lane == 0) mk_mbar_arrive(pipe_empty(slot));
    }
    acc = warp_sum(acc);
    if (lane == 0 && mine) out[r0 + w] = acc;
  }
}

// K-split consumers (PIPE_KSPLIT): warp w takes columns [w * PCW, (w + 1) * PCW) of every row of
// every page, lane l four of them. A lane's float4 of inputs is read once per page and used for the
// page's 8 rows (each input word is read once per page instead of once per row: about 290
// shared-memory wavefronts a page instead of 510; the bulk copies' order is unchanged). Each lane
// sums 8 rows over the row group's K-slices in registers; a transposing butterfly leaves lane l with
// row (l >> 2) & 7 summed over the warp, and the warps' partials go to part [2][PIPE_KS_FLUSH * 8][NW]:
// every PIPE_KS_FLUSH row groups (and at the block's end) a block barrier, then the sums over the
// warps in a fixed order into out (double buffered: the next flush's writes come after the next
// barrier, which every thread reaches only after its sums). The staged input is in the plain
// layout.
template <int K>
__device__ __forceinline__ void pipe_rows_ks(const Ctx& c, int nr, const float* xs, float* out, float* part) {
  constexpr int PCW = PIPE_COLS / NW;  // columns per warp of a page
  static_assert(PIPE_ROWS == 8 && PCW == 4 * WARP && K % 4 == 0, "8-row pages, 4 columns per lane");
  constexpr int NSL = (K + PIPE_COLS - 1) / PIPE_COLS;
  const int lane = lane_id(), w = warp_id();
  const int col = w * PCW + 4 * lane;
  int g = 0;
  for (int r0 = 0; r0 < nr; r0 += PIPE_ROWS, ++g) {
    float acc[PIPE_ROWS];
#pragma unroll
    for (int r = 0; r < PIPE_ROWS; ++r) acc[r] = 0.f;
    for (int sl = 0; sl < NSL; ++sl) {
      const unsigned n = c.pipe_n++;
      const int slot = (int)(n % PIPE_NS);
      pipe_wait(c, n);
      if (col < min(PIPE_COLS, K - sl * PIPE_COLS)) {
        const float4 xv = *reinterpret_cast<const float4*>(xs + sl * PIPE_COLS + col);
        const unsigned char* pg = pipe_page(slot) + col * 2;
        // all 8 rows' loads at once, with no branch between them: the rows past `rows` hold a stale
        // page's bytes, summed into accumulators that are never stored (the butterfly below adds
        // only the same row's values)
        uint2 wv[PIPE_ROWS];
#pragma unroll
        for (int r = 0; r < PIPE_ROWS; ++r) wv[r] = *reinterpret_cast<const uint2*>(pg + r * PIPE_LD * 2);
#pragma unroll
        for (int r = 0; r < PIPE_ROWS; ++r) {
          acc[r] = fmaf(mk_lo_bf16(wv[r].x), xv.x, acc[r]); acc[r] = fmaf(mk_hi_bf16(wv[r].x), xv.y, acc[r]);
          acc[r] = fmaf(mk_lo_bf16(wv[r].y), xv.z, acc[r]); acc[r] = fmaf(mk_hi_bf16(wv[r].y), xv.w, acc[r]);
        }
      }
      mk_syncwarp();
      if (lane == 0) mk_mbar_arrive(pipe_empty(slot));
    }
    // transposing butterfly: after the exchanges over lane bits 4, 3, 2 a lane holds one row
    // ((lane >> 2) & 7), then bits 1 and 0 add the four lanes that hold it
    float a4[4], a2[2];
    const bool h16 = lane & 16, h8 = lane & 8, h4 = lane & 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) a4[i] = (h16 ? acc[i + 4] : acc[i]) + mk_shfl_xor(h16 ? acc[i] : acc[i + 4], 16);
#pragma unroll
    for (int i = 0; i < 2; ++i) a2[i] = (h8 ? a4[i + 2] : a4[i]) + mk_shfl_xor(h8 ? a4[i] : a4[i + 2], 8);
    float v = (h4 ? a2[1] : a2[0]) + mk_shfl_xor(h4 ? a2[0] : a2[1], 4);
    v += mk_shfl_xor(v, 2);
    v += mk_shfl_xor(v, 1);
    float* pb = part + ((g / PIPE_KS_FLUSH) & 1) * (PIPE_KS_FLUSH * PIPE_ROWS * NW);
    if ((lane & 3) == 0) pb[((g % PIPE_KS_FLUSH) * PIPE_ROWS + (lane >> 2)) * NW + w] = v;
    if (g % PIPE_KS_FLUSH == PIPE_KS_FLUSH - 1 || r0 + PIPE_ROWS >= nr) {
      mk_barrier();
      const int rb = (g / PIPE_KS_FLUSH) * PIPE_KS_FLUSH * PIPE_ROWS, re = min(nr, r0 + PIPE_ROWS);
      for (int j = rb + mk_tid(); j < re; j += NT) {
        const float* pj = pb + (j - rb) * NW;
        float s = 0.f;
#pragma unroll
        for (int u = 0; u < NW; ++u) s += pj[u];
        out[j] = s;
      }
    }
  }
}
#endif

}  // namespace mk
