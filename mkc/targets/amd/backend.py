"""The AMD backend: HIP source through the AMD dialect, clang -> code object, ctypes HIP driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkc.backend import Backend, BackendUnavailableError, Binary, Capabilities, LaunchLimits, register
from mkc.target import Target


class AmdLimits(LaunchLimits):
    def blocks_per_sm(self, target: Target, threads: int, regs: int, smem_bytes: int) -> tuple[int, str]:
        """CDNA2/3: a block's waves (wave64) spread over 4 SIMDs; each SIMD has 512 VGPRs per lane
        (allocated in units of 8) and holds at most 8 waves; LDS ``smem_per_sm`` per CU."""
        if threads > self.max_threads or threads < 1:
            return 0, f"{threads} threads per block (1..{self.max_threads} allowed)"
        waves_simd = -(-(-(-threads // 64)) // 4)
        vgprs = -(-max(1, regs) // 8) * 8
        limits = {"VGPRs": (512 // vgprs) // waves_simd if vgprs <= 512 else 0, "waves": 8 // waves_simd}
        limits["shared memory"] = target.smem_per_sm // smem_bytes if smem_bytes else 1 << 30
        limiter = min(limits, key=lambda k: limits[k])
        return limits[limiter], limiter


class AmdBackend(Backend):
    vendor = "amd"
    source_ext = "hip"

    def capabilities(self, target: Target) -> Capabilities:
        # gfx9 has no L2 prefetch instruction and mkc emits no MFMA path yet: GEMVs stay on FMAs
        return Capabilities(warp_size=64, mma_bf16=False, bulk_prefetch=False, trace_timer=True,
                            async_copy=False)

    def launch_limits(self, target: Target) -> LaunchLimits:
        return AmdLimits(threads=256, regs_per_thread=128)

    def dialect(self, target: Target):
        from mkc.targets.amd.dialect import AmdDialect

        return AmdDialect(arch=target.arch, lds_bytes=target.smem_per_block)

    def compile(self, source: str, target: Target, *, out_dir: str | Path | None = None,
                verbose: bool = False) -> Binary:
        from mkc.targets.amd.compiler import CODE_OBJECT, build_hip

        res = build_hip(source, target.arch, out_dir=out_dir)
        return Binary(res.binary, target.arch, res.log, res.cached, loadable=res.kind == CODE_OBJECT)

    def check_runtime(self, device: Any = None) -> None:
        from mkc.targets.amd.driver import Hip

        try:
            Hip(device=int(device or 0))
        except BackendUnavailableError as e:
            raise BackendUnavailableError(f"running an AMD build needs an AMD GPU and ROCm's HIP runtime: {e}") from None

    def driver(self, device: Any = None):
        from mkc.targets.amd.driver import HipDriver

        try:
            return HipDriver(device)
        except BackendUnavailableError as e:
            raise BackendUnavailableError(f"running an AMD build needs an AMD GPU and ROCm's HIP runtime: {e}") from None


BACKEND = register(AmdBackend())
