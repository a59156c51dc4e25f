"""Target GPUs: the table of figures every stage reads (a leaf module: it imports nothing of mkc
but its errors). What a vendor's code does with a target lives in its backend (``mkc.backend``).

Sources (vendor datasheets and programming guides; checked 2026-11):
- H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet / Hopper tuning guide: 132 SMs, 228 KB shared
  memory per SM of which 227 KB per block, 80 GB at 3.35 TB/s HBM3, 50 MB L2, 989 TFLOP/s dense bf16.
- H200 SXM: NVIDIA H200 datasheet: same GH100 chip (132 SMs, 228 KB smem/SM), 141 GB HBM3e at
  4.8 TB/s (we measured 4.20 TB/s read), L2 60 MiB as reported by the device, 989 TFLOP/s bf16.
- A100 SXM4 80GB: NVIDIA A100 datasheet / Ampere tuning guide: 108 SMs, 164 KB smem/SM (163 KB per
  block), 2.0 TB/s HBM2e, 40 MB L2, 312 TFLOP/s bf16.
- B200: NVIDIA Blackwell datasheet (DGX B200): 148 SMs, 228 KB smem/SM, 8 TB/s HBM3e, 126 MB L2,
  ~2.25 PFLOP/s dense bf16, 180 GB HBM3e per GPU (1,440 GB in 8).
- MI300X: AMD Instinct MI300X datasheet / CDNA3 ISA guide: 304 CUs in 8 XCDs, 64 KB LDS per CU,
  5.3 TB/s, 192 GB HBM3, 256 MB Infinity Cache, 4 MB L2 per XCD, 1307 TFLOP/s dense bf16, wave64.
- MI250X: AMD Instinct MI250X datasheet (one GCD of two): 110 CUs, 64 KB LDS, 1.6 TB/s, 64 GB HBM2e, 8 MB L2,
  191.5 TFLOP/s bf16 per GCD (383 for both), wave64.
"""

from __future__ import annotations

from dataclasses import dataclass

from mkc.errors import UnknownNameError


@dataclass(frozen=True)
class Target:
    name: str
    vendor: str  # nvidia | amd
    arch: str  # sm_90a, gfx942, ...
    sms: int  # SMs or CUs: one persistent worker each
    smem_per_sm: int  # bytes of shared memory / LDS per SM
    smem_per_block: int  # the most one block may use
    hbm_bw: float  # bytes per second, datasheet
    l2_bytes: int
    warp_size: int
    bf16_flops: float  # dense tensor-core/matrix rate, flop/s
    fp32_flops: float  # plain FMA rate, flop/s
    default_sync: str  # atomic | nan
    memory_bytes: int = 0  # device memory (HBM), bytes


KiB = 1024
GiB = 2**30
GB = 10**9  # datasheets give HBM sizes in decimal GB (H200: 141 GB), A100/H100 in GiB (80 GB = 81920 MiB)
TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("h100", "nvidia", "sm_90a", 132, 228 * KiB, 227 * KiB, 3.35e12, 50 * 2**20, 32, 989e12, 67e12, "atomic", 80 * GiB),
        Target("h200", "nvidia", "sm_90a", 132, 228 * KiB, 227 * KiB, 4.8e12, 60 * 2**20, 32, 989e12, 67e12, "atomic", 141 * GB),
        Target("a100", "nvidia", "sm_80", 108, 164 * KiB, 163 * KiB, 2.0e12, 40 * 2**20, 32, 312e12, 19.5e12, "atomic", 80 * GiB),
        Target("b200", "nvidia", "sm_100a", 148, 228 * KiB, 227 * KiB, 8.0e12, 126 * 2**20, 32, 2250e12, 80e12, "atomic", 180 * GB),
        Target("mi300x", "amd", "gfx942", 304, 64 * KiB, 64 * KiB, 5.3e12, 32 * 2**20, 64, 1307e12, 163e12, "nan", 192 * GB),
        Target("mi250x", "amd", "gfx90a", 110, 64 * KiB, 64 * KiB, 1.6e12, 8 * 2**20, 64, 191.5e12, 47.9e12, "nan", 64 * GB),
    )
}
DEFAULT_TARGET = "h200"


def get_target(name: str) -> Target:
    key = name.lower()
    if key not in TARGETS:
        raise UnknownNameError(f"unknown target {name!r}; known targets: {', '.join(TARGETS)}")
    return TARGETS[key]
