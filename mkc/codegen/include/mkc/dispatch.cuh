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
  return ResidKind<NH * HD>{wptr(c, l, R_WO), x_in(c, l), lptr<float>(c, l, R_XA, c.par), t.a0, t.a1, t.a0};
}
__device__ __forceinline__ GateUpKind gateup_kind(const Ctx& c, const Task& t) {
  const int l = t.layer;
  return GateUpKind{wptr(c, l, R_WG), wptr(c, l, R_WU), lptr<float>(c, l, R_H, c.par), t.a0, t.a1, t.a0, 0};
}
__device__ __forceinline__ ResidKind<I> down_kind(const Ctx& c, const Task& t) {
  const int l = t.layer;
  return ResidKind<I>{wptr(c, l, R_WD), lptr<const float>(c, l, R_XA, c.par), lptr<float>(c, l, R_XM, c.par), t.a0, t.a1, t.a0};
}
__device__ __forceinline__ LmHeadKind lmhead_kind(const Ctx& c, const Task& t) {
  return LmHeadKind{gptr<const unsigned short>(c, S_LM_HEAD, 0), gptr<float>(c, S_LOGITS, 0), t.a0, t.a1, t.a0};
}

__device__ bool task_lmhead(const Ctx& c, const Task& t, int* s_abort) {
  float* best_v = smem_f(OFF_BEST);
  int* best_i = smem_i(OFF_BEST + 4 * B);
  // per row b: the raw maximum at [b], the Gumbel-max winner at [2B + b] where TOKF_PDRAW asks for
  // it (OFF_BEST's 16B bytes: maxima, their indices, the winners' scores, their indices)
  if (mk_tid() < B) {
    best_v[mk_tid()] = -INFINITY; best_i[mk_tid()] = 0x7fffffff;
    best_v[2 * B + mk_tid()] = -INFINITY; best_i[2 * B + mk_tid()] = 0x7fffffff;
  }
  LmHeadKind kd = lmhead_kind(c, t);
  if (!gemv_task<H, true>(c, t, s_abort, kd, x_in(c, NL), gptr<const unsigned short>(c, S_FINAL_NORM, 0))) return false;
  if constexpr (SAMPLE_PDRAW) {
    if ((tok_flags(c) & TOKF_PDRAW) && mk_tid() < B) {
      // words 0-1 of the tile's candidate block: the winner's score and index (no candidates are
      // kept without a top-k), ordered before the partial argmax polls by the thread's fence
      int* o = gptr<int>(c, S_LM_CAND, 0) + ((size_t)mk_tid() * NTILES + t.a2) * LM_CAND_WORDS;
      o[0] = (int)mk_f32_bits(best_v[2 * B + mk_tid()]);
      o[1] = best_i[2 * B + mk_tid()];
      if constexpr (NAN_MODE) mk_fence();
    }
  }
  if constexpr (CAND_OK && MKC_SAMPLE_CAND) {
    if (tok_flags(c) & TOKF_CAND) {
      mk_barrier();
      const float bv = mk_tid() < B ? best_v[mk_tid()] : 0.0f;  // the candidates' select reuses these bytes
      const int bidx = mk_tid() < B ? best_i[mk_tid()] : 0;
      lm_candidates(c, t.a0, t.a1, t.a2);
      if constexpr (NAN_MODE) {  // argmax polls the partials below, then reads the candidates
        mk_barrier();
        if (mk_tid() < B) mk_fence();
      }
      if (mk_tid() < B) {
        put_f32(gptr<float>(c, S_AMAX_PART, c.par) + mk_tid() * NTILES + t.a2, bv);
        put_i32(gptr<int>(c, S_AMAX_IDX, c.par) + mk_tid() * NTILES + t.a2, bidx);
      }
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
// Returns false when the kernel must stop.
__device__ bool run_task(const Ctx& c, const Task& t, int* s_abort) {
  const int l = t.layer;
  switch (t.kind) {
    case K_QKV: {
      QkvKind kd = qkv_kind(c, t);
      return gemv_task<H, true>(c, t, s_abort, kd, x_in(c, l), wptr(c, l, R_IN_NORM));
    }
    case K_OPROJ: {
      ResidKind<NH * HD> kd = oproj_kind(c, t);
      if constexpr (ATT_SPLIT > 1)
        return gemv_task<NH * HD, false, ResidKind<NH * HD>, true>(c, t, s_abort, kd, lptr<const float>(c, l, R_AO, c.par),
                                                                  nullptr, lptr<const float>(c, l, R_ALSE, c.par));
      else
        return gemv_task<NH * HD, false>(c, t, s_abort, kd, lptr<const float>(c, l, R_ATTN, c.par), nullptr);
    }
    case K_GATEUP: {
      GateUpKind kd = gateup_kind(c, t);
      return gemv_task<H, true>(c, t, s_abort, kd, lptr<const float>(c, l, R_XA, c.par), wptr(c, l, R_POST_NORM));
    }
    case K_DOWN: {
      ResidKind<I> kd = down_kind(c, t);
      return gemv_task<I, false>(c, t, s_abort, kd, lptr<const float>(c, l, R_H, c.par), nullptr);
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
    default: break;
  }
  return true;
}

#if MKC_HAS_BULK_COPY
// The weight pipeline's producer warp (pipe.cuh): every GEMV task of the worker's queue, step after
// step, in the order the consumers run them. It returns when the block aborts.
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
        case K_QKV: { QkvKind kd = qkv_kind(c, t); ok = pipe_issue<H>(c, kd, policy, abort_flag); break; }
        case K_OPROJ: { ResidKind<NH * HD> kd = oproj_kind(c, t); ok = pipe_issue<NH * HD>(c, kd, policy, abort_flag); break; }
        case K_GATEUP: { GateUpKind kd = gateup_kind(c, t); ok = pipe_issue<H>(c, kd, policy, abort_flag); break; }
        case K_DOWN: { ResidKind<I> kd = down_kind(c, t); ok = pipe_issue<I>(c, kd, policy, abort_flag); break; }
        case K_LMHEAD: { LmHeadKind kd = lmhead_kind(c, t); ok = pipe_issue<H>(c, kd, policy, abort_flag); break; }
        default: break;
      }
      if (!ok) return;
    }
  }
  pipe_drain(c, c.pipe_n);  // the last copies land before the warp exits (the consumers may have stopped early)
}
#endif

}  // namespace mk
