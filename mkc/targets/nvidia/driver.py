"""The NVIDIA driver: device memory from torch, the cubin loaded and launched with cuda.core.

Arrays are torch CUDA tensors, so memory comes from torch's caching allocator, a caller's bf16
CUDA weights are used in place, and launches go on torch's current stream (they order with the
caller's own work). Kernel arguments are Python ints for pointers (cuda.core passes them as
``intptr_t``) and ``numpy.int32``; no C++ extension is involved.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mkc.backend import BackendUnavailableError
from mkc.errors import MkcError


def torch_dtype(dtype: str):
    import torch

    return {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32, "i64": torch.int64,
            "u8": torch.uint8}[dtype]


class CudaKernel:
    """One loaded cubin and its kernel, with the dynamic shared-memory limit raised to ``smem_bytes``."""

    def __init__(self, device, cubin: bytes, kernel_name: str, smem_bytes: int):
        from cuda.core import ObjectCode

        self.device = device
        self.object_code = ObjectCode.from_cubin(cubin, name=kernel_name)
        self.kernel = self.object_code.get_kernel(kernel_name)
        self.smem_bytes = int(smem_bytes)
        self._set_max_dynamic_smem(self.smem_bytes)

    def _set_max_dynamic_smem(self, nbytes: int) -> None:
        from cuda.bindings import driver

        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        handle = self.kernel.handle
        if isinstance(handle, driver.CUkernel):
            (err,) = driver.cuKernelSetAttribute(attr, nbytes, handle, driver.CUdevice(self.device.device_id))
        else:
            (err,) = driver.cuFuncSetAttribute(handle, attr, nbytes)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise MkcError(f"cannot give the kernel {nbytes} bytes of dynamic shared memory: {err}")

    @property
    def num_regs(self) -> int:
        return int(self.kernel.attributes.num_regs)

    def max_blocks_per_sm(self, threads: int) -> int:
        return int(self.kernel.occupancy.max_active_blocks_per_multiprocessor(threads, self.smem_bytes))


class CudaDriver:
    name = "cuda"

    def __init__(self, device: Any = None):
        import torch

        self.torch_device = torch.device(device if device is not None else "cuda")
        if self.torch_device.index is None:
            self.torch_device = torch.device("cuda", torch.cuda.current_device())
        from cuda.core import Device

        self.device = Device(self.torch_device.index)
        self.device.set_current()

    # ---- device facts ----
    def sm_count(self) -> int:
        import torch

        return int(torch.cuda.get_device_properties(self.torch_device).multi_processor_count)

    def memory(self) -> tuple[int, int]:
        import torch

        free, total = torch.cuda.mem_get_info(self.torch_device)
        return int(free), int(total)

    # ---- memory ----
    def empty(self, shape: Sequence[int], dtype: str):
        import torch

        return torch.empty(tuple(shape), dtype=torch_dtype(dtype), device=self.torch_device)

    def adopt(self, tensor: Any):
        import torch

        if (isinstance(tensor, torch.Tensor) and tensor.device == self.torch_device
                and tensor.dtype == torch.bfloat16 and tensor.is_contiguous()):
            return tensor.detach()
        return None

    def ptr(self, array) -> int:
        return int(array.data_ptr())

    def upload(self, array, host, offset: int = 0) -> None:
        import torch

        src = host if isinstance(host, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(host))
        src = src.reshape(-1)
        array.reshape(-1)[offset: offset + src.numel()].copy_(src)

    def fill32(self, array, value: int, offset: int = 0, count: int | None = None) -> None:
        import torch

        words = array.view(torch.int32).reshape(-1)
        end = words.numel() if count is None else offset + count
        words[offset:end].fill_(int(np.array(value, dtype=np.uint32).view(np.int32)))

    def fill32_rows(self, array, value: int, rows: int, row_words: int, start: int) -> None:
        """Words [start, row_words) of each of ``rows`` rows of ``row_words`` words."""
        import torch

        words = array.view(torch.int32).reshape(rows, row_words)
        words[:, start:].fill_(int(np.array(value, dtype=np.uint32).view(np.int32)))

    def tensor(self, array, offset: int, shape: Sequence[int]):
        n = int(np.prod(shape, dtype=np.int64))
        return array.reshape(-1)[offset: offset + n].view(tuple(shape))

    # ---- modules and launches ----
    def load(self, binary: bytes, kernel_name: str, smem_bytes: int) -> CudaKernel:
        return CudaKernel(self.device, binary, kernel_name, smem_bytes)

    _BY_KIND = {"ptr": int, "i32": np.int32, "u32": np.uint32, "f32": np.float32}

    def launch(self, kernel: CudaKernel, grid: int, block: int, args: Sequence[tuple[str, int]]) -> None:
        import torch
        from cuda.core import LaunchConfig, Stream, launch

        # the stream wrapper and the launch configuration are kept: a decode step is ~10 us of host time
        handle = torch.cuda.current_stream(self.torch_device).cuda_stream
        cached = getattr(self, "_stream", None)
        if cached is None or cached[0] != handle:
            self._stream = cached = (handle, Stream.from_handle(handle))
        key = (int(grid), int(block), kernel.smem_bytes)
        configs = self.__dict__.setdefault("_configs", {})
        if key not in configs:
            configs[key] = LaunchConfig(grid=key[0], block=key[1], shmem_size=key[2])
        values = [self._BY_KIND[kind](v) for kind, v in args]
        launch(cached[1], configs[key], kernel.kernel, *values)

    def synchronize(self) -> None:
        import torch

        torch.cuda.current_stream(self.torch_device).synchronize()

    # ---- asynchronous use (Megakernel: cheap steps, the token stream) ----
    def pinned(self, shape: Sequence[int], dtype: str):
        """Page-locked host memory the kernel can write (UVA: the host address is the device's)."""
        import torch

        return torch.zeros(tuple(shape), dtype=torch_dtype(dtype), pin_memory=True)

    def mapped_ptr(self, host) -> int:
        """The device address of page-locked host memory (under UVA the host address itself)."""
        from cuda.bindings import driver

        # every 64-bit CUDA platform has unified addressing, where page-locked memory is mapped at its
        # host address; the driver's answer is used where it gives one
        try:
            err, dptr = driver.cuMemHostGetDevicePointer(int(host.data_ptr()), 0)
        except Exception:  # noqa: BLE001 - a binding without it
            return int(host.data_ptr())
        return int(dptr) if err == driver.CUresult.CUDA_SUCCESS else int(host.data_ptr())

    def upload_nowait(self, array, src, offset: int = 0) -> None:
        """Like ``upload`` without waiting for the stream: a CPU source (pageable: the copy is staged
        before this returns) or a CUDA tensor (device to device, capturable in a CUDA graph)."""
        import torch

        src = src if isinstance(src, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(src))
        src = src.reshape(-1)
        array.reshape(-1)[offset: offset + src.numel()].copy_(src, non_blocking=True)

    def copy_async(self, dst, src) -> None:
        """dst <- src on the current stream, without waiting (dst: pinned host memory)."""
        dst.copy_(src, non_blocking=True)

    def record_event(self):
        """An event on the current stream: ``.query()`` is True once the work before it is done."""
        import torch

        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.torch_device))
        return ev

    def capturing(self) -> bool:
        import torch

        return bool(torch.cuda.is_current_stream_capturing())


def check_cuda_runtime(device: Any = None) -> None:
    """Fail fast, with what is missing, where an NVIDIA build cannot run."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a dependency
        raise BackendUnavailableError(f"running an NVIDIA build needs torch with CUDA: {e}")
    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            "running an NVIDIA build needs an NVIDIA GPU, and torch sees none (torch.cuda.is_available() is "
            f"False; this torch is {torch.__version__}). Compiling works without one: `mkc compile`.")
    try:
        import cuda.core  # noqa: F401
    except ImportError:
        raise BackendUnavailableError("running an NVIDIA build needs cuda.core (pip install cuda-core cuda-bindings)")
