// GEMV on tensor cores (render.py turns it on, MMA_GEMV, from batch 2 where the dialect has a bf16
// MMA: MKC_HAS_MMA_BF16). With RING > 0 the weights stream through a cp.async ring in shared memory;
// with RING == 0 through registers, double-buffered. Both variants are always compiled and
// `if constexpr` picks one, so the ring code must stay valid with the manifest's RING = OFF_RING = 0.
#pragma once
#include "mkc/common.cuh"
#include "mkc/sync.cuh"
#include "mkc/gemv_common.cuh"
#include "mkc/pipe.cuh"

#if MKC_HAS_MMA_BF16
namespace mk {

// The input chunk is staged as bf16 [B][XST]. A warp takes units of (16-row tile, range of 8-element
// K segments). Per step, lane (group, quad) takes segments s = sb + 4v + quad (v < U) of weight rows
// group and group + 8 (16-byte loads straight from global memory: the 4 lanes of a group read 64
// contiguous bytes of a row) and the same segments of batch columns group + 8n from shared memory;
// mk_mma_k32 accumulates the 16 x 8 tile of each n. The next step's weight loads go out before this
// step's MMAs, so each lane keeps up to 4U loads in flight.
[[maybe_unused]] constexpr int NTN = (B + 7) / 8;  // tiles of 8 batch columns
// Weight ring (cp.async): RING stages of 2 x U 16-byte segments per thread, thread-private; slot
// (stage, h, v) of all threads is contiguous, so a warp's 16-byte accesses hit disjoint banks.
__device__ __forceinline__ uint4* ring_slot(int st, int h, int v) {
  return reinterpret_cast<uint4*>(mk_smem + OFF_RING) + ((st * 2 + h) * U + v) * NT + mk_tid_kept();
}

// Each accumulator of a warp's 16-row MMA tile (acc[n] from mk_mma_k32): f(r, b, v) for tile row
// r (the lane's group, and group + 8) and batch column b (8n + 2 quad, and + 1) where b < B.
template <class F>
__device__ __forceinline__ void mma_tile_each(const float (&acc)[NTN][4], F&& f) {
  const int g = mk_mma_group(lane_id()), q = mk_mma_quad(lane_id());
#pragma unroll
  for (int n = 0; n < NTN; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int b = 8 * n + 2 * q + e;
        if (B % 8 == 0 || b < B) f(g + 8 * h, b, acc[n][2 * h + e]);
      }
}

// Unit u's accumulators (row tile u / ks, K-part u % ks) out: into the output block (added to it
// with accumulate) when the tile is not split, else into its part of the partial sums.
__device__ __forceinline__ void mma_unit_out(const float (&acc)[NTN][4], int u, int ks, int nr, int nrt, float* out,
                                             float* part, bool accumulate) {
  const int rt = u / ks, p = u % ks;
  mma_tile_each(acc, [&](int r, int b, float v) {
    const int j = rt * 16 + r;
    if (j >= nr) return;
    if (ks == 1) {
      float* o = out + j * OUT_LD + b;
      *o = accumulate ? *o + v : v;
    } else {
      part[(p * nrt * 16 + j) * B + b] = v;
    }
  });
}

// K parts per row tile: enough units for every warp, each at least one step long. (Splitting more
// to even out, say, 12 tiles on 8 warps was slower on the H200: the partials cost a pass and a barrier.)
__device__ __forceinline__ int mma_split_k(int nr, int nseg) {
  const int nrt = (nr + 15) / 16;
  return nrt >= NW ? 1 : max(1, min(NW / nrt, nseg / (4 * U)));
}

// unit u of a chunk: this lane's two weight rows and the unit's segment range [s0, s1)
template <class Rows>
struct MmaUnit {
  const uint4* w[2];
  bool ok[2];
  int s0, s1;
  __device__ __forceinline__ MmaUnit(const Rows& rows, int nr, int c0, int nseg, int ks, int u) {
    const int g = mk_mma_group(lane_id()), rt = u / ks, p = u % ks;
    s0 = nseg * p / ks;
    s1 = nseg * (p + 1) / ks;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = rt * 16 + g + 8 * h;
      ok[h] = j < nr;
      w[h] = reinterpret_cast<const uint4*>(rows.row(ok[h] ? j : 0) + c0);
    }
  }
  // the weight segments of the step at sb; zeros past the unit's range or the task's rows
  template <bool EARLY>
  __device__ __forceinline__ void load(int sb, uint4 (&r)[2][U]) const {
    const int q = mk_mma_quad(lane_id());
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int v = 0; v < U; ++v) {
        const int s = sb + 4 * v + q;
        r[h][v] = make_uint4(0u, 0u, 0u, 0u);
        if (ok[h] && s < s1) {
          if constexpr (EARLY) r[h][v] = mk_ld_weight16_early(w[h] + s);
          else r[h][v] = mk_ld_weight16(w[h] + s);
        }
      }
  }
  // the same segments as load(), copied asynchronously into ring stage st (zeros where load() has them)
  __device__ __forceinline__ void issue(int sb, int st) const {
    const int q = mk_mma_quad(lane_id());
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int v = 0; v < U; ++v) {
        const int s = sb + 4 * v + q;
        const bool in = ok[h] && s < s1;
        mk_cp_async16(ring_slot(st, h, v), in ? w[h] + s : w[h], in);
      }
  }
};

// The steps of this warp's units of a chunk, in order: (unit u, step base sb). The ring's issue side
// walks it RING - 1 steps ahead of the MMAs, across unit boundaries.
template <class Rows>
struct MmaSteps {
  const Rows& rows;
  int nr, c0, nseg, ks, units, u, sb;
  MmaUnit<Rows> un;
  __device__ __forceinline__ MmaSteps(const Rows& r, int nr_, int c0_, int kch)
      : rows(r), nr(nr_), c0(c0_), nseg(kch / 8), ks(mma_split_k(nr_, kch / 8)), units((nr_ + 15) / 16 * ks),
        u(warp_id()), sb(0), un(r, nr_, c0_, kch / 8, ks, warp_id() < units ? warp_id() : 0) {
    sb = un.s0;
  }
  __device__ __forceinline__ bool valid() const { return u < units; }
  __device__ __forceinline__ void advance() {
    sb += 4 * U;
    if (sb >= un.s1) {
      u += NW;
      if (u < units) { un = MmaUnit<Rows>(rows, nr, c0, nseg, ks, u); sb = un.s0; }
    }
  }
};

// Fill the ring with the first RING - 1 steps of this warp's share of a chunk (one commit group
// each, empty past the end): issued before the task waits on its inputs, or before a chunk's input
// is staged, they stream in meanwhile.
template <class Rows>
__device__ __forceinline__ void ring_prologue(const Rows& rows, int nr, int c0, int kch) {
  MmaSteps<Rows> it(rows, nr, c0, kch);
#pragma unroll
  for (int k = 0; k < RING - 1; ++k) {
    if (it.valid()) { it.un.issue(it.sb, k); it.advance(); }
    mk_cp_async_commit();
  }
}

// The first step's weights of this warp's first unit of a chunk, issued before the task waits on
// its inputs (first chunk) or before the chunk's input is staged (the others): they arrive meanwhile.
template <class Rows>
__device__ __forceinline__ void mma_preload(const Rows& rows, int nr, int c0, int kch, uint4 (&pre)[2][U]) {
  const int nseg = kch / 8, ks = mma_split_k(nr, nseg), u = warp_id();
  if (u < (nr + 15) / 16 * ks) {
    const MmaUnit<Rows> un(rows, nr, c0, nseg, ks, u);
    un.template load<true>(un.s0, pre);
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int v = 0; v < U; ++v) pre[h][v] = make_uint4(0u, 0u, 0u, 0u);
  }
}

template <class Rows>
__device__ __forceinline__ void mma_chunk(const Rows& rows, int nr, int c0, int kch, const unsigned short* xs,
                                          float* out, float* part, bool accumulate, const uint4 (&pre)[2][U]) {
  const int lane = lane_id(), g = mk_mma_group(lane), q = mk_mma_quad(lane);
  const int nseg = kch / 8, nrt = (nr + 15) / 16, ks = mma_split_k(nr, nseg);
  for (int u = warp_id(); u < nrt * ks; u += NW) {
    const MmaUnit<Rows> un(rows, nr, c0, nseg, ks, u);
    float acc[NTN][4];
#pragma unroll
    for (int n = 0; n < NTN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    uint4 cur[2][U];
    if (u == warp_id()) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int v = 0; v < U; ++v) cur[h][v] = pre[h][v];
    } else {
      un.template load<false>(un.s0, cur);
    }
#pragma unroll 1
    for (int sb = un.s0; sb < un.s1; sb += 4 * U) {
      uint4 nxt[2][U];
      un.template load<false>(sb + 4 * U, nxt);
#pragma unroll
      for (int v = 0; v < U; ++v) {
        if (sb + 4 * v >= un.s1) break;  // the same for the whole warp, as the MMAs need
        const int s = sb + 4 * v + q;
#pragma unroll
        for (int n = 0; n < NTN; ++n) {
          const int col = 8 * n + g;
          uint4 xv = make_uint4(0u, 0u, 0u, 0u);
          if (s < un.s1 && (B % 8 == 0 || col < B)) xv = mk_ld_shared16(xs + col * XST + 8 * s);
          mk_mma_k32(acc[n], cur[0][v], cur[1][v], xv);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int v = 0; v < U; ++v) cur[h][v] = nxt[h][v];
    }
    mma_unit_out(acc, u, ks, nr, nrt, out, part, accumulate);
  }
  if (ks > 1) {
    mk_barrier();
    for (int idx = mk_tid(); idx < nr * B; idx += NT) {
      float s = 0.f;
      for (int p = 0; p < ks; ++p) s += part[p * nrt * 16 * B + idx];
      float* o = out + idx / B * OUT_LD + idx % B;
      *o = accumulate ? *o + s : s;
    }
  }
  mk_barrier();
}

// mma_chunk fed by the ring: ring_prologue has issued the first RING - 1 steps; each step issues
// the one RING - 1 ahead (the next unit's first steps when this unit ends) and then waits only
// for its own. A lane reads back only what it copied, so no barrier guards the ring.
template <class Rows>
__device__ __forceinline__ void mma_chunk_ring(const Rows& rows, int nr, int c0, int kch, const unsigned short* xs,
                                               float* out, float* part, bool accumulate) {
  const int lane = lane_id(), g = mk_mma_group(lane), q = mk_mma_quad(lane);
  const int nseg = kch / 8, nrt = (nr + 15) / 16, ks = mma_split_k(nr, nseg);
  MmaSteps<Rows> it(rows, nr, c0, kch);  // the issue side, past what the prologue issued
#pragma unroll
  for (int k = 0; k < RING - 1; ++k)
    if (it.valid()) it.advance();
  int st = 0;  // ring stage of the step consumed next
  for (int u = warp_id(); u < nrt * ks; u += NW) {
    const MmaUnit<Rows> un(rows, nr, c0, nseg, ks, u);
    float acc[NTN][4];
#pragma unroll
    for (int n = 0; n < NTN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll 1
    for (int sb = un.s0; sb < un.s1; sb += 4 * U) {
      const int ahead = st == 0 ? RING - 1 : st - 1;  // the stage consumed last step is free again
      if (it.valid()) { it.un.issue(it.sb, ahead); it.advance(); }
      mk_cp_async_commit();
      mk_cp_async_wait<RING - 1>();
      uint4 cur[2][U];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int v = 0; v < U; ++v) cur[h][v] = mk_ld_shared16(ring_slot(st, h, v));
      st = st + 1 == RING ? 0 : st + 1;
#pragma unroll
      for (int v = 0; v < U; ++v) {
        if (sb + 4 * v >= un.s1) break;  // the same for the whole warp, as the MMAs need
        const int s = sb + 4 * v + q;
#pragma unroll
        for (int n = 0; n < NTN; ++n) {
          const int col = 8 * n + g;
          uint4 xv = make_uint4(0u, 0u, 0u, 0u);
          if (s < un.s1 && (B % 8 == 0 || col < B)) xv = mk_ld_shared16(xs + col * XST + 8 * s);
          mk_mma_k32(acc[n], cur[0][v], cur[1][v], xv);
        }
      }
    }
    mma_unit_out(acc, u, ks, nr, nrt, out, part, accumulate);
  }
  mk_cp_async_wait<0>();  // the empty tail groups: nothing of this chunk is left in flight
  if (ks > 1) {
    mk_barrier();
    for (int idx = mk_tid(); idx < nr * B; idx += NT) {
      float s = 0.f;
      for (int p = 0; p < ks; ++p) s += part[p * nrt * 16 * B + idx];
      float* o = out + idx / B * OUT_LD + idx % B;
      *o = accumulate ? *o + s : s;
    }
  }
  mk_barrier();
}

// stage_x for the MMA path: x[:, c0:c0+kch] (times w_norm with NORM) as bf16 into xs [B][XST].
// Each batch row goes to WPR warps (all of them share the rows when B < NW); a lane keeps SB
// independent 16-byte loads in flight (the staging is bound by L2 latency otherwise: at batch 32
// a down-proj task stages 4x its weight bytes). With NORM, each warp adds its share of a row's
// sum of squares into ssp [NW][B]. POLL (STAGE_POLL, nan mode, not COMB): the loads are the wait's
// polls of x (wait_task's PollSkip; poll_units, reporting event ev of task t); false when they stop.
// XB (H_BF16's down-proj, ATTN_BF16's o-proj): x holds bf16 already, copied 16 bytes (8 values) at a time as it is.
// XLD: x's row stride (XB only; K otherwise).
template <int K, bool NORM, bool COMB, bool POLL = false, bool XB = false, int XLD = K>
__device__ bool stage_x_bf16(const Ctx& c, const Task& t, int ev, const float* x, int c0, int kch, const unsigned short* nw,
                             unsigned short* xs, float* ssp, bool sum) {
  static_assert(!(POLL && COMB), "o-proj's split inputs are polled in its wait");
  static_assert(XB || XLD == K, "a strided input is bf16");
  constexpr int SB = 8, WPR = NW > B ? NW / B : 1, NRW = NW / WPR;
  const int q = kch / 4, lane = lane_id(), w = warp_id(), part = w % WPR;
  if constexpr (XB) {
    static_assert(!NORM && !COMB && !POLL, "a bf16 input is down's or o-proj's: no norm, no combine, counters");
    constexpr int SBX = 4;  // 16-byte loads in flight per lane (8 values each)
    const int q8 = kch / 8;
    for (int b = w / WPR; b < B; b += NRW) {
      const uint4* xr = reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned short*>(x) + (size_t)b * XLD + c0);
      unsigned short* sb = xs + b * XST;
      for (int i0 = part * WARP + lane; i0 < q8; i0 += WPR * WARP * SBX) {
        uint4 v[SBX];
#pragma unroll
        for (int e = 0; e < SBX; ++e) {
          const int i = i0 + e * WPR * WARP;
          if (i < q8) v[e] = mk_ld_cache16(xr + i);  // (L2: written by other SMs this step)
        }
#pragma unroll
        for (int e = 0; e < SBX; ++e) {
          const int i = i0 + e * WPR * WARP;
          if (i >= q8) break;
          *reinterpret_cast<uint4*>(sb + 8 * i) = v[e];
        }
      }
    }
    return true;
  }
  bool ok = true;
  for (int b = w / WPR; b < B; b += NRW) {
    unsigned short* sb = xs + b * XST;
    float ss = 0.f;
    for (int i0 = part * WARP + lane; i0 < q; i0 += WPR * WARP * SB) {
      float4 v[SB];
      unsigned w01[SB], w23[SB];
      if constexpr (POLL) {
        const unsigned* xw = reinterpret_cast<const unsigned*>(x) + (size_t)b * K + c0;
        const auto at = [&](int e) -> const unsigned* {
          const int i = i0 + e * WPR * WARP;
          return i < q ? xw + 4 * i : nullptr;
        };
        uint4 u[SB];
#pragma unroll
        for (int e = 0; e < SB; ++e) {
          u[e] = at(e) != nullptr ? mk_ld_relaxed4(at(e)) : make_uint4(0u, 0u, 0u, 0u);
          const int i = i0 + e * WPR * WARP;
          if (NORM && i < q) { w01[e] = mk_ld_weight4(nw + c0 + 4 * i); w23[e] = mk_ld_weight4(nw + c0 + 4 * i + 2); }
        }
        if (ok) ok = poll_units<SB>(c, t, ev, at, u, reinterpret_cast<const unsigned*>(x));
#pragma unroll
        for (int e = 0; e < SB; ++e) v[e] = make_float4(mk_bits_f32(u[e].x), mk_bits_f32(u[e].y), mk_bits_f32(u[e].z), mk_bits_f32(u[e].w));
      } else {
#pragma unroll
        for (int e = 0; e < SB; ++e) {
          const int i = i0 + e * WPR * WARP;
          if (i < q) {
            v[e] = load_x4<K, COMB>(x, b, c0 + 4 * i);
            if constexpr (NORM) { w01[e] = mk_ld_weight4(nw + c0 + 4 * i); w23[e] = mk_ld_weight4(nw + c0 + 4 * i + 2); }
          }
        }
      }
#pragma unroll
      for (int e = 0; e < SB; ++e) {
        const int i = i0 + e * WPR * WARP;
        if (i >= q) break;
        if constexpr (NORM) {
          ss = fmaf(v[e].x, v[e].x, ss); ss = fmaf(v[e].y, v[e].y, ss);
          ss = fmaf(v[e].z, v[e].z, ss); ss = fmaf(v[e].w, v[e].w, ss);
          v[e].x *= mk_lo_bf16(w01[e]); v[e].y *= mk_hi_bf16(w01[e]);
          v[e].z *= mk_lo_bf16(w23[e]); v[e].w *= mk_hi_bf16(w23[e]);
        }
        mk_st_shared8(sb + 4 * i, mk_pack_bf16x2(v[e].x, v[e].y), mk_pack_bf16x2(v[e].z, v[e].w));
      }
    }
    if constexpr (NORM) {
      if (sum) {
        ss = warp_sum(ss);
        if (lane == 0) ssp[w * B + b] += ss;
      }
    }
  }
  return ok;
}

// NORM with XB (XN_BF16): the sums of squares of a normed input come with it, by XN_GROUP columns
// (xss [B][K / XN_GROUP], names.xss_of); their totals go to the first warp's slots of ssp (the
// others stay 0), summed in a fixed order, for gemv_block_end's 1/rms. A barrier follows (the staging's).
// XSS_WIDE (CodegenOptions.xss_wide): the same adds in the same order, but a lane's loads for all of
// its warp's rows go out before the first add (one round trip, not one a row) where they fit
// XSS_WIDE_REGS registers; a lane's loads past the row add +0, which changes no sum of squares.
template <int K>
__device__ __forceinline__ void xss_total(const float* xss, float* ssp) {
  constexpr int XSS_WIDE_REGS = 32;
  constexpr int NG = K / XN_GROUP;
  static_assert(K % XN_GROUP == 0, "whole groups");
  constexpr int RPW = (B + NW - 1) / NW, PER = (NG + WARP - 1) / WARP;
  if constexpr (XSS_WIDE && RPW * PER <= XSS_WIDE_REGS) {
    float v[RPW][PER];
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int b = warp_id() + r * NW, g = lane_id() + i * WARP;
        v[r][i] = b < B && g < NG ? mk_ld_act(xss + (size_t)b * NG + g) : 0.f;
      }
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < PER; ++i) s += v[r][i];
      s = warp_sum(s);
      const int b = warp_id() + r * NW;
      if (b < B && lane_id() == 0) ssp[b] = s;
    }
  } else {
    for (int b = warp_id(); b < B; b += NW) {
      float s = 0.f;
      for (int g = lane_id(); g < NG; g += WARP) s += mk_ld_act(xss + (size_t)b * NG + g);
      s = warp_sum(s);
      if (lane_id() == 0) ssp[b] = s;
    }
  }
}

// A GEMV task on tensor cores: rows in blocks that fit the output staging, K in balanced chunks of
// at most KCB. Every chunk's first weight loads go out before its input is staged (the first
// chunk's before the task waits on its inputs). Returns false to stop.
template <int K, bool NORM, class Kind, bool COMB, bool XB = false, int XLD = K>
__device__ __forceinline__ bool gemv_task_mma(const Ctx& c, const Task& t, int* s_abort, Kind& kd, const float* x,
                                              const unsigned short* nw, const float* lse, const float* xss = nullptr) {
  constexpr int NCH0 = (K + KCB - 1) / KCB;
  constexpr int KCH = ((K + NCH0 - 1) / NCH0 + 31) / 32 * 32;  // <= KCB (a multiple of 64)
  constexpr int NCH = (K + KCH - 1) / KCH;
  unsigned short* xs = reinterpret_cast<unsigned short*>(mk_smem + OFF_XS);
  float* out = smem_f(OFF_OUT);
  float* part = smem_f(OFF_PART);
  float* rs = smem_f(OFF_RS);
  float* ssp = smem_f(OFF_SSP);
  [[maybe_unused]] uint4 pre[2][U];  // the register path's first step (RING == 0)
  if constexpr (RING > 0) {
    if constexpr (PRELOAD) ring_prologue(kd, kd.begin(0), 0, min(KCH, K));
    if (!wait_task(c, t, s_abort)) return false;
    if constexpr (!PRELOAD) ring_prologue(kd, kd.begin(0), 0, min(KCH, K));
  } else {
    if constexpr (PRELOAD) mma_preload(kd, kd.begin(0), 0, min(KCH, K), pre);
    if (!wait_task(c, t, s_abort)) return false;
    if constexpr (!PRELOAD) mma_preload(kd, kd.begin(0), 0, min(KCH, K), pre);
  }
  if constexpr (NORM) {
    for (int i = mk_tid(); i < NW * B; i += NT) ssp[i] = 0.f;
    mk_barrier();
    if constexpr (XB) xss_total<K>(xss, ssp);
  }
  attn_weights<COMB>(lse);
  const int nblk = kd.blocks();
  for (int blk = 0; blk < nblk; ++blk) {
    const int nr = kd.begin(blk);
    for (int ch = 0; ch < NCH; ++ch) {
      const int c0 = ch * KCH, kch = min(KCH, K - c0);
      if (blk > 0 || ch > 0) {
        if constexpr (RING > 0) ring_prologue(kd, nr, c0, kch);
        else mma_preload(kd, nr, c0, kch, pre);
      }
      if (NCH > 1 || blk == 0) {
        stage_x_bf16<K, NORM && !XB, COMB, false, XB, XLD>(c, t, -1, x, c0, kch, nw, xs, ssp, blk == 0);
        mk_barrier();
        if (blk == 0 && ch == 0) kd.input_staged();
      }
      if constexpr (RING > 0) mma_chunk_ring(kd, nr, c0, kch, xs, out, part, ch > 0);
      else mma_chunk(kd, nr, c0, kch, xs, out, part, ch > 0, pre);
    }
    gemv_block_end<K, NORM>(c, kd, nr, blk, out, rs, ssp);
  }
  return true;
}


#if MKC_HAS_BULK_COPY
// The tensor-core GEMV fed by the weight pipeline (pipe.cuh): out[j][b] (+)= <row j, xs[b]> for the
// nr rows of a block over the staged chunk of kch columns, in the producer's page order. A page is
// one 16-row tile of PIPE_COLS columns; warp w takes its segments [w * SEGW, (w + 1) * SEGW) (8
// columns each), lane (group, quad) rows group and group + 8 of segments 4i + quad as mma_chunk
// does, and keeps the tile's accumulators across the row's pages. At the end of a tile the warps'
// partials go to part (two tiles' worth, alternating, so one barrier per tile) and are summed in
// warp order: the same bits run to run.
// One page's dots (pipe_mma_rows): warp w's segments of the 16-row tile in page pg against the
// staged columns xc, nseg segments in the page, into the warp's accumulators of that tile.
__device__ __forceinline__ void pipe_mma_page(const unsigned short* pg, const unsigned short* xc, int nseg,
                                              float (&acc)[NTN][4]) {
  constexpr int SEGW = PIPE_COLS / 8 / NW;
  const int lane = lane_id(), w = warp_id(), g = mk_mma_group(lane), q = mk_mma_quad(lane);
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int st = 0; st < SEGW / 4; ++st) {
    if (w * SEGW + 4 * st >= nseg) break;  // the same for the whole warp, as the MMAs need
    const int sg = w * SEGW + 4 * st + q;
    const bool ok = sg < nseg;
    const uint4 lo = ok ? mk_ld_shared16(pg + g * PIPE_LD + 8 * sg) : zero;
    const uint4 hi = ok ? mk_ld_shared16(pg + (g + 8) * PIPE_LD + 8 * sg) : zero;
#pragma unroll
    for (int n = 0; n < NTN; ++n) {
      const int col = 8 * n + g;
      uint4 xv = zero;
      if (ok && (B % 8 == 0 || col < B)) xv = mk_ld_shared16(xc + col * XST + 8 * sg);
      mk_mma_k32(acc[n], lo, hi, xv);
    }
  }
}

// The pages of one 16-row tile in a chunk of kch columns, as the producer fills them, into acc.
__device__ __forceinline__ void pipe_mma_tile(const Ctx& c, int kch, const unsigned short* xs, float (&acc)[NTN][4]) {
  const int nsl = (kch + PIPE_COLS - 1) / PIPE_COLS;
  for (int sl = 0; sl < nsl; ++sl) {
    const unsigned pn = c.pipe_n++;
    const int slot = (int)(pn % PIPE_NS);
    pipe_wait(c, pn);
    const int nseg = min(PIPE_COLS, kch - sl * PIPE_COLS) / 8;  // segments of this page
    pipe_mma_page(reinterpret_cast<const unsigned short*>(pipe_page(slot)), xs + sl * PIPE_COLS, nseg, acc);
    mk_syncwarp();
    if (lane_id() == 0) mk_mbar_arrive(pipe_empty(slot));
  }
}

// The end of a tile: the warps' partials of the tile at row r0 to part (half tp: two tiles' worth,
// alternating, so one barrier per tile) and summed in warp order into out (added with accumulate):
// the same bits run to run. Rows past nr hold what the page's stale rows gave and are never read.
// TILE_SUM_FRAG (CodegenOptions.tile_sum_frag; render sets it where B % 8 == 0): a warp's partials go out in fragment order, each
// lane's acc[n] one 16-byte store at [(n * WARP + lane) * 4]: by (row, column) the 32 lanes of a
// store hit 4 banks at batch 32 (8 ways; 2 at batch 8), which cost batch 32 about as much as the
// page's dot products. A thread then sums fragment pairs (acc[n][2h], acc[n][2h + 1]: row g + 8h,
// columns 8n + 2q and + 1), reading each warp's pair at consecutive addresses; the same sums in
// the same order as the row-major layout, so the same bits.
__device__ __forceinline__ void pipe_tile_sum(const float (&acc)[NTN][4], float* part, int tp, int r0, int nr, float* out,
                                              bool accumulate) {
  const int tid = mk_tid();
  if constexpr (TILE_SUM_FRAG) {
    float4* pw4 = reinterpret_cast<float4*>(part + (tp * NW + warp_id()) * 16 * B);
#pragma unroll
    for (int n = 0; n < NTN; ++n) pw4[n * WARP + lane_id()] = make_float4(acc[n][0], acc[n][1], acc[n][2], acc[n][3]);
    mk_barrier();
    const float2* pt2 = reinterpret_cast<const float2*>(part + tp * NW * 16 * B);
    const int rows = min(PIPE_ROWS, nr - r0);
    for (int f = tid; f < 8 * B; f += NT) {  // 16 x B floats a warp, in pairs
      const int ln = (f >> 1) % WARP, r = mk_mma_group(ln) + 8 * (f & 1);
      if (r >= rows) continue;
      float2 sum = make_float2(0.f, 0.f);
      for (int ww = 0; ww < NW; ++ww) {
        const float2 v = pt2[ww * 8 * B + f];
        sum.x += v.x;
        sum.y += v.y;
      }
      float2* o = reinterpret_cast<float2*>(out + (r0 + r) * OUT_LD + 8 * (f / (2 * WARP)) + 2 * mk_mma_quad(ln));
      if (accumulate) {
        const float2 was = *o;
        sum.x = was.x + sum.x;
        sum.y = was.y + sum.y;
      }
      *o = sum;
    }
    return;
  }
  float* pw = part + (tp * NW + warp_id()) * 16 * B;
  mma_tile_each(acc, [&](int r, int b, float v) { pw[r * B + b] = v; });
  mk_barrier();
  const float* pt = part + tp * NW * 16 * B;
  for (int idx = tid; idx < min(PIPE_ROWS, nr - r0) * B; idx += NT) {
    float sum = 0.f;
    for (int ww = 0; ww < NW; ++ww) sum += pt[ww * 16 * B + idx];
    float* o = out + (r0 + idx / B) * OUT_LD + idx % B;
    *o = accumulate ? *o + sum : sum;
  }
}

// The tensor-core GEMV fed by the weight pipeline (pipe.cuh): out[j][b] (+)= <row j, xs[b]> for the
// nr rows of a block over the staged chunk of kch columns, in the producer's page order. A page is
// one 16-row tile of PIPE_COLS columns; warp w takes its segments [w * SEGW, (w + 1) * SEGW) (8
// columns each), lane (group, quad) rows group and group + 8 of segments 4i + quad as mma_chunk
// does, and keeps the tile's accumulators across the row's pages; at the end of a tile the warps'
// partials are summed (pipe_tile_sum).
__device__ __forceinline__ void pipe_mma_rows(const Ctx& c, int nr, int kch, const unsigned short* xs, float* out,
                                              float* part, bool accumulate) {
  static_assert(!MMA_GEMV || PIPE_SLOTS == 0 || (PIPE_ROWS == 16 && PIPE_COLS / 8 / NW % 4 == 0 && PIPE_COLS / 8 / NW > 0),
                "a page is one 16-row tile, whole k32 steps per warp");
  int tp = 0;  // which half of part this tile's partials use
  for (int r0 = 0; r0 < nr; r0 += PIPE_ROWS, tp ^= 1) {
    float acc[NTN][4];
#pragma unroll
    for (int n = 0; n < NTN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    pipe_mma_tile(c, kch, xs, acc);
    pipe_tile_sum(acc, part, tp, r0, nr, out, accumulate);
  }
  mk_barrier();
}

// Tiles whose accumulators each warp holds across all of a task's K-chunks (MMA_HOLD,
// CodegenOptions.mma_hold): 16 floats of them. A block of at most that many tiles then sums its
// warps' partials once, at the end, instead of once per chunk (at batch 32 a llama-3.2-1b down-proj
// task is one tile over 8 chunks).
// (HOLD_FLOATS: CodegenOptions.mma_hold_floats, 16 by default)
[[maybe_unused]] constexpr int HOLD_TILES = !MMA_HOLD ? 0 : 4 * NTN >= HOLD_FLOATS ? 1 : HOLD_FLOATS / (4 * NTN);

// A GEMV task on tensor cores whose weights come through the weight pipeline: after the wait, each
// K-chunk (pipe_kch, the producer's) staged as bf16 and its pages taken as the producer fills them.
template <int K, bool NORM, class Kind, bool COMB, bool XB = false, int XLD = K>
__device__ __forceinline__ bool gemv_task_mma_pipe(const Ctx& c, const Task& t, int* s_abort, Kind& kd, const float* x,
                                                   const unsigned short* nw, const float* lse, const float* xss = nullptr) {
  constexpr int KCH = pipe_kch<K>();
  constexpr int NCH = (K + KCH - 1) / KCH;
  static_assert(KCH <= KCB, "a chunk fits the staged input");
  unsigned short* xs = reinterpret_cast<unsigned short*>(mk_smem + OFF_XS);
  float* out = smem_f(OFF_OUT);
  float* part = smem_f(OFF_PART);
  float* rs = smem_f(OFF_RS);
  float* ssp = smem_f(OFF_SSP);
  // STAGE_POLL: the first staging of every chunk polls x (PollSkip), the re-arm after the last
  constexpr bool POLL = STAGE_POLL && NAN_MODE && !COMB && !XB;
  PollSkip skip;
  skip.lo[0] = x;
  skip.hi[0] = x + B * K;
  skip.lo[1] = skip.hi[1] = nullptr;
  skip.ev = -1;
  if (!gemv_wait<NORM>(c, t, s_abort, ssp, POLL ? &skip : nullptr)) return false;
  if constexpr (NORM && XB) xss_total<K>(xss, ssp);
  // after a polled staging's barrier: stop if it timed out; after the last, acquire and re-arm
  const auto polled = [&](bool ok, bool last) {
    if constexpr (POLL) {
      if (!ok) *s_abort = 1;
      if (last) sync_fence();
      mk_barrier();
      if (*s_abort) return false;
      if (last) rearm_task(c, t);
    }
    return true;
  };
  // stage chunk ch of x as bf16 into xs (sum: add its sums of squares; last: the task's last
  // polled staging); false to stop
  const auto stage = [&](int ch, bool sum, bool last) {
    const unsigned long long t0 = trace_now(c);
    const bool ok = stage_x_bf16<K, NORM && !XB, COMB, POLL, XB, XLD>(c, t, skip.ev, x, ch * KCH, min(KCH, K - ch * KCH), nw,
                                                                 xs, ssp, sum);
    mk_barrier();
    trace_stage_end(c, t0);
    return polled(ok, last);
  };
  attn_weights<COMB>(lse);
  const int nblk = kd.blocks();
  if constexpr (NCH > 1 && HOLD_TILES > 0) {
    const int nr = kd.begin(0);
    if (nblk == 1 && nr <= HOLD_TILES * PIPE_ROWS) {  // one block of few tiles: the chunks into held accumulators
      float acc[HOLD_TILES][NTN][4];
#pragma unroll
      for (int tl = 0; tl < HOLD_TILES; ++tl)
#pragma unroll
        for (int n = 0; n < NTN; ++n) acc[tl][n][0] = acc[tl][n][1] = acc[tl][n][2] = acc[tl][n][3] = 0.f;
      for (int ch = 0; ch < NCH; ++ch) {
        const int kch = min(KCH, K - ch * KCH);
        if (!stage(ch, true, ch == NCH - 1)) return false;
        if (ch == 0) trace_mark(c, 0);  // input staged
        if (ch == (POLL ? NCH - 1 : 0)) kd.input_staged();  // (POLL: once the last polled staging acquired)
#pragma unroll
        for (int tl = 0; tl < HOLD_TILES; ++tl)
          if (tl * PIPE_ROWS < nr) pipe_mma_tile(c, kch, xs, acc[tl]);
        mk_barrier();  // every warp is done with this chunk's input before the next is staged
      }
#pragma unroll
      for (int tl = 0; tl < HOLD_TILES; ++tl)
        if (tl * PIPE_ROWS < nr) pipe_tile_sum(acc[tl], part, tl & 1, tl * PIPE_ROWS, nr, out, false);
      mk_barrier();
      trace_mark(c, 1);  // the block's dot products
      gemv_block_end<K, NORM>(c, kd, nr, 0, out, rs, ssp);
      trace_mark(c, 2);  // epilogues done
      trace_pipe_wait(c);
      return true;
    }
  }
  for (int blk = 0; blk < nblk; ++blk) {
    const int nr = kd.begin(blk);
    for (int ch = 0; ch < NCH; ++ch) {
      const int c0 = ch * KCH, kch = min(KCH, K - c0);
      if (NCH > 1 || blk == 0) {
        // (later blocks' stagings poll too: they find every word written at once; the staging is
        // spelled out here, not `stage`, which made ptxas reorder batch 8's nan kernel)
        const unsigned long long t0 = trace_now(c);
        const bool ok = stage_x_bf16<K, NORM && !XB, COMB, POLL, XB, XLD>(c, t, skip.ev, x, c0, kch, nw, xs, ssp, blk == 0);
        mk_barrier();
        trace_stage_end(c, t0);
        if (!polled(ok, blk == 0 && ch == NCH - 1)) return false;
        if (blk == 0 && ch == 0) trace_mark(c, 0);  // input staged
        if (blk == 0 && ch == (POLL ? NCH - 1 : 0)) kd.input_staged();
      }
      pipe_mma_rows(c, nr, kch, xs, out, part, ch > 0);
    }
    if (blk == 0) trace_mark(c, 1);  // the first block's dot products
    gemv_block_end<K, NORM>(c, kd, nr, blk, out, rs, ssp);
  }
  trace_mark(c, 2);  // epilogues done
  trace_pipe_wait(c);
  return true;
}
#endif

}  // namespace mk
#endif  // MKC_HAS_MMA_BF16
