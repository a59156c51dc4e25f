// GEMV on fp32 FMAs: the input chunk staged as fp32 [B][KC], G weight rows per warp with U 16-byte
// loads in flight per row and lane, split-K across warps when rows are few. Every target has it; the
// tensor-core path (gemv_mma.cuh) replaces it from batch 2 where the dialect has a bf16 MMA.
#pragma once
#include "mkc/common.cuh"
#include "mkc/sync.cuh"
#include "mkc/gemv_common.cuh"
#include "mkc/pipe.cuh"

namespace mk {

// Rows are dealt to warps G at a time; when there are fewer row groups than warps, warps also
// split K (deterministic: partials are summed in a fixed order). Each lane keeps G*U 16-byte
// weight loads in flight.
__device__ __forceinline__ int split_k(int nr, int nseg) {
  const int nrg = (nr + G - 1) / G;
  int ks = 1;
  while (ks * 2 * nrg <= NW && ks * 2 * WARP <= nseg) ks *= 2;
  return ks;
}

// The first U loads of this warp's first unit of a task's first chunk, issued before the task
// waits for its inputs (weights never depend on anything): they arrive while it waits.
template <class Rows>
__device__ __forceinline__ void gemv_preload(const Rows& rows, int nr, int kch, uint4 (&pre)[G][U]) {
  const int lane = lane_id(), u = warp_id();
  const int nseg = kch / 8, ks = split_k(nr, nseg), nrg = (nr + G - 1) / G;
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int v = 0; v < U; ++v) pre[g][v] = make_uint4(0u, 0u, 0u, 0u);
  if (u >= nrg * ks) return;
  const int rg = u / ks, p = u % ks;
  const int s0 = nseg * p / ks, s1 = nseg * (p + 1) / ks;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int j = rg * G + g;
    if (j >= nr) continue;
    const uint4* wp = reinterpret_cast<const uint4*>(rows.row(j));
#pragma unroll
    for (int v = 0; v < U; ++v) {
      const int ss = s0 + lane + v * WARP;
      if (ss < s1) pre[g][v] = mk_ld_weight16_early(wp + ss);
    }
  }
}

template <int KCH, class Rows>
__device__ __forceinline__ void gemv_chunk(const Rows& rows, int nr, int c0, int kch, const float* xs, float* out,
                                           float* part, bool accumulate, const uint4 (&pre)[G][U], bool have_pre) {
  const int lane = lane_id(), warp = warp_id();
  const int nseg = kch / 8;
  const int nrg = (nr + G - 1) / G;
  const int ks = split_k(nr, nseg);
  const int units = nrg * ks;
  for (int u = warp; u < units; u += NW) {
    const int rg = u / ks, p = u % ks;
    const int s0 = nseg * p / ks, s1 = nseg * (p + 1) / ks;
    const uint4* wp[G];
    bool valid[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int j = rg * G + g;
      valid[g] = j < nr;
      wp[g] = reinterpret_cast<const uint4*>(rows.row(valid[g] ? j : 0) + c0);
    }
#pragma unroll 1
    for (int bg = 0; bg < B; bg += BB) {
      float acc[G][BB];
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int bb = 0; bb < BB; ++bb) acc[g][bb] = 0.f;
      bool use_pre = have_pre && u == warp && bg == 0;
      for (int s = s0 + lane; s < s1; s += WARP * U) {
        uint4 w[G][U];
        if (use_pre) {
#pragma unroll
          for (int v = 0; v < U; ++v)
#pragma unroll
            for (int g = 0; g < G; ++g) w[g][v] = pre[g][v];
          use_pre = false;
        } else {
#pragma unroll
          for (int v = 0; v < U; ++v)
#pragma unroll
            for (int g = 0; g < G; ++g) {
              const int ss = s + v * WARP;
              w[g][v] = (valid[g] && ss < s1) ? mk_ld_weight16(wp[g] + ss) : make_uint4(0u, 0u, 0u, 0u);
            }
        }
#pragma unroll
        for (int v = 0; v < U; ++v) {
          const int ss = s + v * WARP;
          if (ss < s1) {
#pragma unroll
            for (int bb = 0; bb < BB; ++bb) {
              if (BB * ((B + BB - 1) / BB) != B && bg + bb >= B) break;
              const float4* xp = reinterpret_cast<const float4*>(xs + (bg + bb) * KCH + ss * 8);
              const float4 xa = xp[0], xb = xp[1];
#pragma unroll
              for (int g = 0; g < G; ++g) acc[g][bb] = dot8(w[g][v], xa, xb, acc[g][bb]);
            }
          }
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int bb = 0; bb < BB; ++bb) acc[g][bb] = warp_sum(acc[g][bb]);
      if (lane == 0) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const int j = rg * G + g;
          if (!valid[g]) continue;
#pragma unroll
          for (int bb = 0; bb < BB; ++bb) {
            const int b = bg + bb;
            if (b >= B) break;
            if (ks == 1) {
              float* o = out + j * OUT_LD + b;
              *o = accumulate ? *o + acc[g][bb] : acc[g][bb];
            } else {
              part[(p * nrg * G + j) * B + b] = acc[g][bb];
            }
          }
        }
      }
    }
  }
  if (ks > 1) {
    mk_barrier();
    for (int idx = mk_tid(); idx < nr * B; idx += NT) {
      float s = 0.f;
      for (int p = 0; p < ks; ++p) s += part[p * nrg * G * B + idx];
      float* o = out + idx / B * OUT_LD + idx % B;
      *o = accumulate ? *o + s : s;
    }
  }
  mk_barrier();
}

// Where float4 i of a batch-1 input (columns 4i..4i+3) sits in the weight pipeline's staged input
// (PL: the planes, where XS_PLANES and the task's consumers take a row per warp): in two planes, columns 8s..8s+3 at 4s and 8s+4..8s+7 at K/2 + 4s, so the lanes
// of a warp, which take consecutive 8-column words s of a weight row (pipe.cuh pipe_rows), read
// their inputs as consecutive float4s, one shared-memory wavefront per 8 lanes; in the plain layout
// (4i) each lane's pair of float4s is 32 bytes from the next lane's, two wavefronts. Else 4i.
template <int K, bool PL>
__device__ __forceinline__ int xs_at4(int i) {
  static_assert(!PL || K % 8 == 0, "two planes of whole 8-column words");
  return PL ? (i & 1) * (K / 2) + 4 * (i >> 1) : 4 * i;
}

// Store float4 i of a staged input: in the weight pipeline's layout where PL (xs_at4), else at 4i.
template <int K, bool PL>
__device__ __forceinline__ void put_x4(float* xs, int i, float4 v) {
  *reinterpret_cast<float4*>(xs + xs_at4<K, PL>(i)) = v;
}

// Stage x[:, c0:c0+kch] into xs [B][KCH] (PL, batch 1 and the whole input: the pipeline's layout,
// put_x4). With NORM, stage x * w_norm and add each warp's sum of x^2 per batch row into ssp
// [NW][B]: the 1/rms factor is a per-row scalar applied to the dot products afterwards, so the norm
// costs no extra pass over x before the weights stream.
template <int K, int KCH, bool NORM, bool COMB, bool PL = false>
__device__ void stage_x(const float* x, int c0, int kch, const unsigned short* nw, float* xs, float* ssp, bool sum) {
  static_assert(!PL || (B == 1 && KCH == K), "planes: one batch row, staged whole");
  const int q = kch / 4, tid = mk_tid();
#pragma unroll 8
  for (int b = 0; b < B; ++b) {
    float ss = 0.f;
#pragma unroll 4
    for (int i = tid; i < q; i += NT) {
      const int k = 4 * i;
      float4 v = load_x4<K, COMB>(x, b, c0 + k);
      if constexpr (NORM) {
        ss = fmaf(v.x, v.x, ss); ss = fmaf(v.y, v.y, ss); ss = fmaf(v.z, v.z, ss); ss = fmaf(v.w, v.w, ss);
        const unsigned w01 = mk_ld_weight4(nw + c0 + k), w23 = mk_ld_weight4(nw + c0 + k + 2);
        v.x *= mk_lo_bf16(w01); v.y *= mk_hi_bf16(w01); v.z *= mk_lo_bf16(w23); v.w *= mk_hi_bf16(w23);
      }
      if constexpr (PL) put_x4<K, true>(xs, i, v);
      else *reinterpret_cast<float4*>(xs + b * KCH + k) = v;
    }
    if constexpr (NORM) {
      if (sum) {
        ss = warp_sum(ss);
        if (lane_id() == 0) ssp[warp_id() * B + b] += ss;
      }
    }
  }
}

// LEAN_COMB, batch 1: o-proj's input from split attention staged in one round trip to L2: every
// thread issues its loads of the splits' outputs first, then the first NH threads load the
// log-sum-exps and compute the split weights into shared memory (attn_weights' arithmetic, so the
// same bits) while those loads are in flight; a barrier, and each thread combines its values.
// (render.py sets LEAN_COMB only where a thread's loads fit in registers.) POLL (STAGE_POLL, nan
// mode): the loads are the wait's polls of the outputs and the log-sum-exps (wait_task's PollSkip:
// every word is loaded again until it holds no sentinel); false (after the barrier) to stop.
template <int K, bool POLL = false, bool PL = true>
__device__ __forceinline__ bool stage_x_comb(const Ctx& c, const Task& t, int ev, const float* x, const float* lse,
                                             float* xs) {
  static_assert(B == 1 && K % 4 == 0 && HD % 4 == 0 && NH <= NT, "one batch row, whole float4s of a head");
  constexpr int IT = (K / 4 + NT - 1) / NT;
  const int tid = mk_tid();
  // splits before s0 hold no positions at this step (attn_active_splits): they wrote zeros and -inf,
  // which would add 0, so they are not read (nor polled)
  const int s0 = ATT_SPLIT - attn_active_splits(c);
  bool ok = true;
  float4 a[IT][ATT_SPLIT];
  if constexpr (POLL) {
    const unsigned* xw = reinterpret_cast<const unsigned*>(x);
    // unit u = it * ATT_SPLIT + s: split s's float4 i = tid + it * NT
    const auto at = [&](int u) -> const unsigned* {
      const int i = tid + (u / ATT_SPLIT) * NT;
      return i < K / 4 && u % ATT_SPLIT >= s0 ? xw + (size_t)(u % ATT_SPLIT) * K + 4 * i : nullptr;
    };
    uint4 v[IT * ATT_SPLIT];
#pragma unroll
    for (int u = 0; u < IT * ATT_SPLIT; ++u) v[u] = at(u) != nullptr ? mk_ld_relaxed4(at(u)) : make_uint4(0u, 0u, 0u, 0u);
    ok = poll_units<IT * ATT_SPLIT>(c, t, ev, at, v, xw);
#pragma unroll
    for (int it = 0; it < IT; ++it)
#pragma unroll
      for (int s = 0; s < ATT_SPLIT; ++s) {
        const uint4 w = v[it * ATT_SPLIT + s];
        a[it][s] = make_float4(mk_bits_f32(w.x), mk_bits_f32(w.y), mk_bits_f32(w.z), mk_bits_f32(w.w));
      }
  } else {
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int i = tid + it * NT;
#pragma unroll
      for (int s = 0; s < ATT_SPLIT; ++s)
        a[it][s] = i < K / 4 && s >= s0 ? mk_ld_act4(x + (size_t)s * K + 4 * i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  float* aw = smem_f(OFF_AW);
  if (tid < NH) {
    float ls[ATT_SPLIT];
    float m = -INFINITY;
    if constexpr (POLL) {
      const unsigned* lw = reinterpret_cast<const unsigned*>(lse) + tid;
      unsigned u[ATT_SPLIT];
#pragma unroll
      for (int s = 0; s < ATT_SPLIT; ++s) u[s] = s >= s0 ? mk_ld_relaxed(lw + s * NH) : mk_f32_bits(-INFINITY);
#pragma unroll
      for (int s = 0; s < ATT_SPLIT; ++s) {
        if (u[s] == SENTINEL && ok) {
          ok = spin_words<1>(c, t, ev, lw + s * NH, (unsigned)(ATT_SPLIT * K + s * NH + tid));
          u[s] = mk_ld_relaxed(lw + s * NH);
        }
        ls[s] = mk_bits_f32(u[s]);
        m = fmaxf(m, ls[s]);
      }
    } else {
#pragma unroll
      for (int s = 0; s < ATT_SPLIT; ++s) {
        ls[s] = s >= s0 ? mk_ld_act(lse + s * NH + tid) : -INFINITY;
        m = fmaxf(m, ls[s]);
      }
    }
    float sum = 0.f;
#pragma unroll
    for (int s = 0; s < ATT_SPLIT; ++s) {
      ls[s] = expf(ls[s] - m);
      sum += ls[s];
    }
#pragma unroll
    for (int s = 0; s < ATT_SPLIT; ++s) aw[s * NH + tid] = ls[s] / sum;
  }
  mk_barrier();
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int i = tid + it * NT;
    if (i >= K / 4) break;
    const float* w = aw + (4 * i) / HD;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s = 0; s < ATT_SPLIT; ++s) {
      const float ws = w[s * NH];
      v.x = fmaf(ws, a[it][s].x, v.x); v.y = fmaf(ws, a[it][s].y, v.y);
      v.z = fmaf(ws, a[it][s].z, v.z); v.w = fmaf(ws, a[it][s].w, v.w);
    }
    put_x4<K, PL>(xs, i, v);
  }
  return ok;
}

// STAGE_POLL (nan mode), batch 1: stage_x of the whole input x[0, K) with its loads as the wait's
// polls (wait_task's PollSkip): each thread loads its float4s at once, loads the armed ones again
// until none holds the sentinel, then stages them as stage_x does (the same products and sums in
// the same order: the same bits). False to stop.
template <int K, bool NORM, bool PL = true>
__device__ __forceinline__ bool stage_x_polled(const Ctx& c, const Task& t, int ev, const float* x, const unsigned short* nw,
                                               float* xs, float* ssp) {
  static_assert(B == 1 && K % 4 == 0, "one batch row of whole float4s");
  constexpr int IT = (K / 4 + NT - 1) / NT;
  const int tid = mk_tid();
  const unsigned* xw = reinterpret_cast<const unsigned*>(x);
  const auto at = [&](int it) -> const unsigned* { return tid + it * NT < K / 4 ? xw + 4 * (tid + it * NT) : nullptr; };
  uint4 v[IT];
#pragma unroll
  for (int it = 0; it < IT; ++it) v[it] = at(it) != nullptr ? mk_ld_relaxed4(at(it)) : make_uint4(0u, 0u, 0u, 0u);
  const bool ok = poll_units<IT>(c, t, ev, at, v, xw);
  float ss = 0.f;
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int i = tid + it * NT;
    if (i >= K / 4) break;
    const int k = 4 * i;
    float4 f = make_float4(mk_bits_f32(v[it].x), mk_bits_f32(v[it].y), mk_bits_f32(v[it].z), mk_bits_f32(v[it].w));
    if constexpr (NORM) {
      ss = fmaf(f.x, f.x, ss); ss = fmaf(f.y, f.y, ss); ss = fmaf(f.z, f.z, ss); ss = fmaf(f.w, f.w, ss);
      const unsigned w01 = mk_ld_weight4(nw + k), w23 = mk_ld_weight4(nw + k + 2);
      f.x *= mk_lo_bf16(w01); f.y *= mk_hi_bf16(w01); f.z *= mk_lo_bf16(w23); f.w *= mk_hi_bf16(w23);
    }
    put_x4<K, PL>(xs, i, f);
  }
  if constexpr (NORM) {
    ss = warp_sum(ss);
    if (lane_id() == 0) ssp[warp_id() * B] += ss;
  }
  return ok;
}

// A GEMV task: rows in blocks that fit the output staging, K in chunks that fit the input staging.
// The task's first weight loads go out before it waits on its inputs. Returns false to stop.
template <int K, bool NORM, class Kind, bool COMB>
__device__ __forceinline__ bool gemv_task_fma(const Ctx& c, const Task& t, int* s_abort, Kind& kd, const float* x,
                                              const unsigned short* nw, const float* lse) {
  constexpr int KCH = K < KC ? K : KC;
  constexpr int NCH = (K + KCH - 1) / KCH;
  float* xs = smem_f(OFF_XS);
  float* out = smem_f(OFF_OUT);
  float* part = smem_f(OFF_PART);
  float* rs = smem_f(OFF_RS);
  float* ssp = smem_f(OFF_SSP);
  uint4 pre[G][U];
  if constexpr (PRELOAD) gemv_preload(kd, kd.begin(0), min(KCH, K), pre);
  if (!gemv_wait<NORM>(c, t, s_abort, ssp)) return false;
  attn_weights<COMB>(lse);
  const int nblk = kd.blocks();
  for (int blk = 0; blk < nblk; ++blk) {
    const int nr = kd.begin(blk);
    for (int ch = 0; ch < NCH; ++ch) {
      const int c0 = ch * KCH, kch = min(KCH, K - c0);
      if (NCH > 1 || blk == 0) {
        stage_x<K, KCH, NORM, COMB>(x, c0, kch, nw, xs, ssp, blk == 0);
        mk_barrier();
        if (blk == 0 && ch == 0) kd.input_staged();
      }
      gemv_chunk<KCH>(kd, nr, c0, kch, xs, out, part, ch > 0, pre, PRELOAD && blk == 0 && ch == 0);
    }
    gemv_block_end<K, NORM>(c, kd, nr, blk, out, rs, ssp);
  }
  return true;
}

#if MKC_HAS_BULK_COPY
// A GEMV task whose weights come through the weight pipeline (pipe.cuh, batch 1): the whole input
// staged once after the wait, then each row block's pages as the producer fills them.
template <int K, bool NORM, class Kind, bool COMB>
__device__ __forceinline__ bool gemv_task_pipe(const Ctx& c, const Task& t, int* s_abort, Kind& kd, const float* x,
                                               const unsigned short* nw, const float* lse) {
  static_assert(B == 1 && K <= KC, "the weight pipeline stages the whole input of one batch row");
  // this kind's consumers split the pages' columns (PIPE_KSPLIT, kinds.cuh KS_BIT: the input in the
  // plain layout) or take a row per warp (the input in planes where XS_PLANES)
  constexpr bool KS = (PIPE_KSPLIT & Kind::KS_BIT) != 0, PL = XS_PLANES && !KS;
  float* xs = smem_f(OFF_XS);
  float* out = smem_f(OFF_OUT);
  float* rs = smem_f(OFF_RS);
  float* ssp = smem_f(OFF_SSP);
  if constexpr (STAGE_POLL && NAN_MODE && (LEAN_COMB || !COMB)) {
    // the input's polls are its staging loads (PollSkip): one pass over it through the L2, not two
    PollSkip skip;
    skip.lo[0] = x;
    skip.hi[0] = x + (COMB ? ATT_SPLIT : 1) * K;
    skip.lo[1] = COMB ? lse : nullptr;
    skip.hi[1] = COMB ? lse + ATT_SPLIT * NH : nullptr;
    skip.ev = -1;
    if (!gemv_wait<NORM>(c, t, s_abort, ssp, &skip)) return false;
    bool ok;
    if constexpr (COMB) ok = stage_x_comb<K, true, PL>(c, t, skip.ev, x, lse, xs);
    else ok = stage_x_polled<K, NORM, PL>(c, t, skip.ev, x, nw, xs, ssp);
    if (!ok) *s_abort = 1;
    sync_fence();  // acquire what the loads observed: the re-arm and the outputs after them
    mk_barrier();
    if (*s_abort) return false;
    rearm_task(c, t);
  } else {
    if (!gemv_wait<NORM>(c, t, s_abort, ssp)) return false;
    if constexpr (LEAN_COMB && COMB) {
      stage_x_comb<K, false, PL>(c, t, -1, x, lse, xs);  // one round trip to L2 (the barrier after it publishes xs)
    } else {
      attn_weights<COMB>(lse);
      stage_x<K, K, NORM, COMB, PL>(x, 0, K, nw, xs, ssp, true);
    }
    mk_barrier();
  }
  trace_mark(c, 0);  // input staged
  kd.input_staged();
  const int nblk = kd.blocks();
  for (int blk = 0; blk < nblk; ++blk) {
    const int nr = kd.begin(blk);
    if constexpr (KS) pipe_rows_ks<K>(c, nr, xs, out, smem_f(OFF_PART));
    else pipe_rows<K, PL>(c, nr, xs, out);
    mk_barrier();
    if (blk == 0) trace_mark(c, 1);  // the first block's dot products
    gemv_block_end<K, NORM>(c, kd, nr, blk, out, rs, ssp);
  }
  trace_mark(c, 2);  // epilogues done
  trace_pipe_wait(c);
  return true;
}
#endif

}  // namespace mk
