"""The NVIDIA dialect: every CUDA-specific spelling the kernel template prints.

The device headers (``mkc/codegen/include/mkc/*.cuh``) and the kernel manifest
(``mkc/codegen/templates/kernel.j2``) are shared by all vendors. They call only the ``mk_*``
helpers of this dialect's header, ``mkc/codegen/include/mkc/dialect/cuda.cuh``, and the few names
below (types, kernel prefix, the macros the header keys on); an AMD dialect defines the same names
with HIP spellings. Memory-model choices,
per docs/sync.md:

- atomic mode: ``red.release.gpu.global.add.u32`` by one thread after a block barrier; consumers
  spin on ``ld.acquire.gpu.global.u32`` with ``__nanosleep`` backoff.
- nan mode: polls with ``ld.relaxed.gpu.global.u32``, then ``fence.acq_rel.gpu``; outputs are
  stored with ``st.relaxed.gpu.global`` after a fence.
- activations are read through L2 only (``ld.global.cg``): L1 is not coherent across SMs.
- weights are streamed with ``ld.global.nc.L1::no_allocate.v4`` (16 bytes, read-only path), or
  by the weight pipeline's bulk copies on sm_90+; attention prefetches a split's later K/V rows
  into L2 (``cp.async.bulk.prefetch.L2`` on sm_90+, ``prefetch.global.L2`` per 128-byte line
  elsewhere).
- the per-task trace (``CodegenOptions(trace=True)``) reads ``%globaltimer`` (``mk_globaltimer``).
- batch >= 2 GEMVs run on tensor cores (sm_80+): ``mma.sync.aligned.m16n8k16`` bf16 -> fp32 with
  weights as A straight from 16-byte global loads and bf16-staged activations as B (the header's
  ``MKC_SM >= 80`` part).
"""

from __future__ import annotations

from dataclasses import dataclass

# the device code of this dialect (under mkc/codegen/include): every mk_* helper, per-architecture
# parts chosen by #if on MKC_SM (bulk L2 prefetch from sm_90, the bf16 MMA helpers from sm_80)
HEADER = "mkc/dialect/cuda.cuh"


@dataclass(frozen=True)
class NvidiaDialect:
    """What the shared template needs to print CUDA for one ``sm_XX`` architecture."""

    arch: str = "sm_90a"
    name: str = "cuda"
    warp_size: int = 32
    source_ext: str = "cu"
    kernel_name: str = "mkc_megakernel"

    @property
    def sm(self) -> int:
        return int("".join(ch for ch in self.arch.split("_")[1] if ch.isdigit()))

    @property
    def has_bulk_prefetch(self) -> bool:
        return self.sm >= 90

    @property
    def has_trace_timer(self) -> bool:
        """``mk_globaltimer`` (``mov.u64 %globaltimer``: ns, one clock for all SMs) stamps the per-task
        trace of ``CodegenOptions(trace=True)``. Its update granularity is the driver's (about 1 us on
        some parts, 32 ns on others), so sub-microsecond tasks may read as zero-length."""
        return True

    @property
    def has_mma_bf16(self) -> bool:
        """mma.sync m16n8k16 with bf16 operands exists from sm_80 (Ampere) on."""
        return self.sm >= 80

    @property
    def prelude(self) -> str:
        """The system include of the dialect header: only builtin vector types are used, and no CUDA
        header means a fast compile."""
        return "#include <stdint.h>"

    @property
    def defines(self) -> tuple[tuple[str, int], ...]:
        """Macros the manifest defines before the dialect header: the architecture it keys on."""
        return (("MKC_SM", self.sm), ("MKC_WARP", self.warp_size))

    def kernel_decl(self, threads: int) -> str:
        return f'extern "C" __global__ void __launch_bounds__({threads}, 1) {self.kernel_name}'

    @property
    def smem_decl(self) -> str:
        """What the dialect header declares the dynamic shared memory as."""
        return "extern __shared__ __align__(16) unsigned char mk_smem[];"

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
