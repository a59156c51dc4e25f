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
__device__ __forceinline__ float gumbel_at(unsigned pos, unsigned seed_lo, unsigned seed_hi, int b, int v) {
  const unsigned x = philox_x0((unsigned)v, (unsigned)b, pos, 0u, seed_lo, seed_hi);
  const float u = ((float)(x >> 9) + 0.5f) * (1.0f / 8388608.0f);
  return -logf(-logf(u));
}
__device__ __forceinline__ float gumbel(const Ctx& c, const Sampler& s, int b, int v) {
  return gumbel_at((unsigned)c.pos, s.seed_lo, s.seed_hi, b, v);
}
// float -> uint32 with the same order (non-NaN values): the radix select's keys
__device__ __forceinline__ unsigned order_key(float f) {
  const unsigned u = mk_f32_bits(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// order_key's inverse: the float's bits
__device__ __forceinline__ unsigned key_bits(unsigned key) { return (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key; }
// a Gumbel-max candidate (score v, vocabulary index i) as one u64 whose unsigned maximum is
// argmax_merge's winner: the larger score (NaN above all), then the lower index
__device__ __forceinline__ unsigned long long pack_best(float v, int i) {
  const unsigned key = v != v ? 0xFFFFFFFFu : order_key(v);
  return ((unsigned long long)key << 32) | (0xFFFFFFFFu - (unsigned)i);
}
__device__ __forceinline__ float best_score(unsigned long long p) {
  const unsigned key = (unsigned)(p >> 32);
  return mk_bits_f32(key_bits(key));
}
__device__ __forceinline__ int best_index(unsigned long long p) { return (int)(0xFFFFFFFFu - (unsigned)p); }
// probability mass of a scaled logit z relative to the row's largest zmax, in 2^-32 units: integer
// histogram sums do not depend on the order of the adds, so the thresholds are deterministic
__device__ __forceinline__ unsigned long long mass_of(float z, float zmax) {
  return (unsigned long long)(expf(z - zmax) * 4294967296.0f);
}

// shared-memory scratch of the argmax task from SAMPLE_BASE, past the weight pipeline's pages
// (render.sample_smem, checked below the flag). Region A is either the radix select's histograms or
// the histogram select's bins and collected bin (never both at once).
constexpr int SNB = SAMPLE_NB;                  // bins per level; also how many tokens a collected bin holds
constexpr int SM_A = SAMPLE_BASE;
constexpr int SM_HIST = SM_A;                   // radix: SAMPLE_HISTS copies of 256 u64 bins (copy 0: the merged sums)
constexpr int SM_BMASS = SM_A;                  // histogram: u64 mass per bin
constexpr int SM_BCNT = SM_BMASS + 8 * SNB;     // u32 count per bin
constexpr int SM_CZ = SM_BCNT + 4 * SNB;        // the collected bin: scaled logit, vocabulary index
constexpr int SM_CV = SM_CZ + 4 * SNB;
constexpr int SM_SZ = SM_CV + 4 * SNB;          // the collected bin sorted (descending key): logit, weight
constexpr int SM_SW = SM_SZ + 4 * SNB;
constexpr int SM_PAIR = SM_A + (SAMPLE_HISTS * 2048 > 32 * SNB ? SAMPLE_HISTS * 2048 : 32 * SNB);  // per-warp (score, index), up to 64 warps
constexpr int SM_RES = SM_PAIR + 512;      // u64: chosen digit/bin, weight above it, target; u32: collected count; int: all-stopped
constexpr int SM_LVL = SM_RES + 48;        // the histogram select's levels: float lo [3], float scale [3], int bin [3]
constexpr int SM_ROW = SM_LVL + 48;        // per row: token [B] then the largest raw logit [B]
static_assert(SM_ROW + 8 * B <= SAMPLE_BASE + SAMPLE_SMEM, "render.sample_smem must cover the sampler's scratch");
static_assert(256 % WARP == 0 && NW <= 64 && SNB % WARP == 0, "the sampler's scan and reduction layout");

__device__ __forceinline__ unsigned long long shfl_u64(unsigned long long v, int src) {
  const unsigned lo = mk_shfl_u32((unsigned)v, src), hi = mk_shfl_u32((unsigned)(v >> 32), src);
  return ((unsigned long long)hi << 32) | lo;
}
// v of lane ^ m: a butterfly shuffle under SAMPLER_LEAN (no lane index to compute, or to hoist)
__device__ __forceinline__ unsigned long long shfl_xor_u64(unsigned long long v, int m) {
  if constexpr (!SAMPLER_LEAN) return shfl_u64(v, s_lane() ^ m);
  const unsigned lo = (unsigned)mk_shfl_xor_i((int)v, m), hi = (unsigned)mk_shfl_xor_i((int)(v >> 32), m);
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
  const int tid = s_tid(), lane = s_lane();
  unsigned prefix = 0;
  unsigned long long above = 0, target = k;
#pragma unroll 1
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < SAMPLE_HISTS * 256; i += NT) hist[i] = 0;
    mk_barrier();
    // The top byte of a key is the sign and 7 exponent bits: a row's logits fall in a few bins, so
    // the adds would serialise on them. Each warp has its own bins, and each thread adds runs of
    // one bin from a register (integer sums: the result does not depend on the order).
    unsigned long long* own_hist = hist + (s_warp() % SAMPLE_HISTS) * 256;
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
    if (s_warp() == 0) {
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

// ---- the histogram select: the same thresholds as radix_select, usually in two passes ----
// Tokens are binned by d = zmax - z (fp32, monotone in z): level 0 has SNB bins over d in [0, SDMAX)
// (the last bin also holds every larger d; beyond d = 22.2 a token's mass is 0 in 2^-32 units). A
// scan of the bins finds the one where the weight from the top reaches the target; if it holds at
// most SNB tokens, one more pass collects them, they are sorted by key in shared memory and the
// threshold is read off; otherwise that bin is split into SNB bins (up to SLEVELS levels), and the
// radix select is the fallback (a crowded open-ended last bin, or ties no split separates).
constexpr float SDMAX = 32.0f;
constexpr int SLEVELS = 3;  // SM_LVL holds 3
// the top-k path's first candidates a thread holds in registers (CandScan::held: slots tid, tid + NT, ...)
constexpr int CAND_HELD = (NTILES * LM_PREF + NT - 1) / NT;

__device__ __forceinline__ int sbin(float d, float lo, float sc) {
  const float x = floorf((d - lo) * sc);
  return x < 0.0f ? 0 : (x < (float)(SNB - 1) ? (int)x : SNB - 1);  // NaN: the last bin
}

// f(v, z) for every token of the row, z = logit / T: 16-byte loads, the next chunk's in flight while
// this chunk is processed
template <class F>
__device__ __forceinline__ void row_scan(const float* lg, float temp, F&& f) {
  if constexpr (V % 4 == 0) {
    constexpr int UNR = 4, STEP = NT * 4 * UNR;
    auto load = [&](int base, float4* x) {
#pragma unroll
      for (int u = 0; u < UNR; ++u) {
        const int v = base + u * NT * 4;
        x[u] = v < V ? mk_ld_act4(lg + v) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    };
    float4 cur[UNR], nxt[UNR];
    load(s_tid() * 4, cur);
    for (int base = s_tid() * 4; base < V; base += STEP) {
      load(base + STEP, nxt);  // zeros past the row
#pragma unroll
      for (int u = 0; u < UNR; ++u) {
        const int v = base + u * NT * 4;
        if (v < V) { f(v, cur[u].x / temp); f(v + 1, cur[u].y / temp); f(v + 2, cur[u].z / temp); f(v + 3, cur[u].w / temp); }
      }
#pragma unroll
      for (int u = 0; u < UNR; ++u) cur[u] = nxt[u];
    }
  } else {
    for (int v = s_tid(); v < V; v += NT) f(v, mk_ld_act(lg + v) / temp);
  }
}

// warp 0: the first index i of w[0..n) (zero beyond n) where above + w[0] + ... + w[i] >= target;
// writes res[0] = i, res[1] = the weight before it (above included); n if none reaches it
__device__ __forceinline__ void scan_reach(const unsigned long long* w, int n, unsigned long long above,
                                           unsigned long long target, unsigned long long* res) {
  constexpr int PER = SNB / WARP;
  const int lane = s_lane();
  unsigned long long own = 0;
  for (int j = 0; j < PER; ++j) own += lane * PER + j < n ? w[lane * PER + j] : 0ull;
  unsigned long long incl = own;
  for (int off = 1; off < WARP; off <<= 1) {
    const unsigned long long o = shfl_u64(incl, lane >= off ? lane - off : lane);
    if (lane >= off) incl += o;
  }
  unsigned long long acc = above + incl - own;
  if (acc < target && acc + own >= target) {
    for (int j = 0; j < PER; ++j) {
      const unsigned long long x = lane * PER + j < n ? w[lane * PER + j] : 0ull;
      if (acc + x >= target) { res[0] = (unsigned long long)(lane * PER + j); res[1] = acc; break; }
      acc += x;
    }
  } else if (lane == WARP - 1 && acc + own < target) {
    res[0] = (unsigned long long)n; res[1] = acc;
  }
}

// warp 0: scan_reach on 256 u32 counts (the LM-head tiles' cut, held_hist_kth): the first bin i
// where the count from the top reaches target -> res[0], the count before it -> res[1]; res is left
// alone where no bin reaches it
__device__ __forceinline__ void bins_reach_u32(const unsigned* hist, unsigned target, unsigned* res) {
  constexpr int PER = 256 / WARP;
  const int lane = s_lane();
  unsigned own = 0u;
  for (int j = 0; j < PER; ++j) own += hist[lane * PER + j];
  unsigned incl = own;
  for (int off = 1; off < WARP; off <<= 1) {
    const unsigned o2 = mk_shfl_u32(incl, lane >= off ? lane - off : lane);
    if (lane >= off) incl += o2;
  }
  unsigned acc = incl - own;
  if (acc < target && incl >= target) {
    for (int j = 0; j < PER; ++j) {
      const unsigned h = hist[lane * PER + j];
      if (acc + h >= target) { res[0] = (unsigned)(lane * PER + j); res[1] = acc; break; }
      acc += h;
    }
  }
}

// the block's Gumbel-max winner from every thread's (score, index); every thread returns it
__device__ __forceinline__ int block_argmax(float best, int bi) {
  warp_argmax(best, bi);
  float* pv = reinterpret_cast<float*>(mk_smem + SM_PAIR);
  int* pi = reinterpret_cast<int*>(mk_smem + SM_PAIR + 4 * 64);
  if (s_lane() == 0) { pv[s_warp()] = best; pi[s_warp()] = bi; }
  mk_barrier();
  best = -INFINITY; bi = 0x7fffffff;
  for (int w = 0; w < NW; ++w) argmax_merge(best, bi, pv[w], pi[w]);
  mk_barrier();  // pv/pi are reused by the next row
  return bi;
}

// The largest key t >= lo whose weight over keys >= t reaches the target: radix_select's contract
// and result (tests/test_tokens.py runs a numpy twin of both against a sort). Block-wide.
// ``drawing`` (the last filter of the row), the collecting pass also draws: Gumbel-max over the
// tokens ranked above the collected bin (keys >= lo and >= mkey, the min-p key), then over the
// collected tokens at or above the threshold; the token goes to SM_RES + 24 (the row needs no
// final pass).
// ``scan`` visits the tokens: the whole row (ROW) or the LM-head tiles' candidates, which have no
// radix fallback (SM_RES + 36 is set instead and lo returned).
template <bool ROW, class Scan>
__device__ __forceinline__ unsigned hist_select(const Scan& scan, unsigned pos, unsigned seed_lo, unsigned seed_hi, int row,
                                                const float* lg, float temp, float zmax, unsigned lo, bool by_mass,
                                                unsigned long long k, float p, unsigned mkey, bool drawing,
                                                const Ctx* mc = nullptr) {
  // mc: the argmax task's trace marks 1-4 (mkc.trace.MARKS "argmax") at this select's steps
  auto mark = [&](int m) { if (mc != nullptr) trace_mark(*mc, m); };
  unsigned long long* bmass = reinterpret_cast<unsigned long long*>(mk_smem + SM_BMASS);
  unsigned* bcnt = reinterpret_cast<unsigned*>(mk_smem + SM_BCNT);
  float* cz = reinterpret_cast<float*>(mk_smem + SM_CZ);
  int* cv = reinterpret_cast<int*>(mk_smem + SM_CV);
  float* sz = reinterpret_cast<float*>(mk_smem + SM_SZ);
  unsigned long long* sw = reinterpret_cast<unsigned long long*>(mk_smem + SM_SW);
  unsigned long long* res = reinterpret_cast<unsigned long long*>(mk_smem + SM_RES);
  unsigned* ncol = reinterpret_cast<unsigned*>(mk_smem + SM_RES + 32);
  const int tid = s_tid(), lane = s_lane();
  // the bins chosen so far, in shared memory (arrays indexed by the level would live in local memory)
  float* lv_lo = reinterpret_cast<float*>(mk_smem + SM_LVL);
  float* lv_sc = lv_lo + SLEVELS;
  int* lv_bin = reinterpret_cast<int*>(lv_sc + SLEVELS);
  float cur_lo = 0.0f, cur_sc = (float)SNB / SDMAX;
  unsigned long long above = 0, target = k;
  // where a token lies against the bins chosen at levels 0..nl-1: -1 ranked above them, 0 in them,
  // 1 below (the first level where its bin differs decides)
  auto rank = [&](float d, int nl) {
#pragma unroll
    for (int j = 0; j < SLEVELS; ++j) {
      if (j >= nl) break;
      const int bj = sbin(d, lv_lo[j], lv_sc[j]);
      if (bj != lv_bin[j]) return bj < lv_bin[j] ? -1 : 1;
    }
    return 0;
  };
#pragma unroll 1
  for (int nl = 0; nl < SLEVELS; ++nl) {
    for (int i = tid; i < SNB; i += NT) { bmass[i] = 0; bcnt[i] = 0; }
    mk_barrier();
    // the last bin (the open end at level 0, where most tokens of a peaked row land) is summed in
    // registers, the others with shared-memory adds (integers: the order of the adds does not matter)
    unsigned last_n = 0;
    unsigned long long last_w = 0;
    // token z in this level's bins and not in the last: its bin b and weight w
    auto bin_of = [&](float z, int& b, unsigned long long& w) {
      if (order_key(z) < lo) return false;
      const float d = zmax - z;
      if (rank(d, nl) != 0) return false;
      b = sbin(d, cur_lo, cur_sc);
      w = by_mass ? mass_of(z, zmax) : 1ull;
      if (b == SNB - 1) { ++last_n; last_w += w; return false; }
      return true;
    };
    bool counted = false;
    if constexpr (!ROW) {
      if (scan.held) {  // the held candidates crowd a few bins near the top: a warp's adds per bin at once
#pragma unroll
        for (int u = 0; u < CAND_HELD; ++u) {
          int b = 0;
          unsigned long long w = 0;
          const bool in = scan.hv[u] >= 0 && bin_of(scan.hz[u] / scan.temp, b, w);
          mk_warp_count(bcnt, (unsigned)b, in);
          if (by_mass && in) mk_smem_add_u64(bmass + b, w);
        }
        counted = true;
      }
    }
    if (!counted) {
      scan([&](int, float z) {
        int b = 0;
        unsigned long long w = 0;
        if (!bin_of(z, b, w)) return;
        mk_smem_add_u32(bcnt + b, 1u);
        if (by_mass) mk_smem_add_u64(bmass + b, w);
      });
    }
    for (int off = WARP / 2; off > 0; off >>= 1) {
      last_n += (unsigned)mk_shfl_xor_i((int)last_n, off);
      last_w += shfl_xor_u64(last_w, off);
    }
    if (lane == 0 && last_n != 0) { mk_smem_add_u32(bcnt + SNB - 1, last_n); mk_smem_add_u64(bmass + SNB - 1, last_w); }
    mk_barrier();
    if (nl == 0) mark(1);  // level 0's bins counted
    if (!by_mass) for (int i = tid; i < SNB; i += NT) bmass[i] = bcnt[i];  // counts are the weights
    mk_barrier();
    if (s_warp() == 0) {
      if (nl == 0 && by_mass) {
        unsigned long long tot = 0;
        for (int j = lane; j < SNB; j += WARP) tot += bmass[j];
        for (int off = WARP / 2; off > 0; off >>= 1) tot += shfl_xor_u64(tot, off);
        const unsigned long long want = (unsigned long long)((double)p * (double)tot);
        target = want > 0 ? want : 1ull;
      }
      scan_reach(bmass, SNB, above, target, res);
      if (lane == 0) res[2] = target;
    }
    mk_barrier();
    if (nl == 0) mark(2);  // level 0's reaching bin
    const int b = (int)res[0];
    target = res[2];
    if (b >= SNB) { mk_barrier(); return lo; }  // the weight of keys >= lo is below the target: keep them all
    above = res[1];
    const unsigned nb = bcnt[b];
    if (tid == 0) { lv_lo[nl] = cur_lo; lv_sc[nl] = cur_sc; lv_bin[nl] = b; }
    mk_barrier();  // res and the bins are rewritten below
    if (nb <= (unsigned)SNB) {
      // collect the bin's tokens (drawing over those ranked above it), sort them by key (descending;
      // ties by slot), read off the threshold
      if (tid == 0) *ncol = 0;
      mk_barrier();
      const unsigned keep = max(lo, mkey);
      float best = -INFINITY;
      int bi = 0x7fffffff;
      bool collected = false;
      if constexpr (!ROW) {
        if (scan.held) {  // a warp's slots at once (mk_warp_slot)
#pragma unroll
          for (int u = 0; u < CAND_HELD; ++u) {
            const int v = scan.hv[u];
            const float z = scan.hz[u] / scan.temp;
            const unsigned key = order_key(z);
            const int r = v >= 0 && key >= lo ? rank(zmax - z, nl + 1) : 1;
            const unsigned sl = mk_warp_slot(ncol, r == 0);
            if (r == 0) {
              if (sl < (unsigned)SNB) { cz[sl] = z; cv[sl] = v; }
            } else if (r < 0 && drawing && key >= keep) {
              argmax_merge(best, bi, z + gumbel_at(pos, seed_lo, seed_hi, row, v), v);
            }
          }
          collected = true;
        }
      }
      if (!collected) {
        scan([&](int v, float z) {
          const unsigned key = order_key(z);
          if (key < lo) return;
          const int r = rank(zmax - z, nl + 1);
          if (r == 0) {
            const unsigned sl = mk_smem_add_u32(ncol, 1u);
            if (sl < (unsigned)SNB) { cz[sl] = z; cv[sl] = v; }
          } else if (r < 0 && drawing && key >= keep) {
            argmax_merge(best, bi, z + gumbel_at(pos, seed_lo, seed_hi, row, v), v);
          }
        });
      }
      mk_barrier();
      mark(3);  // the bin collected (and the tokens above it drawn over)
      const int n = min((int)*ncol, SNB);
      for (int i = tid; i < n; i += NT) {
        const unsigned ki = order_key(cz[i]);
        int r = 0;
        for (int j = 0; j < n; ++j) {
          const unsigned kj = order_key(cz[j]);
          r += kj > ki || (kj == ki && j < i);
        }
        sz[r] = cz[i];
        sw[r] = by_mass ? mass_of(cz[i], zmax) : 1ull;
      }
      mk_barrier();
      if (s_warp() == 0) scan_reach(sw, n, above, target, res);
      mk_barrier();
      const int r = (int)res[0];
      const unsigned thr = r < n ? order_key(sz[r]) : lo;
      mk_barrier();
      mark(4);  // the threshold
      if (drawing) {
        const unsigned cut = max(thr, mkey);
        for (int i = tid; i < n; i += NT)
          if (order_key(cz[i]) >= cut) argmax_merge(best, bi, cz[i] + gumbel_at(pos, seed_lo, seed_hi, row, cv[i]), cv[i]);
        const int tok = block_argmax(best, bi);
        if (tid == 0) *reinterpret_cast<int*>(mk_smem + SM_RES + 24) = tok;
      }
      return thr;
    }
    if (nl == 0 && b == SNB - 1) break;  // the open end: no finite interval to split
    cur_lo = cur_lo + (float)b / cur_sc;
    cur_sc = cur_sc * (float)SNB;
  }
  if constexpr (ROW) {
    return radix_select(lg, temp, zmax, lo, by_mass, k, p);
  } else {
    if (tid == 0) *reinterpret_cast<int*>(mk_smem + SM_RES + 36) = 1;
    mk_barrier();
    return lo;
  }
}

// the scanners of hist_select: f(v, z = logit / T) over the row, or over row b's candidates
struct RowScan {
  const float* lg;
  float temp;
  template <class F> __device__ __forceinline__ void operator()(F&& f) const { row_scan(lg, temp, f); }
};
struct CandScan {
  const float* cw;  // row b's NTILES blocks of LM_CAND_WORDS words (lm_candidates)
  float temp;
  int per;          // the first ``per`` (sorted) candidates of each tile: LM_PREF or LM_CAND
  // held (CAND_HELD_ON, per == LM_PREF): the thread's slots were loaded once (load_held) and every
  // pass reads them from registers; else each pass loads them (two passes over the first
  // candidates took ~16 us of the argmax task at batch 1)
  bool held;
  float hz[CAND_HELD];
  int hv[CAND_HELD];
  float hg[CAND_NOISE ? CAND_HELD : 1];  // (CAND_NOISE) the slots' Gumbel noise, as the tiles wrote it
  // every slot's (logit bits, index) pair in flight at once (8-byte aligned: LM_CAND_HEAD is even)
  __device__ __forceinline__ void load_held() {
#pragma unroll
    for (int u = 0; u < CAND_HELD; ++u) {
      const int sl = s_tid() + u * NT;
      hv[u] = -1;
      hz[u] = 0.0f;
      if constexpr (CAND_NOISE != 0) hg[u] = 0.0f;
      if (sl < NTILES * LM_PREF) {
        const uint2 w = mk_ld_cache_word2(reinterpret_cast<const unsigned*>(
            cw + (sl / LM_PREF) * LM_CAND_WORDS + LM_CAND_HEAD + 2 * (sl % LM_PREF)));
        hz[u] = mk_bits_f32(w.x);
        hv[u] = (int)w.y;
        if constexpr (CAND_NOISE != 0)
          hg[u] = mk_bits_f32(mk_ld_cache_word(reinterpret_cast<const unsigned*>(
              cw + (sl / LM_PREF) * LM_CAND_WORDS + LM_CAND_NOISE + sl % LM_PREF)));
      }
    }
  }
  template <class F> __device__ __forceinline__ void operator()(F&& f) const {
    if (held) {
#pragma unroll
      for (int u = 0; u < CAND_HELD; ++u)
        if (hv[u] >= 0) f(hv[u], hz[u] / temp);
      return;
    }
    constexpr int UNR = 4;  // slots in flight per thread: one at a time waited ~33 L2 round trips a pass
    for (int base = s_tid(); base < NTILES * per; base += NT * UNR) {
      float x[UNR];
      int v[UNR];
#pragma unroll
      for (int u = 0; u < UNR; ++u) {
        const int sl = base + u * NT;
        v[u] = -1;
        if (sl < NTILES * per) {
          const float* pr = cw + (sl / per) * LM_CAND_WORDS + LM_CAND_HEAD + 2 * (sl % per);
          x[u] = mk_ld_act(pr);
          v[u] = (int)mk_f32_bits(mk_ld_act(pr + 1));
        }
      }
#pragma unroll
      for (int u = 0; u < UNR; ++u)
        if (v[u] >= 0) f(v[u], x[u] / temp);
    }
  }
};

// One step of the candidates' radix select, run by one warp (all lanes): over the 256 bins from the
// top, the digit where the count reaches need -> res[0], and the count above that digit -> res[1].
__device__ __forceinline__ void cand_digit(const unsigned* hist, unsigned need, unsigned* res, int lane) {
  constexpr int PER = 256 / WARP;
  unsigned own = 0;
  for (int j = 0; j < PER; ++j) own += hist[255 - lane * PER - j];
  unsigned incl = own;
  for (int off = 1; off < WARP; off <<= 1) {
    const unsigned o2 = mk_shfl_u32(incl, lane >= off ? lane - off : lane);
    if (lane >= off) incl += o2;
  }
  unsigned acc = incl - own;
  if (acc < need && acc + own >= need) {
    for (int j = 0; j < PER; ++j) {
      const int bin = 255 - lane * PER - j;
      if (acc + hist[bin] >= need) { res[0] = (unsigned)bin; res[1] = acc; break; }
      acc += hist[bin];
    }
  }
}
// One collect pass over the tile's keys i0, i0 + step, ... < n: pass 0 the keys above the cut, pass
// 1 those at it, into the slots res[2] hands out while they last.
template <class KeyOf>
__device__ __forceinline__ void cand_collect(int pass, int i0, int step, int n, unsigned cut, int r0, unsigned* res,
                                             unsigned* ckey, int* cidx, KeyOf&& key_of) {
  for (int i = i0; i < n; i += step) {
    const unsigned key = key_of(i);
    if (pass == 0 ? key > cut : key == cut) {
      const unsigned sl = mk_smem_add_u32(res + 2, 1u);
      if (sl < (unsigned)LM_CAND) { ckey[sl] = key; cidx[sl] = r0 + i; }
    }
  }
}
// Slot sl of the collected candidates into the tile's block o at its rank (keys above it, and equal
// keys at lower indices), or an unused slot cleared.
// CAND_NOISE: a slot ranked among the first LM_PREF also writes its token's Gumbel noise (row b's,
// this step's) at word LM_CAND_NOISE + rank, for argmax's draw over the held candidates.
// hist (TILE_HIST's cut): the slot ranked last also writes its key as word 1, the smallest kept.
__device__ __forceinline__ void cand_write(const Ctx& c, int b, int* o, const unsigned* ckey, const int* cidx, int used,
                                           int n, int sl, bool hist = false) {
  if (sl < used) {
    const unsigned k = ckey[sl];
    const int v = cidx[sl];
    const float g = CAND_NOISE != 0 ? gumbel(c, tok_sampler(c), b, v) : 0.0f;  // (its chain beside the rank's loop)
    int r = 0;
    for (int j = 0; j < used; ++j) r += ckey[j] > k || (ckey[j] == k && cidx[j] < v);
    o[LM_CAND_HEAD + 2 * r] = (int)key_bits(k);  // the logit's bits
    o[LM_CAND_HEAD + 1 + 2 * r] = v;
    if (r == LM_PREF - 1 && n > LM_PREF) o[2] = (int)k;  // (then used >= LM_PREF: some slot ranks there)
    if (hist && r == used - 1) o[1] = (int)k;
    if (CAND_NOISE != 0 && r < LM_PREF) o[LM_CAND_NOISE + r] = (int)mk_f32_bits(g);
  } else {
    o[LM_CAND_HEAD + 2 * sl] = 0; o[LM_CAND_HEAD + 1 + 2 * sl] = -1;
  }
}
// RANK_QUAD (CodegenOptions.rank_quad): every slot's rank counted by four threads, each over a
// quarter of the kept keys (j = q, q + 4, ...), summed by two shuffles: the same ranks as
// cand_write's, a quarter of its loop, on all of a block's threads instead of LM_CAND of them.
// (Its writes repeat cand_write's: the two shared through a helper moved one compare in the default
// kernel's SASS. Once measured, one of the two goes.)
static_assert(4 * LM_CAND % WARP == 0, "RANK_QUAD: whole warps");
__device__ __forceinline__ void cand_write_quad(const Ctx& c, int b, int* o, const unsigned* ckey, const int* cidx, int used,
                                                int n, bool hist = false) {
  for (int t = s_tid(); t < 4 * LM_CAND; t += NT) {  // (whole warps: the bound is a multiple of WARP)
    const int sl = t >> 2, q = t & 3;
    const unsigned k = sl < used ? ckey[sl] : 0u;
    const int v = sl < used ? cidx[sl] : 0;
    int r = 0;
    if (sl < used)
      for (int j = q; j < used; j += 4) r += ckey[j] > k || (ckey[j] == k && cidx[j] < v);
    r += mk_shfl_xor_i(r, 1);
    r += mk_shfl_xor_i(r, 2);
    if (q != 0) continue;
    if (sl < used) {
      const float g = CAND_NOISE != 0 ? gumbel(c, tok_sampler(c), b, v) : 0.0f;
      o[LM_CAND_HEAD + 2 * r] = (int)key_bits(k);
      o[LM_CAND_HEAD + 1 + 2 * r] = v;
      if (r == LM_PREF - 1 && n > LM_PREF) o[2] = (int)k;
      if (hist && r == used - 1) o[1] = (int)k;
      if (CAND_NOISE != 0 && r < LM_PREF) o[LM_CAND_NOISE + r] = (int)mk_f32_bits(g);
    } else {
      o[LM_CAND_HEAD + 2 * sl] = 0; o[LM_CAND_HEAD + 1 + 2 * sl] = -1;
    }
  }
}
// The LM-head tile's LM_CAND largest logits of each batch row, for the filtered sampler's candidate
// path (TOKF_CAND): a radix select over the order keys of the tile's logits [r0, r1) in shared
// memory (region A, free once the tile's GEMV is done), then the words of block ``tile``: how many,
// the key of the smallest kept logit when the tile had more than LM_CAND (0: it kept them all), the
// key of the LM_PREF-th when the tile had more than LM_PREF (0: none beyond them), then (fp32 bits,
// index) pairs sorted by key (descending; ties by index; -1: unused). Ties at the cut are kept
// while slots remain: argmax trusts the candidates only above every cut tile's smallest kept key,
// and the first LM_PREF of each tile above every tile's LM_PREF-th key. Block-wide.
// TILE_HIST: the bin of d = zmax - z (|d|: zmax - zmax may be -0), 16 bins an octave from 2^-8 (bin 0
// below it, bin 255 from ~2^8 up): monotone in z, equal logits in one bin
__device__ __forceinline__ unsigned tile_bin(float zmax, float z) {
  constexpr unsigned LO = 0x3b800000u;  // 2^-8
  const unsigned u = mk_f32_bits(zmax - z) & 0x7fffffffu;
  return u < LO ? 0u : min(1u + ((u - LO) >> 19), 255u);
}
// The tile's logits: the GEMV's output rows in shared memory (OFF_OUT, row j of batch row b at j * B
// + b) where ``smem`` (TILE_HIST, the tile one row block, clear of the caller's scratch), else its
// stores read back through the L2
template <bool SMEM>
__device__ __forceinline__ float tile_logit(const float* lgb, int r0, int b, int i) {
  if constexpr (SMEM) return smem_f(OFF_OUT)[i * OUT_LD + b];
  else return lgb[(size_t)b * V + r0 + i];
}
// bytes [SM_A, SM_A + n) clear of bytes [off, off + len)
constexpr bool clear_of_a(int n, int off, int len) { return off >= SM_A + n || off + len <= SM_A; }
constexpr int CAND_SCR = 4 * (LM_ROWS + 260 + 2 * LM_CAND);  // lm_candidates_block's scratch from SM_A
constexpr bool CAND_SMEM = TILE_HIST != 0 && LM_ROWS <= RESID_RB && clear_of_a(CAND_SCR, OFF_OUT, 4 * OUT_LD * LM_ROWS);
// (the histogram cut reads the rows' maxima after the previous row's scratch writes)
constexpr bool CAND_HIST = TILE_HIST != 0 && clear_of_a(CAND_SCR, OFF_BEST, 16 * B);
__device__ __forceinline__ void lm_candidates_block(const Ctx& c, int r0, int r1, int tile) {
  unsigned* keys = reinterpret_cast<unsigned*>(mk_smem + SM_A);
  unsigned* hist = keys + LM_ROWS;
  unsigned* res = hist + 256;  // chosen digit, count above it, slots taken
  unsigned* ckey = res + 4;    // the kept slots before the sort: key, index
  int* cidx = reinterpret_cast<int*>(ckey + LM_CAND);
  const int n = r1 - r0, tid = s_tid(), lane = s_lane();
  const float* lgb = gptr<const float>(c, S_LOGITS, 0);
  int* out = gptr<int>(c, S_LM_CAND, 0);
  for (int b = 0; b < B; ++b) {
    int* o = out + ((size_t)b * NTILES + tile) * LM_CAND_WORDS;
    mk_barrier();  // the tile's logits stores are visible to the block; the last row's readers are done
    if constexpr (CAND_HIST) {
      // one count over the bins of tile_bin, then the tokens of the bins above the first bin where
      // the count from the top passes LM_CAND: at most LM_CAND, ties never split, so every logit
      // above the smallest kept one is kept (word 1: that key). Fewer than LM_PREF kept (a crowded
      // bin), or a maximum that is not finite: the radix select below.
      const float zmax = smem_f(OFF_BEST)[b];
      if (n > LM_CAND && isfinite(zmax)) {
        for (int i = tid; i < 256; i += NT) hist[i] = 0;
        if (tid == 0) res[2] = 0;
        mk_barrier();
        for (int i = tid; i < n; i += NT) mk_smem_add_u32(hist + tile_bin(zmax, tile_logit<CAND_SMEM>(lgb, r0, b, i)), 1u);
        mk_barrier();
        // the first bin whose count from the top passes LM_CAND, and the count above it
        if (s_warp() == 0) bins_reach_u32(hist, (unsigned)LM_CAND + 1u, res);
        mk_barrier();
        if (b == 0) trace_mark(c, 3);  // row 0's cut
        const unsigned cbin = res[0], used = res[1];
        if (used >= (unsigned)LM_PREF) {
          for (int i0 = tid - lane; i0 < n; i0 += NT) {  // whole warps (mk_warp_slot)
            const int i = i0 + lane;
            const float z = i < n ? tile_logit<CAND_SMEM>(lgb, r0, b, i) : 0.0f;
            const bool take = i < n && tile_bin(zmax, z) < cbin;
            const unsigned sl = mk_warp_slot(res + 2, take);
            if (take) { ckey[sl] = order_key(z); cidx[sl] = r0 + i; }
          }
          mk_barrier();
          if (B == 1) trace_mark(c, 5);
          if constexpr (RANK_QUAD != 0) cand_write_quad(c, b, o, ckey, cidx, (int)used, n, true);
          else for (int sl = tid; sl < LM_CAND; sl += NT) cand_write(c, b, o, ckey, cidx, (int)used, n, sl, true);
          if (B == 1) trace_mark(c, 6);  // ranked and written (thread 0's slots)
          if (tid == 0) o[0] = (int)used;
          continue;
        }
      }
    }
#pragma unroll 4
    for (int i = tid; i < n; i += NT) keys[i] = order_key(tile_logit<CAND_SMEM>(lgb, r0, b, i));
    unsigned cut = 0;
    if (n > LM_CAND) {
      unsigned need = LM_CAND;
#pragma unroll 1
      for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += NT) hist[i] = 0;
        mk_barrier();
        if constexpr (TILE_WARP_ADDS != 0) {
          for (int i0 = tid - lane; i0 < n; i0 += NT) {  // whole warps (mk_warp_count)
            const int i = i0 + lane;
            const unsigned key = i < n ? keys[i] : 0u;
            mk_warp_count(hist, (key >> shift) & 255u, i < n && (shift == 24 || (key >> (shift + 8)) == (cut >> (shift + 8))));
          }
        } else {
          for (int i = tid; i < n; i += NT) {
            const unsigned key = keys[i];
            if (shift == 24 || (key >> (shift + 8)) == (cut >> (shift + 8))) mk_smem_add_u32(hist + ((key >> shift) & 255u), 1u);
          }
        }
        mk_barrier();
        if (s_warp() == 0) cand_digit(hist, need, res, lane);
        mk_barrier();
        cut |= res[0] << shift;
        need -= res[1];
        mk_barrier();
      }
    }
    if (b == 0) trace_mark(c, 3);  // row 0's cut
    if (tid == 0) res[2] = 0;
    mk_barrier();
    // the logits above the cut (fewer than LM_CAND), then ties at the cut while slots remain
    for (int pass = 0; pass < 2; ++pass) {
      cand_collect(pass, tid, NT, n, cut, r0, res, ckey, cidx, [&](int i) { return keys[i]; });
      mk_barrier();
    }
    if (B == 1) trace_mark(c, 5);  // the candidates collected (batch 1: the FMA path's tasks leave stamp 8 free)
    const int used = min((int)res[2], LM_CAND);
    if constexpr (RANK_QUAD != 0) cand_write_quad(c, b, o, ckey, cidx, used, n);
    else for (int sl = tid; sl < LM_CAND; sl += NT) cand_write(c, b, o, ckey, cidx, used, n, sl);
    if (B == 1) trace_mark(c, 6);  // ranked and written (thread 0's slots)
    if (tid == 0) {
      o[0] = used; o[1] = n > LM_CAND ? (int)cut : 0;
      if (n <= LM_PREF) o[2] = 0;
    }
  }
}

// The same candidates with a warp per row (rows w, w + NW, ...: LM_CAND_WARPS, render.py's choice), so the
// rows' selects run at once instead of one after another behind block barriers (at batch 8 the
// block-wide select took ~80 us of the LM-head tile, BENCHMARKS.md eleventh session). Each warp
// has its own scratch (256 u32 bins, 4 result words, LM_CAND keys and indices) and reads the keys
// from the tile's logits (global: this block's stores, visible after the barrier), as the block
// version reads them from shared memory. The same digits, cut and ranks: a row's result is the
// block version's (which ties at the cut fill the last slots may differ; argmax never trusts them).
constexpr int CAND_WS = 256 + 4 + 2 * LM_CAND;  // scratch words per warp
__device__ __forceinline__ void lm_candidates_warps(const Ctx& c, int r0, int r1, int tile) {
  static_assert(NW * CAND_WS * 4 <= (SAMPLE_HISTS * 2048 > 32 * SNB ? SAMPLE_HISTS * 2048 : 32 * SNB),
                "every warp's candidate scratch fits region A");
  unsigned* hist = reinterpret_cast<unsigned*>(mk_smem + SM_A) + s_warp() * CAND_WS;
  unsigned* res = hist + 256;  // chosen digit, count above it, slots taken
  unsigned* ckey = res + 4;
  int* cidx = reinterpret_cast<int*>(ckey + LM_CAND);
  const int n = r1 - r0, lane = s_lane();
  const float* lgb = gptr<const float>(c, S_LOGITS, 0);
  int* out = gptr<int>(c, S_LM_CAND, 0);
  mk_barrier();  // the tile's logits stores are visible to the block; region A's earlier users are done
  for (int b = s_warp(); b < B; b += NW) {
    const float* lg = lgb + (size_t)b * V + r0;
    int* o = out + ((size_t)b * NTILES + tile) * LM_CAND_WORDS;
    unsigned cut = 0;
    if (n > LM_CAND) {
      unsigned need = LM_CAND;
#pragma unroll 1
      for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = lane; i < 256; i += WARP) hist[i] = 0;
        mk_syncwarp();
        if constexpr (TILE_WARP_ADDS != 0) {
#pragma unroll 4
          for (int i0 = 0; i0 < n; i0 += WARP) {  // whole warps (mk_warp_count)
            const int i = i0 + lane;
            const unsigned key = i < n ? order_key(lg[i]) : 0u;
            mk_warp_count(hist, (key >> shift) & 255u, i < n && (shift == 24 || (key >> (shift + 8)) == (cut >> (shift + 8))));
          }
        } else {
#pragma unroll 4
          for (int i = lane; i < n; i += WARP) {
            const unsigned key = order_key(lg[i]);
            if (shift == 24 || (key >> (shift + 8)) == (cut >> (shift + 8))) mk_smem_add_u32(hist + ((key >> shift) & 255u), 1u);
          }
        }
        mk_syncwarp();
        cand_digit(hist, need, res, lane);
        mk_syncwarp();
        cut |= res[0] << shift;
        need -= res[1];
        mk_syncwarp();
      }
    }
    if (lane == 0) res[2] = 0;
    mk_syncwarp();
    for (int pass = 0; pass < 2; ++pass) {  // above the cut (fewer than LM_CAND), then ties while slots remain
      cand_collect(pass, lane, WARP, n, cut, r0, res, ckey, cidx, [&](int i) { return order_key(lg[i]); });
      mk_syncwarp();
    }
    const int used = min((int)res[2], LM_CAND);
    for (int sl = lane; sl < LM_CAND; sl += WARP) cand_write(c, b, o, ckey, cidx, used, n, sl);
    if (lane == 0) {
      o[0] = used; o[1] = n > LM_CAND ? (int)cut : 0;
      if (n <= LM_PREF) o[2] = 0;
    }
    mk_syncwarp();  // the next row reuses the scratch
  }
}

__device__ MK_OUTLINE void lm_candidates(const Ctx& c, int r0, int r1, int tile) {
  if constexpr (LM_CAND_WARPS) lm_candidates_warps(c, r0, r1, tile);
  else lm_candidates_block(c, r0, r1, tile);
}

// ---- the LM-head tiles' mass sums for sample_pdraw's bounds (TOKF_PDRAW, PDRAW_BOUND) ----
// Per row, the tile's z = logit / T in PD_HB bins of 1/S (S = PD_S, 8) on an absolute grid from the
// tile's largest down: bin j holds z in [(A - j) / S, (A - j + 1) / S), A = floor(S max z) (word 2 of
// block ``tile``), the last bin everything below. Each bin holds its tokens' mass relative to the
// grid's top, e^(z - A / S) summed (float adds in any order: the bounds are widened for it), written as
// sums from the top from word LM_CAND_HEAD (word LM_CAND_HEAD + j: bins 0..j), so argmax reads one
// word a tile for the mass ranked above a token and one for the tile's whole mass.
// PD_NOHIST in word 2: no bound from this tile (more than 65535 logits, or logits past the grid).
// PDRAW_WALK: 64 bins, then the tile's PD_M - 1 best Gumbel scores after its winner (words 0-1):
// (score bits, index) pairs from word PD_CW, sorted (pack_best's order; index -1: none).
// WALK_ONCE (CodegenOptions.walk_once): the winner too, from the same pass (lm_gumbel does not run).
// (WALK_FINE: the walk's grid in bins of 1/16, 128 of them, the same 8 units from the tile's top)
constexpr int PD_HB = PDRAW_WALK != 0 && WALK_FINE == 0 ? 64 : 128;
constexpr int PD_S = PDRAW_WALK != 0 && WALK_FINE != 0 ? 16 : 8;  // bins per unit of z
constexpr float PD_SF = (float)PD_S, PD_INV = 1.0f / (float)PD_S;  // (exact: a power of two)
constexpr int PD_M = 4;
constexpr int PD_CW = LM_CAND_HEAD + PD_HB;
constexpr int PD_ROWB = 4 * PD_HB + (PDRAW_WALK ? 8 * PD_M : 0);  // region A's bytes a row
constexpr int PD_NOHIST = (int)0x80000000;
static_assert(LM_CAND_HEAD + PD_HB <= LM_CAND_WORDS && PD_HB % WARP == 0 && 4 * PD_HB <= SAMPLE_SMEM, "the tiles' mass sums");
static_assert(!PDRAW_WALK || (PD_CW % 4 == 0 && PD_CW + 2 * (PD_M - 1) <= LM_CAND_WORDS && NTILES <= NT), "the tiles' candidates");
static_assert(OFF_BEST >= SM_A + PD_ROWB || OFF_BEST + 16 * B <= SM_A, "the histogram's bins clear of the tile's maxima");
// PD_RB rows at once (their bins side by side in region A, clear of the tile's maxima, which hold
// rawmax): one clear, one count and one write-out pass for them, not three block barriers per row.
constexpr int PD_RA = SAMPLE_HISTS * 2048 > 32 * SNB ? SAMPLE_HISTS * 2048 : 32 * SNB;  // region A's bytes
constexpr int PD_RB0 = !LM_ROWS_AT_ONCE ? 1 : B < PD_RA / PD_ROWB ? B : PD_RA / PD_ROWB;
constexpr int PD_RB = (OFF_BEST >= SM_A && OFF_BEST < SM_A + PD_ROWB * PD_RB0) ? (OFF_BEST - SM_A) / PD_ROWB : PD_RB0;
static_assert(PD_RB >= 1, "a row's histogram fits region A");
constexpr bool HIST_SMEM = TILE_HIST != 0 && LM_ROWS <= RESID_RB && clear_of_a(PD_ROWB * PD_RB, OFF_OUT, 4 * OUT_LD * LM_ROWS);
__device__ __forceinline__ bool pd_top(const float* rawmax, int b, float temp, int n, float& top) {
  top = floorf(rawmax[b] / temp * PD_SF);
  return n <= 65535 && fabsf(top) < 1.0e6f;
}
// A warp writes a row's bin sums from the top to o: lane l's PL consecutive bins, run[e] its running
// sums over them, acc its total; the lanes' totals scanned by shuffles
template <int PL>
__device__ __forceinline__ void sums_from_top(float* o, const float (&run)[PL], float acc, int lane) {
  float incl = acc;
  for (int off = 1; off < WARP; off <<= 1) {
    const float x = mk_bits_f32(mk_shfl_u32(mk_f32_bits(incl), lane >= off ? lane - off : lane));
    if (lane >= off) incl += x;
  }
  const float excl = mk_bits_f32(mk_shfl_u32(mk_f32_bits(incl), lane > 0 ? lane - 1 : 0));
#pragma unroll
  for (int e = 0; e < PL; ++e) o[lane * PL + e] = (lane > 0 ? excl : 0.0f) + run[e];
}
__device__ MK_OUTLINE void lm_histogram(const Ctx& c, int r0, int r1, int tile, const float* rawmax) {
  float* hm = reinterpret_cast<float*>(mk_smem + SM_A);  // region A: free once the GEMV is done
  // PDRAW_WALK: each row's PD_M best (pack_best) after the rows' bins
  [[maybe_unused]] unsigned long long* best = reinterpret_cast<unsigned long long*>(mk_smem + SM_A + 4 * PD_HB * PD_RB);
  const Sampler smp = tok_sampler(c);
  const float temp = smp.temperature;
  const float* lgb = gptr<const float>(c, S_LOGITS, 0);
  int* cand = gptr<int>(c, S_LM_CAND, 0);
  const int n = r1 - r0, tid = s_tid();
  for (int b0 = 0; b0 < B; b0 += PD_RB) {
    const int nb = min(PD_RB, B - b0);
    mk_barrier();  // the tile's logits stores are visible to the block; the last rows' readers are done
    for (int i = tid; i < nb * PD_HB; i += NT) hm[i] = 0.0f;
    if constexpr (PDRAW_WALK) for (int i = tid; i < nb * PD_M; i += NT) best[i] = 0ull;
    mk_barrier();
#pragma unroll 4
    for (int idx = tid; idx < nb * n; idx += NT) {
      const int r = idx / n, i = idx - r * n;
      float top;
      if (!pd_top(rawmax, b0 + r, temp, n, top)) continue;
      const float z = tile_logit<HIST_SMEM>(lgb, r0, b0 + r, i) / temp;
      const float j = top - floorf(z * PD_SF);
      const float m = expf(z - top * PD_INV);  // <= e^(1/S): z < (A + 1) / S
      if (m > 0.0f) mk_smem_add_f32(hm + r * PD_HB + (j >= 0.0f && j < (float)(PD_HB - 1) ? (int)j : PD_HB - 1), m);
      if constexpr (PDRAW_WALK) {
        // the row's PD_M largest scores: each slot keeps the larger of it and what arrives and passes
        // the smaller on (a slot k ends with the k+1-th largest whatever the order of the adds)
        unsigned long long x = pack_best(z + gumbel(c, smp, b0 + r, r0 + i), r0 + i);
        unsigned long long* sl = best + r * PD_M;
        if (x > *reinterpret_cast<volatile unsigned long long*>(sl + PD_M - 1))
          for (int k = 0; k < PD_M && x != 0ull; ++k) {
            const unsigned long long old = mk_smem_fetch_max_u64(sl + k, x);
            x = old < x ? old : x;
          }
      }
    }
    mk_barrier();
    if (b0 == 0) trace_mark(c, 6);  // the count pass over the tile done
    if constexpr (PDRAW_WALK) {
      for (int idx = tid; idx < nb * (PD_M - 1); idx += NT) {
        const int r = idx / (PD_M - 1), k = 1 + idx % (PD_M - 1);
        const unsigned long long x = best[r * PD_M + k];
        int* o = cand + ((size_t)(b0 + r) * NTILES + tile) * LM_CAND_WORDS + PD_CW + 2 * (k - 1);
        o[0] = x != 0ull ? (int)mk_f32_bits(best_score(x)) : 0;
        o[1] = x != 0ull ? best_index(x) : -1;
      }
      if constexpr (WALK_ONCE != 0) {  // the first is the tile's winner (words 0-1, as lm_sample_tail writes lm_gumbel's)
        for (int r = tid; r < nb; r += NT) {
          const unsigned long long x = best[r * PD_M];
          int* o = cand + ((size_t)(b0 + r) * NTILES + tile) * LM_CAND_WORDS;
          o[0] = (int)mk_f32_bits(best_score(x));
          o[1] = best_index(x);
        }
      }
    }
    // a warp per row: sums from the top (each lane PL consecutive bins, then the lanes' totals)
    constexpr int PL = PD_HB / WARP;
    for (int r = s_warp(); r < nb; r += NW) {
      float* o = reinterpret_cast<float*>(cand + ((size_t)(b0 + r) * NTILES + tile) * LM_CAND_WORDS + LM_CAND_HEAD);
      const int l = s_lane();
      float run[PL];
      float acc = 0.0f;
#pragma unroll
      for (int e = 0; e < PL; ++e) { acc += hm[r * PD_HB + l * PL + e]; run[e] = acc; }
      sums_from_top(o, run, acc, l);
    }
    if (tid < nb) {
      float top;
      const bool ok = pd_top(rawmax, b0 + tid, temp, n, top);
      cand[((size_t)(b0 + tid) * NTILES + tile) * LM_CAND_WORDS + 2] = ok ? (int)top : PD_NOHIST;
    }
  }
  trace_mark(c, 3);  // the mass sums written (thread 0's)
}

// ---- top-p and/or min-p without a top-k (TOKF_PDRAW): the row's winner checked, then rejection ----
// F, the set the filters keep, is a top set: keys >= max(top-p threshold, min-p key). Round 1
// takes the LM-head tiles' Gumbel-max winner v over the whole row (what temperature alone would
// draw) and one pass sums the masses of the row and of the tokens ranked above v: v is in F iff
// that sum is below the top-p target (radix_select's threshold is the largest key whose mass from
// the top reaches it) and key(v) >= the min-p key. Then v is also the Gumbel-max over F, the exact
// path's draw. Else round r + 1 draws from S = {keys > key(v)}, a superset of F, by the inverse CDF
// of the integer masses in index order at a fresh 64-bit uniform (Philox counter (r, b, pos, 1|2)),
// and checks that draw the same way. A draw from S that lands in F is a draw from F, and S shrinks
// only on draws outside F, so what is accepted follows softmax over F exactly; after PD_ROUNDS
// checks the exact path draws (its Gumbel-max over F does not depend on where the row's winner
// fell). Sums are integers (the order of the adds does not matter). tests/sampling_ref.py
// sample_row is the twin. Returns the token, or -1 for the exact path. Block-wide.
constexpr int PD_K = 8;                     // 16-byte loads per lane and segment
constexpr int PD_SEG = PD_K * 4 * WARP;     // a segment: consecutive tokens, one warp's
constexpr int PD_NSEG = (V + PD_SEG - 1) / PD_SEG;
constexpr int PD_ROUNDS = 6;
static_assert(SM_A + 8 * PD_NSEG <= SM_PAIR && 16 * NW <= 512, "the rejection sampler's segment sums and warp sums");

// the values of segment sg (lane's 4 consecutive tokens per load; zeros past the row)
__device__ __forceinline__ void pd_load(const float* lg, int sg, float* x) {
  const int lane = s_lane();
#pragma unroll
  for (int k = 0; k < PD_K; ++k) {
    const int v0 = sg * PD_SEG + k * 4 * WARP + lane * 4;
    if constexpr (V % 4 == 0) {
      const float4 q = v0 < V ? mk_ld_act4(lg + v0) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      x[4 * k] = q.x; x[4 * k + 1] = q.y; x[4 * k + 2] = q.z; x[4 * k + 3] = q.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) x[4 * k + j] = v0 + j < V ? mk_ld_act(lg + v0 + j) : 0.0f;
    }
  }
}
__device__ __forceinline__ int pd_index(int sg, int e) { return sg * PD_SEG + (e / 4) * 4 * WARP + s_lane() * 4 + e % 4; }
__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
  for (int off = WARP / 2; off > 0; off >>= 1) v += shfl_xor_u64(v, off);
  return v;
}
// the sum of v over lanes 0 .. this lane
__device__ __forceinline__ unsigned long long warp_incl_sum_u64(unsigned long long v) {
  const int lane = s_lane();
  for (int off = 1; off < WARP; off <<= 1) {
    const unsigned long long o = shfl_u64(v, lane >= off ? lane - off : lane);
    if (lane >= off) v += o;
  }
  return v;
}
// how many lanes hold a value <= x (with non-decreasing values: the first lane above x; WARP if none)
__device__ __forceinline__ int lanes_at_or_below(unsigned long long v, unsigned long long x) {
  int n = v <= x;
  for (int off = WARP / 2; off > 0; off >>= 1) n += mk_shfl_xor_i(n, off);
  return n;
}

// From the tiles' mass sums (lm_histogram), the row's mass at least L and the mass ranked above zv
// (bins whose upper edge is above zv: j <= A - floor(8 zv)) at most U, in mass_of's units, widened
// by 1e-3 for expf and the float sums. A thread per tile: two loads, then the one that depends on A.
// Every thread gets the same. Block-wide.
__device__ __forceinline__ bool pd_mass_bounds(const Ctx& c, int b, float zmax, float zv, double& L, double& U) {
  float* part = reinterpret_cast<float*>(mk_smem + SM_PAIR);  // per warp: L, U, then 1 where a tile has no sums
  const int lane = s_lane(), wid = s_warp();
  const int* cw = gptr<const int>(c, S_LM_CAND, 0) + (size_t)b * NTILES * LM_CAND_WORDS;
  float lo = 0.0f, up = 0.0f, none = 0.0f;
  const float y = floorf(zv * PD_SF);
  for (int t = s_tid(); t < NTILES; t += NT) {
    const int* o = cw + t * LM_CAND_WORDS;
    const int a = mk_ld_int(o + 2);
    const float tot = mk_ld_act(reinterpret_cast<const float*>(o + LM_CAND_HEAD + PD_HB - 1));
    if (a == PD_NOHIST) { none = 1.0f; continue; }
    const float jf = (float)a - y;  // the last bin whose upper edge is above zv (none: < 0)
    const float cu = jf < 0.0f ? 0.0f : mk_ld_act(reinterpret_cast<const float*>(o + LM_CAND_HEAD) + (jf < (float)(PD_HB - 1) ? (int)jf : PD_HB - 1));
    const float sc = expf((float)a * PD_INV - zmax);  // A / S <= the row's largest z
    lo += tot * sc;
    up += cu * sc;
  }
  for (int off = WARP / 2; off > 0; off >>= 1) {
    lo += mk_shfl_xor(lo, off);
    up += mk_shfl_xor(up, off);
    none += mk_shfl_xor(none, off);
  }
  mk_barrier();  // part is the pass's per-warp sums too
  if (lane == 0) { part[3 * wid] = lo; part[3 * wid + 1] = up; part[3 * wid + 2] = none; }
  mk_barrier();
  double l = 0.0, u = 0.0;
  bool any_none = false;
  for (int w = 0; w < NW; ++w) { l += part[3 * w]; u += part[3 * w + 1]; any_none |= part[3 * w + 2] != 0.0f; }
  mk_barrier();  // part is rewritten by the pass
  const double M = 4294967296.0;
  L = l * M * (1.0 - 1e-3) - (double)V;  // floor(): up to 1 below each token's e^(z - zmax) 2^32
  U = u * M * (1.0 + 1e-3);
  return !any_none;
}

__device__ MK_OUTLINE int sample_pdraw(const Ctx& c, const Sampler& s, int b, float rawmax) {
  const float* lg = gptr<const float>(c, S_LOGITS, 0) + (size_t)b * V;
  const float temp = s.temperature, zmax = rawmax / temp;
  const bool use_p = s.top_p < 1.0f;
  const unsigned mkey = s.min_p > 0.0f ? order_key(zmax + logf(s.min_p)) : 0u;
  unsigned long long* seg = reinterpret_cast<unsigned long long*>(mk_smem + SM_A);
  unsigned long long* wsum = reinterpret_cast<unsigned long long*>(mk_smem + SM_PAIR);
  unsigned long long* res = reinterpret_cast<unsigned long long*>(mk_smem + SM_RES);
  int* tokp = reinterpret_cast<int*>(mk_smem + SM_RES + 24);
  const int tid = s_tid(), lane = s_lane(), wid = s_warp();
  mk_barrier();  // the previous row's readers of tokp are done
  if (wid == 0) {  // the tiles' winners: words 0-1 of each candidate block (task_lmhead)
    const float* cw = gptr<const float>(c, S_LM_CAND, 0) + (size_t)b * NTILES * LM_CAND_WORDS;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int t = lane; t < NTILES; t += WARP)
      argmax_merge(bv, bi, mk_ld_act(cw + t * LM_CAND_WORDS), (int)mk_f32_bits(mk_ld_act(cw + t * LM_CAND_WORDS + 1)));
    warp_argmax(bv, bi);
    if (lane == 0) *tokp = (bi >= 0 && bi < V) ? bi : 0;
  }
  mk_barrier();
  int v = *tokp;
  unsigned long long target = 1;
#pragma unroll 1
  for (int r = 1; r <= PD_ROUNDS; ++r) {
    const float zv = mk_ld_act(lg + v) / temp;
    const unsigned kv = order_key(zv);
    if (!use_p && kv >= mkey) return v;  // min-p alone needs no sums
    if constexpr (PDRAW_BOUND) {
      // v is in the top-p set where the mass ranked above it is below the target: round 1 against
      // p L - 1 (target = floor(p total) >= p L - 1), later rounds against the pass's exact target
      if (kv >= mkey && use_p) {
        double L, U;
        if (pd_mass_bounds(c, b, zmax, zv, L, U) && U < (r == 1 ? (double)s.top_p * L - 1.0 : (double)target)) return v;
      }
    }
    // the pass: per segment the mass ranked above v (the next round's S), and the row's in round 1
    unsigned long long tot = 0, above_w = 0;
    // SAMPLER_LEAN: one segment's loads in flight per warp; else the next segment's too (their 32 more
    // registers made ptxas spill the layers' values in the whole kernel: BENCHMARKS.md seventeenth session)
    float x[4 * PD_K], nx[4 * PD_K];
    if (!SAMPLER_LEAN && wid < PD_NSEG) pd_load(lg, wid, nx);
    for (int sg = wid; sg < PD_NSEG; sg += NW) {
      if constexpr (SAMPLER_LEAN) {
        pd_load(lg, sg, x);
      } else {
#pragma unroll
        for (int e = 0; e < 4 * PD_K; ++e) x[e] = nx[e];
        if (sg + NW < PD_NSEG) pd_load(lg, sg + NW, nx);  // the next segment's loads in flight
      }
      unsigned long long ab = 0;
#pragma unroll
      for (int e = 0; e < 4 * PD_K; ++e) {
        if (pd_index(sg, e) >= V) continue;
        const float z = x[e] / temp;
        const unsigned long long w = mass_of(z, zmax);
        if (r == 1) tot += w;
        if (order_key(z) > kv) ab += w;
      }
      ab = warp_sum_u64(ab);
      if (lane == 0) seg[sg] = ab;
      above_w += ab;
    }
    tot = warp_sum_u64(tot);
    if (lane == 0) { wsum[2 * wid] = tot; wsum[2 * wid + 1] = above_w; }
    mk_barrier();
    if (tid == 0) {
      unsigned long long tt = 0, aa = 0;
      for (int w = 0; w < NW; ++w) { tt += wsum[2 * w]; aa += wsum[2 * w + 1]; }
      res[1] = aa;
      if (r == 1) {
        const unsigned long long want = (unsigned long long)((double)s.top_p * (double)tt);
        res[2] = want > 0 ? want : 1ull;
      }
    }
    mk_barrier();
    const unsigned long long above = res[1];
    if (r == 1) target = res[2];
    if ((!use_p || above < target) && kv >= mkey) return v;
    if (r == PD_ROUNDS || above == 0) break;
    if (wid == 0) {
      // x uniform in [0, above); the first token (index order) whose inclusive mass sum exceeds it
      const unsigned long long rnd = ((unsigned long long)philox_x0((unsigned)r, (unsigned)b, (unsigned)c.pos, 1u, s.seed_lo, s.seed_hi) << 32) |
                                     philox_x0((unsigned)r, (unsigned)b, (unsigned)c.pos, 2u, s.seed_lo, s.seed_hi);
      const unsigned long long xu = mk_umul64hi(rnd, above);
      unsigned long long acc = 0;
      int sg = -1;
      for (int base = 0; base < PD_NSEG && sg < 0; base += WARP) {
        const unsigned long long w = base + lane < PD_NSEG ? seg[base + lane] : 0ull;
        const unsigned long long incl = warp_incl_sum_u64(w);
        const int before = lanes_at_or_below(acc + incl, xu);
        if (before < WARP) {
          sg = base + before;
          acc += shfl_u64(incl - w, before);
        } else {
          acc += shfl_u64(incl, WARP - 1);
        }
      }
      int tok = v;
      if (sg >= 0) {
        float x[4 * PD_K];
        pd_load(lg, sg, x);
        // load k of the segment holds tokens [k * 4 * WARP, (k + 1) * 4 * WARP): 4 per lane
        auto wt = [&](int e) { const float z = x[e] / temp; return pd_index(sg, e) < V && order_key(z) > kv ? mass_of(z, zmax) : 0ull; };
#pragma unroll
        for (int k = 0; k < PD_K; ++k) {
          const unsigned long long own = wt(4 * k) + wt(4 * k + 1) + wt(4 * k + 2) + wt(4 * k + 3);
          const unsigned long long incl = warp_incl_sum_u64(own);
          const int before = lanes_at_or_below(acc + incl, xu);
          if (before < WARP) {
            unsigned long long a = acc + incl - own;
            int pick = 3;  // the first of the lane's 4 whose inclusive sum exceeds x (the last if none)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              a += wt(4 * k + j);
              if (a > xu) { pick = j; break; }
            }
            tok = (int)mk_shfl_u32((unsigned)pd_index(sg, 4 * k + pick), before);  // lane ``before``'s
            break;
          }
          acc += shfl_u64(incl, WARP - 1);
        }
      }
      if (lane == 0) *tokp = tok;
    }
    mk_barrier();
    v = *tokp;
  }
  return -1;
}

// ---- top-p and/or min-p without a top-k (TOKF_PDRAW, PDRAW_WALK): a walk down the Gumbel order ----
// The Gumbel-max over the set F is the first token, in the order of z + Gumbel noise, that lies in
// F. The LM-head tiles give their PD_M best scores (words 0-1 and from PD_CW); a thread per tile
// holds them with their z (one round trip for all), drops those below the min-p key (outside F,
// exact), and each round the block takes the largest head. With top-p, the tiles' mass sums put it
// in the set (mass above it at most U < target) or outside it (mass wholly above its bin at least
// the largest target) or neither: then one pass over the row finds the exact target (once) and the
// mass above it. A tile whose kept candidates are all taken has its other tokens below its last
// candidate: once that ranks above the largest head, the walk gives up (-1: the exact path draws
// the same token). tests/sampling_ref.py pwalk is the twin. Block-wide.
constexpr int PW_ROUNDS = 16;  // candidates taken
static_assert(20 * NW <= 512, "the walk's per-warp head, limit and z");
__device__ MK_OUTLINE int sample_pwalk(const Ctx& c, const Sampler& s, int b, float rawmax) {
  const float* lg = gptr<const float>(c, S_LOGITS, 0) + (size_t)b * V;
  const int* o = gptr<const int>(c, S_LM_CAND, 0) + ((size_t)b * NTILES + s_tid()) * LM_CAND_WORDS;
  float* part = reinterpret_cast<float*>(mk_smem + SM_PAIR);  // per warp: 2 floats, or a u64 head, a u64 limit
  unsigned long long* wsum = reinterpret_cast<unsigned long long*>(mk_smem + SM_PAIR);
  float* wz = reinterpret_cast<float*>(mk_smem + SM_PAIR + 16 * NW);  // per warp: its head's z
  const float temp = s.temperature, zmax = rawmax / temp;
  const bool use_p = s.top_p < 1.0f;
  const unsigned mkey = s.min_p > 0.0f ? order_key(zmax + logf(s.min_p)) : 0u;
  const int tid = s_tid(), lane = s_lane(), wid = s_warp();
  const bool mine = tid < NTILES;
  unsigned long long cand[PD_M];
  float zc[PD_M];
  unsigned live = 0u;  // bit k: candidate k not taken and not below the min-p key
  int a = 0;
  float tot = 0.0f, sc = 0.0f, none = 0.0f;
#pragma unroll
  for (int k = 0; k < PD_M; ++k) { cand[k] = 0ull; zc[k] = 0.0f; }
  if (mine) {  // one round trip: the winner and the grid top, the tile's mass, the other candidates
    const float4 h = mk_ld_act4(reinterpret_cast<const float*>(o));
    const float4 q = mk_ld_act4(reinterpret_cast<const float*>(o + PD_CW));
    const float w0 = mk_ld_act(reinterpret_cast<const float*>(o + PD_CW + 4));
    const int w1 = mk_ld_int(o + PD_CW + 5);
    tot = mk_ld_act(reinterpret_cast<const float*>(o + LM_CAND_HEAD + PD_HB - 1));
    a = (int)mk_f32_bits(h.z);
    const int ix[PD_M] = {(int)mk_f32_bits(h.y), (int)mk_f32_bits(q.y), (int)mk_f32_bits(q.w), w1};
    const float sx[PD_M] = {h.x, q.x, q.z, w0};
    // then their logits, one round trip (not one a round: top-p 0.9 + min-p 0.05 3.1 % a step faster)
#pragma unroll
    for (int k = 0; k < PD_M; ++k) {
      if (ix[k] >= 0 && ix[k] < V) {
        cand[k] = pack_best(sx[k], ix[k]);
        zc[k] = mk_ld_act(lg + ix[k]) / temp;
      }
    }
#pragma unroll
    for (int k = 0; k < PD_M; ++k) live |= cand[k] != 0ull && order_key(zc[k]) >= mkey ? 1u << k : 0u;
    if (a == PD_NOHIST) none = 1.0f;
    else sc = expf((float)a * PD_INV - zmax);  // A / S <= the row's largest z
  }
  float lo = tot * sc;
  for (int off = WARP / 2; off > 0; off >>= 1) { lo += mk_shfl_xor(lo, off); none += mk_shfl_xor(none, off); }
  mk_barrier();  // the previous row's readers of part are done
  if (lane == 0) { part[2 * wid] = lo; part[2 * wid + 1] = none; }
  mk_barrier();
  double l = 0.0;
  bool any_none = false;
  for (int w = 0; w < NW; ++w) { l += part[2 * w]; any_none |= part[2 * w + 1] != 0.0f; }
  mk_barrier();
  if (any_none) return -1;
  trace_mark(c, 1);  // the tiles' sums read
  const double M = 4294967296.0, p = (double)s.top_p;
  const double L = l * M * (1.0 - 1e-3) - (double)V, Utot = l * M * (1.0 + 1e-3);
  double target = -1.0;  // exact once a pass ran
#pragma unroll 1
  for (int r = 0; r < PW_ROUNDS; ++r) {
    // the largest head (with its z), and the largest last candidate of a tile with none left
    const int k0 = live ? mk_ffs(live) - 1 : PD_M;
    unsigned long long head = 0ull;
    float zh = 0.0f;
#pragma unroll
    for (int k = 0; k < PD_M; ++k) {
      head = k == k0 ? cand[k] : head;
      zh = k == k0 ? zc[k] : zh;
    }
    unsigned long long mx = head, gone = live ? 0ull : cand[PD_M - 1];
    for (int off = WARP / 2; off > 0; off >>= 1) {
      const unsigned long long y = shfl_xor_u64(mx, off), g = shfl_xor_u64(gone, off);
      mx = y > mx ? y : mx;
      gone = g > gone ? g : gone;
    }
    if (lane == 0) { wsum[2 * wid] = mx; wsum[2 * wid + 1] = gone; }
    if (head != 0ull && head == mx) wz[wid] = zh;  // packs are distinct: one lane
    mk_barrier();
    mx = 0ull;
    gone = 0ull;
    float zu = 0.0f;
    for (int w = 0; w < NW; ++w) {
      if (wsum[2 * w] > mx) { mx = wsum[2 * w]; zu = wz[w]; }
      gone = wsum[2 * w + 1] > gone ? wsum[2 * w + 1] : gone;
    }
    mk_barrier();
    if (mx == 0ull || gone > mx) return -1;
    if (mine && head == mx) live &= live - 1u;  // taken
    const int u = best_index(mx);
    if (!use_p) return u;  // min-p alone: the first kept candidate
    const unsigned ku = order_key(zu);
    // per tile the sum of the bins whose upper edge is above zu (j <= A - floor(8 zu)) and of those
    // wholly above it (one bin fewer; never the last, everything below the grid)
    float up = 0.0f, la = 0.0f;
    if (mine) {
      const float jf = (float)a - floorf(zu * PD_SF);
      const float* cs = reinterpret_cast<const float*>(o + LM_CAND_HEAD);
      const float cu = jf < 0.0f ? 0.0f : mk_ld_act(cs + (jf < (float)(PD_HB - 1) ? (int)jf : PD_HB - 1));
      const float ca = jf < 1.0f ? 0.0f : mk_ld_act(cs + (jf - 1.0f < (float)(PD_HB - 2) ? (int)jf - 1 : PD_HB - 2));
      up = cu * sc;
      la = ca * sc;
    }
    for (int off = WARP / 2; off > 0; off >>= 1) { up += mk_shfl_xor(up, off); la += mk_shfl_xor(la, off); }
    if (lane == 0) { part[2 * wid] = up; part[2 * wid + 1] = la; }
    mk_barrier();
    double U = 0.0, LA = 0.0;
    for (int w = 0; w < NW; ++w) { U += part[2 * w]; LA += part[2 * w + 1]; }
    mk_barrier();
    U = U * M * (1.0 + 1e-3);
    LA = LA * M * (1.0 - 1e-3) - (double)V;
    if (U < (target < 0.0 ? p * L - 1.0 : target)) return u;
    if (LA >= (target < 0.0 ? p * Utot : target)) continue;  // outside the set
    // the pass: the row's mass (for the target) and the mass ranked above u, integer sums
    unsigned long long tt = 0, ab = 0;
    if constexpr (WALK_SCAN) {
      // (WALK_SCAN) the row a block-wide 16-byte chunk at a time, the next chunk's loads in flight
      // (row_scan); integer sums, so the same totals in any order
      row_scan(lg, temp, [&](int, float z) {
        const unsigned long long w = mass_of(z, zmax);
        tt += w;
        if (order_key(z) > ku) ab += w;
      });
    } else {
      float x[4 * PD_K];
      for (int sg = wid; sg < PD_NSEG; sg += NW) {
        pd_load(lg, sg, x);
#pragma unroll
        for (int e = 0; e < 4 * PD_K; ++e) {
          if (pd_index(sg, e) >= V) continue;
          const float z = x[e] / temp;
          const unsigned long long w = mass_of(z, zmax);
          tt += w;
          if (order_key(z) > ku) ab += w;
        }
      }
    }
    tt = warp_sum_u64(tt);
    ab = warp_sum_u64(ab);
    if (lane == 0) { wsum[2 * wid] = tt; wsum[2 * wid + 1] = ab; }
    mk_barrier();
    unsigned long long T = 0, A = 0;
    for (int w = 0; w < NW; ++w) { T += wsum[2 * w]; A += wsum[2 * w + 1]; }
    mk_barrier();
    if (target < 0.0) {
      const unsigned long long want = (unsigned long long)(p * (double)T);
      target = (double)(want > 0 ? want : 1ull);
    }
    if ((double)A < target) return u;
  }
  return -1;
}

// The top-k threshold over the held candidates (CandScan::held, CAND_BISECT): the largest key t
// above ``cut`` whose count over the keys >= t reaches k (hist_select's result where it is above the
// cut), by bisection over the keys, one block barrier a step (the counts summed a warp at once, a
// word a warp, two copies by step parity); 0 where fewer than k keys lie above the cut (then the
// held candidates may miss a token at or above the threshold). kz: the thread's slots' order keys
// (0: an unused slot). KTH_EXIT (CodegenOptions.kth_exit): each step also takes the smallest key at
// or above the split; a count of exactly k ends the search there (that key is the k-th largest),
// a larger count raises lo to it: ~9 steps instead of ~24 on llama-3.2-1b's 132 x 16 candidates
// (tests/test_tokens.py's twin). Block-wide; every thread returns the same key.
static_assert(5 * NW <= SNB, "the search's counts, maxima and minima fit the bins' counts (SM_BCNT)");
__device__ __forceinline__ unsigned held_kth(const unsigned (&kz)[CAND_HELD], unsigned cut, unsigned k) {
  // 2 x NW counts, NW maxima, 2 x NW minima (KTH_EXIT)
  unsigned* wc = reinterpret_cast<unsigned*>(mk_smem + SM_BCNT);
  int par = 0;
  // the count at t (and, with ``first``, the largest key; with KTH_EXIT, the smallest key >= t in
  // kmin) over the block
  auto count = [&](unsigned t, bool first, unsigned& kmax, unsigned& kmin) {
    unsigned n = 0u, m = 0u, mn = 0xffffffffu;
#pragma unroll
    for (int u = 0; u < CAND_HELD; ++u) {
      n += kz[u] >= t ? 1u : 0u;
      m = max(m, kz[u]);
      if (KTH_EXIT) mn = min(mn, kz[u] >= t ? kz[u] : 0xffffffffu);
    }
    n = mk_warp_sum_u32(n);
    if (first) m = mk_warp_max_u32(m);
    if (KTH_EXIT && !first) mn = mk_warp_min_u32(mn);
    if (s_lane() == 0) {
      wc[par * NW + s_warp()] = n;
      if (first) wc[2 * NW + s_warp()] = m;
      if (KTH_EXIT && !first) wc[(3 + par) * NW + s_warp()] = mn;
    }
    mk_barrier();
    unsigned tot = 0u;
    for (int w = 0; w < NW; ++w) tot += wc[par * NW + w];
    if (first) for (int w = 0; w < NW; ++w) kmax = max(kmax, wc[2 * NW + w]);
    if (KTH_EXIT && !first) for (int w = 0; w < NW; ++w) kmin = min(kmin, wc[(3 + par) * NW + w]);
    par ^= 1;
    return tot;
  };
  if (cut == 0xffffffffu) return 0u;
  unsigned lo = cut + 1u, hi = 0u, unused = 0xffffffffu;  // count(>= lo) >= k, count(> hi) = 0 < k
  if (count(lo, true, hi, unused) < k) return 0u;
  while (lo < hi) {  // uniform: every thread holds the same lo and hi
    const unsigned mid = lo + (hi - lo + 1u) / 2u;
    unsigned kmax = 0u, kmin = 0xffffffffu;
    const unsigned n = count(mid, false, kmax, kmin);
    if (KTH_EXIT && n == k) return kmin;  // the keys >= mid are the k largest
    if (n >= k) lo = KTH_EXIT ? kmin : mid;  // (the k-th largest is a key >= mid)
    else hi = mid - 1u;
  }
  return lo;
}

// (GATHER_ONCE, CodegenOptions.gather_once) the thread's held slots u with in(u), each put(sl, u)
// at its place sl in *ctr's shared list: one add a warp after a scan of the lanes' counts
// (mk_warp_take), not one a warp for each of the CAND_HELD slots (mk_warp_slot). Whole warps.
template <class P, class F>
__device__ __forceinline__ void gather_once(unsigned* ctr, P&& in, F&& put) {
  unsigned m = 0u;
#pragma unroll
  for (int u = 0; u < CAND_HELD; ++u) m += in(u) ? 1u : 0u;
  unsigned sl = mk_warp_take(ctr, m);
#pragma unroll
  for (int u = 0; u < CAND_HELD; ++u)
    if (in(u)) put(sl++, u);
}

// held_kth's contract by one count over 256 bins of the key range above the cut (HELD_HIST): bin
// (kmax - key) >> sh from the top, sh the least shift that fits kmax - lo in 8 bits; the scan finds
// the bin where the count from the top reaches k, and warp 0 ranks that bin's keys (at most a warp
// of them; else the halving). Five block barriers where the halving takes ~24; traced on an H100 it
// saved at most ~0.4 us (most of the time before the threshold is the held loads' round trip).
// (Its scan and lm_candidates_block's are bins_reach_u32, scan_reach's on 256 u32 counts: scan_reach
// made generic over the count type added 64 instructions to the kernel that ran on the GPU.)
__device__ __forceinline__ unsigned held_hist_kth(const unsigned (&kz)[CAND_HELD], unsigned cut, unsigned k) {
  unsigned* wc = reinterpret_cast<unsigned*>(mk_smem + SM_BCNT);  // NW counts, NW maxima
  unsigned* hist = reinterpret_cast<unsigned*>(mk_smem + SM_A);   // 256 bins, then 4 result words, a warp of keys
  unsigned* res = hist + 256;
  unsigned* mem = res + 4;
  static_assert(4 * (256 + 4 + WARP) <= SM_BCNT - SM_A, "the held count's bins below the warps' counts");
  const int tid = s_tid(), lane = s_lane();
  if (cut == 0xffffffffu) return 0u;
  const unsigned lo = cut + 1u;
  unsigned n = 0u, m = 0u;
#pragma unroll
  for (int u = 0; u < CAND_HELD; ++u) {
    n += kz[u] >= lo ? 1u : 0u;
    m = max(m, kz[u]);
  }
  n = mk_warp_sum_u32(n);
  m = mk_warp_max_u32(m);
  if (lane == 0) { wc[s_warp()] = n; wc[NW + s_warp()] = m; }
  for (int i = tid; i < 256; i += NT) hist[i] = 0u;
  if (tid == 0) res[2] = 0u;
  mk_barrier();
  unsigned tot = 0u, kmax = 0u;
  for (int w = 0; w < NW; ++w) { tot += wc[w]; kmax = max(kmax, wc[NW + w]); }
  if (tot < k) return 0u;
  const unsigned r = kmax - lo;
  const int sh = r < 256u ? 0 : 24 - mk_clz(r);  // (kmax - lo) >> sh <= 255
#pragma unroll
  for (int u = 0; u < CAND_HELD; ++u)
    if (kz[u] >= lo) mk_smem_add_u32(hist + ((kmax - kz[u]) >> sh), 1u);
  mk_barrier();
  if (s_warp() == 0) bins_reach_u32(hist, k, res);  // the bin where the count from the top reaches k, and the count above it
  mk_barrier();
  const unsigned cb = res[0], need = k - res[1], cnt = hist[cb];
  if (cnt > (unsigned)WARP) return held_kth(kz, cut, k);  // (uniform) a crowded bin: the halving
  if constexpr (GATHER_ONCE != 0) {
    gather_once(res + 2, [&](int u) { return kz[u] >= lo && (kmax - kz[u]) >> sh == cb; },
                [&](unsigned sl, int u) { mem[sl] = kz[u]; });
  } else {
#pragma unroll
    for (int u = 0; u < CAND_HELD; ++u) {  // whole warps (mk_warp_slot)
      const bool take = kz[u] >= lo && (kmax - kz[u]) >> sh == cb;
      const unsigned sl = mk_warp_slot(res + 2, take);
      if (take) mem[sl] = kz[u];
    }
  }
  mk_barrier();
  if (s_warp() == 0) {  // the need-th largest of the bin's keys
    const unsigned x = lane < (int)cnt ? mem[lane] : 0u;
    unsigned gt = 0u, ge = 0u;
    for (int j = 0; j < (int)cnt; ++j) {
      const unsigned y = mem[j];
      gt += y > x ? 1u : 0u;
      ge += y >= x ? 1u : 0u;
    }
    if (lane < (int)cnt && gt < need && ge >= need) res[3] = x;
  }
  mk_barrier();
  return res[3];
}

// HELD_P (CodegenOptions.held_p): top-p's threshold over the top-k set of the held slots (their
// keys kz >= thr): the set gathered into shared memory (a warp's slots at once), ranked by key
// (descending, ties by slot), each key's mass (mass_of against the row's zmax) in rank order, and
// the key where the mass from the top reaches p of the set's: hist_select's result with lo = thr
// over the same tokens (the same integer masses, total and target). 0 where the set holds more than
// SNB keys (ties at the k-th key): the caller takes the histogram selects. ncol (SM_RES + 32) is 0
// on entry (sample_filtered clears it). Block-wide; every thread returns the same key.
__device__ __forceinline__ unsigned held_top_p(const unsigned (&kz)[CAND_HELD], const float (&hz)[CAND_HELD],
                                               unsigned thr, float zmax, float temp, float p) {
  float* cz = reinterpret_cast<float*>(mk_smem + SM_CZ);
  float* sz = reinterpret_cast<float*>(mk_smem + SM_SZ);
  unsigned long long* sw = reinterpret_cast<unsigned long long*>(mk_smem + SM_SW);
  unsigned long long* res = reinterpret_cast<unsigned long long*>(mk_smem + SM_RES);
  unsigned* ncol = reinterpret_cast<unsigned*>(mk_smem + SM_RES + 32);
  const int tid = s_tid(), lane = s_lane();
  if constexpr (P_DIRECT != 0) {
    // (CodegenOptions.p_direct) no ranking: each gathered key's mass from the top, the sum of the
    // masses of the set's keys >= it (ties included), and the largest key whose sum reaches the
    // target, by one shared max (the ranked scan's key: a key ranked before the reaching one has
    // less than the target above it, ties at its key included)
    unsigned* ck = reinterpret_cast<unsigned*>(mk_smem + SM_CZ);
    unsigned* best = reinterpret_cast<unsigned*>(mk_smem + SM_RES);
    if constexpr (GATHER_ONCE != 0) {
      gather_once(ncol, [&](int u) { return kz[u] >= thr; }, [&](unsigned sl, int u) {
        if (sl < (unsigned)SNB) { ck[sl] = kz[u]; sw[sl] = mass_of(hz[u] / temp, zmax); }
      });
    } else {
#pragma unroll
      for (int u = 0; u < CAND_HELD; ++u) {  // whole warps (mk_warp_slot)
        const bool in = kz[u] >= thr;
        const unsigned sl = mk_warp_slot(ncol, in);
        if (in && sl < (unsigned)SNB) { ck[sl] = kz[u]; sw[sl] = mass_of(hz[u] / temp, zmax); }
      }
    }
    if (tid == 0) *best = 0u;
    mk_barrier();
    const int n = (int)*ncol;
    if (n > SNB) return 0u;  // (uniform)
    for (int i = tid; i < n; i += NT) {
      const unsigned ki = ck[i];
      unsigned long long tot = 0, ge = 0;
#pragma unroll 8
      for (int j = 0; j < n; ++j) {
        const unsigned long long w = sw[j];
        tot += w;
        ge += ck[j] >= ki ? w : 0ull;
      }
      const unsigned long long want = (unsigned long long)((double)p * (double)tot);
      if (ge >= (want > 0 ? want : 1ull)) atomicMax(best, ki);
    }
    mk_barrier();
    const unsigned r = *best;
    return r != 0u ? r : thr;
  }
  if constexpr (GATHER_ONCE != 0) {  // (the rank's ties by slot: the same keys either way)
    gather_once(ncol, [&](int u) { return kz[u] >= thr; }, [&](unsigned sl, int u) {
      if (sl < (unsigned)SNB) cz[sl] = hz[u] / temp;
    });
  } else {
#pragma unroll
    for (int u = 0; u < CAND_HELD; ++u) {  // whole warps (mk_warp_slot)
      const bool in = kz[u] >= thr;  // (an unused slot's key is 0, below every threshold)
      const unsigned sl = mk_warp_slot(ncol, in);
      if (in && sl < (unsigned)SNB) cz[sl] = hz[u] / temp;
    }
  }
  mk_barrier();
  const int n = (int)*ncol;
  if (n > SNB) return 0u;  // (uniform)
  for (int i = tid; i < n; i += NT) {
    const float zi = cz[i];
    const unsigned ki = order_key(zi);
    int r = 0;
    for (int j = 0; j < n; ++j) {
      const unsigned kj = order_key(cz[j]);
      r += kj > ki || (kj == ki && j < i);
    }
    sz[r] = zi;
    sw[r] = mass_of(zi, zmax);
  }
  mk_barrier();
  if (s_warp() == 0) {
    unsigned long long tot = 0;
    for (int j = lane; j < n; j += WARP) tot += sw[j];
    for (int off = WARP / 2; off > 0; off >>= 1) tot += shfl_xor_u64(tot, off);
    const unsigned long long want = (unsigned long long)((double)p * (double)tot);
    scan_reach(sw, n, 0ull, want > 0 ? want : 1ull, res);
  }
  mk_barrier();
  const int r = (int)res[0];
  return r < n ? order_key(sz[r]) : thr;
}

// Batch 1's merge of the LM-head tiles' partials of row b (task_argmax, and sample_filtered with
// HELD_EARLY): a thread per tile, every partial's load in flight at once (a warp over the tiles
// waited ~NTILES / 32 L2 round trips on the step's critical path), the thread's best in (v, i);
// partials_warps leaves each warp's winner in SM_PAIR, and after a block barrier partials_final's
// thread 0 merges them into the row's token and raw maximum (SM_ROW). argmax_merge is a total
// order: any grouping gives the same winner. (lane: the caller's s_lane(), read once)
__device__ __forceinline__ void partials_warps(int lane, float& v, int& i) {
  warp_argmax(v, i);
  float* wv = reinterpret_cast<float*>(mk_smem + SM_PAIR);
  int* wi = reinterpret_cast<int*>(mk_smem + SM_PAIR + 4 * 64);
  if (lane == 0) { wv[s_warp()] = v; wi[s_warp()] = i; }
}
// (v, i: thread 0's, warp 0's winner)
__device__ __forceinline__ void partials_final(int b, int tid, float v, int i) {
  float* wv = reinterpret_cast<float*>(mk_smem + SM_PAIR);
  int* wi = reinterpret_cast<int*>(mk_smem + SM_PAIR + 4 * 64);
  int* s_tok = reinterpret_cast<int*>(mk_smem + SM_ROW);
  float* s_max = reinterpret_cast<float*>(mk_smem + SM_ROW + 4 * B);
  if (tid == 0) {
    for (int w = 1; w < NW; ++w) argmax_merge(v, i, wv[w], wi[w]);
    s_tok[b] = i; s_max[b] = v;
  }
}

// The held path's pick (CAND_HELD_ON, CAND_BISECT): top-k's threshold over the held slots above
// ``cut``, top-p's over that set (HELD_P), then Gumbel-max over the slots at or above the larger of
// them and min-p's key ``mkey``, the token to ``tok``. False (uniform) where the held slots cannot
// decide: fewer than k keys above the cut, or (HELD_P) a set of more than SNB keys. Block-wide.
__device__ __forceinline__ bool held_pick(const Ctx& c, const Sampler& s, int b, const CandScan& cs, unsigned cut,
                                          float zmax, float temp, bool use_p, unsigned mkey, int& tok) {
  unsigned kz[CAND_HELD];
#pragma unroll
  for (int u = 0; u < CAND_HELD; ++u) kz[u] = cs.hv[u] >= 0 ? order_key(cs.hz[u] / temp) : 0u;
  trace_mark(c, 3);  // the slots' keys (thread 0's loads landed)
  const unsigned thr = HELD_HIST ? held_hist_kth(kz, cut, (unsigned)s.top_k) : held_kth(kz, cut, (unsigned)s.top_k);
  trace_mark(c, 4);  // the threshold
  // (HELD_P, top-p: its threshold over the top-k set; 0 where the set overflows the bins)
  const unsigned pthr = HELD_P && use_p && thr != 0u ? held_top_p(kz, cs.hz, thr, zmax, temp, s.top_p) : thr;
  trace_mark(c, 5);  // top-p's threshold (the top-k one's where there is no top-p)
  if (pthr == 0u) return false;
  const unsigned keep = max(pthr, mkey);
  float best = -INFINITY;
  int bi = 0x7fffffff;
  // the noise the tiles wrote beside their first candidates (CAND_NOISE), else drawn here
  // (a warp's slots in the set one after another, each a Philox chain)
#pragma unroll
  for (int u = 0; u < CAND_HELD; ++u)
    if (kz[u] >= keep)
      argmax_merge(best, bi, cs.hz[u] / temp + (CAND_NOISE ? cs.hg[u] : gumbel(c, s, b, cs.hv[u])), cs.hv[u]);
  trace_mark(c, 1);  // the held slots' scores
  tok = block_argmax(best, bi);
  trace_mark(c, 2);  // the winner
  return true;
}

// Sample row b among the tokens that survive top-k, then top-p (over the renormalised top-k set),
// then min-p (HF's order; min-p's ratio to the largest probability does not change with the
// renormalisation): Gumbel-max of z = logit / T over the keys >= the largest of the thresholds.
// Never outside the set. ``pdraw`` (no top-k, TOKF_PDRAW): the rejection sampler first, this where it
// gives up. Block-wide; every thread returns the token.
// HELD_EARLY (batch 1: task_argmax leaves the tiles' partials to this): the row's raw
// maximum is merged here, and where the row takes the held path its first pass's loads (the held
// slots, the tiles' header words) are issued before the partials' and land with them, its cut
// taken between the merge's two barriers: one L2 round trip and three block barriers fewer before
// top-k's threshold. ``rawmax`` is then not read.
__device__ MK_OUTLINE int sample_filtered(const Ctx& c, const Sampler& s, int b, float rawmax, bool cand, bool pdraw) {
  int* drawn = reinterpret_cast<int*>(mk_smem + SM_RES + 24);
  unsigned* cutw = reinterpret_cast<unsigned*>(mk_smem + SM_RES + 28);
  int* failed = reinterpret_cast<int*>(mk_smem + SM_RES + 36);
  const float temp = s.temperature;
  const bool use_k = s.top_k > 0 && s.top_k < V, use_p = s.top_p < 1.0f;
  const int tid = s_tid();
  // (HELD_EARLY) the held path's first pass, begun with the merge
  const bool pre = HELD_EARLY != 0 && CAND_OK != 0 && MKC_SAMPLE_CAND != 0 && cand && use_k && !pdraw && (!use_p || HELD_P);
  CandScan pcs{gptr<const float>(c, S_LM_CAND, 0) + (size_t)b * NTILES * LM_CAND_WORDS, temp, LM_PREF, true};
  if constexpr (HELD_EARLY != 0) {
    static_assert(HELD_EARLY == 0 || NTILES <= NT, "HELD_EARLY: a thread per LM-head tile");
    // every load in flight before any is waited on: the partials' first (the merge waits on them
    // alone), then the tiles' header words and the held slots
    const float* pv = gptr<const float>(c, S_AMAX_PART, c.par);
    const int* pi = gptr<const int>(c, S_AMAX_IDX, c.par);
    float v = -INFINITY, hw = 0.0f;
    int i = 0x7fffffff;
    if (tid < NTILES) { v = mk_ld_act(pv + b * NTILES + tid); i = mk_ld_int(pi + b * NTILES + tid); }
    if (pre && tid < NTILES) hw = mk_ld_act(pcs.cw + tid * LM_CAND_WORDS + 2);
    if (pre) pcs.load_held();
    partials_warps(s_lane(), v, i);
    if (tid == 0) { *drawn = -1; *cutw = 0; *failed = 0; if (HELD_P) *reinterpret_cast<unsigned*>(mk_smem + SM_RES + 32) = 0u; }
    unsigned hmax = 0u;  // (every order key of a float is above 0)
    const unsigned hk = mk_f32_bits(hw);
    if (hk != 0u) hmax = order_key(mk_bits_f32(key_bits(hk)) / temp);
    if (pre) hmax = mk_warp_max_u32(hmax);
    mk_barrier();
    if (pre && hmax != 0u && s_lane() == 0) atomicMax(cutw, hmax);
    partials_final(b, tid, v, i);
    mk_barrier();
    rawmax = reinterpret_cast<const float*>(mk_smem + SM_ROW + 4 * B)[b];
    trace_mark(c, 0);  // the tiles' partials merged
    // the held pick here, before the walk's out-of-line call (pre excludes pdraw): the held slots
    // are not live across that call (with the pick after it, the kernel's stack frame grew from
    // 40 to 120 bytes)
    if (pre) {
      const float zm = rawmax / temp;
      int tok;
      if (held_pick(c, s, b, pcs, *cutw, zm, temp, use_p, s.min_p > 0.0f ? order_key(zm + logf(s.min_p)) : 0u, tok))
        return tok;
      if (tid == 0) *cutw = 0;  // the wide set's cut
      mk_barrier();
    }
  }
  if constexpr (SAMPLE_PDRAW) {
    if (pdraw) {
      // (PDRAW_WALK: the walk; its -1 leaves the exact path, which draws the same token)
      const int tok = PDRAW_WALK ? sample_pwalk(c, s, b, rawmax) : sample_pdraw(c, s, b, rawmax);
      trace_mark(c, 2);  // the walk's (or the rounds') end
      if (tok >= 0) return tok;
    }
  }
  const float* lg = gptr<const float>(c, S_LOGITS, 0) + (size_t)b * V;
  const float zmax = rawmax / temp;
  const unsigned mkey = s.min_p > 0.0f ? order_key(zmax + logf(s.min_p)) : 0u;
  if (!pre) {
    if (tid == 0) *drawn = -1;
    mk_barrier();
  }
  if constexpr (CAND_OK && MKC_SAMPLE_CAND) {
    if (!pre) {
      if (tid == 0) { *cutw = 0; *failed = 0; if (HELD_P) *reinterpret_cast<unsigned*>(mk_smem + SM_RES + 32) = 0u; }
      mk_barrier();
    }
    // the top-k set among the LM-head tiles' candidates: first each tile's LM_PREF largest, trusted
    // above every tile's LM_PREF-th key (header word 2), then all LM_CAND, trusted above every cut
    // tile's smallest kept key (word 1); else the whole row
#pragma unroll 1
    for (int wide = pre ? 1 : 0; wide < (cand && use_k ? 2 : 0); ++wide) {
      // (HELD_EARLY: the held pass ran above where it can; the first pass here reads the slots)
      CandScan cs{gptr<const float>(c, S_LM_CAND, 0) + (size_t)b * NTILES * LM_CAND_WORDS, temp,
                  wide ? LM_CAND : LM_PREF, CAND_HELD_ON && !HELD_EARLY && !wide};
      if (cs.held) cs.load_held();  // in flight with the header words below
      unsigned hmax = 0u;  // (every order key of a float is above 0)
      for (int t = tid; t < NTILES; t += NT) {
        const unsigned hk = mk_f32_bits(mk_ld_act(cs.cw + t * LM_CAND_WORDS + (wide ? 1 : 2)));
        if (hk != 0u) hmax = max(hmax, order_key(mk_bits_f32(key_bits(hk)) / temp));
      }
      if (cs.held) hmax = mk_warp_max_u32(hmax);  // one add a warp, not one a tile (held: every lane is here)
      if (hmax != 0u && (!cs.held || s_lane() == 0)) atomicMax(cutw, hmax);
      mk_barrier();
      const unsigned cut = *cutw;
      if constexpr (CAND_BISECT != 0) {
        if (cs.held && (!use_p || HELD_P)) {  // top-k (top-p, min-p): the threshold, then the draw over the held slots
          int tok;
          if (held_pick(c, s, b, cs, cut, zmax, temp, use_p, mkey, tok)) return tok;
          if (tid == 0) *cutw = 0;  // the next set's cut
          mk_barrier();
          continue;
        }
      }
      unsigned thr = hist_select<false>(cs, (unsigned)c.pos, s.seed_lo, s.seed_hi, b, lg, temp, zmax, 0u, false,
                                        (unsigned long long)s.top_k, s.top_p, mkey, MKC_SAMPLE_FUSED_DRAW && !use_p,
                                        wide ? nullptr : &c);
      bool ok = !*failed && thr > cut;
      if (ok && use_p) {
        thr = hist_select<false>(cs, (unsigned)c.pos, s.seed_lo, s.seed_hi, b, lg, temp, zmax, thr, true,
                                 (unsigned long long)s.top_k, s.top_p, mkey, MKC_SAMPLE_FUSED_DRAW);
        ok = !*failed;
      }
      mk_barrier();
      const int tok = *drawn;
      mk_barrier();
      if (ok) {
        if (tok >= 0) return tok;
        thr = max(thr, mkey);
        float best = -INFINITY;
        int bi = 0x7fffffff;
        cs([&](int v, float z) {
          if (order_key(z) >= thr) argmax_merge(best, bi, z + gumbel(c, s, b, v), v);
        });
        return block_argmax(best, bi);
      }
      if (tid == 0) { *drawn = -1; *cutw = 0; *failed = 0; }
      mk_barrier();
    }
  }
  const RowScan rs{lg, temp};
  unsigned thr = 0;
  // one call site (the selects are inlined: one copy of them keeps the kernel's branches short);
  // the row's last filter draws in its collecting pass
#pragma unroll 1
  for (int by_mass = 0; by_mass < 2; ++by_mass) {
    if (by_mass ? use_p : use_k)
      thr = hist_select<true>(rs, (unsigned)c.pos, s.seed_lo, s.seed_hi, b, lg, temp, zmax, thr, by_mass != 0,
                              (unsigned long long)s.top_k, s.top_p, mkey, MKC_SAMPLE_FUSED_DRAW && (by_mass || !use_p));
  }
  mk_barrier();
  const int tok = *drawn;
  mk_barrier();  // drawn is reset by the next row
  if (tok >= 0) return tok;
  thr = max(thr, mkey);
  float best = -INFINITY;
  int bi = 0x7fffffff;
  row_scan(lg, temp, [&](int v, float z) {
    if (order_key(z) >= thr) argmax_merge(best, bi, z + gumbel(c, s, b, v), v);
  });
  return block_argmax(best, bi);
}

}  // namespace mk
