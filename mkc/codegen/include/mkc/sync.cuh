// Synchronisation between workers (docs/sync.md): the error slot, bounded spins, task records,
// region descriptors, and a task's wait (with the nan-mode re-arm) and signal.
#pragma once
#include "mkc/common.cuh"

namespace mk {

// The fence of a wait or a signal (docs/sync.md): fence.acq_rel. (fence.sc, whose sm_90 SASS is
// MEMBAR.SC.GPU, waits for the SM's bulk copies in flight as MEMBAR.ALL.GPU does: forty-first session)
__device__ __forceinline__ void sync_fence() { mk_fence(); }
// A release add
__device__ __forceinline__ void signal_add(unsigned* p, unsigned v) { mk_red_release_add(p, v); }

// ---- errors: first reporter wins, everyone sees the abort flag ----
__device__ void report(const Ctx& c, const Task& t, int event, unsigned seen, unsigned want) {
  if (mk_atomic_cas(c.ws + WS_CLAIM, 0u, 1u) == 0u) {
    c.ws[WS_WORKER] = (unsigned)c.worker;
    c.ws[WS_TASK] = (unsigned)t.id;
    c.ws[WS_EVENT] = (unsigned)event;
    c.ws[WS_SEEN] = seen;
    c.ws[WS_STEP] = (unsigned)c.step;
    c.ws[WS_WANT] = want;
    c.ws[WS_KIND] = (unsigned)t.kind;
    mk_fence();
  }
  mk_st_relaxed(c.ws + WS_ABORT, 1u);
}

// One poll of a counter. An acquire load invalidates the SM's L1 on every poll, under the table
// loads of the block's other warps too (docs/sync.md "Acquire once"). ACQUIRE_ONCE polls relaxed
// and wait_task fences once, after the last poll of each polling thread.
__device__ __forceinline__ unsigned poll_counter(const unsigned* p) {
  if constexpr (ACQUIRE_ONCE != 0) return mk_ld_relaxed(p);
  else return mk_ld_acquire(p);
}

// Bounded spin until *p >= want (acquire, or relaxed under ACQUIRE_ONCE: the caller fences). False
// on timeout (reported) or when another worker aborted.
__device__ bool spin_geq(const Ctx& c, const Task& t, int event, const unsigned* p, unsigned want) {
  unsigned v = poll_counter(p);
  unsigned ns = 32;
  for (int it = 0; v < want; ++it) {
    if (it >= c.spin_limit) { report(c, t, event, v, want); return false; }
    if ((it & 31) == 31 && mk_ld_relaxed(c.ws + WS_ABORT)) return false;
    if (it >= SPIN_HOT) { mk_sleep(ns); if (ns < SPIN_MAX_NS) ns <<= 1; }
    v = poll_counter(p);
  }
  return true;
}

__device__ __forceinline__ bool armed4(uint4 v) {
  return v.x == SENTINEL || v.y == SENTINEL || v.z == SENTINEL || v.w == SENTINEL;
}
// Bounded spin until none of the W words at p (W = 4: 16-byte aligned) is the sentinel (relaxed;
// the caller fences).
template <int W>
__device__ bool spin_words(const Ctx& c, const Task& t, int event, const unsigned* p, unsigned where) {
  static_assert(W == 1 || W == 4, "polls read one word or four");
  uint4 v = W == 4 ? mk_ld_relaxed4(p) : make_uint4(mk_ld_relaxed(p), 0u, 0u, 0u);
  unsigned ns = 32;
  for (int it = 0; W == 4 ? armed4(v) : v.x == SENTINEL; ++it) {
    if (it >= c.spin_limit) { report(c, t, event, SENTINEL, where); return false; }
    if ((it & 31) == 31 && mk_ld_relaxed(c.ws + WS_ABORT)) return false;
    if (it >= SPIN_HOT) { mk_sleep(ns); if (ns < SPIN_MAX_NS) ns <<= 1; }
    v = W == 4 ? mk_ld_relaxed4(p) : make_uint4(mk_ld_relaxed(p), 0u, 0u, 0u);
  }
  return true;
}

// A task's own loads as its polls (PollSkip): v[k] holds the 16 bytes at at(k) (null: no unit),
// as the caller loaded them with mk_ld_relaxed4; until none holds the sentinel, every unit still
// armed is loaded again, all of them together each round (bounded, as spin_words; a timeout
// reports the word's index from base). False to stop.
template <int N, class At>
__device__ bool poll_units(const Ctx& c, const Task& t, int ev, const At& at, uint4 (&v)[N], const unsigned* base) {
  static_assert(N <= 32, "armed units are bits of one word");
  unsigned armed = 0;
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (at(k) != nullptr && armed4(v[k])) armed |= 1u << k;
  unsigned ns = 32;
  for (int it = 0; armed != 0u; ++it) {
    if (it >= c.spin_limit) {
      report(c, t, ev, SENTINEL, (unsigned)(at(mk_ffs(armed) - 1) - base));
      return false;
    }
    if ((it & 31) == 31 && mk_ld_relaxed(c.ws + WS_ABORT)) return false;
    if (it >= SPIN_HOT) { mk_sleep(ns); if (ns < SPIN_MAX_NS) ns <<= 1; }
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (armed & (1u << k)) v[k] = mk_ld_relaxed4(at(k));
#pragma unroll
    for (int k = 0; k < N; ++k)
      if ((armed & (1u << k)) && !armed4(v[k])) armed &= ~(1u << k);
  }
  return true;
}

__device__ __forceinline__ Task load_task(const int* r) {
  Task t;
  t.kind = mk_ld_table(r + T_KIND); t.layer = mk_ld_table(r + T_LAYER);
  t.a0 = mk_ld_table(r + T_A0); t.a1 = mk_ld_table(r + T_A1); t.a2 = mk_ld_table(r + T_A2);
  t.a3 = mk_ld_table(r + T_A3);
  t.wait_off = mk_ld_table(r + T_WAIT_OFF); t.n_wait = mk_ld_table(r + T_N_WAIT);
  t.sig_off = mk_ld_table(r + T_SIG_OFF); t.n_sig = mk_ld_table(r + T_N_SIG);
  t.rearm_off = mk_ld_table(r + T_REARM_OFF); t.n_rearm = mk_ld_table(r + T_N_REARM);
  t.id = mk_ld_table(r + T_ID); t.flags = mk_ld_table(r + T_FLAGS);
  t.sig_ev = -1; t.wait_ev = -1; t.wait_thr = 0;
  return t;
}
// The record and this thread's wait and signal entries, issued together, so a wait or a signal
// needs no dependent table load after it (CodegenOptions.task_ahead: while the task before it runs).
__device__ __forceinline__ Task load_task_entries(const Ctx& c, const int* r) {
  Task t = load_task(r);
  const int tid = mk_tid();
  if (tid < t.n_sig) t.sig_ev = mk_ld_table(c.tab + mk_ld_table(c.tab + HDR_SIGS) + t.sig_off + tid);
  if (!NAN_MODE && tid < t.n_wait) {
    const int* wt = c.tab + mk_ld_table(c.tab + HDR_WAITS) + (t.wait_off + tid) * WT_SIZE;
    t.wait_ev = mk_ld_table(wt + WT_EVENT);
    t.wait_thr = mk_ld_table(wt + WT_THRESHOLD);
  }
  return t;
}

// The 32-bit words of a region descriptor (slot, flags, base, run, n1, s1, n2, s2), in the copy
// of parity `par`; a cache region is taken at the current position.
__device__ __forceinline__ unsigned region_words(const int* rg) {
  return (unsigned)mk_ld_table(rg + RG_RUN) * (unsigned)mk_ld_table(rg + RG_N1) * (unsigned)mk_ld_table(rg + RG_N2);
}
__device__ __forceinline__ unsigned* region_word(const Ctx& c, const int* rg, int par, unsigned idx) {
  const unsigned run = (unsigned)mk_ld_table(rg + RG_RUN), n1 = (unsigned)mk_ld_table(rg + RG_N1);
  const int flags = mk_ld_table(rg + RG_FLAGS);
  const unsigned i2 = idx / (run * n1), rem = idx % (run * n1);
  size_t off = (size_t)mk_ld_table(rg + RG_BASE) + (size_t)i2 * (unsigned)mk_ld_table(rg + RG_S2)
             + (size_t)(rem / run) * (unsigned)mk_ld_table(rg + RG_S1) + rem % run;
  if (flags & RF_CACHE) off += (size_t)c.pos * (HD / 2);
  return gptr<unsigned>(c, mk_ld_table(rg + RG_SLOT), (flags & RF_PARITY) ? par : 0) + off;
}

// A polled region decoded once (nan mode): word idx at p + i2 * s2 + i1 * s1 + i0, idx = (i2 * n1 + i1)
// * run + i0; one run (n1 = n2 = 1) is contiguous. Polled in units of four words when every run,
// stride and the start are 16-byte aligned (POLL_VEC), else word by word.
struct PollRegion {
  unsigned* p;
  unsigned run, n1, s1, s2, n;
  __device__ __forceinline__ unsigned* at(unsigned idx) const {
    if (n == run) return p + idx;
    const unsigned rn = run * n1, i2 = idx / rn, rem = idx - i2 * rn, i1 = rem / run;
    return p + (size_t)i2 * s2 + (size_t)i1 * s1 + (rem - i1 * run);
  }
  __device__ __forceinline__ bool vec() const {
    return POLL_VEC && ((run | s1 | s2) & 3u) == 0 && ((uintptr_t)p & 15u) == 0;
  }
};
__device__ __forceinline__ PollRegion poll_region(const Ctx& c, const int* rg, int par) {
  PollRegion r;
  r.p = region_word(c, rg, par, 0);
  r.run = (unsigned)mk_ld_table(rg + RG_RUN); r.n1 = (unsigned)mk_ld_table(rg + RG_N1);
  r.s1 = (unsigned)mk_ld_table(rg + RG_S1); r.s2 = (unsigned)mk_ld_table(rg + RG_S2);
  r.n = r.run * r.n1 * (unsigned)mk_ld_table(rg + RG_N2);
  return r;
}
template <int W>
__device__ __forceinline__ bool unit_armed(uint4 v) {
  if constexpr (W == 4) return armed4(v);
  else return v.x == SENTINEL;
}
template <int W>
__device__ __forceinline__ uint4 poll_unit(const PollRegion& r, unsigned u) {
  if constexpr (W == 4) return mk_ld_relaxed4(r.at(u * 4));
  else return make_uint4(mk_ld_relaxed(r.at(u)), 0u, 0u, 0u);
}
template <int W>
__device__ __forceinline__ bool spin_unit(const Ctx& c, const Task& t, int ev, const PollRegion& r, unsigned u) {
  return spin_words<W>(c, t, ev, r.at(u * W), u * W);
}

// Every word of r until none holds the sentinel: POLL_BATCH independent polls in flight per thread
// (16 bytes each where r.vec()). POLL_REISSUE: the thread spins on its first armed unit only; once
// that one is written, it polls all its other armed units again at once (one round trip, not one
// per unit: the values of the first polls are stale by then), and so on until none is armed.
// Else (the measured baseline) it spins on each armed unit in turn. False to stop.
template <int W>
__device__ __forceinline__ bool poll_words(const Ctx& c, const Task& t, int ev, const PollRegion& r) {
  const unsigned units = r.n / W;
  bool ok = true;
  if constexpr (POLL_REISSUE != 0) {
    static_assert(POLL_BATCH <= 32, "armed units are bits of one word");
    for (unsigned u0 = mk_tid(); u0 < units && ok; u0 += NT * POLL_BATCH) {
      uint4 v[POLL_BATCH];
#pragma unroll
      for (int k = 0; k < POLL_BATCH; ++k)
        v[k] = u0 + k * NT < units ? poll_unit<W>(r, u0 + k * NT) : make_uint4(0u, 0u, 0u, 0u);
      unsigned armed = 0;  // bit k: unit u0 + k * NT still held the sentinel when last polled
#pragma unroll
      for (int k = 0; k < POLL_BATCH; ++k)
        if (u0 + k * NT < units && unit_armed<W>(v[k])) armed |= 1u << k;
      for (int it = 0; armed != 0u; ++it) {
        if (it >= c.spin_limit) { report(c, t, ev, SENTINEL, u0 * W); ok = false; break; }
        if ((it & 31) == 31 && mk_ld_relaxed(c.ws + WS_ABORT)) { ok = false; break; }
        const int k0 = mk_ffs(armed) - 1;
        if (!spin_unit<W>(c, t, ev, r, u0 + (unsigned)k0 * NT)) { ok = false; break; }
        armed &= ~(1u << k0);
#pragma unroll
        for (int k = 0; k < POLL_BATCH; ++k)
          if (armed & (1u << k)) v[k] = poll_unit<W>(r, u0 + k * NT);
#pragma unroll
        for (int k = 0; k < POLL_BATCH; ++k)
          if ((armed & (1u << k)) && !unit_armed<W>(v[k])) armed &= ~(1u << k);
      }
    }
  } else {
    for (unsigned u0 = mk_tid(); u0 < units && ok; u0 += NT * POLL_BATCH) {
      uint4 v[POLL_BATCH];
#pragma unroll
      for (int k = 0; k < POLL_BATCH; ++k)
        v[k] = u0 + k * NT < units ? poll_unit<W>(r, u0 + k * NT) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
      for (int k = 0; k < POLL_BATCH; ++k)
        if (u0 + k * NT < units && unit_armed<W>(v[k]) && ok) ok = spin_unit<W>(c, t, ev, r, u0 + k * NT);
    }
  }
  return ok;
}

// Inputs a task polls in its own first loads instead of in its wait (nan mode, STAGE_POLL: the
// poll is the load, so those words cross the L2 once): a region of a waited event that lies in
// [lo[i], hi[i]) is skipped by wait_task, and the caller's loads must then read every word of
// those ranges until none holds the sentinel, then call rearm_task. ev: the event of the last
// region skipped (-1: none), which a load that times out reports.
struct PollSkip {
  const void* lo[2];
  const void* hi[2];
  int ev;
  __device__ bool covers(const PollRegion& r) const {
    const char *a = reinterpret_cast<const char*>(r.p), *z = reinterpret_cast<const char*>(r.at(r.n - 1) + 1);
    for (int i = 0; i < 2; ++i)
      if (lo[i] != nullptr && a >= static_cast<const char*>(lo[i]) && z <= static_cast<const char*>(hi[i])) return true;
    return false;
  }
};

// nan mode: the re-arm of the other parity of what t writes, after its polls (a fence: acquire what
// they observed), so the re-arm is ordered after the previous step's readers of that copy.
__device__ void rearm_task(const Ctx& c, const Task& t) {
  if constexpr (NAN_MODE) {
    if (t.n_rearm > 0) {
      const int tid = mk_tid();
      for (int r = 0; r < t.n_rearm; ++r) {
        const int* rg = c.tab + mk_ld_table(c.tab + HDR_REGIONS) + (t.rearm_off + r) * RG_SIZE;
        const unsigned n = region_words(rg);
        for (unsigned i = tid; i < n; i += NT) mk_st_relaxed(region_word(c, rg, c.par ^ 1, i), SENTINEL);
      }
      mk_barrier();
      sync_fence();  // every thread: all re-arm stores before any of its output stores
    }
  }
}

// Wait for every event of task t, then (nan mode) re-arm the other parity of what t writes.
// The re-arm comes after the waits: only they order this task after the previous step's readers
// of that copy (through the previous step's argmax). With ``skip`` (nan mode) the regions it
// covers are left to the caller's loads and so is the re-arm (rearm_task after them). Returns
// false (in every thread) to stop.
__device__ bool wait_task(const Ctx& c, const Task& t, int* s_abort, PollSkip* skip = nullptr) {
  const int tid = mk_tid();
  if constexpr (TRACE) {
    if (tid == 0 && c.trace_rec != nullptr) c.trace_rec[0] = mk_globaltimer();  // trace: begins waiting
  }
  const bool loop_wait = (t.flags & TF_WAIT_LOOP) && c.step > c.step0;
  if (t.n_wait > 0 || loop_wait) {
    bool ok = true;
    if constexpr (NAN_MODE) {
      for (int w = 0; w < t.n_wait && ok; ++w) {
        const int* wt = c.tab + mk_ld_table(c.tab + HDR_WAITS) + (t.wait_off + w) * WT_SIZE;
        const int ev = mk_ld_table(wt + WT_EVENT), r0 = mk_ld_table(wt + WT_REG_OFF), nr = mk_ld_table(wt + WT_N_REG);
        for (int r = 0; r < nr && ok; ++r) {
          const PollRegion pr = poll_region(c, c.tab + mk_ld_table(c.tab + HDR_REGIONS) + (r0 + r) * RG_SIZE, c.par);
          if (skip != nullptr && skip->covers(pr)) {
            skip->ev = ev;
            continue;
          }
          ok = pr.vec() ? poll_words<4>(c, t, ev, pr) : poll_words<1>(c, t, ev, pr);
        }
      }
    } else {
      for (int w = tid; w < t.n_wait; w += NT) {
        int ev = t.wait_ev, thr = t.wait_thr;
        if (w != tid || ev < 0) {
          const int* wt = c.tab + mk_ld_table(c.tab + HDR_WAITS) + (t.wait_off + w) * WT_SIZE;
          ev = mk_ld_table(wt + WT_EVENT);
          thr = mk_ld_table(wt + WT_THRESHOLD);
        }
        const unsigned want = (unsigned)thr * (unsigned)(c.step + 1);
        ok = spin_geq(c, t, ev, c.ws + WS_COUNTERS + ev, want) && ok;
      }
      if constexpr (TRACE) {  // trace mark 9: thread 0's poll saw its count (before the fence and barrier)
        if (tid == 0 && c.trace_rec != nullptr) c.trace_rec[3 + 9] = mk_globaltimer();
      }
    }
    if (loop_wait && tid == NT - 1) {
      // this step's token is the previous step's argmax (the in-kernel decode loop)
      const int ev = mk_ld_table(c.tab + HDR_N_EVENTS);
      const unsigned want = (unsigned)mk_ld_table(c.tab + HDR_N_ARGMAX) * (unsigned)c.step;
      ok = spin_geq(c, t, ev, c.ws + WS_COUNTERS + ev, want) && ok;
    }
    if (!ok) *s_abort = 1;
    if constexpr (NAN_MODE) sync_fence();  // relaxed polls -> fence: acquire what they observed
    else if constexpr (ACQUIRE_ONCE != 0) {
      // PTX ISA 9.1 section 8.8: a strong read of M (the relaxed poll, at the same scope as the
      // producer's release add on M, so morally strong with it) followed in program order by an
      // acquire fence is an acquire pattern, so it synchronises with that release (through any
      // later adds on M, read-modify-writes in its observation order) as the acquire poll did;
      // HIP's agent-scope relaxed load + acquire fence is the same pattern. Only threads that
      // polled need it; the barrier below passes it on to the block, as before.
      if (tid < t.n_wait || (loop_wait && tid == NT - 1)) mk_acquire_fence();
    }
    mk_barrier();
    if (*s_abort) return false;
  }
  if (skip == nullptr) rearm_task(c, t);
  if constexpr (TRACE) {
    if (tid == 0 && c.trace_rec != nullptr) c.trace_rec[1] = mk_globaltimer();  // trace: waits satisfied
  }
  return true;
}

// Publish task t: every thread's outputs are written; one release add per signalled event.
__device__ void signal_task(const Ctx& c, const Task& t) {
  mk_barrier();
  const int tid = mk_tid();
  if constexpr (TRACE) {  // trace mark 8: the block's barrier passed (the end stamp: after the release add)
    if (tid == 0 && c.trace_rec != nullptr) c.trace_rec[3 + 8] = mk_globaltimer();
  }
  if constexpr (!NAN_MODE) {
    if (tid < t.n_sig) {
      const int ev = t.sig_ev >= 0 ? t.sig_ev : mk_ld_table(c.tab + mk_ld_table(c.tab + HDR_SIGS) + t.sig_off + tid);
      signal_add(c.ws + WS_COUNTERS + ev, 1u);
    }
  }
  if ((t.flags & TF_SIGNAL_LOOP) && tid == NT - 1)
    signal_add(c.ws + WS_COUNTERS + mk_ld_table(c.tab + HDR_N_EVENTS), 1u);
  // PIPE_TAIL (pipe.cuh): the task is closed, its signal issued after its release fence
  if (PIPE_TAIL > 0 && tid == 0) *pipe_closing() = 0u;
}

}  // namespace mk
