// Attention of one (batch row, kv head, split of the sequence) over the KV cache.
#pragma once
#include "mkc/common.cuh"

namespace mk {

// attention of the NREP query heads of kv head g, batch row b, over positions [0, pos]:
// online softmax over tiles of ATT_CH positions, fp32 throughout.
__device__ void task_attn(const Ctx& c, const Task& t) {
  const int l = t.layer, b = t.a0, g = t.a1, split = t.a2;
  // this split's positions [lo, hi) of [0, pos]; only the last one reaches pos
  const int T = c.pos + 1, lo = split * T / ATT_SPLIT, hi = (split + 1) * T / ATT_SPLIT;
  const bool last = split == ATT_SPLIT - 1;
  const int tid = mk_tid(), lane = lane_id(), warp = warp_id();
  float* q_s = smem_f(OFF_AQ);    // [NREP][HD]
  float* p_s = smem_f(OFF_AP);    // [NREP][ATT_CH]
  float* m_s = smem_f(OFF_AM);    // [NREP] running max
  float* l_s = m_s + NREP;        // [NREP] running sum
  float* a_s = l_s + NREP;        // [NREP] rescale of this tile
  float* red = smem_f(OFF_ARED);  // [NTG][NREP][HD]
  const float* q = lptr<const float>(c, l, R_Q, c.par) + (size_t)b * NH * HD + g * NREP * HD;
  for (int i = tid; i < NREP * HD; i += NT) q_s[i] = mk_ld_act(q + i);
  if (tid < NREP) { m_s[tid] = -INFINITY; l_s[tid] = 0.f; }
  const size_t head_off = (size_t)(b * NKV + g) * L * HD;
  unsigned short* knew = reinterpret_cast<unsigned short*>(smem_f(OFF_AK));  // q/k norm: the key at pos, bf16
  if constexpr (QK_NORM) {
    // q and this step's key arrive raw: RMSNorm over each head (q_norm / k_norm), RoPE at pos, and
    // the key into the cache at pos; its bf16 copy in shared memory stands in for the cache row at pos
    static_assert(NREP * ATT_CH >= HD, "the raw key is staged in the score buffer");
    float* k_s = p_s;  // [HD], before the scores need p_s
    const float* kr = lptr<const float>(c, l, R_KR, c.par) + (size_t)b * NKV * HD + g * HD;
    if (last)
      for (int i = tid; i < HD; i += NT) k_s[i] = mk_ld_act(kr + i);
    mk_barrier();
    for (int h = warp; h <= (last ? NREP : NREP - 1); h += NW) {  // h == NREP: the key
      float* v = h < NREP ? q_s + h * HD : k_s;
      const unsigned short* nw = wptr(c, l, h < NREP ? R_QNORM : R_KNORM);
      float ss = 0.f;
      for (int i = lane; i < HD; i += WARP) ss = fmaf(v[i], v[i], ss);
      ss = warp_sum(ss);
      const float f = 1.0f / sqrtf(ss / (float)HD + c.eps);
      for (int i = lane; i < HD; i += WARP) v[i] = (v[i] * f) * mk_bf16_to_f32(nw[i]);
    }
    mk_barrier();
    const float* inv = gptr<const float>(c, S_INV_FREQ, 0);
    for (int idx = tid; idx < (last ? NREP + 1 : NREP) * (HD / 2); idx += NT) {
      const int h = idx / (HD / 2), i = idx % (HD / 2);
      float* v = h < NREP ? q_s + h * HD : k_s;
      float sn, cs;
      sincosf((float)c.pos * inv[i], &sn, &cs);
      cs *= c.rope_scaling;
      sn *= c.rope_scaling;
      const float x1 = v[i], x2 = v[i + HD / 2];
      v[i] = x1 * cs - x2 * sn;
      v[i + HD / 2] = x2 * cs + x1 * sn;
    }
    mk_barrier();
    unsigned* kcw = lptr<unsigned>(c, l, R_KC, 0) + (head_off + (size_t)c.pos * HD) / 2;
    for (int i = tid; i < (last ? HD / 2 : 0); i += NT) {
      put_bf16x2(kcw + i, k_s[2 * i], k_s[2 * i + 1]);
      reinterpret_cast<unsigned*>(knew)[i] = (unsigned)mk_f32_to_bf16(k_s[2 * i]) | ((unsigned)mk_f32_to_bf16(k_s[2 * i + 1]) << 16);
    }
  }
  mk_barrier();
  const unsigned short* kc = lptr<const unsigned short>(c, l, R_KC, 0) + head_off;  // [L][HD] bf16
  const unsigned* vc = lptr<const unsigned>(c, l, R_VC, 0) + head_off / 2;
  constexpr int DP = HD / 2, NTG = NT / DP;
  const int dp = tid % DP, tg = tid / DP;
  float acc[NREP][2];
#pragma unroll
  for (int h = 0; h < NREP; ++h) acc[h][0] = acc[h][1] = 0.f;
  for (int t0 = lo; t0 < hi; t0 += ATT_CH) {
    const int n = min(ATT_CH, hi - t0);
    // scores: one position per thread, 16-byte loads along head_dim, q broadcast from smem
    for (int tt = tid; tt < n; tt += NT) {
      const unsigned short* kr = kc + (size_t)(t0 + tt) * HD;
      float sc[NREP];
#pragma unroll
      for (int h = 0; h < NREP; ++h) sc[h] = 0.f;
      uint4 kw[HD / 8];
      if (QK_NORM && t0 + tt == c.pos) {  // the new key: written by this task, read from its copy
#pragma unroll
        for (int e = 0; e < HD / 8; ++e) kw[e] = reinterpret_cast<const uint4*>(knew)[e];
      } else {
#pragma unroll
        for (int e = 0; e < HD / 8; ++e) kw[e] = mk_ld_cache16(kr + 8 * e);
      }
#pragma unroll
      for (int e8 = 0; e8 < HD / 8; ++e8) {
        const int e = 8 * e8;
        const uint4 w = kw[e8];
#pragma unroll
        for (int h = 0; h < NREP; ++h) {
          const float4* qp = reinterpret_cast<const float4*>(q_s + h * HD + e);
          sc[h] = dot8(w, qp[0], qp[1], sc[h]);
        }
      }
#pragma unroll
      for (int h = 0; h < NREP; ++h) p_s[h * ATT_CH + tt] = sc[h] * c.attn_scale;
    }
    mk_barrier();
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
    if (tg < NTG) {
#pragma unroll
      for (int h = 0; h < NREP; ++h) { acc[h][0] *= a_s[h]; acc[h][1] *= a_s[h]; }
      for (int tt0 = tg; tt0 < n; tt0 += NTG * AV_BATCH) {
        unsigned w[AV_BATCH];
#pragma unroll
        for (int k = 0; k < AV_BATCH; ++k) {
          const int tt = tt0 + k * NTG;
          w[k] = tt < n ? mk_ld_cache_word(vc + (size_t)(t0 + tt) * DP + dp) : 0u;
        }
#pragma unroll
        for (int k = 0; k < AV_BATCH; ++k) {
          const int tt = tt0 + k * NTG;
          if (tt < n) {
            const float v0 = mk_lo_bf16(w[k]), v1 = mk_hi_bf16(w[k]);
#pragma unroll
            for (int h = 0; h < NREP; ++h) {
              const float p = p_s[h * ATT_CH + tt];
              acc[h][0] = fmaf(p, v0, acc[h][0]);
              acc[h][1] = fmaf(p, v1, acc[h][1]);
            }
          }
        }
      }
    }
    mk_barrier();
  }
  if (tg < NTG) {
#pragma unroll
    for (int h = 0; h < NREP; ++h) {
      red[(tg * NREP + h) * HD + 2 * dp] = acc[h][0];
      red[(tg * NREP + h) * HD + 2 * dp + 1] = acc[h][1];
    }
  }
  mk_barrier();
  if constexpr (ATT_SPLIT == 1) {
    float* o = lptr<float>(c, l, R_ATTN, c.par) + (size_t)b * NH * HD + g * NREP * HD;
    for (int i = tid; i < NREP * HD; i += NT) {
      const int h = i / HD;
      float s = 0.f;
      for (int k = 0; k < NTG; ++k) s += red[k * NREP * HD + i];
      put_f32(o + i, s / l_s[h]);
    }
  } else {
    // the split's softmax-normalised output and log-sum-exp (an empty split: zeros and -inf)
    float* o = lptr<float>(c, l, R_AO, c.par) + ((size_t)b * ATT_SPLIT + split) * NH * HD + g * NREP * HD;
    for (int i = tid; i < NREP * HD; i += NT) {
      const int h = i / HD;
      float s = 0.f;
      for (int k = 0; k < NTG; ++k) s += red[k * NREP * HD + i];
      put_f32(o + i, l_s[h] > 0.f ? s / l_s[h] : 0.f);
    }
    float* lse = lptr<float>(c, l, R_ALSE, c.par) + ((size_t)b * ATT_SPLIT + split) * NH + g * NREP;
    if (tid < NREP) put_f32(lse + tid, l_s[tid] > 0.f ? m_s[tid] + logf(l_s[tid]) : -INFINITY);
  }
}

}  // namespace mk
