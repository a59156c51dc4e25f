// The NVIDIA dialect: the CUDA spelling of every mk_* helper the device headers call, and the
// shared-memory declaration. Why each primitive is the one it is (memory model, cache paths) is in
// mkc/targets/nvidia/dialect.py. The manifest defines MKC_SM (90 for sm_90a) and MKC_WARP before
// including this; architecture differences are preprocessor conditions on MKC_SM, so one file
// serves every sm_XX and the emitted kernel keeps only what its architecture has.
#pragma once
#ifndef MKC_SM
#error "MKC_SM (the number of the sm_XX target) must be defined before the CUDA dialect"
#endif
#ifndef MKC_WARP
#error "MKC_WARP must be defined before the CUDA dialect"
#endif
static_assert(MKC_WARP == 32, "the CUDA shuffles below name the full 32-lane mask");
// only builtin vector types are used; no CUDA headers means a fast compile
#include <stdint.h>

__device__ __forceinline__ float mk_bf16_to_f32(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
// round to nearest even, NaN stays a (quiet) NaN: the same rounding torch uses for .to(bfloat16)
__device__ __forceinline__ unsigned short mk_f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float mk_lo_bf16(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float mk_hi_bf16(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ unsigned mk_f32_bits(float f) { return __float_as_uint(f); }
__device__ __forceinline__ float mk_bits_f32(unsigned u) { return __uint_as_float(u); }
__device__ __forceinline__ float mk_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ int mk_shfl_xor_i(int v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ float mk_shfl(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }
#ifdef MKC_BAR_THREADS
// a producer warp runs beside the block's MKC_BAR_THREADS consumer threads: their barrier is a
// named one that counts only them (barrier 0, __syncthreads, is the whole block's)
__device__ __forceinline__ void mk_barrier() { asm volatile("bar.sync 1, %0;" :: "n"(MKC_BAR_THREADS) : "memory"); }
#else
__device__ __forceinline__ void mk_barrier() { __syncthreads(); }
#endif
__device__ __forceinline__ void mk_barrier_all() { __syncthreads(); }
__device__ __forceinline__ void mk_syncwarp() { __syncwarp(); }
__device__ __forceinline__ void mk_trap() { __trap(); }
__device__ __forceinline__ int mk_tid() { return (int)threadIdx.x; }
// the thread index as a value the compiler may keep (inner loops)
__device__ __forceinline__ int mk_tid_kept() { return (int)threadIdx.x; }
// the thread index as a value the compiler cannot hoist: nothing derived from it leaves the code
// that reads it (the sampler's: common.cuh s_tid)
__device__ __forceinline__ int mk_tid_opaque() { int t; asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t)); return t; }
__device__ __forceinline__ int mk_worker() { return (int)blockIdx.x; }
__device__ __forceinline__ void mk_sleep(unsigned ns) { __nanosleep(ns); }
__device__ __forceinline__ unsigned long long mk_globaltimer() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
// --- synchronisation (docs/sync.md) ---
__device__ __forceinline__ unsigned mk_ld_acquire(const unsigned* p) {
  unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ void mk_red_release_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned mk_ld_relaxed(const unsigned* p) {
  unsigned v; asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
// four relaxed 32-bit reads in one 16-byte access (each word is its own single-copy-atomic read)
__device__ __forceinline__ uint4 mk_ld_relaxed4(const unsigned* p) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void mk_st_relaxed(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void mk_fence() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
// Acquire only (CodegenOptions.acquire_once): a relaxed poll that saw the release, then this, is an
// acquire pattern (PTX ISA 9.1 section 8.8, "a strong read on M followed by an acquire memory
// fence"). fence.acquire (PTX 8.6, sm_90) is ld.acquire's L1 invalidate alone (CCTL.IVALL);
// fence.acq_rel adds MEMBAR.ALL.GPU, which also waits for the weight loads issued before the wait.
__device__ __forceinline__ void mk_acquire_fence() {
#if MKC_SM >= 90 && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
  asm volatile("fence.acquire.gpu;" ::: "memory");
#else
  mk_fence();
#endif
}
__device__ __forceinline__ unsigned mk_atomic_cas(unsigned* p, unsigned cmp, unsigned val) { return atomicCAS(p, cmp, val); }
// the sampler (tokens.cuh): 32-bit lane broadcast, shared-memory histogram adds (integers, so the
// sums do not depend on the order of the adds), and the host-mapped token stream (system scope)
__device__ __forceinline__ unsigned mk_shfl_u32(unsigned v, int src) { return __shfl_sync(0xffffffffu, v, src); }
__device__ __forceinline__ int mk_ffs(unsigned v) { return __ffs((int)v); }  // lowest set bit + 1, 0 if none
// a 64-bit shared add is a compare-and-swap loop in SASS (ATOMS adds 32 bits), which crawls when many
// lanes hit one bin: two 32-bit adds instead, the low word's wrap carried into the high word (the
// sum is exact whatever the order, as every add is)
__device__ __forceinline__ void mk_smem_add_u64(unsigned long long* p, unsigned long long v) {
  unsigned* w = reinterpret_cast<unsigned*>(p);
  const unsigned lo = (unsigned)v, hi = (unsigned)(v >> 32);
  const unsigned old = lo != 0u ? atomicAdd(w, lo) : 0u;
  const unsigned carry = (unsigned)(old + lo < old) + hi;
  if (carry != 0u) atomicAdd(w + 1, carry);
}
__device__ __forceinline__ unsigned mk_smem_add_u32(unsigned* p, unsigned v) { return atomicAdd(p, v); }
// a float shared add (the sampler's bounds, whose float sums need no fixed order)
__device__ __forceinline__ void mk_smem_add_f32(float* p, float v) { atomicAdd(p, v); }
// one count in hist[bin] for every lane with `valid`, from one add per distinct bin of the warp (the
// tiles' logits share a few bins: 32 lanes adding to one word serialise). Every lane of the warp
// calls it together. (Capabilities.warp_match: dialects without it have no mk_warp_count, and
// sampling.cuh counts lane by lane there, TILE_WARP_ADDS = 0.)
__device__ __forceinline__ void mk_warp_count(unsigned* hist, unsigned bin, bool valid) {
  const unsigned m = __match_any_sync(0xffffffffu, valid ? bin : 0xffffffffu);
  if (valid && (int)(threadIdx.x & 31u) == __ffs((int)m) - 1) atomicAdd(hist + bin, (unsigned)__popc(m));
}
// a slot of *ctr for every lane with `want` (consecutive in lane order) from one add a warp, not one
// a lane (lanes taking slots of one counter serialise on it). Every lane of the warp calls it
// together; the lanes without `want` get a value they do not use.
__device__ __forceinline__ unsigned mk_warp_slot(unsigned* ctr, bool want) {
  const unsigned m = __ballot_sync(0xffffffffu, want);
  const int lane = (int)(threadIdx.x & 31u), lead = m != 0u ? __ffs((int)m) - 1 : 0;
  unsigned base = 0u;
  if (lane == lead && m != 0u) base = atomicAdd(ctr, (unsigned)__popc(m));
  base = __shfl_sync(0xffffffffu, base, lead);
  return base + (unsigned)__popc(m & ((1u << lane) - 1u));
}
// the first of ``n`` consecutive slots of *ctr for each lane (the warp calls it together): one
// add a warp, after an inclusive scan of the lanes' counts
__device__ __forceinline__ unsigned mk_warp_take(unsigned* ctr, unsigned n) {
  const int lane = (int)(threadIdx.x & 31u);
  unsigned incl = n;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const unsigned t = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += t;
  }
  unsigned base = 0u;
  if (lane == 31 && incl != 0u) base = atomicAdd(ctr, incl);
  return __shfl_sync(0xffffffffu, base, 31) + incl - n;
}
// the sum of the warp's values, in every lane
__device__ __forceinline__ unsigned mk_warp_sum_u32(unsigned v) {
#if MKC_SM >= 80
  return __reduce_add_sync(0xffffffffu, v);
#else
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
#endif
}
__device__ __forceinline__ int mk_clz(unsigned v) { return __clz((int)v); }  // leading zero bits (32 for 0)
// the largest of the warp's values, in every lane
__device__ __forceinline__ unsigned mk_warp_max_u32(unsigned v) {
#if MKC_SM >= 80
  return __reduce_max_sync(0xffffffffu, v);
#else
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
#endif
}
// the smallest of the warp's values, in every lane
__device__ __forceinline__ unsigned mk_warp_min_u32(unsigned v) {
#if MKC_SM >= 80
  return __reduce_min_sync(0xffffffffu, v);
#else
  for (int off = 16; off > 0; off >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
#endif
}
__device__ __forceinline__ void mk_smem_max_u64(unsigned long long* p, unsigned long long v) { atomicMax(p, v); }
// the same, returning the word before the max
__device__ __forceinline__ unsigned long long mk_smem_fetch_max_u64(unsigned long long* p, unsigned long long v) { return atomicMax(p, v); }
__device__ __forceinline__ void mk_fence_system() { __threadfence_system(); }
__device__ __forceinline__ void mk_st_system(int* p, int v) {
  asm volatile("st.relaxed.sys.global.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned mk_umulhi(unsigned a, unsigned b) { return __umulhi(a, b); }
__device__ __forceinline__ unsigned long long mk_umul64hi(unsigned long long a, unsigned long long b) { return __umul64hi(a, b); }
// code off the hot path kept out of line, so its registers do not add to the GEMV loops' (the
// filtered sampler inlined spills the batch-32 tensor-core build)
#ifndef MK_OUTLINE  // CodegenOptions.sampler_inline defines it inline
#define MK_OUTLINE __noinline__
#endif
// the task dispatch (dispatch.cuh run_task) inlined into the step loop by force: nvcc's own choice
// inlined it in every kernel until a small change elsewhere tipped the batch-32 nan kernel with the
// sampler over its threshold, and out of line it spilled ~2.9 KB (twenty-fifth session)
#define MK_TASK_INLINE __forceinline__
// the filtered sampler's last filter draws while it collects (no final pass over the row)
#define MKC_SAMPLE_FUSED_DRAW 1
// the filtered sampler reads the LM-head tiles' candidates for a top-k (lm_candidates)
#define MKC_SAMPLE_CAND 1
// --- data movement ---
// weights never change during a launch: not volatile, so the compiler may batch these loads
__device__ __forceinline__ uint4 mk_ld_weight16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
// the same load, kept in program order before a wait (volatile: not sunk past the spin)
__device__ __forceinline__ uint4 mk_ld_weight16_early(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned mk_ld_weight4(const void* p) {
  unsigned v; asm("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p)); return v;
}
__device__ __forceinline__ float mk_ld_act(const float* p) { return __ldcg(p); }
__device__ __forceinline__ float4 mk_ld_act4(const float* p) { return __ldcg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ int mk_ld_int(const int* p) { return __ldcg(p); }
__device__ __forceinline__ unsigned mk_ld_cache_word(const unsigned* p) { return __ldcg(p); }
__device__ __forceinline__ uint4 mk_ld_cache16(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ unsigned short mk_ld_cache_half(const unsigned short* p) { return __ldcg(p); }
__device__ __forceinline__ uint2 mk_ld_cache_word2(const unsigned* p) { return __ldcg(reinterpret_cast<const uint2*>(p)); }
__device__ __forceinline__ int mk_ld_table(const int* p) { return __ldg(p); }
#if MKC_SM >= 90
// one thread asks the copy engine to pull [p, p + bytes) into L2 (16-byte aligned, multiple of 16)
__device__ __forceinline__ void mk_prefetch_l2(const void* p, unsigned bytes, int tid, int nthreads) {
  if (tid == 0 && bytes >= 16u)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes & ~15u) : "memory");
}
#else
// every thread prefetches a share of the 128-byte lines of [p, p + bytes) into L2
__device__ __forceinline__ void mk_prefetch_l2(const void* p, unsigned bytes, int tid, int nthreads) {
  const char* c = reinterpret_cast<const char*>(p);
  for (unsigned off = 128u * (unsigned)tid; off < bytes; off += 128u * (unsigned)nthreads)
    asm volatile("prefetch.global.L2 [%0];" :: "l"(c + off));
}
#endif

#if MKC_SM >= 90
// ---- the weight pipeline (mkc/pipe.cuh): mbarriers and bulk asynchronous copies (PTX ISA 8.0, sm_90) ----
#define MKC_HAS_BULK_COPY 1
__device__ __forceinline__ unsigned mk_smem_addr(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ void mk_mbar_init(void* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(mk_smem_addr(bar)), "r"(count) : "memory");
}
// the initialised mbarriers visible to the async proxy (the bulk copies complete on them)
__device__ __forceinline__ void mk_mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// one arrival that also expects `bytes` of transactions (the copies of this phase)
__device__ __forceinline__ void mk_mbar_arrive_tx(void* bar, unsigned bytes) {
  asm volatile("{ .reg .b64 s; mbarrier.arrive.expect_tx.shared::cta.b64 s, [%0], %1; }"
               :: "r"(mk_smem_addr(bar)), "r"(bytes) : "memory");
}
// one arrival (release: this thread's reads of the page are done before the producer reuses it)
__device__ __forceinline__ void mk_mbar_arrive(void* bar) {
  asm volatile("{ .reg .b64 s; mbarrier.arrive.shared::cta.b64 s, [%0]; }" :: "r"(mk_smem_addr(bar)) : "memory");
}
// has the phase of parity `parity` completed? (acquire: the page's bytes are visible after true)
__device__ __forceinline__ bool mk_mbar_test(void* bar, unsigned parity) {
  unsigned ok;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok) : "r"(mk_smem_addr(bar)), "r"(parity) : "memory");
  return ok != 0u;
}
// the same without blocking (test_wait: try_wait may suspend the thread until the phase completes,
// which a trace must not count as a page that had landed)
__device__ __forceinline__ bool mk_mbar_test_now(void* bar, unsigned parity) {
  unsigned ok;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok) : "r"(mk_smem_addr(bar)), "r"(parity) : "memory");
  return ok != 0u;
}
// an L2 policy for data read once: weight streams should not push activations out of L2
__device__ __forceinline__ unsigned long long mk_policy_stream() {
  unsigned long long p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
// [src, src + bytes) -> shared dst, completing `bytes` of transactions on the mbarrier (16-byte aligned, multiple of 16)
__device__ __forceinline__ void mk_bulk_copy(void* dst, const void* src, unsigned bytes, void* bar, unsigned long long policy) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
               :: "r"(mk_smem_addr(dst)), "l"(src), "r"(bytes), "r"(mk_smem_addr(bar)), "l"(policy) : "memory");
}
// [src, src + bytes) into L2 only (16-byte aligned, a multiple of 16): no shared memory, no
// completion to wait for; a later read of the bytes finds them in L2 if they are still there.
// With the stream's policy (evict-first), as the copy that reads them later, so that a weight
// stream running ahead does not push the activations and the KV cache out of L2.
__device__ __forceinline__ void mk_bulk_prefetch_l2(const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mk_bulk_prefetch_l2(const void* src, unsigned bytes, unsigned long long policy) {
  asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" :: "l"(src), "r"(bytes), "l"(policy)
               : "memory");
}
#else
#define MKC_HAS_BULK_COPY 0
#endif

// Tensor-core GEMV helpers (sm_80+): gemv_mma.cuh is compiled only where MKC_HAS_MMA_BF16 is 1.
#if MKC_SM >= 80
#define MKC_HAS_MMA_BF16 1
// mma.sync.aligned.m16n8k16 (bf16 in, fp32 accumulate). Fragments (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"), lane = 4 * group + quad:
//   A (16 x 16, row): a0 = (row group,     k 2quad, 2quad+1)   a1 = (row group + 8, same k)
//                     a2 = (row group,     k 2quad+8, 2quad+9) a3 = (row group + 8, same k)
//   B (16 x 8, col):  b0 = (k 2quad, 2quad+1; column group)    b1 = (k 2quad+8, 2quad+9; column group)
//   C (16 x 8, f32):  c0, c1 = (row group; columns 2quad, 2quad+1)   c2, c3 = (row group + 8; same)
__device__ __forceinline__ int mk_mma_group(int lane) { return lane >> 2; }
__device__ __forceinline__ int mk_mma_quad(int lane) { return lane & 3; }
__device__ __forceinline__ void mk_mma_16816(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                             unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// C[16 x 8] += W[16 x 32] X[32 x 8] where lane (group, quad) brings 8 consecutive bf16 of weight
// rows group and group + 8 (lo, hi) and of activation column group (x), all at the same 8 k's.
// A dot product does not care about k order: the lane's k's 0-3 feed the first MMA's k slots
// (2quad, 2quad+1, 2quad+8, 2quad+9) and 4-7 the second's, the same permutation for A and B, so
// each operand is one 16-byte load straight from memory.
__device__ __forceinline__ void mk_mma_k32(float (&c)[4], uint4 lo, uint4 hi, uint4 x) {
  mk_mma_16816(c, lo.x, hi.x, lo.y, hi.y, x.x, x.y);
  mk_mma_16816(c, lo.z, hi.z, lo.w, hi.w, x.z, x.w);
}
// two floats -> two bf16 (round to nearest even) in one word, lo in the low half
__device__ __forceinline__ unsigned mk_pack_bf16x2(float lo, float hi) {
  unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
__device__ __forceinline__ uint4 mk_ld_shared16(const void* p) { return *reinterpret_cast<const uint4*>(p); }
// setmaxnreg (sm_90a and later, arch-specific): the registers per thread of the executing warpgroup,
// every warp of it executing the same one (CodegenOptions.consumer_regs: the kernel template's
// producer warpgroup gives registers back, the consumers take them); used only where render allows it
template <int N>
__device__ __forceinline__ void mk_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N)); }
template <int N>
__device__ __forceinline__ void mk_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N)); }
// cp.async (sm_80+): 16 bytes global -> shared without registers, L2 only (.cg); zeros when !full
__device__ __forceinline__ void mk_cp_async16(void* dst, const void* src, bool full) {
  unsigned d;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(d) : "l"(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d), "l"(src), "r"(full ? 16 : 0) : "memory");
}
// the same, 16 bytes, to a shared-memory address (mk_smem_addr's), so that a run of copies needs no
// address conversion each
__device__ __forceinline__ void mk_cp_async16_s(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
// an arrival on the mbarrier once every cp.async this thread issued before has landed (its
// expected count includes the arrival: .noinc)
__device__ __forceinline__ void mk_cp_async_mbar_arrive(void* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
}
__device__ __forceinline__ void mk_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// wait until at most N of this thread's commit groups are still in flight
template <int N>
__device__ __forceinline__ void mk_cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
__device__ __forceinline__ void mk_st_shared8(void* p, unsigned a, unsigned b) { *reinterpret_cast<uint2*>(p) = make_uint2(a, b); }
#else
#define MKC_HAS_MMA_BF16 0
#endif

extern __shared__ __align__(16) unsigned char mk_smem[];
