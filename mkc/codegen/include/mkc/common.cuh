// Shared by every device header: the per-launch context and task record, shared-memory and
// pointer-table access, warp reductions, and the stores of produced values (sentinel-safe in nan mode).
#pragma once
#include "mkc/config.cuh"

namespace mk {

// rows of the concatenated (q | k | v) projection (qkv's partial products, lower(qkv_sum=...)); a
// function, not a constant: a header compiled alone would warn of a constant it never reads
__device__ __forceinline__ constexpr int qkv_rows() { return (NH + 2 * NKV) * HD; }

struct Ctx {
  const int* tab;
  const dev_ptr* ptrs;  // two entries per slot: the parity-0 and parity-1 copy
  unsigned* ws;
  int worker, step, step0, pos, par, nforced, spin_limit;
  float eps, rope_scaling, attn_scale;
  // TRACE: this task's [wait_start, start, end] in this step (nullptr: not traced). Present in every
  // build so the stamps are `if constexpr` code; untraced, nothing reads or writes it.
  unsigned long long* trace_rec;
  // PIPE_SLOTS: weight pages this thread has consumed (the producer: issued) since the launch began;
  // page n is slot n % PIPE_SLOTS in its (n / PIPE_SLOTS)-th use
  mutable unsigned pipe_n;
  // TRACE, PIPE_SLOTS: ns this thread spent in pipe_wait on pages that had not landed, since the
  // task began (each warp's lane 0 counts for its warp; the longest goes to the task's last trace mark: trace_pipe_wait)
  mutable unsigned long long pipe_late_ns;
};

struct Task {
  int kind, layer, a0, a1, a2, a3, wait_off, n_wait, sig_off, n_sig, rearm_off, n_rearm, id, flags;
  // this thread's share of the task's table entries, read with the record (load_task_entries): the
  // event it signals (tid < n_sig, else -1), the event and per-step threshold of the wait it polls
  // (tid < n_wait, else -1). A wait or a signal then needs no dependent table load after the
  // previous task has signalled. load_task leaves them -1 (read at the wait and the signal).
  int sig_ev, wait_ev, wait_thr;
};

// ---- the token settings the host writes into the workspace (tables.WORKSPACE, WS_TOK_FLAGS on) ----
__device__ __forceinline__ unsigned tok_word(const Ctx& c, int w) { return (unsigned)mk_ld_int(reinterpret_cast<const int*>(c.ws) + w); }
__device__ __forceinline__ unsigned tok_flags(const Ctx& c) { return tok_word(c, WS_TOK_FLAGS); }
// the decode control block (tables.ctl_layout), nullptr: every row forced while k < nforced, no stops
__device__ __forceinline__ int* tok_ctl(const Ctx& c) {
  if (!(tok_flags(c) & TOKF_CTL)) return nullptr;
  return reinterpret_cast<int*>(((unsigned long long)tok_word(c, WS_CTL_HI) << 32) | tok_word(c, WS_CTL_LO));
}
// the host-mapped token stream [per row: steps published [B], tokens [L, B]], nullptr: none
__device__ __forceinline__ int* tok_stream(const Ctx& c) {
  if (!(tok_flags(c) & TOKF_STREAM)) return nullptr;
  return reinterpret_cast<int*>(((unsigned long long)tok_word(c, WS_STREAM_HI) << 32) | tok_word(c, WS_STREAM_LO));
}
// sampling (mkc/sampling.py); read only where TOKF_GUMBEL or TOKF_FILTER says the step samples
struct Sampler {
  float temperature;
  int top_k;
  float top_p, min_p;
  unsigned seed_lo, seed_hi;
};
__device__ __forceinline__ Sampler tok_sampler(const Ctx& c) {
  return Sampler{mk_bits_f32(tok_word(c, WS_TEMP)), (int)tok_word(c, WS_TOPK), mk_bits_f32(tok_word(c, WS_TOPP)),
                 mk_bits_f32(tok_word(c, WS_MINP)), tok_word(c, WS_SEED_LO), tok_word(c, WS_SEED_HI)};
}

__device__ __forceinline__ float* smem_f(int off) { return reinterpret_cast<float*>(mk_smem + off); }
__device__ __forceinline__ int* smem_i(int off) { return reinterpret_cast<int*>(mk_smem + off); }
// the weight pipeline's flag words 2 and 3 (pipe.cuh, PIPE_TAIL): a task closing, the slots of tail pages
__device__ __forceinline__ volatile unsigned* pipe_closing() { return reinterpret_cast<volatile unsigned*>(mk_smem + OFF_FLAG) + 2; }
__device__ __forceinline__ volatile unsigned* pipe_tail_slots() { return reinterpret_cast<volatile unsigned*>(mk_smem + OFF_FLAG) + 3; }
__device__ __forceinline__ int lane_id() { return mk_tid() % WARP; }
__device__ __forceinline__ int warp_id() { return mk_tid() / WARP; }
// The sampler's thread index (sampling.cuh, the argmax task, the LM-head tiles' sampling ends).
// SAMPLER_LEAN (CodegenOptions.sampler_lean): read where it is used, so what the sampler derives
// from it (lane masks, bin offsets, ...) cannot be hoisted out of the task loop and held in
// registers through every layer's tasks, where it made ptxas spill the layers' own values.
__device__ __forceinline__ int s_tid() { return SAMPLER_LEAN ? mk_tid_opaque() : mk_tid(); }
__device__ __forceinline__ int s_lane() { return s_tid() % WARP; }
__device__ __forceinline__ int s_warp() { return s_tid() / WARP; }

template <class T>
__device__ __forceinline__ T* gptr(const Ctx& c, int slot, int par) {
  return reinterpret_cast<T*>(c.ptrs[2 * slot + par]);
}
template <class T>
__device__ __forceinline__ T* lptr(const Ctx& c, int layer, int role, int par) {
  return gptr<T>(c, NGLOBAL + layer * NPER + role, par);
}
__device__ __forceinline__ const unsigned short* wptr(const Ctx& c, int layer, int role) {
  return lptr<const unsigned short>(c, layer, role, 0);
}
// the residual stream entering layer l
__device__ __forceinline__ float* x_in(const Ctx& c, int l) {
  return l == 0 ? gptr<float>(c, S_X0, c.par) : lptr<float>(c, l - 1, R_XM, c.par);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int m = WARP / 2; m > 0; m >>= 1) v += mk_shfl_xor(v, m);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int m = WARP / 2; m > 0; m >>= 1) v = fmaxf(v, mk_shfl_xor(v, m));
  return v;
}
// (value, index) maximum as torch.argmax: NaN is the largest value, equal values keep the lower index
__device__ __forceinline__ void argmax_merge(float& v, int& i, float v2, int i2) {
  const bool n1 = v != v, n2 = v2 != v2;
  if (n1 || n2) {
    if (n2 && (!n1 || i2 < i)) { v = v2; i = i2; }
    return;
  }
  if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
  for (int m = WARP / 2; m > 0; m >>= 1) argmax_merge(v, i, mk_shfl_xor(v, m), mk_shfl_xor_i(i, m));
}

// ---- stores of produced values ----
// nan mode: a value whose bits equal the sentinel is written as a canonical NaN (docs/sync.md),
// with a relaxed gpu-scope store; atomic mode: plain stores, published by the release add.
__device__ __forceinline__ void put_f32(float* p, float v) {
  if constexpr (NAN_MODE) {
    unsigned u = mk_f32_bits(v);
    mk_st_relaxed(reinterpret_cast<unsigned*>(p), u == SENTINEL ? CANON_NAN : u);
  } else {
    *p = v;
  }
}
__device__ __forceinline__ void put_i32(int* p, int v) {
  if constexpr (NAN_MODE) mk_st_relaxed(reinterpret_cast<unsigned*>(p), (unsigned)v);
  else *p = v;
}
// two bf16 in one 32-bit word (low half = lower address)
__device__ __forceinline__ void put_bf16x2(unsigned* p, float lo, float hi) {
  unsigned w = (unsigned)mk_f32_to_bf16(lo) | ((unsigned)mk_f32_to_bf16(hi) << 16);
  if constexpr (NAN_MODE) {
    if (w == SENTINEL) w = (w & 0xffff0000u) | 0x7fc0u;
    mk_st_relaxed(p, w);
  } else {
    *p = w;
  }
}

// dot product of 8 bf16 weights (one 16-byte load) with 8 floats: the GEMV and attention inner step
__device__ __forceinline__ float dot8(const uint4 w, const float4 a, const float4 b, float acc) {
  acc = fmaf(mk_lo_bf16(w.x), a.x, acc); acc = fmaf(mk_hi_bf16(w.x), a.y, acc);
  acc = fmaf(mk_lo_bf16(w.y), a.z, acc); acc = fmaf(mk_hi_bf16(w.y), a.w, acc);
  acc = fmaf(mk_lo_bf16(w.z), b.x, acc); acc = fmaf(mk_hi_bf16(w.z), b.y, acc);
  acc = fmaf(mk_lo_bf16(w.w), b.z, acc); acc = fmaf(mk_hi_bf16(w.w), b.w, acc);
  return acc;
}

// A mark inside a traced task (TRACE builds): stamp 3 + k of its record, thread 0 (mkc.trace.MARKS
// names what each kind marks).
__device__ __forceinline__ void trace_mark(const Ctx& c, int k) {
  if constexpr (TRACE) {
    if (mk_tid() == 0 && c.trace_rec != nullptr) c.trace_rec[3 + k] = mk_globaltimer();
  }
}

// The end of a GEMV task on the weight pipeline (TRACE builds): its last mark (stamp 7) is its start
// plus the longest time a warp waited for pages that had not landed yet (mkc.trace.MARKS "waiting
// for pages"; each warp's lane 0 counts for its warp: a maximum of the block's own record, so the
// block scope of mk_smem_max_u64 covers it); then the count restarts for the next task.
__device__ __forceinline__ void trace_pipe_wait(const Ctx& c) {
  if constexpr (TRACE) {
    if ((mk_tid() & (WARP - 1)) == 0 && c.trace_rec != nullptr) mk_smem_max_u64(c.trace_rec + 7, c.trace_rec[1] + c.pipe_late_ns);
    c.pipe_late_ns = 0;
  }
}

// The input staging of a tensor-core GEMV task on the weight pipeline (TRACE builds): trace_now
// before a chunk's staging, trace_stage_end after the barrier that ends it; the record's stamp 8 is
// its start plus the time of all its stagings so far (mkc.trace.MARKS "input staging, all chunks").
// Untraced builds: nothing.
__device__ __forceinline__ unsigned long long trace_now(const Ctx& c) {
  if constexpr (TRACE) {
    if (mk_tid() == 0 && c.trace_rec != nullptr) return mk_globaltimer();
  }
  return 0ull;
}
__device__ __forceinline__ void trace_stage_end(const Ctx& c, unsigned long long t0) {
  if constexpr (TRACE) {
    if (mk_tid() == 0 && c.trace_rec != nullptr) {
      const unsigned long long s = c.trace_rec[8];
      c.trace_rec[8] = (s == 0ull ? c.trace_rec[1] : s) + (mk_globaltimer() - t0);
    }
  }
}

// Attention splits that hold positions at this step (tiling.attn_active_splits): all ATT_SPLIT, or
// with ATT_SPAN (lower(attn_split_pos)) ceil((pos + 1) / ATT_SPAN) of them, the last ones; the splits
// before them are empty (zeros and a log-sum-exp of -inf), so o-proj need not read them.
__device__ __forceinline__ int attn_active_splits(const Ctx& c) {
  constexpr int span = ATT_SPAN > 0 ? ATT_SPAN : 1;  // (no division by zero in the branch not taken)
  if constexpr (ATT_SPAN > 0) return min(ATT_SPLIT, (c.pos + span) / span);
  else return ATT_SPLIT;
}

}  // namespace mk
