// What both GEMV paths (gemv_fma.cuh, gemv_mma.cuh) share: the input as o-proj reads it from split
// attention, the combination weights of the splits, and the end of a row block (1/rms, epilogue).
#pragma once
#include "mkc/common.cuh"
#include "mkc/sync.cuh"

namespace mk {

// The GEMV input x[b][k..k+3]. COMB (o-proj over split attention): x is the splits' outputs
// [B][ATT_SPLIT][K], combined with the weights attn_weights left in shared memory (an empty split
// has weight 0 and wrote zeros).
template <int K, bool COMB>
__device__ __forceinline__ float4 load_x4(const float* x, int b, int k) {
  if constexpr (!COMB) {
    return mk_ld_act4(x + (size_t)b * K + k);
  } else {
    const float* aw = smem_f(OFF_AW) + b * ATT_SPLIT * NH + k / HD;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    // every split is read, so its loads go out together: an empty split wrote zeros (attention.cuh)
    // and has weight 0, so it adds 0 (a guard on w would serialise the loads behind their weights)
    float4 a[ATT_SPLIT];
#pragma unroll
    for (int s = 0; s < ATT_SPLIT; ++s) a[s] = mk_ld_act4(x + ((size_t)b * ATT_SPLIT + s) * K + k);
#pragma unroll
    for (int s = 0; s < ATT_SPLIT; ++s) {
      const float w = aw[s * NH];
      v.x = fmaf(w, a[s].x, v.x); v.y = fmaf(w, a[s].y, v.y); v.z = fmaf(w, a[s].z, v.z); v.w = fmaf(w, a[s].w, v.w);
    }
    return v;
  }
}

// Combination weights of the attention splits, aw[b][s][h] = softmax over s of lse[b][s][h] (the
// last split always has a position, so the maximum is finite); a barrier publishes them.
template <bool COMB>
__device__ __forceinline__ void attn_weights(const float* lse) {
  if constexpr (COMB) {
    float* aw = smem_f(OFF_AW);
    for (int i = mk_tid(); i < B * NH; i += NT) {
      const int b = i / NH, h = i % NH;
      const float* ls = lse + (size_t)b * ATT_SPLIT * NH + h;
      float m = -INFINITY;
      for (int s = 0; s < ATT_SPLIT; ++s) m = fmaxf(m, mk_ld_act(ls + s * NH));
      float sum = 0.f;
      for (int s = 0; s < ATT_SPLIT; ++s) {
        const float e = expf(mk_ld_act(ls + s * NH) - m);
        aw[(b * ATT_SPLIT + s) * NH + h] = e;
        sum += e;
      }
      for (int s = 0; s < ATT_SPLIT; ++s) aw[(b * ATT_SPLIT + s) * NH + h] /= sum;
    }
    mk_barrier();
  }
}

// A GEMV task's wait on its inputs (skip: wait_task's), then (NORM) the warps' sums of squares cleared for stage_x.
// False (in every thread) to stop.
template <bool NORM>
__device__ __forceinline__ bool gemv_wait(const Ctx& c, const Task& t, int* s_abort, float* ssp,
                                          PollSkip* skip = nullptr) {
  if (!wait_task(c, t, s_abort, skip)) return false;
  if constexpr (NORM) {
    for (int i = mk_tid(); i < NW * B; i += NT) ssp[i] = 0.f;
    mk_barrier();
  }
  return true;
}

// The end of a row block: with NORM, scale by 1/rms of each batch row; then the kind's epilogue.
template <int K, bool NORM, class Kind>
__device__ __forceinline__ void gemv_block_end(const Ctx& c, const Kind& kd, int nr, int blk, float* out, float* rs,
                                               const float* ssp) {
  if constexpr (NORM) {
    // rs[b] = 1 / sqrt(mean(x^2) + eps), the warps' partial sums added in a fixed order
    if (blk == 0 && mk_tid() < B) {
      float ss = 0.f;
      for (int w = 0; w < NW; ++w) ss += ssp[w * B + mk_tid()];
      rs[mk_tid()] = 1.0f / sqrtf(ss / (float)K + c.eps);
    }
    mk_barrier();
    for (int idx = mk_tid(); idx < nr * B; idx += NT) out[idx / B * OUT_LD + idx % B] *= rs[idx % B];
    mk_barrier();
  }
  kd.epilogue(c, nr, out);
  mk_barrier();
}

}  // namespace mk
