// The GEMV task kinds (mkc/taskgraph/ir.py): which weight rows a task streams, in which row blocks,
// and the epilogue that turns its dot products into outputs. gemv_task takes any of them.
#pragma once
#include "mkc/common.cuh"
#include "mkc/sampling.cuh"
#include "mkc/sync.cuh"

namespace mk {

// An epilogue's items: nr rows x B batch columns of the block's dot products (out[j * OUT_LD + b]). By
// default a warp's lanes take consecutive rows j of one column b: the global stores of a row's
// outputs are contiguous, and out's reads are B words apart, which at batch 32 puts all 32 lanes
// on one bank (8 at batch 8). EPI_TILES (CodegenOptions.epi_tiles; render sets it on the
// tensor-core path where B % 8 == 0): lanes take 4 consecutive rows of 8 columns instead (4-way
// conflicts at batch 32, none at 8; a store then covers 8 rows' 16 contiguous bytes). epi_items is
// the loop bound; epi_item maps idx to (j, b) and is false for an idx past the rows.
__device__ __forceinline__ int epi_items(int nr) { return EPI_TILES ? (nr + 3) / 4 * 4 * B : nr * B; }
__device__ __forceinline__ bool epi_item(int idx, int nr, int& j, int& b) {
  if constexpr (EPI_TILES) {
    constexpr int BT = B / 8 > 0 ? B / 8 : 1;  // batch tiles (a build without EPI_TILES still compiles this)
    const int ln = idx & 31, chunk = idx >> 5;
    b = 8 * (chunk % BT) + (ln >> 2);
    j = 4 * (chunk / BT) + (ln & 3);
    return j < nr;
  } else {
    b = idx / nr;
    j = idx % nr;
    return true;
  }
}

// qkv: the pairs [h0 * HD/2 + p0, (h1 - 1) * HD/2 + p1) of the q|k|v head space (ir.py): rmsnorm ->
// linear (+bias) -> q/k norm (whole heads) -> RoPE -> q buffer / KV cache at pos. Head h takes its
// pairs [pa(h), pb(h)): p0 in the first head, p1 in the last, whole heads between. A head brings
// 2 (pb - pa) rows in task order: a q/k head its rotary halves pa..pb then HD/2+pa..HD/2+pb (so
// RoPE pairs out row i with row i + n, n = pb - pa), a v head rows 2pa..2pb. Uniform tiles (whole
// heads, or a slice of one head) hold hr rows per head, QKV_ROWS / hr heads per block; a tile
// crossing a head boundary (at most HD/2 pairs, HD rows <= QKV_ROWS) is one block.
struct QkvKind {
  static constexpr int KS_BIT = 1;  // PIPE_KSPLIT's bit (render.KSPLIT_BITS)
  __device__ void input_staged() {}  // (ResidKind's RESID_PF)
  const unsigned short *wq, *wk, *wv;
  int layer, h0, h1, p0, p1, hr, hb;
  __device__ bool uniform() const { return h1 - h0 == 1 || (p0 == 0 && p1 == HD / 2); }
  __device__ int pa(int head) const { return head == h0 ? p0 : 0; }
  __device__ int pb(int head) const { return head == h1 - 1 ? p1 : HD / 2; }
  __device__ int per_block() const { return uniform() ? max(1, QKV_ROWS / hr) : h1 - h0; }  // heads per output block
  __device__ int blocks() const { return (h1 - h0 + per_block() - 1) / per_block(); }
  __device__ int begin(int blk) {
    hb = h0 + blk * per_block();
    return uniform() ? min(per_block(), h1 - hb) * hr : 2 * ((h1 - 1 - h0) * (HD / 2) + p1 - p0);
  }
  // the head of the block's j-th row and the row's index r among that head's rows
  __device__ void locate(int j, int& head, int& r) const {
    if (uniform()) {
      head = hb + j / hr;
      r = j % hr;
      return;
    }
    r = j;
    head = h1 - 1;
    for (int h = h0; h < h1 - 1; ++h) {
      const int n2 = 2 * (pb(h) - pa(h));
      if (r < n2) {
        head = h;
        return;
      }
      r -= n2;
    }
  }
  // the row within its head's hd rows of the r-th row the task takes of `head`
  __device__ int head_row(int head, int r) const {
    const int a = pa(head);
    if (head >= NH + NKV) return 2 * a + r;
    const int n = pb(head) - a;
    return r < n ? a + r : HD / 2 + a + (r - n);
  }
  __device__ const unsigned short* row(int j) const {
    int head, r;
    locate(j, head, r);
    r = head_row(head, r);
    if (head < NH) return wq + (size_t)(head * HD + r) * H;
    if (head < NH + NKV) return wk + (size_t)((head - NH) * HD + r) * H;
    return wv + (size_t)((head - NH - NKV) * HD + r) * H;
  }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    const int tid = mk_tid();
    if constexpr (QKV_BIAS) {
      for (int idx = tid; idx < nr * B; idx += NT) {
        int head, r;
        locate(idx / B, head, r);
        const unsigned short* bias = head < NH ? wptr(c, layer, R_BQ) + head * HD
                                   : head < NH + NKV ? wptr(c, layer, R_BK) + (head - NH) * HD
                                   : wptr(c, layer, R_BV) + (head - NH - NKV) * HD;
        out[idx / B * OUT_LD + idx % B] += mk_bf16_to_f32(bias[head_row(head, r)]);
      }
      mk_barrier();
    }
    // RoPE (rotate-half) on q and k heads, angle pos * inv_freq, cos/sin times the scaling: the
    // thread of a first-half row rotates it with its partner n rows on. With q/k norm (over the
    // whole head, which this task may hold a slice of) attention does both instead.
    const float* inv = gptr<const float>(c, S_INV_FREQ, 0);
    for (int idx = tid; idx < (QK_NORM ? 0 : nr * B); idx += NT) {
      const int j = idx / B, b = idx % B;
      int head, r;
      locate(j, head, r);
      const int n = pb(head) - pa(head);
      if (head >= NH + NKV || r >= n) continue;
      float sn, cs;
      sincosf((float)c.pos * inv[pa(head) + r], &sn, &cs);
      cs *= c.rope_scaling;
      sn *= c.rope_scaling;
      float* o1 = out + j * OUT_LD + b;
      float* o2 = out + (j + n) * OUT_LD + b;
      const float x1 = *o1, x2 = *o2;
      *o1 = x1 * cs - x2 * sn;
      *o2 = x2 * cs + x1 * sn;
    }
    mk_barrier();
    trace_mark(c, 3);  // RoPE
    // q rows -> q buffer (fp32); k/v rows -> cache at pos (bf16 pairs: rows 2m, 2m+1 are adjacent
    // columns of one head, as every head's pa and pb are even)
    float* q = lptr<float>(c, layer, R_Q, c.par);
    unsigned* kc = lptr<unsigned>(c, layer, R_KC, 0);
    unsigned* vc = lptr<unsigned>(c, layer, R_VC, 0);
    for (int idx = tid; idx < epi_items(nr); idx += NT) {
      int j, b;
      if (!epi_item(idx, nr, j, b)) continue;
      int head, r;
      locate(j, head, r);
      if (head < NH) put_f32(q + (size_t)b * NH * HD + head * HD + head_row(head, r), out[j * OUT_LD + b]);
      // q/k norm: raw keys (fp32) for attention to norm, rotate and append
      if (QK_NORM && head >= NH && head < NH + NKV)
        put_f32(lptr<float>(c, layer, R_KR, c.par) + (size_t)b * NKV * HD + (head - NH) * HD + head_row(head, r),
                out[j * OUT_LD + b]);
    }
    for (int idx = tid; idx < nr / 2 * B; idx += NT) {
      const int j = 2 * (idx % (nr / 2)), b = idx / (nr / 2);
      int head, r;
      locate(j, head, r);
      if (head < NH || (QK_NORM && head < NH + NKV)) continue;
      const bool is_k = head < NH + NKV;
      const int g = is_k ? head - NH : head - NH - NKV;
      unsigned* cache = is_k ? kc : vc;
      const size_t word = (((size_t)(b * NKV + g) * L + c.pos) * HD + head_row(head, r)) / 2;
      put_bf16x2(cache + word, out[j * OUT_LD + b], out[(j + 1) * OUT_LD + b]);
    }
  }
};

// o-proj + residual: xa[:, r] = x_in[:, r] + attn @ Wo[r].T
// down + residual:  xm[:, r] = xa[:, r] + h @ Wd[r].T
// split-K down (downk): y[:, r] = prev[:, r] + h[:, k0:k1] @ Wd[r, k0:k1].T, w pointing at column
// k0 of row 0 and LD = I the weight rows' stride (dispatch.cuh downk_kind picks prev and y)
template <int K, int LD = K>
struct ResidKind {
  static constexpr int KS_BIT = LD == I ? 8 : 2;  // down (its rows are I long), else o-proj
  static_assert(!XN_BF16 || RESID_RB % XN_GROUP == 0, "a block holds whole groups of the sums of squares");
  const unsigned short* w;
  const float* resid;
  float* y;
  int r0, r1, rb;
  // RESID_PF (CodegenOptions.resid_early): the residual under this thread's epilogue items, loaded
  // as soon as the task's input is staged (after its wait: the residual's writers are ordered
  // before it through that wait) and used by the epilogue, so the epilogue does not wait an L2
  // round trip for it after the dot products; pf: loaded (a task of one block whose items fit)
  float rp[RESID_PF > 0 ? RESID_PF : 1];
  bool pf;
  // XN_BF16 (lower(xn_bf16=True), names.xn_of): y's companions, bf16(y * nw) [B, H] and y's sums of
  // squares by XN_GROUP columns [B, H / XN_GROUP], for the GEMV that normalises y with nw next
  unsigned short* xn;
  float* xss;
  const unsigned short* nw;
  // y's companions from the block's values, which the epilogue left in out: bf16(v * nw) and the
  // sums of squares of each XN_GROUP rows in row order (the same bits run to run)
  __device__ void companions(int nr, float* out) const {
    if constexpr (XN_BF16) {
      mk_barrier();  // every value of the block is in out
      for (int idx = mk_tid(); idx < nr * B; idx += NT) {
        const int b = idx / nr, j = idx % nr;
        xn[(size_t)b * H + rb + j] = mk_f32_to_bf16(out[j * OUT_LD + b] * mk_bf16_to_f32(nw[rb + j]));
      }
      for (int idx = mk_tid(); idx < nr / XN_GROUP * B; idx += NT) {
        const int b = idx % B, g = idx / B;
        float ss = 0.f;
#pragma unroll
        for (int r = 0; r < XN_GROUP; ++r) {
          const float v = out[(g * XN_GROUP + r) * OUT_LD + b];
          ss = fmaf(v, v, ss);
        }
        xss[(size_t)b * (H / XN_GROUP) + rb / XN_GROUP + g] = ss;
      }
    }
  }
  __device__ int blocks() const { return (r1 - r0 + RESID_RB - 1) / RESID_RB; }
  __device__ int begin(int blk) { rb = r0 + blk * RESID_RB; return min(RESID_RB, r1 - rb); }
  __device__ const unsigned short* row(int j) const { return w + (size_t)(rb + j) * LD; }
  __device__ void input_staged() {
    if constexpr (RESID_PF > 0) {
      const int nr = begin(0);
      pf = blocks() == 1 && epi_items(nr) <= RESID_PF * NT;
      if (!pf) return;
#pragma unroll
      for (int k = 0; k < RESID_PF; ++k) {
        int j, b;
        const int idx = mk_tid() + k * NT;
        if (idx < epi_items(nr) && epi_item(idx, nr, j, b)) rp[k] = mk_ld_act(resid + (size_t)b * H + rb + j);
      }
    }
  }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    if constexpr (RESID_PF > 0) {
      if (pf) {
#pragma unroll
        for (int k = 0; k < RESID_PF; ++k) {
          int j, b;
          const int idx = mk_tid() + k * NT;
          if (idx < epi_items(nr) && epi_item(idx, nr, j, b)) {
            const float v = rp[k] + out[j * OUT_LD + b];
            put_f32(y + (size_t)b * H + rb + j, v);
            if constexpr (XN_BF16) out[j * OUT_LD + b] = v;
          }
        }
        companions(nr, out);
        return;
      }
    }
    for (int idx = mk_tid(); idx < epi_items(nr); idx += NT) {
      int j, b;
      if (!epi_item(idx, nr, j, b)) continue;
      const size_t o = (size_t)b * H + rb + j;  // both outputs are [B, H]
      const float v = mk_ld_act(resid + o) + out[j * OUT_LD + b];
      put_f32(y + o, v);
      if constexpr (XN_BF16) out[j * OUT_LD + b] = v;
    }
    companions(nr, out);
  }
};

// down's partial product over a chunk of h (lower_downp): y[:, rb + j] = the block's dot products,
// w pointing at the chunk's first column of row 0 and LD the weight rows' stride (dispatch.cuh
// downp_kind); dsum adds the chunks to the residual
template <int K, int LD>
struct PartKind {
  static constexpr int KS_BIT = 8;  // (down's)
  __device__ void input_staged() {}  // (ResidKind's RESID_PF)
  const unsigned short* w;
  float* y;
  int r0, r1, rb;
  __device__ int blocks() const { return (r1 - r0 + RESID_RB - 1) / RESID_RB; }
  __device__ int begin(int blk) { rb = r0 + blk * RESID_RB; return min(RESID_RB, r1 - rb); }
  __device__ const unsigned short* row(int j) const { return w + (size_t)(rb + j) * LD; }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    for (int idx = mk_tid(); idx < epi_items(nr); idx += NT) {
      int j, b;
      if (!epi_item(idx, nr, j, b)) continue;
      put_f32(y + (size_t)b * H + rb + j, out[j * OUT_LD + b]);
    }
  }
};

// qkv's partial product over a chunk of the normed input (lower_qkvp): y[:, rb + j] = the block's
// dot products, rows of the concatenated (q | k | v) matrix, qkv_rows() of them; wq, wk, wv point at the
// chunk's first column of their row 0 (dispatch.cuh qkvp_kind). Attention adds the chunks.
struct QkvPartKind {
  static constexpr int KS_BIT = 1;  // (qkv's)
  __device__ void input_staged() {}  // (ResidKind's RESID_PF)
  const unsigned short *wq, *wk, *wv;
  float* y;
  int r0, r1, rb;
  __device__ int blocks() const { return (r1 - r0 + RESID_RB - 1) / RESID_RB; }
  __device__ int begin(int blk) { rb = r0 + blk * RESID_RB; return min(RESID_RB, r1 - rb); }
  __device__ const unsigned short* row(int j) const {
    const int r = rb + j;
    if (r < NH * HD) return wq + (size_t)r * H;
    if (r < (NH + NKV) * HD) return wk + (size_t)(r - NH * HD) * H;
    return wv + (size_t)(r - (NH + NKV) * HD) * H;
  }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    for (int idx = mk_tid(); idx < epi_items(nr); idx += NT) {
      int j, b;
      if (!epi_item(idx, nr, j, b)) continue;
      put_f32(y + (size_t)b * qkv_rows() + rb + j, out[j * OUT_LD + b]);
    }
  }
};

// dsum (lower_dsum): y[:, r0:r1] = resid + (part[0] + part[1] + ... + part[NC - 1]) over [r0, r1),
// the chunks added in order (parts NC x [B, H]); with XN_BF16 y's companions as ResidKind writes
// them (bf16(v * nw) and the sums of squares of each XN_GROUP columns, in column order). A thread
// takes XN_GROUP columns of a batch row (a column where there are no companions).
template <int NC>
__device__ __forceinline__ void dsum_cols(int r0, int r1, const float* part, const float* resid, float* y,
                                          [[maybe_unused]] unsigned short* xn, [[maybe_unused]] float* xss,
                                          [[maybe_unused]] const unsigned short* nw) {
  constexpr int GC = XN_BF16 ? XN_GROUP : 1;  // columns a thread
  const int ng = (r1 - r0) / GC;
  for (int idx = mk_tid(); idx < B * ng; idx += NT) {
    const int b = idx / ng, j0 = r0 + (idx % ng) * GC;
    const size_t o = (size_t)b * H + j0;
    float v[GC];
#pragma unroll
    for (int e = 0; e < GC; ++e) {
      float p[NC];
#pragma unroll
      for (int k = 0; k < NC; ++k) p[k] = mk_ld_act(part + (size_t)k * B * H + o + e);
      float s = p[0];
#pragma unroll
      for (int k = 1; k < NC; ++k) s += p[k];
      v[e] = mk_ld_act(resid + o + e) + s;
    }
    float ss = 0.f;
#pragma unroll
    for (int e = 0; e < GC; ++e) {
      put_f32(y + o + e, v[e]);
      if constexpr (XN_BF16) {
        xn[o + e] = mk_f32_to_bf16(v[e] * mk_bf16_to_f32(nw[j0 + e]));
        ss = fmaf(v[e], v[e], ss);
      }
    }
    if constexpr (XN_BF16) xss[(size_t)b * (H / XN_GROUP) + j0 / XN_GROUP] = ss;
  }
}

// gate/up + SiLU * up: rows of Wg and the same rows of Wu in one block
struct GateUpKind {
  static constexpr int KS_BIT = 4;
  __device__ void input_staged() {}  // (ResidKind's RESID_PF)
  const unsigned short *wg, *wu;
  float* y;
  int r0, r1, rb, nb;
  __device__ int blocks() const { return (r1 - r0 + GATEUP_RB - 1) / GATEUP_RB; }
  __device__ int begin(int blk) { rb = r0 + blk * GATEUP_RB; nb = min(GATEUP_RB, r1 - rb); return 2 * nb; }
  __device__ const unsigned short* row(int j) const {
    return j < nb ? wg + (size_t)(rb + j) * H : wu + (size_t)(rb + j - nb) * H;
  }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    for (int idx = mk_tid(); idx < epi_items(nb); idx += NT) {
      int j, b;
      if (!epi_item(idx, nb, j, b)) continue;
      const float gt = out[j * OUT_LD + b], up = out[(nb + j) * OUT_LD + b];
      // H_BF16 (lower(h_bf16=True); atomic counters, tensor-core path: render checks): h in bf16,
      // rounded to nearest even as the tensor-core staging rounds it, so down stages the same bits as it is
      if constexpr (H_BF16)
        reinterpret_cast<unsigned short*>(y)[(size_t)b * I + rb + j] = mk_f32_to_bf16(gt / (1.0f + expf(-gt)) * up);
      else
        put_f32(y + (size_t)b * I + rb + j, gt / (1.0f + expf(-gt)) * up);
    }
  }
};

// the LM-head block's Gumbel-max winner per row (rows rb .. rb + nr of out) into the u64 maxima at
// OFF_BEST + 8B (pack_best); lm_gumbel out of line (the kernel with the filtered sampler: its
// registers stay out of the GEMV loops'), lm_gumbel_body inline (the temperature-only kernel, where
// a call would make ptxas save the step loop's state around it)
__device__ __forceinline__ void lm_gumbel_body(const Ctx& c, int nr, int rb, const float* out) {
  const Sampler s = tok_sampler(c);
  unsigned long long* gbest = reinterpret_cast<unsigned long long*>(mk_smem + OFF_BEST + 8 * B);
  for (int b = 0; b < B; ++b) {
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int j = s_tid(); j < nr; j += NT) argmax_merge(v, i, out[j * OUT_LD + b] / s.temperature + gumbel(c, s, b, rb + j), rb + j);
    warp_argmax(v, i);
    if (s_lane() == 0 && i != 0x7fffffff) mk_smem_max_u64(gbest + b, pack_best(v, i));
  }
}
__device__ MK_OUTLINE void lm_gumbel(const Ctx& c, int nr, int rb, const float* out) { lm_gumbel_body(c, nr, rb, out); }

// final rmsnorm + LM head: logits rows [r0, r1) and the tile's (max, first argmax) per batch row
struct LmHeadKind {
  static constexpr int KS_BIT = 16;
  __device__ void input_staged() {}  // (ResidKind's RESID_PF)
  const unsigned short* w;
  float* logits;
  int r0, r1, rb;
  __device__ int blocks() const { return (r1 - r0 + RESID_RB - 1) / RESID_RB; }
  __device__ int begin(int blk) { rb = r0 + blk * RESID_RB; return min(RESID_RB, r1 - rb); }
  __device__ const unsigned short* row(int j) const { return w + (size_t)(rb + j) * H; }
  __device__ void epilogue(const Ctx& c, int nr, float* out) const {
    for (int idx = mk_tid(); idx < epi_items(nr); idx += NT) {
      int j, b;
      if (!epi_item(idx, nr, j, b)) continue;
      logits[(size_t)b * V + rb + j] = out[j * OUT_LD + b];  // not polled: plain store
    }
    float* best_v = smem_f(OFF_BEST);
    int* best_i = smem_i(OFF_BEST + 4 * B);
    const int lane = lane_id();
    // temperature alone: Gumbel-max, argmax of logit / T + Gumbel noise samples softmax(logit / T)
    // exactly (tokens.cuh); with a filter the argmax task samples, and the tiles give the raw maximum
    // (and, without a top-k, their Gumbel-max winner too: sampling.cuh sample_pdraw). The noise is
    // the costly part: every thread scores some of the block's tokens, and the block's winner per
    // row is one u64 maximum (task_lmhead reads it)
    const unsigned flags = tok_flags(c);
    if (SAMPLER && ((flags & TOKF_GUMBEL) || (SAMPLE_PDRAW && !WALK_ONCE && (flags & TOKF_PDRAW)))) {
      if constexpr (SAMPLE_FILTER) lm_gumbel(c, nr, rb, out);
      else lm_gumbel_body(c, nr, rb, out);
    }
    if (!SAMPLER || !(flags & TOKF_GUMBEL)) {
      if constexpr (EPI_TILES && (WARP % B == 0 || B % WARP == 0)) {
        // (EPI_TILES) a warp's lanes on consecutive words of out: lane l keeps batch row bg + l % LB
        // over rows j = l / LB + RG * (a step), so a load of the warp has no bank conflict (a warp
        // on one batch row's rows, below, puts all 32 lanes on one bank at batch 32); the lanes,
        // then the warps (their partials in OFF_PART, free once the dot products are summed) are
        // merged per batch row. argmax_merge is a total order, so any order gives the same winner.
        constexpr int LB = B < WARP ? B : WARP, RG = WARP / LB;
        float* pv = smem_f(OFF_PART);
        int* pi = smem_i(OFF_PART + 4 * NW * B);
        for (int bg = 0; bg < B; bg += LB) {
          const int b = bg + lane % LB;
          float v = -INFINITY;
          int i = 0x7fffffff;
          for (int j = warp_id() * RG + lane / LB; j < nr; j += NW * RG) argmax_merge(v, i, out[j * OUT_LD + b], rb + j);
          for (int m = WARP / 2; m >= LB; m >>= 1) argmax_merge(v, i, mk_shfl_xor(v, m), mk_shfl_xor_i(i, m));
          if (lane < LB) {
            pv[warp_id() * B + b] = v;
            pi[warp_id() * B + b] = i;
          }
        }
        mk_barrier();
        for (int b = mk_tid(); b < B; b += NT)
          for (int w = 0; w < NW; ++w) argmax_merge(best_v[b], best_i[b], pv[w * B + b], pi[w * B + b]);
      } else {
        for (int b = warp_id(); b < B; b += NW) {
          float v = -INFINITY;
          int i = 0x7fffffff;
          for (int j = lane; j < nr; j += WARP) argmax_merge(v, i, out[j * OUT_LD + b], rb + j);
          warp_argmax(v, i);
          if (lane == 0) argmax_merge(best_v[b], best_i[b], v, i);
        }
      }
    }
    if constexpr (NAN_MODE) {
      // the argmax task reads the logits (plain stores, not polled) when it samples with a filter:
      // each partial's writer fences after the block's logits stores and before its relaxed store
      // of the partial, which argmax polls and then fences (message passing through the partial)
      if (SAMPLE_FILTER && (flags & TOKF_FILTER)) {
        mk_barrier();
        if (mk_tid() < B) sync_fence();
      }
    }
  }
};

}  // namespace mk
