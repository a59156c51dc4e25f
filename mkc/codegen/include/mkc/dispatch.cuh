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
  if (mk_tid() < B) { best_v[mk_tid()] = -INFINITY; best_i[mk_tid()] = 0x7fffffff; }
  LmHeadKind kd = lmhead_kind(c, t);
  if (!gemv_task<H, true>(c, t, s_abort, kd, x_in(c, NL), gptr<const unsigned short>(c, S_FINAL_NORM, 0))) return false;
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
// PIPE_L2_AHEAD: a second walk over the producer's pages (the same tasks, steps and page order), by
// groups of PIPE_ROWS rows (a group is its K / PIPE_COLS pages), that asks the copy engine to pull
// each group's rows into L2 (the lanes' line prefetches). It stays PIPE_L2_AHEAD bytes of
// pages ahead of the producer's copies: while every page of the ring is full (the consumers wait on
// an event), HBM still streams that far, and those pages' copies then come from L2.
struct L2Ahead {
  const Ctx* c;
  const int* recs;
  int first, len, step_end;
  int s, i, blk, r0;
  unsigned n;  // the producer's page count at the walk's position

  template <int K, class Kind>
  __device__ bool group(Kind kd, int lane) {  // false past the task's last group
    if (blk >= kd.blocks()) return false;
    const int nr = kd.begin(blk), rows = min(PIPE_ROWS, nr - r0);
    // every lane a share of the group's 128-byte lines (a prefetch instruction each, not the copy
    // engine: its bulk prefetches queue with the pages' copies)
    for (int r = 0; r < rows; ++r) {
      const char* p = reinterpret_cast<const char*>(kd.row(r0 + r));
      for (int off = 128 * lane; off < K * 2; off += 128 * WARP) mk_prefetch_line_l2(p + off);
    }
    n += (unsigned)((K + PIPE_COLS - 1) / PIPE_COLS);
    r0 += PIPE_ROWS;
    if (r0 >= nr) { r0 = 0; ++blk; }
    return true;
  }
  __device__ void to(unsigned target) {
    const int lane = lane_id();
    while (n < target && s < step_end) {
      const Task t = load_task(recs + (first + i) * T_SIZE);
      bool more = false;
      switch (t.kind) {
        case K_QKV: more = group<H>(qkv_kind(*c, t), lane); break;
        case K_OPROJ: more = group<NH * HD>(oproj_kind(*c, t), lane); break;
        case K_GATEUP: more = group<H>(gateup_kind(*c, t), lane); break;
        case K_DOWN: more = group<I>(down_kind(*c, t), lane); break;
        case K_LMHEAD: more = group<H>(lmhead_kind(*c, t), lane); break;
        default: break;
      }
      if (!more) {
        blk = r0 = 0;
        if (++i == len) { i = 0; ++s; }
      }
    }
  }
};

template <int K, class Kind>
__device__ __forceinline__ bool produce_task(const Ctx& c, Kind& kd, unsigned long long policy, volatile int* s_abort,
                                             L2Ahead& l2) {
  if constexpr (PIPE_L2_AHEAD > 0) {
    return pipe_issue<K>(c, kd, policy, s_abort, l2);
  } else {
    NoAhead none;
    return pipe_issue<K>(c, kd, policy, s_abort, none);
  }
}

// The weight pipeline's producer warp (pipe.cuh): every GEMV task of the worker's queue, step after
// step, in the order the consumers run them. It returns when the block aborts.
__device__ void pipe_produce(const Ctx& c0, const int* recs, int first, int len, int step0, int nsteps, int* s_abort) {
  Ctx c = c0;
  volatile int* abort_flag = s_abort;
  const unsigned long long policy = mk_policy_stream();
  // (weights do not depend on the step: the walk builds its kinds from c0)
  L2Ahead l2{&c0, recs, first, len, step0 + nsteps, step0, 0, 0, 0, 0u};
  for (int s = step0; s < step0 + nsteps; ++s) {
    c.step = s;
    c.pos = c0.pos + (s - step0);
    c.par = NAN_MODE ? (s & 1) : 0;
    for (int i = 0; i < len; ++i) {
      const Task t = load_task(recs + (first + i) * T_SIZE);
      bool ok = true;
      switch (t.kind) {
        case K_QKV: { QkvKind kd = qkv_kind(c, t); ok = produce_task<H>(c, kd, policy, abort_flag, l2); break; }
        case K_OPROJ: { ResidKind<NH * HD> kd = oproj_kind(c, t); ok = produce_task<NH * HD>(c, kd, policy, abort_flag, l2); break; }
        case K_GATEUP: { GateUpKind kd = gateup_kind(c, t); ok = produce_task<H>(c, kd, policy, abort_flag, l2); break; }
        case K_DOWN: { ResidKind<I> kd = down_kind(c, t); ok = produce_task<I>(c, kd, policy, abort_flag, l2); break; }
        case K_LMHEAD: { LmHeadKind kd = lmhead_kind(c, t); ok = produce_task<H>(c, kd, policy, abort_flag, l2); break; }
        default: break;
      }
      if (!ok) return;
    }
  }
  pipe_drain(c, c.pipe_n);  // the last copies land before the warp exits (the consumers may have stopped early)
}
#endif

}  // namespace mk
