// The GEMV task kinds (mkc/taskgraph/ir.py): which weight rows a task streams, in which row blocks,
// and the epilogue that turns its dot products into outputs. gemv_task takes any of them.
#pragma once
#include "mkc/common.cuh"
#include "mkc/sampling.cuh"

namespace mk {

// qkv: pairs [p0, p1) of heads [h0, h1) of the q|k|v head space (ir.py): rmsnorm -> linear (+bias)
// -> q/k norm (whole heads) -> RoPE -> q buffer / KV cache at pos. A head brings HR = 2 (p1 - p0)
// rows in task order: a q/k head its rotary halves p0..p1 then HD/2+p0..HD/2+p1 (so RoPE pairs
// out row i with row i + HR/2), a v head rows 2p0..2p1.
struct QkvKind {
  const unsigned short *wq, *wk, *wv;
  int layer, h0, h1, p0, p1, hr, hb;
  __device__ int per_block() const { return max(1, QKV_ROWS / hr); }  // heads per output block
  __device__ int blocks() const { return (h1 - h0 + per_block() - 1) / per_block(); }
  __device__ int begin(int blk) { hb = h0 + blk * per_block(); return min(per_block(), h1 - hb) * hr; }
  // the row within its head's hd rows of the r-th row (0 <= r < hr) the task takes of `head`
  __device__ int head_row(int head, int r) const {
    if (head >= NH + NKV) return 2 * p0 + r;
    const int n = p1 - p0;
    return r < n ? p0 + r : HD / 2 + p0 + (r - n);
  }
  __device__ const unsigned short* row(int j) const {
    const int head = hb + j / hr, r = head_row(head, j % hr);
    if (head < NH) return wq + (size_t)(head * HD + r) * H;
    if (head < NH + NKV) return wk + (size_t)((head - NH) * HD + r) * H;
    return wv + (size_t)((head - NH - NKV) * HD + r) * H;
  }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    const int nhb = nr / hr, n = p1 - p0, tid = mk_tid(), lane = lane_id();
    if constexpr (QKV_BIAS) {
      for (int idx = tid; idx < nr * B; idx += NT) {
        const int j = idx / B, head = hb + j / hr, r = head_row(head, j % hr);
        const unsigned short* bias = head < NH ? wptr(c, layer, R_BQ) + head * HD
                                   : head < NH + NKV ? wptr(c, layer, R_BK) + (head - NH) * HD
                                   : wptr(c, layer, R_BV) + (head - NH - NKV) * HD;
        out[idx] += mk_bf16_to_f32(bias[r]);
      }
      mk_barrier();
    }
    // RoPE (rotate-half) on q and k heads, angle pos * inv_freq, cos/sin times the scaling. With q/k
    // norm (over the whole head, which this task may hold a slice of) attention does both instead.
    const float* inv = gptr<const float>(c, S_INV_FREQ, 0);
    for (int idx = tid; idx < (QK_NORM ? 0 : nhb * B * n); idx += NT) {
      const int i = idx % n, hb2 = idx / n, b = hb2 % B, hh = hb2 / B;
      if (hb + hh >= NH + NKV) continue;
      float sn, cs;
      sincosf((float)c.pos * inv[p0 + i], &sn, &cs);
      cs *= c.rope_scaling;
      sn *= c.rope_scaling;
      float* o1 = out + (hh * hr + i) * B + b;
      float* o2 = out + (hh * hr + n + i) * B + b;
      const float x1 = *o1, x2 = *o2;
      *o1 = x1 * cs - x2 * sn;
      *o2 = x2 * cs + x1 * sn;
    }
    mk_barrier();
    trace_mark(c, 3);  // RoPE
    // q rows -> q buffer (fp32); k/v rows -> cache at pos (bf16 pairs: rows 2m, 2m+1 are adjacent
    // columns of the head, as p0 and p1 are even)
    float* q = lptr<float>(c, layer, R_Q, c.par);
    unsigned* kc = lptr<unsigned>(c, layer, R_KC, 0);
    unsigned* vc = lptr<unsigned>(c, layer, R_VC, 0);
    for (int idx = tid; idx < nhb * B * hr; idx += NT) {
      const int r = idx % hr, hb2 = idx / hr, b = hb2 % B, hh = hb2 / B, head = hb + hh;
      if (head < NH) put_f32(q + (size_t)b * NH * HD + head * HD + head_row(head, r), out[(hh * hr + r) * B + b]);
      // q/k norm: raw keys (fp32) for attention to norm, rotate and append
      if (QK_NORM && head >= NH && head < NH + NKV)
        put_f32(lptr<float>(c, layer, R_KR, c.par) + (size_t)b * NKV * HD + (head - NH) * HD + head_row(head, r),
                out[(hh * hr + r) * B + b]);
    }
    for (int idx = tid; idx < nhb * B * n; idx += NT) {
      const int r2 = idx % n, hb2 = idx / n, b = hb2 % B, hh = hb2 / B, head = hb + hh;
      if (head < NH || (QK_NORM && head < NH + NKV)) continue;
      const bool is_k = head < NH + NKV;
      const int g = is_k ? head - NH : head - NH - NKV;
      unsigned* cache = is_k ? kc : vc;
      const size_t word = (((size_t)(b * NKV + g) * L + c.pos) * HD + head_row(head, 2 * r2)) / 2;
      put_bf16x2(cache + word, out[(hh * hr + 2 * r2) * B + b], out[(hh * hr + 2 * r2 + 1) * B + b]);
    }
  }
};

// o-proj + residual: xa[:, r] = x_in[:, r] + attn @ Wo[r].T
// down + residual:  xm[:, r] = xa[:, r] + h @ Wd[r].T
template <int K>
struct ResidKind {
  const unsigned short* w;
  const float* resid;
  float* y;
  int r0, r1, rb;
  __device__ int blocks() const { return (r1 - r0 + RESID_RB - 1) / RESID_RB; }
  __device__ int begin(int blk) { rb = r0 + blk * RESID_RB; return min(RESID_RB, r1 - rb); }
  __device__ const unsigned short* row(int j) const { return w + (size_t)(rb + j) * K; }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    for (int idx = mk_tid(); idx < nr * B; idx += NT) {
      const int b = idx / nr, j = idx % nr;
      const size_t o = (size_t)b * H + rb + j;  // both outputs are [B, H]
      put_f32(y + o, mk_ld_act(resid + o) + out[j * B + b]);
    }
  }
};

// gate/up + SiLU * up: rows of Wg and the same rows of Wu in one block
struct GateUpKind {
  const unsigned short *wg, *wu;
  float* y;
  int r0, r1, rb, nb;
  __device__ int blocks() const { return (r1 - r0 + GATEUP_RB - 1) / GATEUP_RB; }
  __device__ int begin(int blk) { rb = r0 + blk * GATEUP_RB; nb = min(GATEUP_RB, r1 - rb); return 2 * nb; }
  __device__ const unsigned short* row(int j) const {
    return j < nb ? wg + (size_t)(rb + j) * H : wu + (size_t)(rb + j - nb) * H;
  }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    for (int idx = mk_tid(); idx < nb * B; idx += NT) {
      const int b = idx / nb, j = idx % nb;
      const float gt = out[j * B + b], up = out[(nb + j) * B + b];
      put_f32(y + (size_t)b * I + rb + j, gt / (1.0f + expf(-gt)) * up);
    }
  }
};

// final rmsnorm + LM head: logits rows [r0, r1) and the tile's (max, first argmax) per batch row
struct LmHeadKind {
  const unsigned short* w;
  float* logits;
  int r0, r1, rb;
  __device__ int blocks() const { return (r1 - r0 + RESID_RB - 1) / RESID_RB; }
  __device__ int begin(int blk) { rb = r0 + blk * RESID_RB; return min(RESID_RB, r1 - rb); }
  __device__ const unsigned short* row(int j) const { return w + (size_t)(rb + j) * H; }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    for (int idx = mk_tid(); idx < nr * B; idx += NT) {
      const int b = idx / nr, j = idx % nr;
      logits[(size_t)b * V + rb + j] = out[j * B + b];  // not polled: plain store
    }
    float* best_v = smem_f(OFF_BEST);
    int* best_i = smem_i(OFF_BEST + 4 * B);
    const int lane = lane_id();
    // temperature alone: Gumbel-max, argmax of logit / T + Gumbel noise samples softmax(logit / T)
    // exactly (tokens.cuh); with a filter the argmax task samples, and the tiles give the raw maximum
    const unsigned flags = tok_flags(c);
    for (int b = warp_id(); b < B; b += NW) {
      float v = -INFINITY;
      int i = 0x7fffffff;
      if (flags & TOKF_GUMBEL) {
        const Sampler s = tok_sampler(c);
        for (int j = lane; j < nr; j += WARP) argmax_merge(v, i, out[j * B + b] / s.temperature + gumbel(c, s, b, rb + j), rb + j);
      } else {
        for (int j = lane; j < nr; j += WARP) argmax_merge(v, i, out[j * B + b], rb + j);
      }
      warp_argmax(v, i);
      if (lane == 0) argmax_merge(best_v[b], best_i[b], v, i);
    }
    if constexpr (NAN_MODE) {
      // the argmax task reads the logits (plain stores, not polled) when it samples with a filter:
      // each partial's writer fences after the block's logits stores and before its relaxed store
      // of the partial, which argmax polls and then fences (message passing through the partial)
      if (flags & TOKF_FILTER) {
        mk_barrier();
        if (mk_tid() < B) mk_fence();
      }
    }
  }
};

}  // namespace mk
