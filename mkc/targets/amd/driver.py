"""The AMD driver: the dozen HIP runtime calls the megakernel needs, through ctypes on AMD's
runtime (libamdhip64), no C++ extension and no torch device.

**Untested on AMD hardware.** The machines this was written on have no AMD GPU. What is tested
without one: the kernel-argument layout against the offsets clang records in the code object,
the uploads, fills and readbacks, and the launch buffer, through a stand-in for the HIP API
(``tests/test_hip_runtime.py``), and that loading ``libamdhip64`` without a GPU fails clearly.

Arrays are ``HipArray`` (a device address, a shape, a dtype); readbacks come back as CPU torch
tensors. Kernels are launched through ``hipModuleLaunchKernel``'s ``extra`` argument buffer
(ROCm 5's HIP documents ``kernelParams`` as unimplemented).
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from mkc.backend import BackendUnavailableError
from mkc.errors import MkcError

_ARG_FMT = {"ptr": ("Q", 8), "i32": ("i", 4), "u32": ("I", 4), "f32": ("f", 4)}

# hip_runtime_api.h (ROCm 5.2; the CUDA-compatible values are unchanged in ROCm 6)
HIP_SUCCESS = 0
HIP_ERROR_NO_DEVICE = 100
HIP_ATTR_MULTIPROCESSOR_COUNT = 63
HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3
LIB_NAMES = ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5")


class HipError(MkcError):
    """The HIP runtime refused a call (a bad code object, a failed launch)."""


class HipUnavailableError(HipError, BackendUnavailableError):
    """No HIP runtime library, or no AMD GPU visible to it."""


# ---- kernel arguments ----------------------------------------------------------------------------
def arg_layout(spec: Sequence[tuple[str, str]]) -> list[tuple[str, int, int]]:
    """(name, byte offset, size) of each argument: C layout, each aligned to its size."""
    out, at = [], 0
    for name, kind in spec:
        size = _ARG_FMT[kind][1]
        at = -(-at // size) * size
        out.append((name, at, size))
        at += size
    return out


def pack_args(values: Sequence[int], spec: Sequence[tuple[str, str]]) -> bytes:
    """The argument buffer ``hipModuleLaunchKernel`` copies into the kernarg segment."""
    if len(values) != len(spec):
        raise MkcError(f"the kernel takes {len(spec)} arguments, got {len(values)}")
    layout = arg_layout(spec)
    size = layout[-1][1] + layout[-1][2]
    size = -(-size // 8) * 8
    buf = bytearray(size)
    for (name, kind), (_, off, _), v in zip(spec, layout, values):
        fmt = _ARG_FMT[kind][0]
        if kind == "i32" and not -(2**31) <= int(v) < 2**31:
            raise MkcError(f"kernel argument {name} = {v} does not fit in int32")
        struct.pack_into("<" + fmt, buf, off, float(v) if kind == "f32" else int(v))
    return bytes(buf)


# ---- the HIP API through ctypes ------------------------------------------------------------------
def _load_library(path: str | None = None) -> ctypes.CDLL:
    cands = [path or os.environ.get("MKC_LIBAMDHIP64")] if (path or os.environ.get("MKC_LIBAMDHIP64")) else []
    cands += list(LIB_NAMES) + ["/opt/rocm/lib/libamdhip64.so"]
    errors = []
    for name in cands:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(f"{name}: {e}")
    raise HipUnavailableError("cannot load AMD's HIP runtime (libamdhip64): install ROCm or Debian's libamdhip64-5, "
                   "or set $MKC_LIBAMDHIP64\n  " + "\n  ".join(errors))


class Hip:
    """The dozen HIP calls the megakernel needs; every failure raises ``HipError`` with HIP's text."""

    def __init__(self, library: str | None = None, device: int = 0):
        lib = self.lib = _load_library(library)
        vp, sz, i, u = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint
        sig = {
            "hipGetErrorString": ([i], ctypes.c_char_p),
            "hipGetDeviceCount": ([ctypes.POINTER(i)], i),
            "hipSetDevice": ([i], i),
            "hipDeviceGetAttribute": ([ctypes.POINTER(i), i, i], i),
            "hipMalloc": ([ctypes.POINTER(vp), sz], i),
            "hipFree": ([vp], i),
            "hipMemcpyHtoD": ([vp, vp, sz], i),
            "hipMemcpyDtoH": ([vp, vp, sz], i),
            "hipMemsetD32": ([vp, i, sz], i),
            "hipModuleLoadData": ([ctypes.POINTER(vp), vp], i),
            "hipModuleUnload": ([vp], i),
            "hipModuleGetFunction": ([ctypes.POINTER(vp), vp, ctypes.c_char_p], i),
            "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor": ([ctypes.POINTER(i), vp, i, sz], i),
            "hipModuleLaunchKernel": ([vp, u, u, u, u, u, u, u, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)], i),
            "hipDeviceSynchronize": ([], i),
            "hipMemGetInfo": ([ctypes.POINTER(sz), ctypes.POINTER(sz)], i),
        }
        for name, (args, res) in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        n = ctypes.c_int(0)
        err = lib.hipGetDeviceCount(ctypes.byref(n))
        if err == HIP_ERROR_NO_DEVICE or (err == HIP_SUCCESS and n.value == 0):
            raise HipUnavailableError("no AMD GPU is visible to the HIP runtime (hipGetDeviceCount: no device)")
        self._check(err, "hipGetDeviceCount")
        if not 0 <= device < n.value:
            raise HipUnavailableError(f"AMD GPU {device} does not exist ({n.value} visible)")
        self.device = device
        self._check(lib.hipSetDevice(device), "hipSetDevice")

    def _check(self, err: int, what: str) -> None:
        if err != HIP_SUCCESS:
            msg = self.lib.hipGetErrorString(err)
            raise HipError(f"{what} failed: {msg.decode() if msg else ''} (hipError {err})")

    def multiprocessor_count(self) -> int:
        v = ctypes.c_int(0)
        self._check(self.lib.hipDeviceGetAttribute(ctypes.byref(v), HIP_ATTR_MULTIPROCESSOR_COUNT, self.device),
                    "hipDeviceGetAttribute(multiprocessor count)")
        return v.value

    def mem_get_info(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self._check(self.lib.hipMemGetInfo(ctypes.byref(free), ctypes.byref(total)), "hipMemGetInfo")
        return int(free.value), int(total.value)

    def malloc(self, nbytes: int) -> int:
        p = ctypes.c_void_p()
        self._check(self.lib.hipMalloc(ctypes.byref(p), max(int(nbytes), 4)), f"hipMalloc({nbytes})")
        return int(p.value)

    def free(self, ptr: int) -> None:
        self._check(self.lib.hipFree(ctypes.c_void_p(ptr)), "hipFree")

    def htod(self, dst: int, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data)
        self._check(self.lib.hipMemcpyHtoD(ctypes.c_void_p(dst), data.ctypes.data_as(ctypes.c_void_p), data.nbytes),
                    "hipMemcpyHtoD")

    def dtoh(self, dst: np.ndarray, src: int) -> np.ndarray:
        if not dst.flags.c_contiguous:
            raise MkcError("dtoh needs a contiguous host array")
        self._check(self.lib.hipMemcpyDtoH(dst.ctypes.data_as(ctypes.c_void_p), ctypes.c_void_p(src), dst.nbytes),
                    "hipMemcpyDtoH")
        return dst

    def memset32(self, dst: int, value: int, count: int) -> None:
        value = int(np.array(value, dtype=np.uint32).view(np.int32))
        self._check(self.lib.hipMemsetD32(ctypes.c_void_p(dst), value, count), "hipMemsetD32")

    def load_module(self, image: bytes) -> int:
        mod = ctypes.c_void_p()
        self._image = ctypes.create_string_buffer(image, len(image))  # must outlive the call
        self._check(self.lib.hipModuleLoadData(ctypes.byref(mod), self._image), "hipModuleLoadData")
        return int(mod.value)

    def get_function(self, module: int, name: str) -> int:
        fn = ctypes.c_void_p()
        self._check(self.lib.hipModuleGetFunction(ctypes.byref(fn), ctypes.c_void_p(module), name.encode()),
                    f"hipModuleGetFunction({name})")
        return int(fn.value)

    def max_blocks_per_cu(self, function: int, threads: int, smem_bytes: int) -> int:
        n = ctypes.c_int(0)
        self._check(self.lib.hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(n), ctypes.c_void_p(function), threads, smem_bytes), "hipModuleOccupancy")
        return n.value

    def launch(self, function: int, grid: int, block: int, smem_bytes: int, args: bytes) -> None:
        buf = ctypes.create_string_buffer(args, len(args))
        size = ctypes.c_size_t(len(args))
        extra = (ctypes.c_void_p * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buf),
                                      HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size), HIP_LAUNCH_PARAM_END)
        self._check(self.lib.hipModuleLaunchKernel(ctypes.c_void_p(function), grid, 1, 1, block, 1, 1, smem_bytes,
                                                   None, None, extra), "hipModuleLaunchKernel")

    def synchronize(self) -> None:
        self._check(self.lib.hipDeviceSynchronize(), "hipDeviceSynchronize (the kernel)")


def bf16_bits(x) -> np.ndarray:
    """bf16 bit patterns (uint16) of a numpy array or CPU torch tensor; float32 rounds to nearest even."""
    if hasattr(x, "detach"):  # torch
        import torch

        return x.detach().cpu().to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16)
    a = np.asarray(x)
    if a.dtype == np.uint16:
        return a
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)




# ---- the driver over it --------------------------------------------------------------------------
_ITEM = {"bf16": 2, "f32": 4, "i32": 4, "i64": 8, "u8": 1}
_HOST = {"f32": np.float32, "i32": np.int32, "i64": np.int64, "u8": np.uint8}


@dataclass(frozen=True)
class HipArray:
    ptr: int
    shape: tuple[int, ...]
    dtype: str  # bf16 | f32 | i32 | i64 | u8

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * _ITEM[self.dtype]


@dataclass
class HipKernel:
    module: int
    function: int
    smem_bytes: int
    hip: Any

    @property
    def num_regs(self) -> int | None:
        """Unknown here: clang reports VGPRs in its build log; HIP's attribute query is not bound."""
        return None

    def max_blocks_per_sm(self, threads: int) -> int:
        return self.hip.max_blocks_per_cu(self.function, threads, self.smem_bytes)


class HipDriver:
    """``mkc.backend.Driver`` over :class:`Hip` (or a stand-in with the same methods, in tests)."""

    name = "hip"

    def __init__(self, device: Any = None, hip=None):
        self.hip = hip if hip is not None else Hip(device=int(device or 0))
        self._arrays: list[HipArray] = []

    def sm_count(self) -> int:
        return self.hip.multiprocessor_count()

    def memory(self) -> tuple[int, int]:
        return self.hip.mem_get_info()

    def empty(self, shape: Sequence[int], dtype: str) -> HipArray:
        shape = tuple(int(x) for x in shape)
        a = HipArray(0, shape, dtype)
        a = HipArray(self.hip.malloc(a.nbytes), shape, dtype)
        self._arrays.append(a)
        return a

    def adopt(self, tensor: Any):
        return None  # host tensors only: every weight is uploaded

    def ptr(self, array: HipArray) -> int:
        return array.ptr

    def upload(self, array: HipArray, host: Any, offset: int = 0) -> None:
        if array.dtype == "bf16":
            data = bf16_bits(host)
        else:
            h = host.detach().cpu().numpy() if hasattr(host, "detach") else np.asarray(host)
            data = h.astype(_HOST[array.dtype], copy=False)
        self.hip.htod(array.ptr + offset * _ITEM[array.dtype], np.ascontiguousarray(data).reshape(-1))

    def fill32(self, array: HipArray, value: int, offset: int = 0, count: int | None = None) -> None:
        words = array.nbytes // 4
        n = words - offset if count is None else count
        if n > 0:
            self.hip.memset32(array.ptr + 4 * offset, value, n)

    def fill32_rows(self, array: HipArray, value: int, rows: int, row_words: int, start: int) -> None:
        for r in range(rows):
            if row_words > start:
                self.hip.memset32(array.ptr + 4 * (r * row_words + start), value, row_words - start)

    def tensor(self, array: HipArray, offset: int, shape: Sequence[int]):
        import torch

        n = int(np.prod(shape, dtype=np.int64))
        host = np.zeros(n, dtype=np.uint16 if array.dtype == "bf16" else _HOST[array.dtype])
        self.hip.dtoh(host, array.ptr + offset * _ITEM[array.dtype])
        t = torch.from_numpy(host)
        return (t.view(torch.bfloat16) if array.dtype == "bf16" else t).reshape(tuple(shape))

    def load(self, binary: bytes, kernel_name: str, smem_bytes: int) -> HipKernel:
        module = self.hip.load_module(binary)
        return HipKernel(module, self.hip.get_function(module, kernel_name), int(smem_bytes), self.hip)

    def launch(self, kernel: HipKernel, grid: int, block: int, args: Sequence[tuple[str, int]]) -> None:
        spec = [(f"a{i}", kind) for i, (kind, _) in enumerate(args)]
        self.hip.launch(kernel.function, grid, block, kernel.smem_bytes, pack_args([v for _, v in args], spec))

    def synchronize(self) -> None:
        self.hip.synchronize()

    def close(self) -> None:
        for a in self._arrays:
            self.hip.free(a.ptr)
        self._arrays = []
