// The token ends of a step: the embedding row of this step's token in, the argmax over the LM
// head's tiles out (the next step's token, and the generated-token log).
#pragma once
#include "mkc/common.cuh"

namespace mk {

__device__ void task_embed(const Ctx& c, const Task& t) {
  const unsigned short* table = gptr<const unsigned short>(c, S_EMBED, 0);
  const int* ids = gptr<const int>(c, S_IDS, 0);
  const int* nxt = gptr<const int>(c, S_NEXT_IDS, 0);
  float* x0 = gptr<float>(c, S_X0, c.par);
  const int k = c.step - c.step0, n = t.a1 - t.a0;
  for (int idx = mk_tid(); idx < B * n; idx += NT) {
    const int b = idx / n, col = t.a0 + idx % n;
    int tok = k < c.nforced ? mk_ld_int(ids + k * B + b) : mk_ld_int(nxt + b);
    if (tok < 0 || tok >= V) tok = 0;  // a NaN-poisoned argmax must not read outside the table
    put_f32(x0 + (size_t)b * H + col, mk_bf16_to_f32(table[(size_t)tok * H + col]));
  }
}

// next_ids[b] = first argmax over the tiles' partials (ties: lowest vocabulary index)
__device__ void task_argmax(const Ctx& c, const Task& t) {
  const float* pv = gptr<const float>(c, S_AMAX_PART, c.par);
  const int* pi = gptr<const int>(c, S_AMAX_IDX, c.par);
  int* nxt = gptr<int>(c, S_NEXT_IDS, 0);
  int* toks = gptr<int>(c, S_TOKENS, 0);
  const int lane = lane_id();
  for (int b = warp_id(); b < B; b += NW) {
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int k = lane; k < NTILES; k += WARP) argmax_merge(v, i, mk_ld_act(pv + b * NTILES + k), mk_ld_int(pi + b * NTILES + k));
    warp_argmax(v, i);
    if (lane == 0) {
      nxt[b] = i;
      const int k = c.step - c.step0;
      if (toks != nullptr && k < TOKENS_CAP) toks[k * B + b] = i;
    }
  }
}

}  // namespace mk
