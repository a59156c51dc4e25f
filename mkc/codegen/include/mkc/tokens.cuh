// The token ends of a step: the embedding row of this step's token in; out, the argmax (or the
// sample) over the LM head's tiles: the next step's token, the generated-token log, the host-mapped
// stream, and the decode control block's stop flags (tables.ctl_layout, Megakernel.decode).
#pragma once
#include "mkc/common.cuh"
#include "mkc/sampling.cuh"

namespace mk {

__device__ void task_embed(const Ctx& c, const Task& t) {
  const unsigned short* table = gptr<const unsigned short>(c, S_EMBED, 0);
  const int* ids = gptr<const int>(c, S_IDS, 0);
  const int* nxt = gptr<const int>(c, S_NEXT_IDS, 0);
  float* x0 = gptr<float>(c, S_X0, c.par);
  const int k = c.step - c.step0, n = t.a1 - t.a0;
  const int* ctl = tok_ctl(c);
  if constexpr (XN_BF16) {
    // with x0's companions (names.xn_of): a thread takes XN_GROUP columns of a row, writes them, their
    // bf16 copy times layer 0's input norm and their sum of squares (in column order)
    unsigned short* xn = gptr<unsigned short>(c, S_XN0, c.par);
    float* xss = gptr<float>(c, S_XSS0, c.par);
    const unsigned short* nw = wptr(c, 0, R_IN_NORM);
    const int ng = n / XN_GROUP;
    for (int idx = mk_tid(); idx < B * ng; idx += NT) {
      const int b = idx / ng, col0 = t.a0 + (idx % ng) * XN_GROUP;
      const int forced = ctl != nullptr ? mk_ld_int(ctl + CTL_PLEN + b) : c.nforced;
      int tok = k < forced ? mk_ld_int(ids + k * B + b) : mk_ld_int(nxt + b);
      if (tok < 0 || tok >= V) tok = 0;
      float ss = 0.f;
#pragma unroll
      for (int e = 0; e < XN_GROUP; ++e) {
        const int col = col0 + e;
        const float v = mk_bf16_to_f32(table[(size_t)tok * H + col]);
        put_f32(x0 + (size_t)b * H + col, v);
        xn[(size_t)b * H + col] = mk_f32_to_bf16(v * mk_bf16_to_f32(nw[col]));
        ss = fmaf(v, v, ss);
      }
      xss[(size_t)b * (H / XN_GROUP) + col0 / XN_GROUP] = ss;
    }
  } else {
    for (int idx = mk_tid(); idx < B * n; idx += NT) {
      const int b = idx / n, col = t.a0 + idx % n;
      const int forced = ctl != nullptr ? mk_ld_int(ctl + CTL_PLEN + b) : c.nforced;  // row b's prompt
      int tok = k < forced ? mk_ld_int(ids + k * B + b) : mk_ld_int(nxt + b);
      if (tok < 0 || tok >= V) tok = 0;  // a NaN-poisoned argmax must not read outside the table
      put_f32(x0 + (size_t)b * H + col, mk_bf16_to_f32(table[(size_t)tok * H + col]));
    }
  }
}

__device__ __forceinline__ bool is_eos(const int* ctl, int tok) {
  const int n = mk_ld_int(ctl + CTL_NEOS);
  for (int e = 0; e < n && e < MAX_EOS; ++e)
    if (mk_ld_int(ctl + CTL_EOS + e) == tok) return true;
  return false;
}

// The step loop's early exit, decided at the start of step s = step0 + k from ctl[CTL_DONE + k - 2],
// which argmax(step0 + k - 2) wrote (once: nothing else writes that word in this launch). Every
// block takes the same decision: a block starting step s has finished its tasks of step s - 1, and
// every task of a step happens after that step's embed tasks (the verifier's decode-loop check),
// which waited on the loop counter that argmax(s - 2) released after its stores. So argmax(s - 2)'s
// store happens before this load in every block that ran a task of step s - 1, and each such block
// reads the one value (a block with an empty queue runs no task, whatever it reads). Blocks stop
// after the same step, so every counter and parity copy is left as after a launch of that many
// steps. Step s - 1 is the one wasted step: its argmax's flag could only be read after a wait.
__device__ __forceinline__ bool stop_launch(const Ctx& c) {
  const int k = c.step - c.step0;
  if (k < 2) return false;
  const int* ctl = tok_ctl(c);
  return ctl != nullptr && mk_ld_int(ctl + CTL_DONE + k - 2) != 0;
}

// Rows [t.a0, t.a1) (lower.lower_argmax: one task per row by default): next_ids[b] = first argmax
// over the tiles' partials (ties: lowest vocabulary index); with temperature > 0 the partials
// already hold Gumbel-max scores (LmHeadKind), or, with a filter, the row is sampled here over the
// LM head's fp32 logits. Then the token log, the stream, and the per-row stop state (decode control
// block). What concerns every row is shared between the tasks without one more hop:
// - ctl[CTL_DONE + k] (all rows stopped after step k): the host sets it to 1 before the launch
//   (decode.DecodePlan.ctl_head) and a task with a row still going clears it, a relaxed store of
//   the one value 0, however many tasks store it; stop_launch reads it two steps later, after the
//   loop counter that every argmax task of step k released after its stores;
// - the stream's count: one word per row (tables.stream_words), which the host takes the least of;
// - the device clock: the task of row 0 advances it (every task would store the same words).
__device__ void task_argmax(const Ctx& c, const Task& t) {
  const float* pv = gptr<const float>(c, S_AMAX_PART, c.par);
  const int* pi = gptr<const int>(c, S_AMAX_IDX, c.par);
  int* nxt = gptr<int>(c, S_NEXT_IDS, 0);
  int* toks = gptr<int>(c, S_TOKENS, 0);
  int* s_tok = reinterpret_cast<int*>(mk_smem + SM_ROW);
  float* s_max = reinterpret_cast<float*>(mk_smem + SM_ROW + 4 * B);
  int* s_all = reinterpret_cast<int*>(mk_smem + SM_RES + 40);
  const int lane = s_lane(), tid = s_tid();
  // AMAX_ROWS: the most rows an argmax task of this build takes (1 with a task per row): the
  // sampler's loop below has a constant trip count (at batch 1 a variable one spilled the filtered
  // sampler inlined: 188 bytes against 48)
  const int k = c.step - c.step0, b0 = B == 1 ? 0 : t.a0, b1 = B == 1 ? 1 : t.a1;
  const unsigned flags = tok_flags(c);
  int* ctl = tok_ctl(c);
  int* stream = tok_stream(c);
  if (tid == 0) *s_all = 1;
  // HELD_EARLY (batch 1, a filtered step): sample_filtered merges the partials itself, with the
  // held path's loads in flight beside them
  const bool early = HELD_EARLY != 0 && SAMPLE_FILTER != 0 && (flags & TOKF_FILTER) != 0;
  if (b1 - b0 == 1) {
    // one row (a task per row, and batch 1): sampling.cuh partials_warps, partials_final
    if (!early) {
      float v = -INFINITY;
      int i = 0x7fffffff;
      for (int j = tid; j < NTILES; j += NT) argmax_merge(v, i, mk_ld_act(pv + b0 * NTILES + j), mk_ld_int(pi + b0 * NTILES + j));
      partials_warps(lane, v, i);
      mk_barrier();
      partials_final(b0, tid, v, i);
    }
  } else {
    for (int b = b0 + s_warp(); b < b1; b += NW) {
      float v = -INFINITY;
      int i = 0x7fffffff;
      for (int j = lane; j < NTILES; j += WARP) argmax_merge(v, i, mk_ld_act(pv + b * NTILES + j), mk_ld_int(pi + b * NTILES + j));
      warp_argmax(v, i);
      if (lane == 0) { s_tok[b] = i; s_max[b] = v; }
    }
  }
  if (!early) {
    mk_barrier();
    trace_mark(c, 0);  // the tiles' partials merged
  }
  if (SAMPLE_FILTER && (flags & TOKF_FILTER)) {  // the filtered sampler's build only (CodegenOptions.sample_filter)
    const Sampler smp = tok_sampler(c);
    for (int r = 0; r < AMAX_ROWS; ++r) {
      const int b = b0 + r;
      if (AMAX_ROWS > 1 && b >= b1) break;
      // (here early == HELD_EARLY: s_max[b] is not read then)
      const int tok = sample_filtered(c, smp, b, s_max[b], MKC_SAMPLE_CAND && (flags & TOKF_CAND) != 0,
                                      SAMPLE_PDRAW && (flags & TOKF_PDRAW) != 0);
      if (tid == 0) s_tok[b] = tok;
    }
    mk_barrier();
  }
  for (int b = b0 + tid; b < b1; b += NT) {
    const int tok = s_tok[b];
    nxt[b] = tok;
    if (toks != nullptr && k < TOKENS_CAP) toks[k * B + b] = tok;
    if (stream != nullptr && k < TOKENS_CAP) stream[B + k * B + b] = tok;
    if (ctl != nullptr) {
      // row b emits its j-th new token at step plen - 1 + j; it stops after max_new of them or an EOS
      const int plen = mk_ld_int(ctl + CTL_PLEN + b), mx = mk_ld_int(ctl + CTL_MAXNEW + b);
      int st = k == 0 ? (mx <= 0) : mk_ld_int(ctl + CTL_STOP + b);
      const int j = k - (plen - 1);
      if (!st && j >= 0 && (j + 1 >= mx || is_eos(ctl, tok))) st = 1;
      ctl[CTL_STOP + b] = st;
      if (!st) *s_all = 0;
    }
  }
  mk_barrier();
  if (tid == 0) {
    if (b0 == 0) {
      // the device clock, read by the next launch when it is passed step0 < 0: every block read it at
      // its start, before its first task, which happens before argmax(step0)
      c.ws[WS_CLK_STEP] = (unsigned)(c.step + 1);
      c.ws[WS_CLK_POS] = (unsigned)(c.pos + 1);
    }
    if (ctl != nullptr && k < L && !*s_all) mk_st_relaxed(reinterpret_cast<unsigned*>(ctl + CTL_DONE + k), 0u);
    if (stream != nullptr) {
      mk_fence_system();  // the block's token stores (ordered before by the barrier) before the counts
      for (int b = b0; b < b1; ++b) mk_st_system(stream + b, k + 1);
    }
  }
}

}  // namespace mk
