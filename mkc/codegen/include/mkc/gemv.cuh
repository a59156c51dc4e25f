// The GEMV task every GEMV kind runs: the tensor-core path where the manifest says MMA_GEMV, the
// FMA path otherwise (both are compiled; the one not taken is never instantiated).
#pragma once
#include "mkc/gemv_fma.cuh"
#include "mkc/gemv_mma.cuh"

namespace mk {

static_assert(!MMA_GEMV || MKC_HAS_MMA_BF16, "MMA_GEMV needs a dialect with a bf16 MMA");
static_assert(PIPE_SLOTS == 0 || MKC_HAS_BULK_COPY, "the weight pipeline needs bulk copies");
static_assert(!H_BF16 || MMA_GEMV, "a bf16 h is staged by the tensor-core path only");
static_assert(!ATTN_BF16 || (MMA_GEMV && ATT_SPLIT == 1), "a bf16 attention output is unsplit, staged on tensor cores");
static_assert(!XN_BF16 || MMA_GEMV, "the normed bf16 copies are staged by the tensor-core path only");

// Returns false (in every thread) when the kernel must stop. COMB: o-proj over split attention,
// whose log-sum-exp per (batch row, split, head) is lse. XB: x holds bf16 (tensor-core path only);
// with NORM (XN_BF16) x is already times the norm's weights and xss holds its sums of squares by
// XN_GROUP columns [B, K / XN_GROUP] (nw unused).
// XLD: x's row stride where it is not K (downp's chunk of h, XB only).
template <int K, bool NORM, class Kind, bool COMB = false, bool XB = false, int XLD = K>
__device__ __forceinline__ bool gemv_task(const Ctx& c, const Task& t, int* s_abort, Kind& kd, const float* x,
                                          const unsigned short* nw, const float* lse = nullptr,
                                          [[maybe_unused]] const float* xss = nullptr) {
  if constexpr (PIPE_SLOTS > 0) {
#if MKC_HAS_BULK_COPY
    if constexpr (MMA_GEMV) {
#if MKC_HAS_MMA_BF16
      return gemv_task_mma_pipe<K, NORM, Kind, COMB, XB, XLD>(c, t, s_abort, kd, x, nw, lse, xss);
#endif
    } else {
      static_assert(XLD == K, "a strided input is staged on tensor cores only");
      return gemv_task_pipe<K, NORM, Kind, COMB>(c, t, s_abort, kd, x, nw, lse);
    }
#endif
  } else if constexpr (MMA_GEMV) {
#if MKC_HAS_MMA_BF16
    return gemv_task_mma<K, NORM, Kind, COMB, XB, XLD>(c, t, s_abort, kd, x, nw, lse, xss);
#endif
  } else {
    static_assert(XLD == K, "a strided input is staged on tensor cores only");
    return gemv_task_fma<K, NORM, Kind, COMB>(c, t, s_abort, kd, x, nw, lse);
  }
}

}  // namespace mk
