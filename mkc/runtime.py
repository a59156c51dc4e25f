"""The Megakernel: one compiled persistent kernel, its device buffers and the decode loop, on any
backend's driver (``mkc.backend``). Nothing here is vendor-specific.

    mk = Megakernel(tg, sched, weights)              # weights: HF state-dict names -> tensors
    logits = mk(input_ids, cache_position)           # one decode step, one launch -> [B, V] fp32 (a view)
    logits = mk.prefill(prompt_ids)                  # [B, P]: the prompt, one launch
    tokens = mk.generate(prompt_ids, max_new_tokens) # prompt + greedy decode, ONE launch
    new = mk.decode(rows, max_new_tokens, eos_token_id=..., sampling=Sampling(...), on_step=...)
                                                     # per-row prompts, stops, sampling, streaming: ONE launch

Design notes:

- The schedule is data (``mkc.codegen.tables``); weights, KV caches [B, nkv, L, hd] bf16 per
  layer, fp32 activations, counters and the error slot are driver arrays bound through a pointer
  table. Weights the driver can use in place (bf16 tensors on its device) are not copied.
- Results are torch tensors: views of device memory where torch owns the device (NVIDIA), host
  copies otherwise (AMD, through ctypes HIP).
- ``step`` counts decode steps since ``reset()``; counters are never reset between steps
  (atomic mode waits for ``count >= threshold * (step + 1)``), and nan mode selects the parity
  copy of every double-buffered activation by ``step % 2``.
- **Prefill goes token by token through the kernel**, in one launch: steps whose token is
  forced (the prompt) and steps whose token is the previous step's argmax run the same code, so
  ``generate`` is prefill plus greedy decode in a single launch and its numerics are exactly
  those of step-by-step decoding. Prefill of P tokens costs P decode steps (decode-bound design).
- In the one-launch loop a step's embed waits for the previous step's argmax through a
  dedicated counter (also in nan mode), which orders every task of a step after the whole
  previous step.
- ``decode`` passes the kernel a control block (``tables.ctl_layout``: per-row prompt lengths,
  budgets, stop ids; argmax writes the stop flags) and the launch ends early once every row has
  stopped (``mkc.decode`` for the host's half); tokens stream through page-locked host memory.
- A step (``__call__``) does not synchronise where the driver has page-locked memory (NVIDIA): the
  error slot is copied behind the launch and checked by the next call or ``synchronize()``; inside
  a CUDA-graph capture the kernel takes its step and position from the device clock (argmax
  advances it), so a replay is the next step.
- A bounded spin that times out makes the kernel exit; ``KernelError`` names the worker, task,
  event, value seen and step. The state is then undefined: the next call resets it (the KV cache
  is lost).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mkc.backend import BackendUnavailableError, Driver, for_target
from mkc.codegen import tables as T
from mkc.codegen.render import TRACE_STAMPS, CodegenOptions, KernelConfig, generate
from mkc.errors import KernelError, MkcError
from mkc.sampling import GREEDY, Sampling
from mkc.schedule.ir import Schedule
from mkc.target import Target, get_target
from mkc.taskgraph import names
from mkc.taskgraph.ir import TASK_KINDS, TaskGraph

DEFAULT_SPIN_LIMIT = 1 << 24  # polls (with up to 256 ns sleep each) before a wait gives up: ~5-10 s
TRACE_STEPS = 8  # CodegenOptions(trace=True): the first steps of each launch that are stamped


@dataclass(frozen=True)
class KernelFault:
    worker: int
    task: int
    kind: str
    layer: int
    event: int
    event_name: str
    seen: int
    want: int
    step: int

    def message(self, sync: str) -> str:
        what = (f"counter {self.seen} < {self.want}" if sync == "atomic" or self.event_name == "decode-loop"
                else f"word {self.want} of its regions still holds the sentinel")
        layer = f" layer {self.layer}" if self.layer >= 0 else ""
        return (f"megakernel wait timed out: worker {self.worker}, task {self.task} ({self.kind}{layer}) "
                f"waiting on event {self.event} ({self.event_name}): {what}, at step {self.step}")


# ---- device buffers: what to allocate and how the pointer table binds it -------------------------
@dataclass(frozen=True)
class DeviceBuffer:
    name: str
    shape: tuple[int, ...]
    dtype: str  # bf16 | f32 | i32 (as stored on the device)
    role: str  # weight | const | cache | act | output | io
    copies: int  # 2: parity copies (nan mode), laid out back to back
    slot: int | None  # pointer-table slot

    @property
    def numel(self) -> int:  # one copy
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:  # one copy
        return self.numel * (2 if self.dtype == "bf16" else 4)

    @property
    def armed(self) -> bool:
        """nan mode fills it with the sentinel on reset: caches and parity-copied activations."""
        return self.role == "cache" or self.copies == 2


def plan_buffers(tg: TaskGraph, tables: T.Tables) -> list[DeviceBuffer]:
    """Every device buffer the kernel reads or writes. i64 inputs and outputs are int32 on the device."""
    dbuf = set(tables.double_buffered)
    L, B = tg.dim("L"), tg.dim("B")
    out = []
    for b in tg.buffers:
        if b.role not in ("weight", "const", "cache", "act", "output") or b.name == "ids":
            continue
        dtype = "bf16" if b.role in ("weight", "cache") or b.dtype == "bf16" else ("f32" if b.dtype == "f32" else "i32")
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


class Megakernel:
    """One compiled megakernel, its device buffers and the decode loop (see the module doc)."""

    def __init__(self, tg: TaskGraph, sched: Schedule, weights: dict, *, target: Target | str | None = None,
                 options: CodegenOptions | None = None, device=None, build_dir: str | Path | None = None,
                 spin_limit: int = DEFAULT_SPIN_LIMIT, trace_steps: int = TRACE_STEPS, split_sampler: bool = True,
                 driver: Driver | None = None, binary: bytes | None = None):
        self.tg, self.sched = tg, sched
        self.target = get_target(target or sched.target) if not isinstance(target, Target) else target
        self.backend = for_target(self.target)
        if driver is None:
            self.backend.check_runtime(device)  # before the source is generated and compiled
        # Two kernels of one layout: greedy steps launch one without the sampling code (its registers
        # and calls slow the greedy step), sampling steps one with it, built on the first of them. A
        # binary given here (or split_sampler=False) is one kernel for both: the source of options as
        # given (options.sampler False: greedy only).
        options = options or CodegenOptions()
        self._build_dir = build_dir
        self._options = dataclasses.replace(options, sampler=True)
        self._split = binary is None and options.sampler and split_sampler
        self.source, self.cfg, self.tables = generate(tg, sched, self.target,
                                                      dataclasses.replace(options, sampler=False) if self._split else options)
        if binary is None:
            binary = self._compile(self.source)
        self.driver = driver if driver is not None else self.backend.driver(device)
        self.kernel = self.driver.load(binary, self.cfg.kernel_name, self.cfg.smem_bytes)
        # "gumbel" (temperature alone) and "filter" (top-k/top-p/min-p): the kernels sampling steps launch
        self._sampling_kernels: dict[str, Any] = ({"gumbel": self.kernel, "filter": self.kernel}
                                                  if not self._split and options.sampler else {})
        self.sampling_source: str | None = self.source if self._sampling_kernels else None
        self.spin_limit = int(spin_limit)
        self.B, self.V, self.L = tg.dim("B"), tg.dim("V"), tg.dim("L")
        self.sync = sched.sync
        self._check_residency()
        self._alloc(weights)
        self.trace_steps = int(trace_steps) if self.cfg.trace else 0
        # [steps][tasks][wait_start, start, end] timer ns (int64 holds them: ns since boot < 2^63)
        self.trace_buf = self.driver.empty((self.trace_steps, len(tg.tasks), TRACE_STAMPS), "i64") if self.cfg.trace else None
        self._traced_steps = 0
        self.reset()

    # ---- setup -------------------------------------------------------------------------------
    def _compile(self, source: str, out_dir: str | Path | None = "build_dir") -> bytes:
        built = self.backend.compile(source, self.target, out_dir=self._build_dir if out_dir == "build_dir" else out_dir)
        if not built.loadable:
            raise BackendUnavailableError(
                f"{self.target.arch} could only be compiled to a listing here ({built.path.name}), not to a "
                f"loadable binary: {built.log.splitlines()[0] if built.log else 'see the build log'}")
        return built.path.read_bytes()

    def prepare_sampling(self, filtered: bool = True) -> None:
        """Build the kernel sampling steps launch now rather than at the first of them (a compile of
        the size of the first one; then it is in the compile cache): the one with the filtered
        sampler, or (``filtered=False``) the temperature-only one."""
        self._kernel_for(T.TOKF_FILTER if filtered else T.TOKF_GUMBEL)

    def _kernel_for(self, flags: int):
        """The kernel for a launch with these token flags: greedy steps the one without the sampler,
        temperature alone (TOKF_GUMBEL) one with only the LM-head tiles' Gumbel-max, a filter
        (TOKF_FILTER) the one with the whole sampler. Each is built on the first launch it serves."""
        if not flags & (T.TOKF_GUMBEL | T.TOKF_FILTER):
            return self.kernel
        key = "filter" if flags & T.TOKF_FILTER else "gumbel"
        if key not in self._sampling_kernels:
            if not self._split:
                raise MkcError("this Megakernel was built without the sampler (CodegenOptions(sampler=False)): "
                               "it decodes greedily only")
            opts = self._options if key == "filter" else dataclasses.replace(self._options, sample_filter=False)
            src, cfg, _ = generate(self.tg, self.sched, self.target, opts)
            if (cfg.smem_bytes, cfg.threads, cfg.num_workers) != (self.cfg.smem_bytes, self.cfg.threads, self.cfg.num_workers):
                raise MkcError("the sampling kernel's launch shape differs from the greedy kernel's (an mkc bug)")
            # (the build directory keeps the greedy kernel's files: this one is cached only)
            self._sampling_kernels[key] = self.driver.load(self._compile(src, out_dir=None), cfg.kernel_name, cfg.smem_bytes)
            if key == "filter" or self.sampling_source is None:
                self.sampling_source = src
        return self._sampling_kernels[key]

    def _check_residency(self) -> None:
        sms = self.driver.sm_count()
        per_sm = self.kernel.max_blocks_per_sm(self.cfg.threads)
        if self.cfg.num_workers > sms or per_sm < 1:
            raise MkcError(f"{self.cfg.num_workers} workers of {self.cfg.threads} threads and "
                           f"{self.cfg.smem_bytes} B shared memory cannot all be resident on this GPU "
                           f"({sms} SMs, {per_sm} block(s) per SM): the kernel would deadlock")

    def _alloc(self, weights: dict) -> None:
        drv, tg = self.driver, self.tg
        self.plan = {b.name: b for b in plan_buffers(tg, self.tables)}
        consts = {b.name: b for b in tg.buffers if b.role == "const"}
        self.buffers: dict[str, Any] = {}  # name -> driver array ([2, ...] when parity-copied)
        for b in self.plan.values():
            if b.role == "weight":
                w = weights.get(b.name)
                if w is None:
                    raise MkcError(f"weight {b.name} {list(b.shape)} is missing")
                if tuple(w.shape) != b.shape:
                    raise MkcError(f"weight {b.name} has shape {list(w.shape)}, expected {list(b.shape)}")
                arr = drv.adopt(w)
                if arr is None:
                    arr = drv.empty(b.shape, "bf16")
                    drv.upload(arr, w)
            else:
                arr = drv.empty(((2,) if b.copies == 2 else ()) + b.shape, b.dtype)
                if b.role == "const":
                    drv.upload(arr, np.asarray(consts[b.name].data, dtype=np.float32))
            self.buffers[b.name] = arr
        self.weights = {n: a for n, a in self.buffers.items() if self.plan[n].role == "weight"}
        self.ids, self.tokens = self.buffers["ids"], self.buffers["tokens"]  # [L, B]: forced / argmax per step
        self.ws = drv.empty((self.tables.ws_words,), "i32")
        B, L = tg.dim("B"), tg.dim("L")
        self.ctl_at = T.ctl_layout(B, L)  # the decode control block (tables.ctl_layout)
        self.ctl = drv.empty((self.ctl_at["CTL_WORDS"],), "i32")
        # drivers with page-locked host memory (NVIDIA): the token stream and the error slot's
        # snapshot behind each launch live there; the others synchronise every launch
        self._async = all(hasattr(drv, f) for f in ("pinned", "mapped_ptr", "upload_nowait", "copy_async",
                                                      "record_event", "capturing"))
        self.stream_host = drv.pinned((T.stream_words(B, L),), "i32") if self._async else None
        self._stream_dev = drv.mapped_ptr(self.stream_host) if self.stream_host is not None else 0
        self._fault_host = drv.pinned((T.WS_COUNTERS,), "i32") if self._async else None
        self._fault_event = None
        self.table = drv.empty(self.tables.ints.shape, "i32")
        drv.upload(self.table, self.tables.ints)
        self.fparams = drv.empty((len(T.FPARAMS),), "f32")
        drv.upload(self.fparams, np.array([tg.const("rms_eps"), tg.const("rope_scaling"), tg.const("attn_scale")],
                                          dtype=np.float32))
        addrs = {n: drv.ptr(a) for n, a in self.buffers.items()}
        self.ptr_table = pointer_table(tg, list(self.plan.values()), addrs)
        self.ptrs = drv.empty((self.ptr_table.size,), "i64")
        drv.upload(self.ptrs, self.ptr_table.view(np.int64).reshape(-1))

    # ---- state -------------------------------------------------------------------------------
    def reset(self) -> None:
        """Empty KV cache, counters at zero, step 0 (nan mode: every polled word armed)."""
        self.driver.fill32(self.ws, 0)
        self._fault_event = None  # an error-slot copy from before the reset is stale
        self._token_words = (0,) * len(T.TOKEN_WORDS)  # zeroed with the workspace
        self.step = 0
        self._written = 0  # cache positions [0, _written) hold data
        self._faulted = False
        fill = T.SENTINEL if self.sync == "nan" else 0
        for b in self.plan.values():
            if b.role in ("weight", "const"):
                continue
            self.driver.fill32(self.buffers[b.name], fill if b.armed else 0)

    def _rearm_cache_from(self, pos: int) -> None:
        """nan mode: positions >= pos will be written again, so they must hold the sentinel."""
        for b in self.plan.values():
            if b.role == "cache":  # [B, nkv, L, hd] bf16: positions >= pos of every (row, head)
                nb, nkv, L, hd = b.shape
                self.driver.fill32_rows(self.buffers[b.name], T.SENTINEL, nb * nkv, L * hd // 2, pos * hd // 2)

    def _prepare(self, nsteps: int, pos0: int) -> None:
        """Refuse after a fault, keep positions inside the cache, and re-arm the NaN-mode cache from
        pos0 when positions are re-used."""
        if self._faulted:
            raise MkcError("the megakernel faulted earlier; call reset() (the KV cache is lost)")
        if pos0 < 0 or pos0 + nsteps > self.L:
            raise MkcError(f"positions {pos0}..{pos0 + nsteps - 1} do not fit max_seq_len {self.L}")
        if self.sync == "nan" and pos0 < self._written:
            self._rearm_cache_from(pos0)

    # ---- launching ---------------------------------------------------------------------------
    def launch_args(self, nsteps: int, pos0: int, nforced: int) -> list[tuple[str, int]]:
        """The kernel's arguments in the order of ``tables.KERNEL_ARGS``."""
        drv = self.driver
        traced = self.trace_buf is not None
        values = dict(tab=drv.ptr(self.table), ptrs=drv.ptr(self.ptrs), fparams=drv.ptr(self.fparams),
                      ws=drv.ptr(self.ws), step0=self.step, nsteps=nsteps, pos0=pos0, nforced=nforced,
                      spin_limit=self.spin_limit, trace=drv.ptr(self.trace_buf) if traced else 0,
                      trace_steps=self.trace_steps if traced else 0, trace_tasks=len(self.tg.tasks) if traced else 0)
        return [(kind, values[name]) for name, kind in T.KERNEL_ARGS]

    def _token_words_for(self, *, ctl: bool = False, stream: bool = False, sampling: Sampling = GREEDY) -> tuple:
        flags, smp = sampling.kernel_words(self.V)
        flags |= (T.TOKF_CTL if ctl else 0) | (T.TOKF_STREAM if stream else 0)
        c, s = self.driver.ptr(self.ctl), self._stream_dev
        return (flags, *smp, c & 0xFFFFFFFF, c >> 32, s & 0xFFFFFFFF, s >> 32) if flags else (0,) * len(T.TOKEN_WORDS)

    def _set_token_words(self, **kw) -> None:
        """The workspace's token settings (tables.TOKEN_WORDS) for the next launch, uploaded only
        when they change (reset zeroes them: greedy, no control block, no stream)."""
        words = self._token_words_for(**kw)
        if words != self._token_words:
            at = T.WORKSPACE.index("WS_TOK_FLAGS")
            host = np.array(words, dtype=np.uint64).astype(np.uint32).view(np.int32)
            if self._async:
                self.driver.upload_nowait(self.ws, host, at)
            else:
                self.driver.upload(self.ws, host, at)
            self._token_words = words

    def _launch(self, nsteps: int, pos0: int, nforced: int, *, wait: bool = True, **kw) -> None:
        """One launch of ``nsteps`` steps (kw: the token settings, ``_set_token_words``). wait=False
        (drivers with pinned memory): return at once; the error slot is copied behind the launch and
        checked at the next call or ``synchronize``."""
        self._poll_fault()
        self._prepare(nsteps, pos0)
        self._set_token_words(**kw)
        if self.trace_buf is not None:
            self.driver.fill32(self.trace_buf, 0)
            self._traced_steps = min(nsteps, self.trace_steps)
        kernel = self._kernel_for(self._token_words[0])
        self.driver.launch(kernel, self.cfg.num_workers, self.cfg.threads, self.launch_args(nsteps, pos0, nforced))
        if wait or not self._async:
            self.driver.synchronize()
            self._check_fault()
        elif not self.driver.capturing():
            self.driver.copy_async(self._fault_host, self.driver.tensor(self.ws, 0, (T.WS_COUNTERS,)))
            self._fault_event = self.driver.record_event()
        self._advance(nsteps, pos0)

    def _advance(self, nsteps: int, pos0: int) -> None:
        self.step += nsteps
        self._written = pos0 + nsteps if pos0 < self._written else max(self._written, pos0 + nsteps)

    def synchronize(self) -> None:
        """Wait for every launch so far; raise ``KernelError`` if one of them faulted. The step
        counter follows the device clock (replays of a captured step advance it on the device)."""
        self.driver.synchronize()
        self._fault_event = None
        self._check_fault()
        at = T.WORKSPACE.index("WS_CLK_STEP")
        step, pos = (int(x) for x in self.driver.tensor(self.ws, at, (2,)).cpu().numpy())
        if step > self.step:
            self.step, self._written = step, max(self._written, pos)

    def _poll_fault(self) -> None:
        """Raise the fault of an earlier asynchronous launch whose error-slot copy has arrived."""
        ev = self._fault_event
        if ev is not None and ev.query():
            self._fault_event = None
            f = decode_fault(self._fault_host.numpy(), self.tg)
            if f is not None:
                self._faulted = True
                raise KernelError(f.message(self.sync))

    def fault(self) -> KernelFault | None:
        """What the error slot says (None when no wait timed out)."""
        ws = self.driver.tensor(self.ws, 0, (T.WS_COUNTERS,)).cpu().numpy()
        return decode_fault(ws, self.tg)

    def _check_fault(self) -> None:
        f = self.fault()
        if f is not None:
            self._faulted = True
            raise KernelError(f.message(self.sync))

    # ---- the user API ------------------------------------------------------------------------
    def _ids(self, input_ids):
        import torch

        ids = torch.as_tensor(input_ids)
        if ids.dim() == 1:
            ids = ids.reshape(self.B, -1) if ids.numel() % self.B == 0 and ids.numel() != self.B else ids[:, None]
        if ids.shape[0] != self.B:
            raise MkcError(f"input_ids has batch {ids.shape[0]}, the kernel was compiled for batch {self.B}")
        if ids.device.type == "cpu":  # ids already on the GPU are not read back (the kernel clamps them)
            bad = (ids < 0) | (ids >= self.V)
            if bool(bad.any()):
                b, k = (int(x) for x in bad.nonzero()[0])
                raise MkcError(f"token id {int(ids[b, k])} of row {b} (position {k}) is outside the vocabulary "
                               f"[0, {self.V})")
        return ids.to(torch.int32)

    def _set_forced(self, ids) -> None:  # ids [B, P] -> the first P rows of ids [L, B]
        self.driver.upload(self.ids, ids.T.contiguous())

    def logits(self):
        """The last step's logits [B, V] (fp32): a view of the device buffer where the driver has one
        (the next launch overwrites it: ``.clone()`` to keep it)."""
        b = self.plan["logits"]
        par = (self.step - 1) % 2 if b.copies == 2 else 0
        return self.driver.tensor(self.buffers["logits"], par * b.numel, b.shape)

    def __call__(self, input_ids, cache_position, *, sampling: Sampling | None = None):
        """One decode step: token ids [B] (or [B, 1]) at position ``cache_position`` -> logits [B, V].

        Cheap on NVIDIA: nothing waits for the GPU. Host ids are checked and copied without a
        synchronisation, CUDA ids device to device; the logits are a view of the device buffer,
        overwritten by the next launch (``.clone()`` to keep them); a fault is raised by a later
        call or by ``synchronize()``. ``cache_position`` is best an int (a CUDA tensor is read back).
        The step's token (argmax, or ``sampling``'s draw) is ``tokens_of_last_step()``."""
        ids = self._ids(input_ids)
        if ids.shape[1] != 1:
            raise MkcError(f"one decode step takes one token per row, got {ids.shape[1]}")
        smp = self._sampling(sampling)
        if self._async and self.driver.capturing():
            return self._captured_step(ids, smp)
        pos = int(cache_position.reshape(-1)[0]) if hasattr(cache_position, "reshape") else int(cache_position)
        if self._async:
            self.driver.upload_nowait(self.ids, ids.reshape(-1))
        else:
            self._set_forced(ids)
        self._launch(1, pos, 1, wait=False, sampling=smp)
        return self.logits()

    def _captured_step(self, ids, smp: Sampling):
        """The step inside a CUDA-graph capture: ids device to device, and the kernel takes its step
        and position from the device clock (the ones after the last step run), so each replay is the
        next step. The host's bookkeeping catches up at ``synchronize()``; keeping the positions
        inside max_seq_len (and, in nan mode, not re-using positions) is the caller's part."""
        if ids.device.type == "cpu":
            raise MkcError("a step captured in a CUDA graph takes its ids as a CUDA tensor (host ids would be "
                           "copied at capture time only)")
        if self._token_words_for(sampling=smp) != self._token_words:
            raise MkcError("a captured step cannot change the sampling settings (a host upload is not captured): "
                           "run one ordinary step with the same `sampling` before capturing")
        self.driver.upload_nowait(self.ids, ids.reshape(-1))
        args = self.launch_args(1, -1, 1)
        args[[n for n, _ in T.KERNEL_ARGS].index("step0")] = ("i32", -1)
        self.driver.launch(self._kernel_for(self._token_words[0]), self.cfg.num_workers, self.cfg.threads, args)
        return self.logits()

    def tokens_of_last_step(self):
        """The last launch's last token per row [B] int32 (a device view where the driver has one)."""
        return self.driver.tensor(self.buffers["next_ids"], 0, (self.B,))

    def _sampling(self, sampling: Sampling | None) -> Sampling:
        smp = GREEDY if sampling is None else sampling
        if not isinstance(smp, Sampling):
            raise MkcError(f"sampling must be an mkc.sampling.Sampling, got {type(smp).__name__}")
        problems = smp.check()
        if problems:
            raise MkcError("sampling: " + "; ".join(problems))
        return smp

    def decode(self, rows, max_new_tokens, *, start_pos: int = 0, eos_token_id=None,
               sampling: Sampling | None = None, on_step=None) -> list[list[int]]:
        """Decode new tokens for up to B rows in ONE launch, each with its own prompt, budget and stop.

        rows: per batch row (len(rows) <= B; missing rows are padding, stopped from the start), the
        token ids not yet in the cache (>= 1 each). The cache already holds positions [0, start_pos)
        of every row (start_pos=0: reset first). Row b is fed rows[b][k] at step k while k <
        len(rows[b]), then its own previous token; it stops after max_new_tokens (int or per row) new
        tokens or after an EOS (eos_token_id: int, list of up to 4, or None); the launch ends early
        once every row has stopped. on_step(new_tokens_so_far) is called from the host while the
        kernel runs (NVIDIA: from the host-mapped token stream) and at least once, at the end.
        Returns the new tokens per row (EOS included, nothing after it). A row that stops early keeps
        running (its outputs ignored) until the launch ends, so its cache past its stop holds them."""
        from mkc.decode import as_rows, plan_decode, row_outputs, steps_run

        plan = plan_decode(rows, max_new_tokens, eos_token_id, batch=self.B, vocab=self.V, max_seq_len=self.L,
                           start_pos=start_pos)
        smp = self._sampling(sampling)
        rows = as_rows(rows)
        if max(plan.max_new) == 0:
            out = [[] for _ in rows]
            if on_step is not None:
                on_step(out)
            return out
        if start_pos == 0:
            self.reset()
        else:
            self._poll_fault()
            if self.sync == "nan":  # the cache may have been written by the host: re-arm what follows
                self._rearm_cache_from(start_pos)
            self._written = max(self._written, start_pos)
        self._set_forced_rows(plan.ids(rows))
        self.driver.upload(self.ctl, plan.ctl_head())
        streaming = on_step is not None and self.stream_host is not None
        if streaming:
            self.stream_host[: self.B] = 0
        self._launch(plan.nsteps, start_pos, 0, wait=not streaming, ctl=True, stream=streaming, sampling=smp)
        if streaming:
            self._follow_stream(plan, on_step)
            self.synchronize()
        at = self.ctl_at["CTL_DONE"]
        ran = steps_run(self.driver.tensor(self.ctl, at, (plan.nsteps,)).cpu().numpy(), plan.nsteps)
        # the step counter and the cache positions follow the steps that ran, not those asked for
        self.step -= plan.nsteps - ran
        self._written = start_pos + ran
        log = self.driver.tensor(self.tokens, 0, (ran, self.B)).cpu().numpy()
        out = row_outputs(log, plan)
        if on_step is not None:
            on_step(out)
        return out

    def _set_forced_rows(self, ids: np.ndarray) -> None:  # [P, B], step-major as the kernel reads it
        self.driver.upload(self.ids, ids)

    def _follow_stream(self, plan, on_step) -> None:
        """Call on_step with the tokens so far each time the kernel publishes steps, until it ends."""
        import time

        from mkc.decode import row_outputs

        host = self.stream_host.numpy()
        done_ev = self.driver.record_event()
        seen = 0
        while True:
            finished = done_ev.query()
            n = int(host[: self.B].min())  # each row's argmax task counts its steps: all rows have n
            if n > seen:
                seen = n
                on_step(row_outputs(host[self.B: (1 + n) * self.B].reshape(n, self.B), plan))
            if finished:
                return
            time.sleep(200e-6)

    def prefill(self, prompt_ids):
        """Start a sequence: reset, then run the prompt [B, P] token by token in one launch.
        Returns the logits of the last prompt position."""
        ids = self._ids(prompt_ids)
        self.reset()
        self._set_forced(ids)
        self._launch(ids.shape[1], 0, ids.shape[1])
        return self.logits().clone()

    def generate(self, input_ids, *args, **kwargs):
        """transformers-style generate (``mkc.generation.generate``): prompt [B, P] -> prompt + new ids,
        [B, P + N] int64 (CPU). ``generate(ids, N)`` stays greedy with N new tokens in one launch."""
        from mkc.generation import generate

        return generate(self, input_ids, *args, **kwargs)

    def trace(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The last launch's per-task stamps (``CodegenOptions(trace=True)``): ``(wait_start, start, end)``,
        each float64 [steps, tasks] in us relative to the launch's first stamp, for its first
        ``min(nsteps, trace_steps)`` steps. ``wait_start``: the task began waiting on its inputs (GEMV
        kinds have issued their first weight loads); ``start``: its waits were satisfied; ``end``: its
        outputs were published. A task that never ran (a fault) reads NaN."""
        if self.trace_buf is None:
            raise MkcError("this Megakernel was built without the trace: pass options=CodegenOptions(trace=True)")
        us = self._trace_us()
        return us[..., 0], us[..., 1], us[..., 2]

    def trace_marks(self) -> np.ndarray:
        """The marks inside each task of the last launch (``trace()``'s clock): float64 [steps, tasks,
        TRACE_STAMPS - 3], NaN where a kind sets no such mark (``mkc.trace.MARKS`` names them)."""
        return self._trace_us()[..., 3:]

    def _trace_us(self) -> np.ndarray:
        if self.trace_buf is None:
            raise MkcError("this Megakernel was built without the trace: pass options=CodegenOptions(trace=True)")
        n = len(self.tg.tasks)
        raw = self.driver.tensor(self.trace_buf, 0, (self.trace_steps, n, TRACE_STAMPS)).cpu().numpy()[: self._traced_steps]
        if raw.size == 0:
            return np.zeros((0, n, TRACE_STAMPS))
        valid = raw > 0
        t0 = raw[..., :3][valid[..., :3]].min() if valid[..., :3].any() else 0
        return np.where(valid, (raw - t0) / 1e3, np.nan)

    @classmethod
    def from_build_dir(cls, bdir: str | Path, weights: dict, **kw) -> "Megakernel":
        """Load ``tasks.json`` and ``schedule.json`` of a build directory (``mkc compile``)."""
        bdir = Path(bdir)
        return cls(TaskGraph.load(bdir / "tasks.json"), Schedule.load(bdir / "schedule.json"), weights, **kw)

    @property
    def config(self) -> KernelConfig:
        return self.cfg
