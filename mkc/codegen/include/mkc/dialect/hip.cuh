// The AMD dialect (gfx90a, gfx942): the HIP spelling of every mk_* helper the device headers call,
// compiled by clang, and the LDS declaration. Why each primitive is the one it is (agent scope,
// the waits after L2 writebacks) is in mkc/targets/amd/dialect.py. The manifest defines MKC_WARP
// (the wavefront: 64) and MKC_SYNC_SCOPE (clang's scope of every cross-CU atomic) first.
#pragma once
#ifndef MKC_WARP
#error "MKC_WARP must be defined before the HIP dialect"
#endif
#ifndef MKC_SYNC_SCOPE
#error "MKC_SYNC_SCOPE must be defined before the HIP dialect"
#endif
// HIP's vector types (uint4, float4, make_uint4) and device math (expf, sincosf, min/max);
// thread ids, barriers and atomics below use clang builtins, so no ockl call is needed
#include <hip/hip_runtime.h>

typedef unsigned mk_u32x4 __attribute__((ext_vector_type(4)));
__device__ __forceinline__ unsigned mk_f32_bits(float f) { return __builtin_bit_cast(unsigned, f); }
__device__ __forceinline__ float mk_bits_f32(unsigned u) { return __builtin_bit_cast(float, u); }
__device__ __forceinline__ float mk_bf16_to_f32(unsigned short h) { return mk_bits_f32(((unsigned)h) << 16); }
// round to nearest even, NaN stays a (quiet) NaN: the same rounding torch uses for .to(bfloat16)
__device__ __forceinline__ unsigned short mk_f32_to_bf16(float f) {
  unsigned u = mk_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float mk_lo_bf16(unsigned w) { return mk_bits_f32(w << 16); }
__device__ __forceinline__ float mk_hi_bf16(unsigned w) { return mk_bits_f32(w & 0xffff0000u); }
// wave64: the xor spans both 32-lane halves (ds_bpermute)
__device__ __forceinline__ float mk_shfl_xor(float v, int m) { return __shfl_xor(v, m, MKC_WARP); }
__device__ __forceinline__ int mk_shfl_xor_i(int v, int m) { return __shfl_xor(v, m, MKC_WARP); }
__device__ __forceinline__ float mk_shfl(float v, int src) { return __shfl(v, src, MKC_WARP); }
// a block barrier that also orders LDS and global memory within the work-group
__device__ __forceinline__ void mk_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
// the whole block (a HIP kernel has no producer warp: the same barrier)
__device__ __forceinline__ void mk_barrier_all() { mk_barrier(); }
__device__ __forceinline__ void mk_syncwarp() { __builtin_amdgcn_wave_barrier(); }
__device__ __forceinline__ void mk_trap() { __builtin_trap(); }
#define MKC_HAS_BULK_COPY 0
__device__ __forceinline__ int mk_tid() { return (int)__builtin_amdgcn_workitem_id_x(); }
__device__ __forceinline__ int mk_tid_kept() { return mk_tid(); }
__device__ __forceinline__ int mk_tid_opaque() { return mk_tid(); }
__device__ __forceinline__ int mk_worker() { return (int)__builtin_amdgcn_workgroup_id_x(); }
// s_sleep N waits about 64*N clocks (~32*N ns at 2.1 GHz); N must be an immediate
__device__ __forceinline__ void mk_sleep(unsigned ns) {
  if (ns <= 32u) __builtin_amdgcn_s_sleep(1);
  else if (ns <= 64u) __builtin_amdgcn_s_sleep(2);
  else if (ns <= 128u) __builtin_amdgcn_s_sleep(4);
  else __builtin_amdgcn_s_sleep(8);
}
// nanoseconds from the constant 100 MHz real-time counter
__device__ __forceinline__ unsigned long long mk_globaltimer() { return 10ull * __builtin_amdgcn_s_memrealtime(); }
// Every pointer the mk_ld_*/mk_st_* helpers take is global memory (the pointer table holds only
// device buffers). Saying so turns flat_* into global_* instructions: no LDS check per lane, no
// lgkmcnt wait, SGPR-base addressing. Vectors are loaded as clang vectors (HIP's uint4/float4 are
// structs that cannot be copied out of address space 1).
#define MK_GLOBAL __attribute__((address_space(1)))
template <class T> __device__ __forceinline__ const MK_GLOBAL T* mk_g(const T* p) { return (const MK_GLOBAL T*)p; }
template <class T> __device__ __forceinline__ MK_GLOBAL T* mk_g(T* p) { return (MK_GLOBAL T*)p; }
typedef unsigned mk_u32x2 __attribute__((ext_vector_type(2)));
typedef float mk_f32x4 __attribute__((ext_vector_type(4)));
// --- synchronisation (docs/sync.md), all at agent scope ---
__device__ __forceinline__ unsigned mk_ld_acquire(const unsigned* p) {
  return __hip_atomic_load(mk_g(p), __ATOMIC_ACQUIRE, MKC_SYNC_SCOPE);
}
// Release = agent fence, a hard wait, then the relaxed operation. clang 19 drops the wait after
// gfx942's L2 writeback (`buffer_wbl2 sc1`) when no other memory operation is pending, so a
// plain release atomic can overtake the writeback (fixed upstream: llvm-project PR #178316).
__device__ __forceinline__ void mk_release_fence() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
  __builtin_amdgcn_s_waitcnt(0);  // vmcnt(0) expcnt(0) lgkmcnt(0): the writeback has completed
}
__device__ __forceinline__ void mk_red_release_add(unsigned* p, unsigned v) {
  mk_release_fence();
  (void)__hip_atomic_fetch_add(mk_g(p), v, __ATOMIC_RELAXED, MKC_SYNC_SCOPE);
}
__device__ __forceinline__ unsigned mk_ld_relaxed(const unsigned* p) {
  return __hip_atomic_load(mk_g(p), __ATOMIC_RELAXED, MKC_SYNC_SCOPE);
}
// four relaxed 32-bit reads (HIP has no 16-byte atomic load; each word is read on its own)
__device__ __forceinline__ uint4 mk_ld_relaxed4(const unsigned* p) {
  return make_uint4(mk_ld_relaxed(p), mk_ld_relaxed(p + 1), mk_ld_relaxed(p + 2), mk_ld_relaxed(p + 3));
}
__device__ __forceinline__ void mk_st_relaxed(unsigned* p, unsigned v) {
  __hip_atomic_store(mk_g(p), v, __ATOMIC_RELAXED, MKC_SYNC_SCOPE);
}
// acquire what relaxed polls observed / release what this thread wrote before relaxed stores
__device__ __forceinline__ void mk_fence() {
  mk_release_fence();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
}
// acquire only, after relaxed polls (CodegenOptions.acquire_once): the L1/L2 invalidate without
// mk_fence's writeback, which nothing the poll observed needs
__device__ __forceinline__ void mk_acquire_fence() { __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent"); }
__device__ __forceinline__ unsigned mk_atomic_cas(unsigned* p, unsigned cmp, unsigned val) {
  __hip_atomic_compare_exchange_strong(mk_g(p), &cmp, val, __ATOMIC_RELAXED, __ATOMIC_RELAXED, MKC_SYNC_SCOPE);
  return cmp;  // the old value
}
// the sampler (tokens.cuh): 32-bit lane broadcast, LDS histogram adds (integers: order-free sums),
// and the token stream at system scope (the AMD driver passes none today: it reads the log)
__device__ __forceinline__ unsigned mk_shfl_u32(unsigned v, int src) { return (unsigned)__shfl((int)v, src, MKC_WARP); }
__device__ __forceinline__ int mk_ffs(unsigned v) { return __ffs(v); }  // lowest set bit + 1, 0 if none
__device__ __forceinline__ void mk_smem_add_u64(unsigned long long* p, unsigned long long v) {
  (void)__hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
}
__device__ __forceinline__ unsigned mk_smem_add_u32(unsigned* p, unsigned v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
}
__device__ __forceinline__ void mk_smem_add_f32(float* p, float v) {
  (void)__hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
}
// mk_warp_count's contract (a count in hist[bin] per lane with `valid`; the wavefront calls it
// together), declared for the code that names it; without a warp match (TILE_WARP_ADDS = 0)
// sampling.cuh counts lane by lane instead
__device__ __forceinline__ void mk_warp_count(unsigned* hist, unsigned bin, bool valid) {
  if (valid) (void)mk_smem_add_u32(hist + bin, 1u);
}
// mk_warp_slot's contract (a slot of *ctr per lane with `want`; the wavefront calls it together):
// one add a lane here
__device__ __forceinline__ unsigned mk_warp_slot(unsigned* ctr, bool want) {
  return want ? mk_smem_add_u32(ctr, 1u) : 0u;
}
// mk_warp_take's contract (``n`` consecutive slots of *ctr per lane; the wavefront calls it
// together): one add a lane here
__device__ __forceinline__ unsigned mk_warp_take(unsigned* ctr, unsigned n) {
  return n != 0u ? mk_smem_add_u32(ctr, n) : 0u;
}
__device__ __forceinline__ unsigned mk_warp_sum_u32(unsigned v) {
  for (int off = MKC_WARP / 2; off > 0; off >>= 1) v += (unsigned)__shfl_xor((int)v, off, MKC_WARP);
  return v;
}
__device__ __forceinline__ int mk_clz(unsigned v) { return __clz((int)v); }  // leading zero bits (32 for 0)
__device__ __forceinline__ unsigned mk_warp_max_u32(unsigned v) {
  for (int off = MKC_WARP / 2; off > 0; off >>= 1) {
    const unsigned o = (unsigned)__shfl_xor((int)v, off, MKC_WARP);
    v = o > v ? o : v;
  }
  return v;
}
__device__ __forceinline__ unsigned mk_warp_min_u32(unsigned v) {
  for (int off = MKC_WARP / 2; off > 0; off >>= 1) {
    const unsigned o = (unsigned)__shfl_xor((int)v, off, MKC_WARP);
    v = o < v ? o : v;
  }
  return v;
}
__device__ __forceinline__ void mk_smem_max_u64(unsigned long long* p, unsigned long long v) {
  (void)__hip_atomic_fetch_max(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
}
__device__ __forceinline__ unsigned long long mk_smem_fetch_max_u64(unsigned long long* p, unsigned long long v) {
  return __hip_atomic_fetch_max(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
}
// system scope (gfx942: buffer_wbl2 sc0 sc1), with the hard wait mk_release_fence has, for the same reason
__device__ __forceinline__ void mk_fence_system() {
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "");
  __builtin_amdgcn_s_waitcnt(0);
}
__device__ __forceinline__ void mk_st_system(int* p, int v) {
  __hip_atomic_store(mk_g(p), v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ unsigned mk_umulhi(unsigned a, unsigned b) { return __umulhi(a, b); }
__device__ __forceinline__ unsigned long long mk_umul64hi(unsigned long long a, unsigned long long b) { return __umul64hi(a, b); }
// the AMD build makes no calls (tests/test_hip.py): what NVIDIA keeps out of line is inlined here
#ifndef MK_OUTLINE
#define MK_OUTLINE __forceinline__
#endif
// the task dispatch left to the compiler, which inlines it; forced inline, the MI250X kernel of
// qwen3-0.6b spilled 15 VGPRs (twenty-fifth session)
#define MK_TASK_INLINE
// the filtered sampler's last filter draws in a pass of its own: drawing while it collects adds the
// random numbers' registers to a kernel already at 256 VGPRs, which then needs scratch
#define MKC_SAMPLE_FUSED_DRAW 0
// the filtered sampler reads the whole row for a top-k too, not the LM-head tiles' candidates
// (lm_candidates), for the same reason
#define MKC_SAMPLE_CAND 0
// --- data movement ---
// weights never change during a launch and are read once per step: 16-byte streaming loads
__device__ __forceinline__ uint4 mk_ld_weight16(const void* p) {
  const mk_u32x4 v = __builtin_nontemporal_load(mk_g(reinterpret_cast<const mk_u32x4*>(p)));
  return make_uint4(v.x, v.y, v.z, v.w);
}
// the same load issued before a task waits on its inputs. It stays ahead of the spin: LLVM does
// not move a load past the ordered atomics of the poll. (vmcnt counts in order, so the first
// poll's wait also waits for these loads: they overlap that poll's latency.)
__device__ __forceinline__ uint4 mk_ld_weight16_early(const void* p) { return mk_ld_weight16(p); }
__device__ __forceinline__ unsigned mk_ld_weight4(const void* p) { return *mk_g(reinterpret_cast<const unsigned*>(p)); }
// activations and caches: plain loads are coherent here because every read follows an
// agent-scope acquire (gfx942 buffer_inv sc1, gfx90a buffer_wbinvl1_vol) of the event that
// published them
__device__ __forceinline__ float mk_ld_act(const float* p) { return *mk_g(p); }
__device__ __forceinline__ float4 mk_ld_act4(const float* p) {
  const mk_f32x4 v = *mk_g(reinterpret_cast<const mk_f32x4*>(p));
  return make_float4(v.x, v.y, v.z, v.w);
}
__device__ __forceinline__ int mk_ld_int(const int* p) { return *mk_g(p); }
__device__ __forceinline__ unsigned mk_ld_cache_word(const unsigned* p) { return *mk_g(p); }
__device__ __forceinline__ uint4 mk_ld_cache16(const void* p) {
  const mk_u32x4 v = *mk_g(reinterpret_cast<const mk_u32x4*>(p));
  return make_uint4(v.x, v.y, v.z, v.w);
}
__device__ __forceinline__ unsigned short mk_ld_cache_half(const unsigned short* p) { return *mk_g(p); }
__device__ __forceinline__ uint2 mk_ld_cache_word2(const unsigned* p) {
  const mk_u32x2 v = *mk_g(reinterpret_cast<const mk_u32x2*>(p));
  return make_uint2(v.x, v.y);
}
__device__ __forceinline__ int mk_ld_table(const int* p) { return *mk_g(p); }
// gfx9 has no L2 prefetch instruction: attention's prefetch of a split's later positions does nothing
__device__ __forceinline__ void mk_prefetch_l2(const void* p, unsigned bytes, int tid, int nthreads) {}

// no bf16 MMA in mkc for gfx9: the GEMV kinds run on FMAs (gemv_fma.cuh)
#define MKC_HAS_MMA_BF16 0

extern __shared__ __attribute__((aligned(16))) unsigned char mk_smem[];
