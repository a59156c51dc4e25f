"""The NVIDIA backend: CUDA source through the NVIDIA dialect, nvcc -> cubin, cuda.core + torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkc.backend import Backend, Binary, Capabilities, LaunchLimits, register
from mkc.target import Target


def sm_version(arch: str) -> int:
    """``sm_90a`` -> 90."""
    return int("".join(ch for ch in arch.split("_")[1] if ch.isdigit()))


class NvidiaLimits(LaunchLimits):
    def blocks_per_sm(self, target: Target, threads: int, regs: int, smem_bytes: int) -> tuple[int, str]:
        """The CUDA occupancy calculator for sm_80/90/100: 65536 registers per SM allocated per warp in
        units of 256, at most 255 per thread; 2048 threads and 32 blocks per SM; each block's shared
        memory plus 1 KiB the runtime reserves, in units of 128 bytes, out of ``smem_per_sm``."""
        if threads > self.max_threads or threads < 1:
            return 0, f"{threads} threads per block (1..{self.max_threads} allowed)"
        if regs > 255:
            return 0, f"{regs} registers per thread (at most 255)"
        warps = -(-threads // 32)
        regs_warp = -(-max(1, regs) * 32 // 256) * 256
        limits = {"registers": (65536 // regs_warp) // warps, "threads": 2048 // threads, "blocks": 32}
        smem_alloc = -(-(smem_bytes + 1024) // 128) * 128
        limits["shared memory"] = target.smem_per_sm // smem_alloc
        limiter = min(limits, key=lambda k: limits[k])
        return limits[limiter], limiter

    def regs_for(self, threads: int) -> int:
        """What ``__launch_bounds__(threads, 1)`` leaves: a block's warps are spread over the SM's 4
        sub-partitions of 16384 registers each, so the fullest one holds ceil(warps / 4) of them; in
        units of 8, at most 255 (256 threads: 255; 288, i.e. 3 warps on a sub-partition: 168, as ptxas)."""
        per_part = -(-(-(-threads // 32)) // 4)
        return min(self.regs_per_thread, 16384 // (per_part * 32) // 8 * 8)


class NvidiaBackend(Backend):
    vendor = "nvidia"
    source_ext = "cu"

    def capabilities(self, target: Target) -> Capabilities:
        sm = sm_version(target.arch)
        # setmaxnreg is in the arch-specific feature sets only (sm_90a, sm_100a, ...)
        return Capabilities(warp_size=32, mma_bf16=sm >= 80, bulk_prefetch=sm >= 90, trace_timer=True,
                            async_copy=sm >= 80, bulk_copy=sm >= 90, warp_match=sm >= 70,
                            reg_realloc=sm >= 90 and target.arch.endswith("a"))

    def launch_limits(self, target: Target) -> LaunchLimits:
        return NvidiaLimits(threads=256, regs_per_thread=255)

    def dialect(self, target: Target):
        from mkc.targets.nvidia.dialect import NvidiaDialect

        return NvidiaDialect(arch=target.arch)

    def compile(self, source: str, target: Target, *, out_dir: str | Path | None = None,
                verbose: bool = False) -> Binary:
        from mkc.targets.nvidia.compiler import build_cubin

        res = build_cubin(source, target.arch, out_dir=out_dir, verbose=verbose)
        return Binary(res.cubin, target.arch, res.log, res.cached, loadable=True)

    def check_runtime(self, device: Any = None) -> None:
        from mkc.targets.nvidia.driver import check_cuda_runtime

        check_cuda_runtime(device)

    def driver(self, device: Any = None):
        from mkc.targets.nvidia.driver import CudaDriver

        self.check_runtime(device)
        return CudaDriver(device)

    def torch_device(self, device: Any = None) -> str | None:
        return str(device) if device is not None else "cuda"


BACKEND = register(NvidiaBackend())
