"""The backend interface: what a GPU vendor gives the vendor-neutral stages.

Every stage names targets only through this module: lowering asks a backend for its
capabilities and launch limits, codegen for its dialect, the runtime for its compiler and
driver. A vendor is one package under ``mkc/targets/<vendor>/`` whose ``backend`` module
registers one :class:`Backend` (``register``); ``for_target`` finds it by ``Target.vendor``.
Nothing here, nor in the stages, spells a vendor's name.

    backend = for_target(get_target("h200"))
    backend.capabilities(target)        # Capabilities: MMA, bulk prefetch, timer, warp size
    backend.launch_limits(target)       # LaunchLimits: threads, registers, blocks per SM of a plan
    backend.dialect(target)             # what the kernel template prints for this vendor
    backend.compile(source, target)     # Binary, cached by a hash of source, flags and compiler
    backend.check_runtime()             # cheap: a device and its runtime are here, or MkcError
    backend.driver(device)              # Driver: memory, module load, launch, synchronise
"""

from __future__ import annotations

import hashlib
import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from mkc.errors import MkcError
from mkc.target import Target

# where the vendor packages live: each sub-package with a ``backend`` module registers itself on import
PLUGIN_PACKAGE = "mkc.targets"


class BackendUnavailableError(MkcError):
    """A build for this target cannot run here: no such GPU, or its runtime is not installed."""


def cache_dir() -> Path:
    """Where compiled binaries and API builds are kept: ``$MKC_CACHE_DIR`` or ``~/.cache/mkc``."""
    return Path(os.environ.get("MKC_CACHE_DIR") or Path.home() / ".cache" / "mkc")


def content_key(*parts: str) -> str:
    """A short hash naming a cached binary (source, flags, compiler version)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Capabilities:
    """What the device code of a target may use; lowering turns these into the device plan."""

    warp_size: int
    mma_bf16: bool  # a bf16 matrix instruction the GEMV kinds can use (tensor cores)
    bulk_prefetch: bool  # a copy-engine L2 prefetch
    trace_timer: bool  # a device-wide timer for the per-task trace
    async_copy: bool  # global -> shared copies without registers (cp.async)
    bulk_copy: bool = False  # bulk asynchronous global -> shared copies completing on an mbarrier
    warp_match: bool = False  # a warp-wide match of equal values (the LM-head tiles' aggregated counts)
    # registers moved between warpgroups of a block at run time (setmaxnreg: CodegenOptions.consumer_regs)
    reg_realloc: bool = False


@dataclass(frozen=True)
class LaunchLimits:
    """How the kernel is launched on a vendor's GPUs and how many blocks an SM then holds."""

    threads: int  # threads per block the kernel is written for
    regs_per_thread: int  # the launch bound it is compiled with (a declaration, not a measurement)
    max_threads: int = 1024

    def blocks_per_sm(self, target: Target, threads: int, regs: int, smem_bytes: int) -> tuple[int, str]:
        """Blocks of (threads, regs, smem) one SM holds at once, and what limits it."""
        raise NotImplementedError

    def regs_for(self, threads: int) -> int:
        """Registers per thread a kernel of ``threads`` per block (one block per SM) is compiled with."""
        return self.regs_per_thread


@dataclass(frozen=True)
class Binary:
    """A compiled kernel: ``path`` holds it; ``loadable`` says whether a driver can load it
    (an AMD ISA listing compiled without the device libraries is for review only)."""

    path: Path
    arch: str
    log: str
    cached: bool
    loadable: bool = True

    @property
    def warnings(self) -> list[str]:
        return [ln for ln in self.log.splitlines() if "warning" in ln.lower()]


class Kernel(Protocol):
    num_regs: int

    def max_blocks_per_sm(self, threads: int) -> int: ...


class Driver(Protocol):
    """Device memory, modules and launches of one GPU. Arrays are the driver's own objects (torch
    tensors where torch owns the device); the runtime only passes them back to the driver."""

    name: str

    def sm_count(self) -> int: ...
    def memory(self) -> tuple[int, int]: ...  # (free, total) bytes
    def empty(self, shape: Sequence[int], dtype: str) -> Any: ...  # dtype: bf16 f32 i32 i64 u8
    def adopt(self, tensor: Any) -> Any | None: ...  # a tensor already on this device, used in place
    def ptr(self, array: Any) -> int: ...
    def upload(self, array: Any, host: Any, offset: int = 0) -> None: ...  # offset in elements
    def fill32(self, array: Any, value: int, offset: int = 0, count: int | None = None) -> None: ...  # 32-bit words
    def tensor(self, array: Any, offset: int, shape: Sequence[int]) -> Any: ...  # a torch tensor of the elements
    def load(self, binary: bytes, kernel_name: str, smem_bytes: int) -> Kernel: ...
    # args: (kind, value) in the kernel's parameter order; kind is ptr, i32, u32 or f32
    def launch(self, kernel: Kernel, grid: int, block: int, args: Sequence[tuple[str, Any]]) -> None: ...
    def synchronize(self) -> None: ...


class Backend:
    """One vendor: its dialect, compiler, driver and launch limits (subclassed per vendor)."""

    vendor: str = ""
    source_ext: str = ""  # the emitted kernel's file extension

    def capabilities(self, target: Target) -> Capabilities:
        raise NotImplementedError

    def launch_limits(self, target: Target) -> LaunchLimits:
        raise NotImplementedError

    def dialect(self, target: Target):
        raise NotImplementedError

    def compile(self, source: str, target: Target, *, out_dir: str | Path | None = None,
                verbose: bool = False) -> Binary:
        raise NotImplementedError

    def check_runtime(self, device: Any = None) -> None:
        """Raise ``BackendUnavailableError`` (fast, before any expensive work) when no build for
        this vendor can run here."""
        raise NotImplementedError

    def driver(self, device: Any = None) -> Driver:
        raise NotImplementedError

    def torch_device(self, device: Any = None) -> str | None:
        """The torch device whose tensors this backend's driver uses in place (weights drawn or
        loaded there are not copied), or None when the driver owns its memory outside torch."""
        return None


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    _REGISTRY[backend.vendor] = backend
    return backend


def _load_plugins() -> None:
    """Import every vendor package's ``backend`` module (found, not listed: a new vendor is one folder)."""
    import pkgutil

    pkg = importlib.import_module(PLUGIN_PACKAGE)
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.ispkg:
            importlib.import_module(f"{PLUGIN_PACKAGE}.{info.name}.backend")


def for_target(target: Target) -> Backend:
    """The backend that serves ``target``'s vendor."""
    if target.vendor not in _REGISTRY:
        _load_plugins()
    if target.vendor not in _REGISTRY:
        raise MkcError(f"no backend for {target.vendor} targets ({target.name}); backends: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[target.vendor]


def backends() -> dict[str, Backend]:
    _load_plugins()
    return dict(_REGISTRY)
