"""The AMD dialect: every HIP spelling the shared kernel template prints (gfx90a, gfx942).

The device headers and kernel manifest (``mkc/codegen/include/mkc/``, ``templates/kernel.j2``) are
the ones the NVIDIA dialect renders; this object and its header
``mkc/codegen/include/mkc/dialect/hip.cuh`` define the same names (``mk_*`` helpers, types, kernel
prefix, LDS declaration) for HIP compiled by clang. Choices, per docs/sync.md and LLVM's AMDGPU memory model (AMDGPUUsage,
"Memory Model GFX942" / "GFX90A"):

- wave64: shuffles are ``__shfl_xor(v, m, MKC_WARP)`` with ``MKC_WARP = 64`` (``ds_bpermute`` over all 64 lanes) and the
  template's reductions run over ``WARP = 64`` lanes.
- Every inter-CU synchronisation is at agent scope. MI300X's L2 is per XCD and not coherent with
  the other seven, so a plain store may sit in this XCD's L2 and a plain load may hit a stale line:
  - atomic mode: the producer releases at agent scope (gfx942: ``buffer_wbl2 sc1``, L2 written
    back) before a relaxed ``__hip_atomic_fetch_add``; the consumer polls with
    ``__hip_atomic_load(.., __ATOMIC_ACQUIRE, AGENT)`` (gfx942: ``global_load_dword .. sc1`` then
    ``buffer_inv sc1``), so its later plain loads miss the stale lines.
  - nan mode: polls are relaxed agent-scope loads and outputs relaxed agent-scope stores (gfx942:
    ``sc1`` on both, gfx90a: ``glc`` on loads), ordered by agent-scope release and acquire fences
    (``__builtin_amdgcn_fence(__ATOMIC_RELEASE/ACQUIRE, "agent")``).
  - Every release is followed by a hard ``s_waitcnt`` (``__builtin_amdgcn_s_waitcnt(0)``): clang 19
    can drop the wait after ``buffer_wbl2`` (llvm-project PR #178316, fixed after 19), which would
    let the flag overtake the data on MI300X. The ISA tests check the wait is there.
- Backoff is ``s_sleep`` (about 64 clocks per unit; its operand must be an immediate, so the
  requested nanoseconds pick one of four fixed sleeps). Spins themselves are bounded by the template.
- bf16 is converted by bit manipulation (round to nearest even, NaN stays NaN), exactly as on
  NVIDIA, so both vendors round as torch does; no ``__bf16``/``hip_bfloat16`` type is needed.
- Weights stream through 16-byte non-temporal loads (``global_load_dwordx4 .. nt`` on gfx942);
  gfx9 has no L2 prefetch instruction, so the template's L2 prefetch is a no-op here.
- Dynamic LDS (up to 64 KiB per block) is ``extern __shared__``; unlike CUDA no attribute is
  needed to go past 48 KiB.
"""

from __future__ import annotations

from dataclasses import dataclass

# sync scope of every cross-CU atomic and fence (HIP spelling, clang's predefined macro)
SCOPE = "__HIP_MEMORY_SCOPE_AGENT"

# the device code of this dialect (under mkc/codegen/include): every mk_* helper, written against
# the MKC_WARP and MKC_SYNC_SCOPE macros the manifest defines from this object
HEADER = "mkc/dialect/hip.cuh"


@dataclass(frozen=True)
class AmdDialect:
    """What the shared template needs to print HIP for one ``gfxNNN`` architecture."""

    arch: str = "gfx942"
    name: str = "hip"
    warp_size: int = 64
    source_ext: str = "hip"
    kernel_name: str = "mkc_megakernel"
    lds_bytes: int = 64 * 1024  # per work-group on gfx90a and gfx942
    sync_scope: str = SCOPE

    @property
    def has_trace_timer(self) -> bool:
        """The per-task trace (``CodegenOptions(trace=True)``) stamps with ``mk_globaltimer``:
        ``s_memrealtime``, the constant 100 MHz counter shared by the device, scaled to ns (10 ns steps).
        The AMD runtime does not pass the trace buffer yet: rendering works, running it is NVIDIA-only."""
        return True

    @property
    def prelude(self) -> str:
        """The system include of the dialect header: HIP's vector types (uint4, float4, make_uint4)
        and device math (expf, sincosf, min/max); thread ids, barriers and atomics use clang builtins,
        so no ockl call is needed."""
        return "#include <hip/hip_runtime.h>"

    @property
    def defines(self) -> tuple[tuple[str, int | str], ...]:
        """Macros the manifest defines before the dialect header: the wavefront size every shuffle
        spans and the scope of every cross-CU atomic and fence."""
        return (("MKC_WARP", self.warp_size), ("MKC_SYNC_SCOPE", self.sync_scope))

    def kernel_decl(self, threads: int) -> str:
        return f'extern "C" __global__ void __launch_bounds__({threads}) {self.kernel_name}'

    @property
    def smem_decl(self) -> str:
        """What the dialect header declares the LDS as."""
        return "extern __shared__ __attribute__((aligned(16))) unsigned char mk_smem[];"

    @property
    def header(self) -> str:
        return HEADER

    @property
    def helpers(self) -> str:
        """The helpers, as the manifest prints them: an include of the dialect header."""
        return f'#include "{HEADER}"'

    @property
    def ptr_t(self) -> str:
        return "unsigned long long"
