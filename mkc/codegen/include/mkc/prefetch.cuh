// L2 prefetch of a task's weights (CodegenOptions.prefetch_l2 / prefetch_next).
#pragma once
#include "mkc/common.cuh"

namespace mk {

// ---- weights of a task, pulled into L2 ahead of use (weights never depend on anything) ----
// at most `cap` bytes of each weight matrix the task streams, from its first row
__device__ void prefetch_rows(const unsigned short* w, int r0, int r1, int k, unsigned cap) {
  if (r1 > r0) mk_prefetch_l2(w + (size_t)r0 * k, min(cap, (unsigned)((size_t)(r1 - r0) * k * 2)), mk_tid(), NT);
}
__device__ void prefetch_task(const Ctx& c, const Task& t, unsigned cap) {
  const int l = t.layer;
  switch (t.kind) {
    case K_QKV: {
      if (t.a2 == 0 && t.a3 == HD / 2) {  // whole heads [a0, a1)
        prefetch_rows(wptr(c, l, R_WQ), min(t.a0, NH) * HD, min(t.a1, NH) * HD, H, cap);
        prefetch_rows(wptr(c, l, R_WK), (min(max(t.a0, NH), NH + NKV) - NH) * HD, (min(max(t.a1, NH), NH + NKV) - NH) * HD, H, cap);
        prefetch_rows(wptr(c, l, R_WV), (max(t.a0, NH + NKV) - NH - NKV) * HD, (max(t.a1, NH + NKV) - NH - NKV) * HD, H, cap);
      } else {  // pairs [a2, a3) of head a0: two rotary halves (q/k), or rows 2*a2 .. 2*a3 (v)
        const int head = t.a0;
        if (head >= NH + NKV) {
          const int r0 = (head - NH - NKV) * HD + 2 * t.a2;
          prefetch_rows(wptr(c, l, R_WV), r0, r0 + 2 * (t.a3 - t.a2), H, cap);
        } else {
          const unsigned short* w = head < NH ? wptr(c, l, R_WQ) : wptr(c, l, R_WK);
          const int r0 = (head < NH ? head : head - NH) * HD + t.a2;
          prefetch_rows(w, r0, r0 + t.a3 - t.a2, H, cap / 2);
          prefetch_rows(w, r0 + HD / 2, r0 + HD / 2 + t.a3 - t.a2, H, cap / 2);
        }
      }
      break;
    }
    case K_OPROJ: prefetch_rows(wptr(c, l, R_WO), t.a0, t.a1, NH * HD, cap); break;
    case K_GATEUP: prefetch_rows(wptr(c, l, R_WG), t.a0, t.a1, H, cap); prefetch_rows(wptr(c, l, R_WU), t.a0, t.a1, H, cap); break;
    case K_DOWN: prefetch_rows(wptr(c, l, R_WD), t.a0, t.a1, I, cap); break;
    case K_LMHEAD: prefetch_rows(gptr<const unsigned short>(c, S_LM_HEAD, 0), t.a0, t.a1, H, cap); break;
    default: break;
  }
}

}  // namespace mk
