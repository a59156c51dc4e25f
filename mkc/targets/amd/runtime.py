"""Host runtime of the HIP megakernel: ctypes on AMD's runtime (libamdhip64), no C++ extension.

    mk = HipMegakernel(tg, sched, weights)     # weights: HF names -> numpy / CPU torch arrays
    logits = mk(input_ids, pos)                # one decode step, one launch -> [B, V] float32
    tokens = mk.generate(prompt_ids, 16)       # prompt + greedy decode in ONE launch

**Untested on AMD hardware.** Nothing here has run on an AMD GPU: the machines this was written
on have none. What is tested without a device: the kernel-argument layout (against the argument
offsets clang records in the code object's metadata), the buffer plan and pointer table, the
upload of the schedule tables, the launch arguments and the error-slot readback, all through a
stand-in for the HIP API (``tests/test_hip_runtime.py``), and that loading ``libamdhip64`` on a
machine without a GPU fails with a clear error.

It follows ``mkc.runtime.Megakernel`` (the CUDA runtime) step for step: same tables, same
pointer-table slots, same workspace and error slot, same step/parity/sentinel rules
(docs/sync.md), with device memory from ``hipMalloc`` instead of torch tensors. The kernel is
launched through ``hipModuleLaunchKernel``'s ``extra`` argument buffer (ROCm 5's HIP documents
``kernelParams`` as unimplemented).
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from mkc.codegen import tables as T
from mkc.codegen.render import CodegenOptions, generate
from mkc.errors import KernelError, MkcError
from mkc.runtime import DEFAULT_SPIN_LIMIT, KernelFault, prepare_launch
from mkc.targets.spec import Target, get_target
from mkc.taskgraph import names
from mkc.taskgraph.ir import TASK_KINDS, TaskGraph

# the kernel's parameters, in order (the entry point in mkc/codegen/templates/kernel.j2)
KERNEL_ARGS: tuple[tuple[str, str], ...] = (
    ("tab", "ptr"), ("ptrs", "ptr"), ("fparams", "ptr"), ("ws", "ptr"),
    ("step0", "i32"), ("nsteps", "i32"), ("pos0", "i32"), ("nforced", "i32"), ("spin_limit", "i32"),
    ("trace", "ptr"), ("trace_steps", "i32"), ("trace_tasks", "i32"),  # the per-task trace: unused here (0)
)
_ARG_FMT = {"ptr": ("Q", 8), "i32": ("i", 4)}

# hip_runtime_api.h (ROCm 5.2; the CUDA-compatible values are unchanged in ROCm 6)
HIP_SUCCESS = 0
HIP_ERROR_NO_DEVICE = 100
HIP_ATTR_MULTIPROCESSOR_COUNT = 63
HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3
LIB_NAMES = ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5")


class HipError(MkcError):
    """The HIP runtime refused a call (no GPU, a bad code object, a failed launch)."""


# ---- kernel arguments ----------------------------------------------------------------------------
def arg_layout(spec: Sequence[tuple[str, str]] = KERNEL_ARGS) -> list[tuple[str, int, int]]:
    """(name, byte offset, size) of each argument: C layout, each aligned to its size."""
    out, at = [], 0
    for name, kind in spec:
        size = _ARG_FMT[kind][1]
        at = -(-at // size) * size
        out.append((name, at, size))
        at += size
    return out


def pack_args(values: Sequence[int], spec: Sequence[tuple[str, str]] = KERNEL_ARGS) -> bytes:
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
        struct.pack_into("<" + fmt, buf, off, int(v))
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
    raise HipError("cannot load AMD's HIP runtime (libamdhip64): install ROCm or Debian's libamdhip64-5, "
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
        }
        for name, (args, res) in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        n = ctypes.c_int(0)
        err = lib.hipGetDeviceCount(ctypes.byref(n))
        if err == HIP_ERROR_NO_DEVICE or (err == HIP_SUCCESS and n.value == 0):
            raise HipError("no AMD GPU is visible to the HIP runtime (hipGetDeviceCount: no device)")
        self._check(err, "hipGetDeviceCount")
        if not 0 <= device < n.value:
            raise HipError(f"AMD GPU {device} does not exist ({n.value} visible)")
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


# ---- device buffers: what to allocate and how the pointer table binds it -------------------------
_NBYTES = {"bf16": 2, "f32": 4, "i32": 4, "i64": 4}  # i64 inputs are bound as int32 (ids)


@dataclass(frozen=True)
class DeviceBuffer:
    name: str
    shape: tuple[int, ...]
    dtype: str  # bf16 | f32 | i32 (as stored on the device)
    role: str  # weight | const | cache | act | output | io
    copies: int  # 2: parity copies (nan mode), laid out back to back
    slot: int | None  # pointer-table slot

    @property
    def nbytes(self) -> int:  # one copy
        return int(np.prod(self.shape, dtype=np.int64)) * _NBYTES[self.dtype]


def plan_buffers(tg: TaskGraph, tables: T.Tables) -> list[DeviceBuffer]:
    """Every device buffer the kernel reads or writes, as ``mkc.runtime.Megakernel`` allocates them."""
    dbuf = set(tables.double_buffered)
    L, B = tg.dim("L"), tg.dim("B")
    out = []
    for b in tg.buffers:
        if b.role not in ("weight", "const", "cache", "act", "output") or b.name == "ids":
            continue
        dtype = "bf16" if b.role in ("weight", "cache") else ("f32" if b.dtype == "f32" else "i32")
        out.append(DeviceBuffer(b.name, tuple(b.shape), dtype, b.role, 2 if b.name in dbuf else 1, T.slot_of(b.name)))
    out.append(DeviceBuffer("ids", (L, B), "i32", "io", 1, T.GLOBAL_SLOTS.index("ids")))  # forced token per step
    out.append(DeviceBuffer("tokens", (L, B), "i32", "io", 1, T.GLOBAL_SLOTS.index("tokens")))  # argmax per step
    return out


def pointer_table(tg: TaskGraph, buffers: Sequence[DeviceBuffer], addrs: dict[str, int]) -> np.ndarray:
    """[n_slots, 2] uint64: each slot's parity-0 and parity-1 address (single copies repeat)."""
    ptrs = np.zeros((T.n_slots(tg.dim("n_layers")), 2), dtype=np.uint64)
    for b in buffers:
        if b.slot is None:
            continue
        a = addrs[b.name]
        ptrs[b.slot] = (a, a + b.nbytes) if b.copies == 2 else (a, a)
    if names.LM_HEAD not in addrs:  # tied embedding
        e = addrs[names.EMBED]
        ptrs[T.GLOBAL_SLOTS.index("lm_head")] = (e, e)
    return ptrs


def decode_fault(ws: np.ndarray, tg: TaskGraph) -> KernelFault | None:
    """The error slot (the first ``WS_COUNTERS`` workspace words) as a ``KernelFault``."""
    ws = np.asarray(ws).view(np.uint32)
    w = {k: int(ws[i]) for i, k in enumerate(T.WORKSPACE)}
    if not (w["WS_ABORT"] or w["WS_CLAIM"]):
        return None
    tid, ev, kind = w["WS_TASK"], w["WS_EVENT"], w["WS_KIND"]
    task = tg.tasks[tid] if 0 <= tid < len(tg.tasks) else None
    return KernelFault(w["WS_WORKER"], tid, TASK_KINDS[kind] if kind < len(TASK_KINDS) else "?",
                       task.layer if task else -1, ev, tg.events[ev].name if ev < len(tg.events) else "decode-loop",
                       w["WS_SEEN"], w["WS_WANT"], w["WS_STEP"])


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


# ---- the megakernel ------------------------------------------------------------------------------
class HipMegakernel:
    """One compiled HIP megakernel, its device buffers and the decode loop (see the module doc)."""

    def __init__(self, tg: TaskGraph, sched, weights: dict, *, target: Target | str | None = None,
                 options: CodegenOptions | None = None, build_dir: str | Path | None = None,
                 spin_limit: int = DEFAULT_SPIN_LIMIT, hip=None, code_object: bytes | None = None):
        self.tg, self.sched = tg, sched
        self.target = get_target(target or sched.target) if not isinstance(target, Target) else target
        if self.target.vendor != "amd":
            raise MkcError(f"HipMegakernel runs AMD targets; {self.target.name} is {self.target.vendor}")
        if options is not None and options.trace:
            raise MkcError("the per-task trace (CodegenOptions(trace=True)) is not supported by the HIP runtime yet")
        self.source, self.cfg, self.tables = generate(tg, sched, self.target, options)
        if code_object is None:
            from mkc.targets.amd.build import CODE_OBJECT, build_hip

            code_object = build_hip(self.source, self.cfg.arch, out_dir=build_dir, kind=CODE_OBJECT).binary.read_bytes()
        self.hip = hip if hip is not None else Hip()
        self.module = self.hip.load_module(code_object)
        self.function = self.hip.get_function(self.module, self.cfg.kernel_name)
        self.spin_limit = int(spin_limit)
        self.B, self.V, self.L = tg.dim("B"), tg.dim("V"), tg.dim("L")
        self.sync = sched.sync
        self._check_residency()
        self._alloc(weights)
        self.reset()

    def _check_residency(self) -> None:
        cus = self.hip.multiprocessor_count()
        per_cu = self.hip.max_blocks_per_cu(self.function, self.cfg.threads, self.cfg.smem_bytes)
        if self.cfg.num_workers > cus or per_cu < 1:
            raise MkcError(f"{self.cfg.num_workers} workers of {self.cfg.threads} threads and {self.cfg.smem_bytes} B "
                           f"LDS cannot all be resident on this GPU ({cus} CUs, {per_cu} block(s) per CU): "
                           f"the kernel would deadlock")

    def _alloc(self, weights: dict) -> None:
        tg, hip = self.tg, self.hip
        self.buffers = {b.name: b for b in plan_buffers(tg, self.tables)}
        self.addr: dict[str, int] = {}
        for b in self.buffers.values():
            if b.role == "weight":
                w = weights.get(b.name)
                if w is None:
                    raise MkcError(f"weight {b.name} {list(b.shape)} is missing")
                if tuple(w.shape) != b.shape:
                    raise MkcError(f"weight {b.name} has shape {list(w.shape)}, expected {list(b.shape)}")
            self.addr[b.name] = hip.malloc(b.nbytes * b.copies)
        src = {x.name: x for x in tg.buffers}
        for b in self.buffers.values():
            if b.role == "weight":
                hip.htod(self.addr[b.name], bf16_bits(weights[b.name]))
            elif b.role == "const":
                hip.htod(self.addr[b.name], np.asarray(src[b.name].data, dtype=np.float32))
        self.ws_words = self.tables.ws_words
        self.ws = hip.malloc(4 * self.ws_words)
        self.tab = hip.malloc(self.tables.ints.nbytes)
        hip.htod(self.tab, self.tables.ints)
        self.fparams = hip.malloc(12)
        hip.htod(self.fparams, np.array([tg.const("rms_eps"), tg.const("rope_scaling"), tg.const("attn_scale")],
                                        dtype=np.float32))
        self.ptr_table = pointer_table(tg, list(self.buffers.values()), self.addr)
        self.ptrs = hip.malloc(self.ptr_table.nbytes)
        hip.htod(self.ptrs, self.ptr_table)

    def reset(self) -> None:
        """Empty KV cache, counters at zero, step 0 (nan mode: every polled word armed)."""
        hip = self.hip
        hip.memset32(self.ws, 0, self.ws_words)
        self.step, self._written, self._faulted = 0, 0, False
        fill = T.SENTINEL if self.sync == "nan" else 0
        for b in self.buffers.values():
            if b.role in ("weight", "const"):
                continue
            armed = b.role == "cache" or b.copies == 2
            hip.memset32(self.addr[b.name], fill if armed else 0, b.nbytes * b.copies // 4)

    def _rearm_cache_from(self, pos: int) -> None:
        for b in self.buffers.values():
            if b.role == "cache":  # [B, nkv, L, hd] bf16: positions >= pos of every (row, head)
                nb, nkv, L, hd = b.shape
                row = L * hd * 2
                for r in range(nb * nkv):
                    a = self.addr[b.name] + r * row + pos * hd * 2
                    self.hip.memset32(a, T.SENTINEL, (L - pos) * hd // 2)

    def _launch(self, nsteps: int, pos0: int, nforced: int) -> None:
        prepare_launch(self, nsteps, pos0)
        args = pack_args((self.tab, self.ptrs, self.fparams, self.ws, self.step, nsteps, pos0, nforced,
                          self.spin_limit, 0, 0, 0))
        self.hip.launch(self.function, self.cfg.num_workers, self.cfg.threads, self.cfg.smem_bytes, args)
        self.hip.synchronize()
        self._check_fault()
        self.step += nsteps
        self._written = pos0 + nsteps if pos0 < self._written else max(self._written, pos0 + nsteps)

    def fault(self) -> KernelFault | None:
        ws = self.hip.dtoh(np.zeros(T.WS_COUNTERS, dtype=np.uint32), self.ws)
        return decode_fault(ws, self.tg)

    def _check_fault(self) -> None:
        f = self.fault()
        if f is not None:
            self._faulted = True
            raise KernelError(f.message(self.sync))

    def _ids(self, input_ids) -> np.ndarray:
        ids = np.asarray(input_ids.cpu() if hasattr(input_ids, "cpu") else input_ids).astype(np.int32)
        if ids.ndim == 1:
            ids = ids[:, None]
        if ids.shape[0] != self.B:
            raise MkcError(f"input_ids has batch {ids.shape[0]}, the kernel was compiled for batch {self.B}")
        return ids

    def _set_forced(self, ids: np.ndarray) -> None:  # ids [B, P] -> the first P rows of ids [L, B]
        self.hip.htod(self.addr["ids"], np.ascontiguousarray(ids.T, dtype=np.int32))

    def logits(self) -> np.ndarray:
        """The last step's logits [B, V] (float32, copied to the host)."""
        b = self.buffers["logits"]
        par = (self.step - 1) % 2 if b.copies == 2 else 0
        out = np.zeros(b.shape, dtype=np.float32)
        return self.hip.dtoh(out, self.addr["logits"] + par * b.nbytes)

    def __call__(self, input_ids, cache_position) -> np.ndarray:
        ids = self._ids(input_ids)
        if ids.shape[1] != 1:
            raise MkcError(f"one decode step takes one token per row, got {ids.shape[1]}")
        self._set_forced(ids)
        self._launch(1, int(np.asarray(cache_position).reshape(-1)[0]), 1)
        return self.logits()

    def prefill(self, prompt_ids) -> np.ndarray:
        ids = self._ids(prompt_ids)
        self.reset()
        self._set_forced(ids)
        self._launch(ids.shape[1], 0, ids.shape[1])
        return self.logits()

    def generate(self, input_ids, max_new_tokens: int) -> np.ndarray:
        """Greedy decoding after the prompt [B, P] in ONE launch; returns [B, P + N] int64."""
        ids = self._ids(input_ids)
        P, N = ids.shape[1], int(max_new_tokens)
        if N <= 0:
            return ids.astype(np.int64)
        self.reset()
        self._set_forced(ids)
        self._launch(P + N - 1, 0, P)
        toks = self.hip.dtoh(np.zeros((self.L, self.B), dtype=np.int32), self.addr["tokens"])
        return np.concatenate([ids, toks[P - 1: P - 1 + N].T], axis=1).astype(np.int64)

    def close(self) -> None:
        for a in (*self.addr.values(), self.ws, self.tab, self.fparams, self.ptrs):
            self.hip.free(a)
        self.addr = {}
