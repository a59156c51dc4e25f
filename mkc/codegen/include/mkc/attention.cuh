// Attention of one (batch row, kv head, split of the sequence) over the KV cache.
#pragma once
#include "mkc/common.cuh"
#include "mkc/sync.cuh"

namespace mk {

// A head row of the cache is ATT_D8 16-byte words of 8 bf16. The weighted sum over V gives each
// thread one word (8 columns) of one position group; ATT_VG groups take positions in turn.
constexpr int ATT_D8 = HD / 8;
constexpr int ATT_VG = NT / ATT_D8;
// threads whose sums one partial output holds: a warp's groups are added with shuffles
// (taskgraph/plan.py attn_partials sizes OFF_AKV for ATT_NPART of them)
constexpr int ATT_GRP = ATT_D8 < WARP ? WARP : ATT_D8;
constexpr int ATT_NPART = NT / ATT_GRP;
// positions a pass of the scores takes (ATT_D8 lanes each)
constexpr int ATT_SPP = NT / ATT_D8;
// 16-byte loads per thread of the K (and of the V) rows loaded before the wait (ATT_PRE positions)
constexpr int ATT_PRE_LD = (ATT_PRE * ATT_D8 + NT - 1) / NT;
// preloaded K rows are stored with word e of row r at e ^ (r & ATT_KSW): the scores read one row per
// thread, so the 8 threads of a 16-byte shared-load phase hit 8 distinct bank groups
constexpr int ATT_KSW = (ATT_D8 & (ATT_D8 - 1)) == 0 ? (ATT_D8 < 8 ? ATT_D8 : 8) - 1 : 0;
// q/k norm: a lane holds the head elements lane + WARP * k, k < ATT_NV, and the cos/sin of the
// rotary indices (lane + WARP * k) % (HD / 2), k < ATT_NR
constexpr int ATT_NV = (HD + WARP - 1) / WARP;
constexpr int ATT_NR = ATT_NV / 2 > 0 ? ATT_NV / 2 : 1;

static_assert(NT % ATT_D8 == 0 && NT % (HD / 2) == 0, "a block is whole position groups and rotary pairs");
static_assert(ATT_GRP % ATT_D8 == 0, "a warp holds whole position groups, or a group whole warps");
static_assert(ATT_D8 <= WARP && (ATT_D8 & (ATT_D8 - 1)) == 0, "a key's 16-byte words are lanes of one warp");
static_assert(ATT_PRE <= ATT_CH, "the preloaded positions lie in the first tile");
// QKV_SUM (lower(qkv_sum=C)): q, the key and the value arrive as qkv's C partial products (qp[l],
// kinds.cuh QkvPartKind); attention adds them in chunk order, scales by 1/rms of the layer's input
// (its sums of squares, added as qkv's xss_total adds them), adds the bias, norms (q/k norm) and
// rotates q and the key, and appends the key and value at pos (unsplit attention only)
constexpr bool QKV_SUM = QKV_PC < H;
constexpr int QKV_NC = H / QKV_PC;
static_assert(!(QK_NORM || QKV_SUM) || (HD / 2) % WARP == 0 || (HD <= WARP && (HD & (HD - 1)) == 0),
              "q/k norm: a rotary pair is in one lane, or in lanes HD/2 apart");
static_assert(!QKV_SUM || (ATT_SPLIT == 1 && HD % 2 == 0), "qkv's partial products: unsplit attention");

// The first task of a worker's step (TF_STEP_FIRST) has nothing before it on this worker that waited
// in this step: before it reads what earlier steps wrote without waiting, it waits for the previous
// step's argmax (the decode-loop counter), which every task of that step is an ancestor of. In the
// first step of a launch the launch boundary orders them. False (in every thread) to stop.
__device__ bool attn_step_order(const Ctx& c, const Task& t, int* s_abort) {
  if (!(t.flags & TF_STEP_FIRST) || c.step <= c.step0) return true;
  if (mk_tid() == 0) {
    const int ev = mk_ld_table(c.tab + HDR_N_EVENTS);
    const unsigned want = (unsigned)mk_ld_table(c.tab + HDR_N_ARGMAX) * (unsigned)c.step;
    if (!spin_geq(c, t, ev, c.ws + WS_COUNTERS + ev, want)) *s_abort = 1;
    if constexpr (ACQUIRE_ONCE != 0) mk_acquire_fence();  // relaxed polls (sync.cuh poll_counter)
  }
  mk_barrier();
  return !*s_abort;
}

// attention of the NREP query heads of kv head g, batch row b, over positions [lo, hi) of [0, pos]:
// online softmax over tiles of ATT_CH positions, fp32 throughout. Waits on its events itself.
//
// Before the wait it loads what does not depend on this step: the K and V rows of its first
// ATT_PRE positions (all before pos), pointers, and with q/k norm the norm weights and the cos/sin
// of pos. Positions before pos were written in earlier steps (or launches): the worker's previous
// task of this step waited, and every task descends from the step's embed tasks, which waited for
// the previous step's argmax, of which every task of that step (the cache's writers too) is an
// ancestor (docs/sync.md; the verifier checks both). The first task of a worker's step waits for
// that counter itself (attn_step_order). In nan mode the wait still polls the cache words at pos
// (this step's key and value); the rows before pos are never polled, they hold no sentinel.
__device__ bool task_attn(const Ctx& c, const Task& t, int* s_abort) {
  const int l = t.layer, b = t.a0, g = t.a1, split = t.a2;
  // this split's positions [lo, hi) of [0, pos]: the last `act` splits share them (all ATT_SPLIT,
  // or ceil(T / ATT_SPAN) where the splits grow with the context), the others are empty; only the
  // last one reaches pos (tiling.attn_split_range)
  const int T = c.pos + 1, act = attn_active_splits(c), j = split - (ATT_SPLIT - act);
  const int lo = j < 0 ? 0 : j * T / act, hi = j < 0 ? 0 : (j + 1) * T / act;
  const bool last = split == ATT_SPLIT - 1;
  const int tid = mk_tid(), lane = lane_id(), warp = warp_id();
  float* q_s = smem_f(OFF_AQ);    // [NREP][HD]
  float* k_s = smem_f(OFF_AK);    // q/k norm, last split: the new key [HD]
  float* p_s = smem_f(OFF_AP);    // [NREP][ATT_CH]
  float* m_s = smem_f(OFF_AM);    // [NREP] running max
  float* l_s = m_s + NREP;        // [NREP] running sum
  float* a_s = l_s + NREP;        // [NREP] rescale of this tile
  uint4* kv_s = reinterpret_cast<uint4*>(smem_f(OFF_AKV));  // K [ATT_PRE][ATT_D8] (swizzled), V after it
  float* red = smem_f(OFF_AKV);   // after the last tile: [ATT_NPART][NREP][HD]
  const float* q = lptr<const float>(c, l, R_Q, c.par) + (size_t)b * NH * HD + g * NREP * HD;
  const size_t head_off = (size_t)(b * NKV + g) * L * HD;
  const unsigned short* kc = lptr<const unsigned short>(c, l, R_KC, 0) + head_off;  // [L][HD] bf16
  const unsigned short* vc = lptr<const unsigned short>(c, l, R_VC, 0) + head_off;

  // ---- before the wait: nothing here depends on this step (ATT_EARLY 0: after it, as a baseline) ----
  if constexpr (ATT_EARLY == 0) {
    if (!wait_task(c, t, s_abort)) return false;
  } else if (!attn_step_order(c, t, s_abort)) {
    return false;
  }
  const int npre = ATT_EARLY ? max(0, min(ATT_PRE, min(hi, c.pos) - lo)) : 0;
  uint4 pk[ATT_PRE_LD], pv[ATT_PRE_LD];
#pragma unroll
  for (int k = 0; k < ATT_PRE_LD; ++k) {
    const int i = tid + k * NT;  // 16-byte word i of rows [lo, lo + npre)
    pk[k] = pv[k] = make_uint4(0u, 0u, 0u, 0u);
    if (i < npre * ATT_D8) {
      pk[k] = mk_ld_cache16(kc + (size_t)lo * HD + 8 * i);
      pv[k] = mk_ld_cache16(vc + (size_t)lo * HD + 8 * i);
    }
  }
  // the rest of the split's rows before pos into L2 (one bulk request each where the target has it)
  if (ATT_EARLY && hi > lo + npre) {
    const int rest = min(hi, c.pos) - (lo + npre);
    if (rest > 0) {
      mk_prefetch_l2(kc + (size_t)(lo + npre) * HD, (unsigned)rest * HD * 2u, tid, NT);
      mk_prefetch_l2(vc + (size_t)(lo + npre) * HD, (unsigned)rest * HD * 2u, tid, NT);
    }
  }
  // q/k norm: this lane's norm weights; with it or QKV_SUM cos/sin of its rotary indices at pos
  [[maybe_unused]] float qn[ATT_NV], kn[ATT_NV], cs[ATT_NR], sn[ATT_NR];
  if constexpr (QK_NORM) {
    const unsigned short* qw = wptr(c, l, R_QNORM);
    const unsigned short* kw = wptr(c, l, R_KNORM);
#pragma unroll
    for (int k = 0; k < ATT_NV; ++k) {
      const int i = lane + k * WARP;
      qn[k] = i < HD ? mk_bf16_to_f32(qw[i]) : 0.f;
      kn[k] = i < HD && last ? mk_bf16_to_f32(kw[i]) : 0.f;
    }
  }
  if constexpr (QK_NORM || QKV_SUM) {
    const float* inv = gptr<const float>(c, S_INV_FREQ, 0);
#pragma unroll
    for (int k = 0; k < ATT_NR; ++k) {
      sincosf((float)c.pos * inv[(lane + k * WARP) % (HD / 2)], &sn[k], &cs[k]);
      cs[k] *= c.rope_scaling;
      sn[k] *= c.rope_scaling;
    }
  }
  [[maybe_unused]] const float* kr = lptr<const float>(c, l, R_KR, c.par) + (size_t)b * NKV * HD + g * HD;
  if (tid < NREP) { m_s[tid] = -INFINITY; l_s[tid] = 0.f; }

  // ---- the wait: q (and in the last split this step's key and value) ----
  if constexpr (ATT_EARLY != 0) {
    if (!wait_task(c, t, s_abort)) return false;
  }

#pragma unroll
  for (int k = 0; k < ATT_PRE_LD; ++k) {
    const int i = tid + k * NT;
    if (i < npre * ATT_D8) {
      const int r = i / ATT_D8, e = i % ATT_D8;
      kv_s[r * ATT_D8 + (e ^ (r & ATT_KSW))] = pk[k];
      kv_s[ATT_PRE * ATT_D8 + i] = pv[k];
    }
  }
  if constexpr (QK_NORM || QKV_SUM) {
    // q and this step's key arrive raw: a warp per head (h == NREP: the key) loads it, takes its
    // RMSNorm (q_norm / k_norm) and RoPE at pos in registers and leaves it in shared memory.
    // QKV_SUM: the heads' rows are the chunks' sums instead, and h == NREP + 1 is the value, which
    // goes to the cache at pos as it is
    static_assert(ATT_NV % 2 == 0 || HD <= WARP, "rotary halves in one lane need whole halves");
    [[maybe_unused]] float rinv = 0.f;
    if constexpr (QKV_SUM) {  // 1/rms of row b of the layer's input, from its sums of squares
      constexpr int NG = H / XN_GROUP;
      const float* xs = (l == 0 ? gptr<const float>(c, S_XSS0, c.par) : lptr<const float>(c, l - 1, R_XSSM, c.par)) + (size_t)b * NG;
      float s = 0.f;
      for (int i = lane; i < NG; i += WARP) s += mk_ld_act(xs + i);
      s = warp_sum(s);
      rinv = 1.0f / sqrtf(s / (float)H + c.eps);
    }
    for (int h = warp; h <= (last ? NREP + (QKV_SUM ? 1 : 0) : NREP - 1); h += NW) {
      float v[ATT_NV];
      if constexpr (QKV_SUM) {
        const int row = h < NREP ? (g * NREP + h) * HD : (h == NREP ? NH : NH + NKV) * HD + g * HD;
        const float* p = lptr<const float>(c, l, R_QP, c.par) + (size_t)b * qkv_rows() + row;
        [[maybe_unused]] const unsigned short* bias =
            QKV_BIAS ? (h < NREP ? wptr(c, l, R_BQ) + (g * NREP + h) * HD : wptr(c, l, h == NREP ? R_BK : R_BV) + g * HD) : nullptr;
        float pc[QKV_NC][ATT_NV];  // every chunk's loads out before the first add
#pragma unroll
        for (int ci = 0; ci < QKV_NC; ++ci)
#pragma unroll
          for (int k = 0; k < ATT_NV; ++k) {
            const int i = lane + k * WARP;
            pc[ci][k] = i < HD ? mk_ld_act(p + (size_t)ci * B * qkv_rows() + i) : 0.f;
          }
#pragma unroll
        for (int k = 0; k < ATT_NV; ++k) {
          const int i = lane + k * WARP;
          float s = pc[0][k];
#pragma unroll
          for (int ci = 1; ci < QKV_NC; ++ci) s += pc[ci][k];
          v[k] = s * rinv;
          if constexpr (QKV_BIAS) v[k] += i < HD ? mk_bf16_to_f32(bias[i]) : 0.f;
        }
        if (h == NREP + 1) {  // the value: bf16 pairs into the cache at pos (lanes 2i, 2i + 1)
          unsigned* vcw = lptr<unsigned>(c, l, R_VC, 0) + (head_off + (size_t)c.pos * HD) / 2;
#pragma unroll
          for (int k = 0; k < ATT_NV; ++k) {
            const int i = lane + k * WARP;
            const float o = mk_shfl_xor(v[k], 1);
            if (i < HD && (i & 1) == 0) put_bf16x2(vcw + i / 2, v[k], o);
          }
          continue;
        }
      } else {
        const float* src = h < NREP ? q + h * HD : kr;
#pragma unroll
        for (int k = 0; k < ATT_NV; ++k) {
          const int i = lane + k * WARP;
          v[k] = i < HD ? mk_ld_act(src + i) : 0.f;
        }
      }
      if constexpr (QK_NORM) {
        float ss = 0.f;
#pragma unroll
        for (int k = 0; k < ATT_NV; ++k) ss = fmaf(v[k], v[k], ss);
        ss = warp_sum(ss);
        const float f = 1.0f / sqrtf(ss / (float)HD + c.eps);
#pragma unroll
        for (int k = 0; k < ATT_NV; ++k) v[k] = (v[k] * f) * (h < NREP ? qn[k] : kn[k]);
      }
      // rotate-half: element i < HD/2 pairs with i + HD/2, at rotary index i
      if constexpr ((HD / 2) % WARP != 0) {
        // HD <= WARP: lane i pairs with lane i ^ HD/2 (lanes >= HD hold nothing)
        const float o = mk_shfl_xor(v[0], HD / 2);
        if (lane < HD) v[0] = lane < HD / 2 ? v[0] * cs[0] - o * sn[0] : v[0] * cs[0] + o * sn[0];
      } else {
        // element lane + WARP k pairs with lane + WARP (k + ATT_NV / 2), in this lane
#pragma unroll
        for (int k = 0; k < ATT_NV / 2; ++k) {
          const float x1 = v[k], x2 = v[k + ATT_NV / 2];
          v[k] = x1 * cs[k] - x2 * sn[k];
          v[k + ATT_NV / 2] = x2 * cs[k] + x1 * sn[k];
        }
      }
      float* dst = h < NREP ? q_s + h * HD : k_s;
#pragma unroll
      for (int k = 0; k < ATT_NV; ++k) {
        const int i = lane + k * WARP;
        if (i < HD) dst[i] = v[k];
      }
    }
  } else {
    for (int i = tid; i < NREP * HD / 4; i += NT)
      reinterpret_cast<float4*>(q_s)[i] = mk_ld_act4(q + 4 * i);
  }
  mk_barrier();
  trace_mark(c, 0);  // q staged
  if constexpr (QK_NORM || QKV_SUM) {
    // the new key into the cache at pos; this task reads it from k_s (rounded as the cache holds it)
    unsigned* kcw = lptr<unsigned>(c, l, R_KC, 0) + (head_off + (size_t)c.pos * HD) / 2;
    for (int i = tid; i < (last ? HD / 2 : 0); i += NT) put_bf16x2(kcw + i, k_s[2 * i], k_s[2 * i + 1]);
  }

  float acc[NREP][8];
#pragma unroll
  for (int h = 0; h < NREP; ++h)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[h][j] = 0.f;
  const int d8 = tid % ATT_D8, vg = tid / ATT_D8;
  const int pre_end = lo + npre;  // positions [lo, pre_end) are in shared memory
  for (int t0 = lo; t0 < hi; t0 += ATT_CH) {
    const int n = min(ATT_CH, hi - t0);
    // scores: ATT_D8 lanes per position, one 16-byte word of the key each (q's matching words
    // broadcast from shared memory), the lanes' partial dot products added with shuffles in a fixed
    // order; NT / ATT_D8 positions a pass (a thread per position left one warp doing a whole short
    // split's work in series)
    for (int tt0 = 0; tt0 < n; tt0 += ATT_SPP) {
      const int tt = tt0 + tid / ATT_D8, p = t0 + tt, e8 = tid % ATT_D8;
      uint4 w = make_uint4(0u, 0u, 0u, 0u);
      if (tt < n) {
        if (p < pre_end) {
          w = kv_s[tt * ATT_D8 + (e8 ^ (tt & ATT_KSW))];
        } else if ((QK_NORM || QKV_SUM) && p == c.pos) {  // the new key: written by this task, read from its copy
          const float* ks = k_s + 8 * e8;
          w = make_uint4((unsigned)mk_f32_to_bf16(ks[0]) | ((unsigned)mk_f32_to_bf16(ks[1]) << 16),
                         (unsigned)mk_f32_to_bf16(ks[2]) | ((unsigned)mk_f32_to_bf16(ks[3]) << 16),
                         (unsigned)mk_f32_to_bf16(ks[4]) | ((unsigned)mk_f32_to_bf16(ks[5]) << 16),
                         (unsigned)mk_f32_to_bf16(ks[6]) | ((unsigned)mk_f32_to_bf16(ks[7]) << 16));
        } else {
          w = mk_ld_cache16(kc + (size_t)p * HD + 8 * e8);
        }
      }
      float sc[NREP];
#pragma unroll
      for (int h = 0; h < NREP; ++h) {
        const float4* qp = reinterpret_cast<const float4*>(q_s + h * HD + 8 * e8);
        sc[h] = dot8(w, qp[0], qp[1], 0.f);
      }
#pragma unroll
      for (int m = ATT_D8 / 2; m >= 1; m >>= 1)
#pragma unroll
        for (int h = 0; h < NREP; ++h) sc[h] += mk_shfl_xor(sc[h], m);
      if (e8 == 0 && tt < n) {
#pragma unroll
        for (int h = 0; h < NREP; ++h) p_s[h * ATT_CH + tt] = sc[h] * c.attn_scale;
      }
    }
    mk_barrier();
    if (t0 == lo) trace_mark(c, 3);  // the first tile's scores
    for (int h = warp; h < NREP; h += NW) {
      float mx = -INFINITY;
      for (int tt = lane; tt < n; tt += WARP) mx = fmaxf(mx, p_s[h * ATT_CH + tt]);
      mx = warp_max(mx);
      const float m_old = m_s[h], m_new = fmaxf(m_old, mx);
      float sum = 0.f;
      for (int tt = lane; tt < n; tt += WARP) {
        const float e = expf(p_s[h * ATT_CH + tt] - m_new);
        p_s[h * ATT_CH + tt] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
        l_s[h] = l_s[h] * alpha + sum;
        m_s[h] = m_new;
        a_s[h] = alpha;
      }
    }
    mk_barrier();
    if (t0 == lo) trace_mark(c, 4);  // the first tile's softmax
    // the weighted sum over V: 16-byte words, AV_BATCH in flight per thread
#pragma unroll
    for (int h = 0; h < NREP; ++h)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[h][j] *= a_s[h];
    for (int tt0 = vg; tt0 < n; tt0 += ATT_VG * AV_BATCH) {
      uint4 w[AV_BATCH];
#pragma unroll
      for (int k = 0; k < AV_BATCH; ++k) {
        const int tt = tt0 + k * ATT_VG, p = t0 + tt;
        w[k] = tt >= n ? make_uint4(0u, 0u, 0u, 0u)
             : p < pre_end ? kv_s[ATT_PRE * ATT_D8 + tt * ATT_D8 + d8]
                           : mk_ld_cache16(vc + (size_t)p * HD + 8 * d8);
      }
#pragma unroll
      for (int k = 0; k < AV_BATCH; ++k) {
        const int tt = tt0 + k * ATT_VG;
        if (tt < n) {
          const float v[8] = {mk_lo_bf16(w[k].x), mk_hi_bf16(w[k].x), mk_lo_bf16(w[k].y), mk_hi_bf16(w[k].y),
                              mk_lo_bf16(w[k].z), mk_hi_bf16(w[k].z), mk_lo_bf16(w[k].w), mk_hi_bf16(w[k].w)};
#pragma unroll
          for (int h = 0; h < NREP; ++h) {
            const float pr = p_s[h * ATT_CH + tt];
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[h][j] = fmaf(pr, v[j], acc[h][j]);
          }
        }
      }
    }
    mk_barrier();
  }
  // the position groups of a warp added in a fixed order (shuffles), one partial per warp; the
  // barrier after the last tile (or before the tiles) separates these stores from the K/V rows
#pragma unroll
  for (int m = ATT_D8; m < WARP; m <<= 1)
#pragma unroll
    for (int h = 0; h < NREP; ++h)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[h][j] += mk_shfl_xor(acc[h][j], m);
  if (tid % ATT_GRP < ATT_D8) {
    const int part = tid / ATT_GRP;
#pragma unroll
    for (int h = 0; h < NREP; ++h) {
      float4* r4 = reinterpret_cast<float4*>(red + (part * NREP + h) * HD + 8 * d8);
      r4[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
      r4[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
    }
  }
  mk_barrier();
  trace_mark(c, 1);  // scores, softmax and the weighted sum over the split's positions
  if constexpr (ATT_SPLIT == 1) {
    float* o = lptr<float>(c, l, R_ATTN, c.par);  // (bf16 with ATTN_BF16)
    const size_t at = (size_t)b * NH * HD + g * NREP * HD;  // in elements
    for (int i = tid; i < NREP * HD; i += NT) {
      const int h = i / HD;
      float s = 0.f;
      for (int k = 0; k < ATT_NPART; ++k) s += red[k * NREP * HD + i];
      // ATTN_BF16 (lower(attn_bf16=True); counters, tensor-core path): rounded as o-proj's staging
      // rounds it (to nearest even), which then copies it as it is
      if constexpr (ATTN_BF16)
        reinterpret_cast<unsigned short*>(o)[at + i] = mk_f32_to_bf16(s / l_s[h]);
      else
        put_f32(o + at + i, s / l_s[h]);
    }
  } else {
    // the split's softmax-normalised output and log-sum-exp (an empty split: zeros and -inf)
    float* o = lptr<float>(c, l, R_AO, c.par) + ((size_t)b * ATT_SPLIT + split) * NH * HD + g * NREP * HD;
    for (int i = tid; i < NREP * HD; i += NT) {
      const int h = i / HD;
      float s = 0.f;
      for (int k = 0; k < ATT_NPART; ++k) s += red[k * NREP * HD + i];
      put_f32(o + i, l_s[h] > 0.f ? s / l_s[h] : 0.f);
    }
    float* lse = lptr<float>(c, l, R_ALSE, c.par) + ((size_t)b * ATT_SPLIT + split) * NH + g * NREP;
    if (tid < NREP) put_f32(lse + tid, l_s[tid] > 0.f ? m_s[tid] + logf(l_s[tid]) : -INFINITY);
  }
  trace_mark(c, 2);  // outputs written
  return true;
}

}  // namespace mk
