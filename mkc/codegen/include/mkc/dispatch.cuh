// run_task: a task record to the device code of its kind (the GEMV kinds wait inside gemv_task,
// after their first weight loads, attention inside task_attn; the others wait here).
#pragma once
#include "mkc/common.cuh"
#include "mkc/sync.cuh"
#include "mkc/gemv.cuh"
#include "mkc/kinds.cuh"
#include "mkc/attention.cuh"
#include "mkc/tokens.cuh"

namespace mk {

// The GEMV kinds of a task record: run_task and the weight pipeline's producer build the same ones.
__device__ __forceinline__ QkvKind qkv_kind(const Ctx& c, const Task& t) {
  const int l = t.layer;
  // hr: the rows of a head of a uniform tile (QkvKind::uniform; unused for a tile crossing heads)
  return QkvKind{wptr(c, l, R_WQ), wptr(c, l, R_WK), wptr(c, l, R_WV), l, t.a0, t.a1, t.a2, t.a3, 2 * (t.a3 - t.a2), t.a0};
}
__device__ __forceinline__ ResidKind<NH * HD> oproj_kind(const Ctx& c, const Task& t) {
  const int l = t.layer;
  ResidKind<NH * HD> kd{wptr(c, l, R_WO), x_in(c, l), lptr<float>(c, l, R_XA, c.par), t.a0, t.a1, t.a0};
  if constexpr (XN_BF16) {  // xa's companions, for gate/up's norm
    kd.xn = lptr<unsigned short>(c, l, R_XNA, c.par);
    kd.xss = lptr<float>(c, l, R_XSSA, c.par);
    kd.nw = wptr(c, l, R_POST_NORM);
  }
  return kd;
}
__device__ __forceinline__ GateUpKind gateup_kind(const Ctx& c, const Task& t) {
  const int l = t.layer;
  return GateUpKind{wptr(c, l, R_WG), wptr(c, l, R_WU), lptr<float>(c, l, R_H, c.par), t.a0, t.a1, t.a0, 0};
}
__device__ __forceinline__ ResidKind<I> down_kind(const Ctx& c, const Task& t) {
  const int l = t.layer;
  ResidKind<I> kd{wptr(c, l, R_WD), lptr<const float>(c, l, R_XA, c.par), lptr<float>(c, l, R_XM, c.par), t.a0, t.a1, t.a0};
  if constexpr (XN_BF16) {  // xm's companions, for the next layer's input norm or the final norm
    kd.xn = lptr<unsigned short>(c, l, R_XNM, c.par);
    kd.xss = lptr<float>(c, l, R_XSSM, c.par);
    kd.nw = l + 1 < NL ? wptr(c, l + 1, R_IN_NORM) : gptr<const unsigned short>(c, S_FINAL_NORM, 0);
  }
  return kd;
}
// XN_BF16: the bf16 normed copy (as the GEMV's x) and the sums of squares of the residual stream
// entering layer l (l == NL: the LM head's), or of xa[l] (post: gate/up's)
__device__ __forceinline__ const float* xn_in(const Ctx& c, int l, bool post) {
  if (post) return lptr<const float>(c, l, R_XNA, c.par);
  return l == 0 ? gptr<const float>(c, S_XN0, c.par) : lptr<const float>(c, l - 1, R_XNM, c.par);
}
__device__ __forceinline__ const float* xss_in(const Ctx& c, int l, bool post) {
  if (post) return lptr<const float>(c, l, R_XSSA, c.par);
  return l == 0 ? gptr<const float>(c, S_XSS0, c.par) : lptr<const float>(c, l - 1, R_XSSM, c.par);
}
static_assert(DOWN_KC == I || B == 1, "split-K down stages a contiguous chunk of h: batch 1 only");
static_assert(DOWN_PC == I || (MMA_GEMV && H_BF16), "down's partial products stage a bf16 chunk of h on tensor cores");
// split-K down, chunk ci = k0 / DOWN_KC of h (batch 1: the chunk of h is contiguous): the running
// sum of the chunks before it (xa for the first) plus this chunk's product; the last chunk writes xm
__device__ __forceinline__ ResidKind<DOWN_KC, I> downk_kind(const Ctx& c, const Task& t) {
  const int l = t.layer, ci = t.a2 / DOWN_KC;
  float* part = lptr<float>(c, l, R_XMP, c.par);
  const float* prev = ci == 0 ? lptr<const float>(c, l, R_XA, c.par) : part + (size_t)(ci - 1) * B * H;
  float* y = t.a3 == I ? lptr<float>(c, l, R_XM, c.par) : part + (size_t)ci * B * H;
  return ResidKind<DOWN_KC, I>{wptr(c, l, R_WD) + t.a2, prev, y, t.a0, t.a1, t.a0};
}
// down's partial product over chunk ci = k0 / DOWN_PC of h (lower_downp) into dp[l][ci]
__device__ __forceinline__ PartKind<DOWN_PC, I> downp_kind(const Ctx& c, const Task& t) {
  const int l = t.layer, ci = t.a2 / DOWN_PC;
  return PartKind<DOWN_PC, I>{wptr(c, l, R_WD) + t.a2, lptr<float>(c, l, R_DP, c.par) + (size_t)ci * B * H, t.a0, t.a1, t.a0};
}
static_assert(QKV_PC == H || (MMA_GEMV && XN_BF16 && ATT_SPLIT == 1),
              "qkv's partial products stage a chunk of the normed bf16 copy on tensor cores; attention is unsplit");
// qkv's partial product over chunk ci = k0 / QKV_PC of the normed input (lower_qkvp) into qp[l][ci]
__device__ __forceinline__ QkvPartKind qkvp_kind(const Ctx& c, const Task& t) {
  const int l = t.layer, ci = t.a2 / QKV_PC;
  return QkvPartKind{wptr(c, l, R_WQ) + t.a2, wptr(c, l, R_WK) + t.a2, wptr(c, l, R_WV) + t.a2,
                     lptr<float>(c, l, R_QP, c.par) + (size_t)ci * B * qkv_rows(), t.a0, t.a1, t.a0};
}
// dsum: xm[l] = xa[l] + the chunks' partial products, and xm's companions
__device__ __forceinline__ void task_dsum(const Ctx& c, const Task& t) {
  if constexpr (DOWN_PC < I) {
    const int l = t.layer;
    unsigned short* xn = nullptr;
    float* xss = nullptr;
    const unsigned short* nw = nullptr;
    if constexpr (XN_BF16) {
      xn = lptr<unsigned short>(c, l, R_XNM, c.par);
      xss = lptr<float>(c, l, R_XSSM, c.par);
      nw = l + 1 < NL ? wptr(c, l + 1, R_IN_NORM) : gptr<const unsigned short>(c, S_FINAL_NORM, 0);
    }
    dsum_cols<I / DOWN_PC>(t.a0, t.a1, lptr<const float>(c, l, R_DP, c.par), lptr<const float>(c, l, R_XA, c.par),
                           lptr<float>(c, l, R_XM, c.par), xn, xss, nw);
  }
}
__device__ __forceinline__ LmHeadKind lmhead_kind(const Ctx& c, const Task& t) {
  return LmHeadKind{gptr<const unsigned short>(c, S_LM_HEAD, 0), gptr<float>(c, S_LOGITS, 0), t.a0, t.a1, t.a0};
}

// The LM-head tile's end when the step samples (TOKF_GUMBEL, TOKF_PDRAW, TOKF_CAND): the Gumbel-max
// winner (the partial under temperature alone; words 0-1 of the tile's candidate block and the
// histogram without a top-k), or the candidates for a top-k, then the partials. In nan mode argmax polls the partials
// and then reads the candidate block: the partial's writer fences after every store to it.
__device__ __forceinline__ void lm_sample_tail_body(const Ctx& c, const Task& t, unsigned flags) {
  float* best_v = smem_f(OFF_BEST);
  int* best_i = smem_i(OFF_BEST + 4 * B);
  const unsigned long long* gbest = reinterpret_cast<const unsigned long long*>(mk_smem + OFF_BEST + 8 * B);
  mk_barrier();  // every warp's maxima are in
  float bv = s_tid() < B ? best_v[s_tid()] : 0.0f;  // the candidates' select may reuse these bytes
  int bidx = s_tid() < B ? best_i[s_tid()] : 0;
  if ((flags & TOKF_GUMBEL) || (SAMPLE_PDRAW && (flags & TOKF_PDRAW))) {
    if (s_tid() < B) {
      const unsigned long long w = gbest[s_tid()];
      if (flags & TOKF_GUMBEL) {  // the partial is the winner
        bv = best_score(w);
        bidx = best_index(w);
      } else if (!WALK_ONCE) {  // (WALK_ONCE: lm_histogram writes the winner)
        int* o = gptr<int>(c, S_LM_CAND, 0) + ((size_t)s_tid() * NTILES + t.a2) * LM_CAND_WORDS;
        o[0] = (int)mk_f32_bits(best_score(w));
        o[1] = best_index(w);
      }
    }
    if constexpr (PDRAW_BOUND) {
      if (!(flags & TOKF_GUMBEL)) lm_histogram(c, t.a0, t.a1, t.a2, best_v);
    }
  } else if constexpr (SAMPLE_FILTER != 0 && CAND_OK != 0 && MKC_SAMPLE_CAND != 0) {
    if (flags & TOKF_CAND) lm_candidates(c, t.a0, t.a1, t.a2);
  }
  if constexpr (NAN_MODE) {
    mk_barrier();
    if (s_tid() < B) sync_fence();
  }
  if (s_tid() < B) {
    put_f32(gptr<float>(c, S_AMAX_PART, c.par) + s_tid() * NTILES + t.a2, bv);
    put_i32(gptr<int>(c, S_AMAX_IDX, c.par) + s_tid() * NTILES + t.a2, bidx);
  }
  trace_mark(c, 7);  // the sampled tail's partials stored (thread 0's), before the signal
}

// out of line in the kernel with the filtered sampler, inline in the temperature-only one (lm_gumbel)
__device__ MK_OUTLINE void lm_sample_tail(const Ctx& c, const Task& t, unsigned flags) { lm_sample_tail_body(c, t, flags); }

__device__ bool task_lmhead(const Ctx& c, const Task& t, int* s_abort) {
  float* best_v = smem_f(OFF_BEST);
  int* best_i = smem_i(OFF_BEST + 4 * B);
  // per row b: the raw maximum and its index at [b], and the Gumbel-max winner (pack_best) at
  // byte 8B + 8b where the row samples without a filter (the partial) or without a top-k (TOKF_PDRAW)
  unsigned long long* gbest = reinterpret_cast<unsigned long long*>(mk_smem + OFF_BEST + 8 * B);
  if (mk_tid() < B) { best_v[mk_tid()] = -INFINITY; best_i[mk_tid()] = 0x7fffffff; gbest[mk_tid()] = 0ull; }
  LmHeadKind kd = lmhead_kind(c, t);
  if constexpr (XN_BF16) {
    if (!gemv_task<H, true, LmHeadKind, false, true>(c, t, s_abort, kd, xn_in(c, NL, false), nullptr, nullptr,
                                                      xss_in(c, NL, false)))
      return false;
  } else {
    if (!gemv_task<H, true>(c, t, s_abort, kd, x_in(c, NL), gptr<const unsigned short>(c, S_FINAL_NORM, 0))) return false;
  }
  if constexpr (SAMPLER) {  // the greedy build (SAMPLER 0: Megakernel's first kernel) has none of it
    const unsigned flags = tok_flags(c);
    constexpr unsigned TAIL = TOKF_GUMBEL | (SAMPLE_PDRAW ? TOKF_PDRAW : 0u) |
                              (SAMPLE_FILTER != 0 && CAND_OK != 0 && MKC_SAMPLE_CAND != 0 ? TOKF_CAND : 0u);
    if (flags & TAIL) {
      if constexpr (SAMPLE_FILTER) lm_sample_tail(c, t, flags);
      else lm_sample_tail_body(c, t, flags);
      return true;
    }
  }
  if (mk_tid() < B) {
    const int b = mk_tid();
    put_f32(gptr<float>(c, S_AMAX_PART, c.par) + b * NTILES + t.a2, best_v[b]);
    put_i32(gptr<int>(c, S_AMAX_IDX, c.par) + b * NTILES + t.a2, best_i[b]);
  }
  return true;
}

// Runs task t, waiting on its events first (GEMV kinds and attention issue their first loads before).
// Returns false when the kernel must stop. (MK_TASK_INLINE: the dialect's inlining of it.)
__device__ MK_TASK_INLINE bool run_task(const Ctx& c, const Task& t, int* s_abort) {
  const int l = t.layer;
  switch (t.kind) {
    case K_QKV: {
      QkvKind kd = qkv_kind(c, t);
      if constexpr (XN_BF16)
        return gemv_task<H, true, QkvKind, false, true>(c, t, s_abort, kd, xn_in(c, l, false), nullptr, nullptr,
                                                        xss_in(c, l, false));
      else
        return gemv_task<H, true>(c, t, s_abort, kd, x_in(c, l), wptr(c, l, R_IN_NORM));
    }
    case K_OPROJ: {
      ResidKind<NH * HD> kd = oproj_kind(c, t);
      if constexpr (ATT_SPLIT > 1)
        return gemv_task<NH * HD, false, ResidKind<NH * HD>, true>(c, t, s_abort, kd, lptr<const float>(c, l, R_AO, c.par),
                                                                  nullptr, lptr<const float>(c, l, R_ALSE, c.par));
      else
        return gemv_task<NH * HD, false, ResidKind<NH * HD>, false, ATTN_BF16 != 0>(c, t, s_abort, kd,
                                                                                  lptr<const float>(c, l, R_ATTN, c.par), nullptr);
    }
    case K_GATEUP: {
      GateUpKind kd = gateup_kind(c, t);
      if constexpr (XN_BF16)
        return gemv_task<H, true, GateUpKind, false, true>(c, t, s_abort, kd, xn_in(c, l, true), nullptr, nullptr,
                                                           xss_in(c, l, true));
      else
        return gemv_task<H, true>(c, t, s_abort, kd, lptr<const float>(c, l, R_XA, c.par), wptr(c, l, R_POST_NORM));
    }
    case K_DOWN: {
      ResidKind<I> kd = down_kind(c, t);
      return gemv_task<I, false, ResidKind<I>, false, H_BF16 != 0>(c, t, s_abort, kd, lptr<const float>(c, l, R_H, c.par), nullptr);
    }
    case K_DOWNK: {
      if constexpr (DOWN_KC < I) {
        ResidKind<DOWN_KC, I> kd = downk_kind(c, t);
        return gemv_task<DOWN_KC, false>(c, t, s_abort, kd, lptr<const float>(c, l, R_H, c.par) + t.a2, nullptr);
      }
      break;
    }
    case K_DOWNP: {
      if constexpr (DOWN_PC < I) {
        // (its chunk of h: bf16 columns k0.. of rows I long)
        PartKind<DOWN_PC, I> kd = downp_kind(c, t);
        const float* h = reinterpret_cast<const float*>(lptr<const unsigned short>(c, l, R_H, c.par) + t.a2);
        return gemv_task<DOWN_PC, false, PartKind<DOWN_PC, I>, false, true, I>(c, t, s_abort, kd, h, nullptr);
      }
      break;
    }
    case K_QKVP: {
      if constexpr (QKV_PC < H) {
        // (its chunk of the normed bf16 copy: columns k0.. of rows H long; 1/rms is attention's)
        QkvPartKind kd = qkvp_kind(c, t);
        const float* x = reinterpret_cast<const float*>(reinterpret_cast<const unsigned short*>(xn_in(c, l, false)) + t.a2);
        return gemv_task<QKV_PC, false, QkvPartKind, false, true, H>(c, t, s_abort, kd, x, nullptr);
      }
      break;
    }
    case K_LMHEAD: return task_lmhead(c, t, s_abort);
    // attention waits inside, after loading the cache rows and immutables this step does not change
    case K_ATTN: return task_attn(c, t, s_abort);
    default: break;
  }
  if (!wait_task(c, t, s_abort)) return false;
  switch (t.kind) {
    case K_EMBED: task_embed(c, t); break;
    case K_ARGMAX: task_argmax(c, t); break;
    case K_DSUM: task_dsum(c, t); break;
    default: break;
  }
  return true;
}

#if MKC_HAS_BULK_COPY
// The weight pipeline's producer warp (pipe.cuh): every GEMV task of the worker's queue, step after
// step, in the order the consumers run them. It returns when the block aborts. PF: the L2
// prefetcher's walk over the same pages (pipe_issue).
template <bool PF = false>
__device__ void pipe_produce(const Ctx& c0, const int* recs, int first, int len, int step0, int nsteps, int* s_abort) {
  Ctx c = c0;
  volatile int* abort_flag = s_abort;
  const unsigned long long policy = mk_policy_stream();
  for (int s = step0; s < step0 + nsteps; ++s) {
    c.step = s;
    c.pos = c0.pos + (s - step0);
    c.par = NAN_MODE ? (s & 1) : 0;
    for (int i = 0; i < len; ++i) {
      const Task t = load_task(recs + (first + i) * T_SIZE);
      bool ok = true;
      switch (t.kind) {
        case K_QKV: { QkvKind kd = qkv_kind(c, t); ok = pipe_issue<H, decltype(kd), PF>(c, kd, policy, abort_flag); break; }
        case K_OPROJ: { ResidKind<NH * HD> kd = oproj_kind(c, t); ok = pipe_issue<NH * HD, decltype(kd), PF>(c, kd, policy, abort_flag); break; }
        case K_GATEUP: { GateUpKind kd = gateup_kind(c, t); ok = pipe_issue<H, decltype(kd), PF>(c, kd, policy, abort_flag); break; }
        case K_DOWN: { ResidKind<I> kd = down_kind(c, t); ok = pipe_issue<I, decltype(kd), PF>(c, kd, policy, abort_flag); break; }
        case K_DOWNK: {
          if constexpr (DOWN_KC < I) { ResidKind<DOWN_KC, I> kd = downk_kind(c, t); ok = pipe_issue<DOWN_KC, decltype(kd), PF>(c, kd, policy, abort_flag); }
          break;
        }
        case K_DOWNP: {
          if constexpr (DOWN_PC < I) { PartKind<DOWN_PC, I> kd = downp_kind(c, t); ok = pipe_issue<DOWN_PC, decltype(kd), PF>(c, kd, policy, abort_flag); }
          break;
        }
        case K_QKVP: {
          if constexpr (QKV_PC < H) { QkvPartKind kd = qkvp_kind(c, t); ok = pipe_issue<QKV_PC, decltype(kd), PF>(c, kd, policy, abort_flag); }
          break;
        }
        case K_LMHEAD: { LmHeadKind kd = lmhead_kind(c, t); ok = pipe_issue<H, decltype(kd), PF>(c, kd, policy, abort_flag); break; }
        default: break;
      }
      if (!ok) return;
    }
  }
  if constexpr (!PF) pipe_drain(c, c.pipe_n);  // the last copies land before the warp exits (the consumers may have stopped early)
}
#endif

}  // namespace mk
