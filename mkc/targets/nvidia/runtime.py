"""Load a cubin and launch the megakernel with cuda.core, on torch's current stream.

Kernel arguments are device pointers (Python ints, e.g. ``tensor.data_ptr()``) and 32-bit ints
(``numpy.int32``); no C++ extension is involved.
"""

from __future__ import annotations

import numpy as np

from mkc.errors import MkcError


class CudaModule:
    """One loaded cubin and its kernel, with the dynamic shared-memory limit raised to ``smem_bytes``."""

    def __init__(self, cubin: bytes, kernel_name: str, smem_bytes: int, device_index: int = 0):
        from cuda.core import Device, ObjectCode

        self.device = Device(device_index)
        self.device.set_current()
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

    def launch(self, grid: int, block: int, args: tuple, stream_handle: int | None = None) -> None:
        from cuda.core import LaunchConfig, Stream, launch

        stream = Stream.from_handle(stream_handle) if stream_handle is not None else self.device.default_stream
        cfg = LaunchConfig(grid=int(grid), block=int(block), shmem_size=self.smem_bytes)
        launch(stream, cfg, self.kernel, *args)


def i32(x: int) -> np.int32:
    return np.int32(x)
