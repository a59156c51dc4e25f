// Sampling in the kernel (mkc/sampling.py): counter-based random numbers, the Gumbel noise the LM
// head adds under temperature alone, and the argmax task's filtered sampler (top-k, top-p, min-p)
// over the row's fp32 logits. tests/sampling_ref.py is the numpy twin of everything here.
#pragma once
#include "mkc/common.cuh"

namespace mk {

// ---- counter-based random numbers ----
// Philox4x32-10 (Salmon et al., SC'11), first output word, counter (vocab index, row, position, 0),
// key (seed_lo, seed_hi): one seed gives the same draws in any launch split and on any schedule.
__device__ __forceinline__ unsigned philox_x0(unsigned c0, unsigned c1, unsigned c2, unsigned c3, unsigned k0,
                                              unsigned k1) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const unsigned hi0 = mk_umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const unsigned hi1 = mk_umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return c0;
}
// Gumbel(0, 1) noise of (row b, vocabulary index v) at this step's position: u in (0, 1) from the
// top 23 bits (u = (x >> 9 + 0.5) / 2^23 is exact in fp32), g = -log(-log(u))
__device__ __forceinline__ float gumbel(const Ctx& c, const Sampler& s, int b, int v) {
  const unsigned x = philox_x0((unsigned)v, (unsigned)b, (unsigned)c.pos, 0u, s.seed_lo, s.seed_hi);
  const float u = ((float)(x >> 9) + 0.5f) * (1.0f / 8388608.0f);
  return -logf(-logf(u));
}
// float -> uint32 with the same order (non-NaN values): the radix select's keys
__device__ __forceinline__ unsigned order_key(float f) {
  const unsigned u = mk_f32_bits(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// probability mass of a scaled logit z relative to the row's largest zmax, in 2^-32 units: integer
// histogram sums do not depend on the order of the adds, so the thresholds are deterministic
__device__ __forceinline__ unsigned long long mass_of(float z, float zmax) {
  return (unsigned long long)(expf(z - zmax) * 4294967296.0f);
}

// shared-memory scratch of the argmax task from SAMPLE_BASE, past the weight pipeline's pages
// (render.sample_smem, checked below the flag)
constexpr int SM_HIST = SAMPLE_BASE;            // SAMPLE_HISTS copies of 256 u64 bins (copy 0: the merged sums)
constexpr int SM_PAIR = SM_HIST + SAMPLE_HISTS * 256 * 8;  // per-warp (score, index), up to 64 warps
constexpr int SM_RES = SM_PAIR + 512;      // u64: chosen digit, weight above it, target; int: all-stopped
constexpr int SM_ROW = SM_RES + 32;        // per row: token [B] then the largest raw logit [B]
static_assert(SM_ROW + 8 * B <= SAMPLE_BASE + SAMPLE_SMEM, "render.sample_smem must cover the sampler's scratch");
static_assert(256 % WARP == 0 && NW <= 64, "the sampler's scan and reduction layout");

__device__ __forceinline__ unsigned long long shfl_u64(unsigned long long v, int src) {
  const unsigned lo = mk_shfl_u32((unsigned)v, src), hi = mk_shfl_u32((unsigned)(v >> 32), src);
  return ((unsigned long long)hi << 32) | lo;
}

// The largest key t (keys >= lo only) whose weight sum over keys >= t reaches the target: counts
// with target k (top-k), or masses with target max(1, p * total) (top-p, the total over keys >= lo).
// Inlined: the AMD build must stay free of calls (tests/test_hip.py).
// Four passes over the row, 8 bits each from the top; warp 0 scans the 256 bins. Block-wide.
__device__ __forceinline__ unsigned radix_select(const float* lg, float temp, float zmax, unsigned lo, bool by_mass,
                                 unsigned long long k, float p) {
  unsigned long long* hist = reinterpret_cast<unsigned long long*>(mk_smem + SM_HIST);
  unsigned long long* res = reinterpret_cast<unsigned long long*>(mk_smem + SM_RES);
  const int tid = mk_tid(), lane = lane_id();
  unsigned prefix = 0;
  unsigned long long above = 0, target = k;
#pragma unroll 1
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < SAMPLE_HISTS * 256; i += NT) hist[i] = 0;
    mk_barrier();
    // The top byte of a key is the sign and 7 exponent bits: a row's logits fall in a few bins, so
    // the adds would serialise on them. Each warp has its own bins, and each thread adds runs of
    // one bin from a register (integer sums: the result does not depend on the order).
    unsigned long long* own_hist = hist + (warp_id() % SAMPLE_HISTS) * 256;
    unsigned run_bin = 0;
    unsigned long long run = 0;
    for (int v = tid; v < V; v += NT) {
      const float z = mk_ld_act(lg + v) / temp;
      const unsigned key = order_key(z);
      if (key < lo || (shift < 24 && (key >> (shift + 8)) != (prefix >> (shift + 8)))) continue;
      const unsigned bin = (key >> shift) & 255u;
      const unsigned long long w = by_mass ? mass_of(z, zmax) : 1ull;
      if (bin != run_bin) {
        if (run != 0) mk_smem_add_u64(own_hist + run_bin, run);
        run_bin = bin;
        run = 0;
      }
      run += w;
    }
    if (run != 0) mk_smem_add_u64(own_hist + run_bin, run);
    mk_barrier();
    for (int i = tid; i < 256; i += NT) {
      unsigned long long sum = hist[i];
      for (int w = 1; w < SAMPLE_HISTS; ++w) sum += hist[w * 256 + i];
      hist[i] = sum;
    }
    mk_barrier();
    if (warp_id() == 0) {
      // lane l holds bins 255 - l*PER .. 256 - (l+1)*PER (descending); prefix sums over lanes
      constexpr int PER = 256 / WARP;
      unsigned long long own = 0;
      for (int j = 0; j < PER; ++j) own += hist[255 - lane * PER - j];
      unsigned long long incl = own;
      for (int off = 1; off < WARP; off <<= 1) {
        const unsigned long long o = shfl_u64(incl, lane >= off ? lane - off : lane);
        if (lane >= off) incl += o;
      }
      if (shift == 24 && by_mass) {
        const unsigned long long total = shfl_u64(incl, WARP - 1);
        const unsigned long long want = (unsigned long long)((double)p * (double)total);
        target = want > 0 ? want : 1ull;
      }
      unsigned long long acc = above + incl - own;
      const bool reach = acc < target && acc + own >= target;
      if (reach) {
        for (int j = 0; j < PER; ++j) {
          const int bin = 255 - lane * PER - j;
          if (acc + hist[bin] >= target) { res[0] = (unsigned long long)bin; res[1] = acc; break; }
          acc += hist[bin];
        }
      } else if (lane == WARP - 1 && acc + own < target) {  // nothing reaches it: keep the whole prefix
        res[0] = 0; res[1] = acc;
      }
      if (lane == 0) res[2] = target;
    }
    mk_barrier();
    prefix |= (unsigned)res[0] << shift;
    above = res[1];
    target = res[2];
    mk_barrier();  // res is rewritten by the next pass
  }
  return prefix;
}

// Sample row b among the tokens that survive top-k, then top-p (over the renormalised top-k set),
// then min-p (HF's order; min-p's ratio to the largest probability does not change with the
// renormalisation): Gumbel-max of z = logit / T over the keys >= the largest of the thresholds.
// Never outside the set. Block-wide; every thread returns the token.
__device__ MK_OUTLINE int sample_filtered(const Ctx& c, const Sampler& s, int b, float rawmax) {
  const float* lg = gptr<const float>(c, S_LOGITS, 0) + (size_t)b * V;
  const float temp = s.temperature, zmax = rawmax / temp;
  unsigned thr = 0;
  // one call site (the select is inlined: one copy of it keeps the kernel's branches short)
#pragma unroll 1
  for (int by_mass = 0; by_mass < 2; ++by_mass) {
    if (by_mass ? s.top_p < 1.0f : (s.top_k > 0 && s.top_k < V))
      thr = radix_select(lg, temp, zmax, thr, by_mass != 0, (unsigned long long)s.top_k, s.top_p);
  }
  if (s.min_p > 0.0f) thr = max(thr, order_key(zmax + logf(s.min_p)));
  float best = -INFINITY;
  int bi = 0x7fffffff;
  for (int v = mk_tid(); v < V; v += NT) {
    const float z = mk_ld_act(lg + v) / temp;
    if (order_key(z) >= thr) argmax_merge(best, bi, z + gumbel(c, s, b, v), v);
  }
  warp_argmax(best, bi);
  float* pv = reinterpret_cast<float*>(mk_smem + SM_PAIR);
  int* pi = reinterpret_cast<int*>(mk_smem + SM_PAIR + 4 * 64);
  if (lane_id() == 0) { pv[warp_id()] = best; pi[warp_id()] = bi; }
  mk_barrier();
  best = -INFINITY; bi = 0x7fffffff;
  for (int w = 0; w < NW; ++w) argmax_merge(best, bi, pv[w], pi[w]);
  mk_barrier();  // pv/pi and the histogram are reused by the next row
  return bi;
}

}  // namespace mk
