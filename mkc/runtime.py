"""The Megakernel: one compiled persistent kernel, its device buffers, and the decode loop.

    mk = Megakernel(tg, sched, weights)              # weights: HF state-dict names -> tensors
    logits = mk(input_ids, cache_position)           # one decode step, one launch -> [B, V] fp32
    logits = mk.prefill(prompt_ids)                  # [B, P]: the prompt, one launch
    tokens = mk.generate(prompt_ids, max_new_tokens) # prompt + greedy decode, ONE launch

Design notes:

- The schedule is data (``mkc.codegen.tables``); weights, KV caches [B, nkv, L, hd] bf16 per
  layer, fp32 activations, counters and the error slot are torch tensors bound through a
  pointer table. Weights given as bf16 CUDA tensors are used in place (no copy).
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
- A bounded spin that times out makes the kernel exit; ``KernelError`` names the worker, task,
  event, value seen and step. The state is then undefined: the next call resets it (the KV cache
  is lost).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mkc.codegen import tables as T
from mkc.codegen.render import CodegenOptions, KernelConfig, generate
from mkc.errors import KernelError, MkcError
from mkc.schedule.ir import Schedule
from mkc.targets.spec import Target, get_target
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


def prepare_launch(mk, nsteps: int, pos0: int) -> None:
    """What every runtime checks and does before a launch: refuse after a fault, keep positions
    inside the cache, and re-arm the NaN-mode cache from pos0 when positions are re-used."""
    if mk._faulted:
        raise MkcError("the megakernel faulted earlier; call reset() (the KV cache is lost)")
    if pos0 < 0 or pos0 + nsteps > mk.L:
        raise MkcError(f"positions {pos0}..{pos0 + nsteps - 1} do not fit max_seq_len {mk.L}")
    if mk.sync == "nan" and pos0 < mk._written:
        mk._rearm_cache_from(pos0)


class Megakernel:
    def __init__(self, tg: TaskGraph, sched: Schedule, weights: dict, *, target: Target | str | None = None,
                 options: CodegenOptions | None = None, device=None, build_dir: str | Path | None = None,
                 spin_limit: int = DEFAULT_SPIN_LIMIT, trace_steps: int = TRACE_STEPS):
        import torch

        from mkc.targets.nvidia.build import build_cubin
        from mkc.targets.nvidia.runtime import CudaModule

        self.tg, self.sched = tg, sched
        self.target = get_target(target or sched.target) if not isinstance(target, Target) else target
        self.device = torch.device(device if device is not None else "cuda")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.source, self.cfg, self.tables = generate(tg, sched, self.target, options)
        self.build = build_cubin(self.source, self.cfg.arch, out_dir=build_dir)
        self.module = CudaModule(self.build.cubin.read_bytes(), self.cfg.kernel_name, self.cfg.smem_bytes,
                                 self.device.index)
        self.spin_limit = int(spin_limit)
        self._check_residency()
        d = dict(tg.dims)
        self.B, self.V, self.L = d["B"], d["V"], d["L"]
        self.sync = sched.sync
        self._alloc(weights)
        self.trace_steps = int(trace_steps) if self.cfg.trace else 0
        # [steps][tasks][wait_start, start, end] globaltimer ns (int64 holds them: ns since boot < 2^63)
        self.trace_buf = (torch.zeros((self.trace_steps, len(tg.tasks), 3), dtype=torch.int64, device=self.device)
                          if self.cfg.trace else None)
        self._traced_steps = 0
        self.reset()

    # ---- setup -------------------------------------------------------------------------------
    def _check_residency(self) -> None:
        import torch

        sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        per_sm = self.module.max_blocks_per_sm(self.cfg.threads)
        if self.cfg.num_workers > sms or per_sm < 1:
            raise MkcError(f"{self.cfg.num_workers} workers of {self.cfg.threads} threads and "
                           f"{self.cfg.smem_bytes} B shared memory cannot all be resident on this GPU "
                           f"({sms} SMs, {per_sm} block(s) per SM): the kernel would deadlock")

    def _alloc(self, weights: dict) -> None:
        import torch

        dev, tg = self.device, self.tg
        dbuf = set(self.tables.double_buffered)
        self.buffers: dict[str, torch.Tensor] = {}  # name -> tensor ([2, ...] when double-buffered)
        self.weights: dict[str, torch.Tensor] = {}
        for b in tg.buffers:
            if b.role == "weight":
                w = weights.get(b.name)
                if w is None:
                    raise MkcError(f"weight {b.name} {list(b.shape)} is missing")
                if tuple(w.shape) != tuple(b.shape):
                    raise MkcError(f"weight {b.name} has shape {list(w.shape)}, expected {list(b.shape)}")
                self.weights[b.name] = w.detach().to(device=dev, dtype=torch.bfloat16).contiguous()
            elif b.role == "const":
                self.buffers[b.name] = torch.tensor(b.data, dtype=torch.float32, device=dev).reshape(b.shape)
            elif b.role == "cache":
                self.buffers[b.name] = torch.zeros(b.shape, dtype=torch.bfloat16, device=dev)
            elif b.role in ("act", "output"):
                dt = torch.float32 if b.dtype == "f32" else torch.int32
                shape = ((2,) if b.name in dbuf else ()) + tuple(b.shape)
                self.buffers[b.name] = torch.zeros(shape, dtype=dt, device=dev)
        self.ids = torch.zeros((self.L, self.B), dtype=torch.int32, device=dev)  # forced tokens per step
        self.tokens = torch.zeros((self.L, self.B), dtype=torch.int32, device=dev)  # argmax per step
        self.ws = torch.zeros(self.tables.ws_words, dtype=torch.int32, device=dev)
        self.table = torch.from_numpy(self.tables.ints).to(dev)
        self.fparams = torch.tensor([tg.const("rms_eps"), tg.const("rope_scaling"), tg.const("attn_scale")],
                                    dtype=torch.float32, device=dev)
        ptrs = np.zeros((T.n_slots(dict(tg.dims)["n_layers"]), 2), dtype=np.uint64)

        def bind(slot: int, t: torch.Tensor, double: bool = False) -> None:
            ptrs[slot] = (t[0].data_ptr(), t[1].data_ptr()) if double else (t.data_ptr(), t.data_ptr())

        for name, t in self.weights.items():
            s = T.slot_of(name)
            if s is not None:
                bind(s, t)
        if names.LM_HEAD not in self.weights:  # tied embedding
            bind(T.GLOBAL_SLOTS.index("lm_head"), self.weights[names.EMBED])
        for name, t in self.buffers.items():
            s = T.slot_of(name)
            if s is not None and name != "ids":
                bind(s, t, name in dbuf)
        bind(T.GLOBAL_SLOTS.index("ids"), self.ids)
        bind(T.GLOBAL_SLOTS.index("tokens"), self.tokens)
        self.ptrs = torch.from_numpy(ptrs.view(np.int64).reshape(-1)).to(dev)

    # ---- state -------------------------------------------------------------------------------
    def reset(self) -> None:
        """Empty KV cache, counters at zero, step 0 (nan mode: every polled word armed)."""
        import torch

        self.ws.zero_()
        self.step = 0
        self._written = 0  # cache positions [0, _written) hold data
        self._faulted = False
        fill = T.SENTINEL if self.sync == "nan" else 0
        dbuf = set(self.tables.double_buffered)
        for b in self.tg.buffers:
            t = self.buffers.get(b.name)
            if t is None or b.role == "const":
                continue
            if b.role == "cache" or b.name in dbuf:
                t.view(torch.int32).fill_(fill)
            else:
                t.zero_()

    def _rearm_cache_from(self, pos: int) -> None:
        """nan mode: positions >= pos will be written again, so they must hold the sentinel."""
        import torch

        for b in self.tg.buffers:
            if b.role == "cache":
                self.buffers[b.name][:, :, pos:, :].view(torch.int32).fill_(T.SENTINEL)

    # ---- launching ---------------------------------------------------------------------------
    def _launch(self, nsteps: int, pos0: int, nforced: int) -> None:
        import torch

        from mkc.targets.nvidia.runtime import i32

        prepare_launch(self, nsteps, pos0)
        args = (self.table.data_ptr(), self.ptrs.data_ptr(), self.fparams.data_ptr(), self.ws.data_ptr(),
                i32(self.step), i32(nsteps), i32(pos0), i32(nforced), i32(self.spin_limit))
        if self.trace_buf is not None:
            self.trace_buf.zero_()
            args += (self.trace_buf.data_ptr(), i32(self.trace_steps), i32(self.trace_buf.shape[1]))
            self._traced_steps = min(nsteps, self.trace_steps)
        else:  # the kernel always takes the trace arguments; an untraced one ignores them
            args += (0, i32(0), i32(0))
        stream = torch.cuda.current_stream(self.device)
        self.module.launch(self.cfg.num_workers, self.cfg.threads, args, stream.cuda_stream)
        stream.synchronize()
        self._check_fault()
        self.step += nsteps
        self._written = pos0 + nsteps if pos0 < self._written else max(self._written, pos0 + nsteps)

    def fault(self) -> KernelFault | None:
        """What the error slot says (None when no wait timed out)."""
        ws = self.ws[: T.WS_COUNTERS].cpu().numpy().view(np.uint32)
        w = {k: int(ws[i]) for i, k in enumerate(T.WORKSPACE)}
        if not (w["WS_ABORT"] or w["WS_CLAIM"]):
            return None
        tid = w["WS_TASK"]
        task = self.tg.tasks[tid] if 0 <= tid < len(self.tg.tasks) else None
        ev = w["WS_EVENT"]
        ev_name = self.tg.events[ev].name if ev < len(self.tg.events) else "decode-loop"
        return KernelFault(w["WS_WORKER"], tid, TASK_KINDS[w["WS_KIND"]] if w["WS_KIND"] < len(TASK_KINDS) else "?",
                           task.layer if task else -1, ev, ev_name, w["WS_SEEN"], w["WS_WANT"], w["WS_STEP"])

    def _check_fault(self) -> None:
        f = self.fault()
        if f is not None:
            self._faulted = True
            raise KernelError(f.message(self.sync))

    # ---- the user API ------------------------------------------------------------------------
    def _ids(self, input_ids) -> "torch.Tensor":
        import torch

        ids = torch.as_tensor(input_ids).to(self.device)
        if ids.dim() == 1:
            ids = ids.reshape(self.B, -1) if ids.numel() % self.B == 0 and ids.numel() != self.B else ids[:, None]
        if ids.shape[0] != self.B:
            raise MkcError(f"input_ids has batch {ids.shape[0]}, the kernel was compiled for batch {self.B}")
        return ids.to(torch.int32)

    def logits(self) -> "torch.Tensor":
        """The last step's logits [B, V] (fp32, a view of the device buffer)."""
        t = self.buffers["logits"]
        return t[(self.step - 1) % 2] if t.dim() == 3 else t

    def __call__(self, input_ids, cache_position) -> "torch.Tensor":
        """One decode step: token ids [B] (or [B, 1]) at position ``cache_position`` -> logits [B, V]."""
        ids = self._ids(input_ids)
        if ids.shape[1] != 1:
            raise MkcError(f"one decode step takes one token per row, got {ids.shape[1]}")
        pos = int(cache_position.reshape(-1)[0]) if hasattr(cache_position, "reshape") else int(cache_position)
        self.ids[0].copy_(ids[:, 0])
        self._launch(1, pos, 1)
        return self.logits().clone()

    def prefill(self, prompt_ids) -> "torch.Tensor":
        """Start a sequence: reset, then run the prompt [B, P] token by token in one launch.
        Returns the logits of the last prompt position."""
        ids = self._ids(prompt_ids)
        self.reset()
        self.ids[: ids.shape[1]].copy_(ids.T)
        self._launch(ids.shape[1], 0, ids.shape[1])
        return self.logits().clone()

    def generate(self, input_ids, max_new_tokens: int) -> "torch.Tensor":
        """Greedy decoding of ``max_new_tokens`` after the prompt [B, P], prompt included, in ONE
        launch (argmax and the next token's embedding run in the kernel). Returns [B, P + N] int64."""
        import torch

        ids = self._ids(input_ids)
        P, N = ids.shape[1], int(max_new_tokens)
        if N <= 0:
            return ids.long().cpu()
        self.reset()
        self.ids[:P].copy_(ids.T)
        self._launch(P + N - 1, 0, P)
        new = self.tokens[P - 1: P - 1 + N].T.long().cpu()
        return torch.cat([ids.long().cpu(), new], dim=1)

    def trace(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The last launch's per-task stamps (``CodegenOptions(trace=True)``): ``(wait_start, start, end)``,
        each float64 [steps, tasks] in us relative to the launch's first stamp, for its first
        ``min(nsteps, trace_steps)`` steps. ``wait_start``: the task began waiting on its inputs (GEMV
        kinds have issued their first weight loads); ``start``: its waits were satisfied; ``end``: its
        outputs were published. A task that never ran (a fault) reads NaN."""
        if self.trace_buf is None:
            raise MkcError("this Megakernel was built without the trace: pass options=CodegenOptions(trace=True)")
        raw = self.trace_buf[: self._traced_steps].cpu().numpy()
        if raw.size == 0:
            empty = np.zeros((0, raw.shape[1]))
            return empty, empty.copy(), empty.copy()
        valid = raw > 0
        t0 = raw[valid].min() if valid.any() else 0
        us = np.where(valid, (raw - t0) / 1e3, np.nan)
        return us[..., 0], us[..., 1], us[..., 2]

    @classmethod
    def from_build_dir(cls, bdir: str | Path, weights: dict, **kw) -> "Megakernel":
        """Load ``tasks.json`` and ``schedule.json`` of a build directory (``mkc compile``)."""
        bdir = Path(bdir)
        return cls(TaskGraph.load(bdir / "tasks.json"), Schedule.load(bdir / "schedule.json"), weights, **kw)

    @property
    def config(self) -> KernelConfig:
        return self.cfg
