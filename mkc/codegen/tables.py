"""The schedule as data: the int32 tables the megakernel walks, and the pointer-table slots.

One int32 array holds everything (offsets in the header are in int32 words from its start):

    header   HDR_SIZE words: where each section starts, event count, argmax task count
    queues   2 per worker: (first record, number of records), records in queue order
    records  T_SIZE per task: kind, layer, 4 args, wait/signal/re-arm lists, task id, flags
    waits    WT_SIZE per wait: event id, threshold, first region, region count (nan mode polls)
    signals  one event id each
    regions  RG_SIZE per region: pointer slot, flags, then the region's 32-bit words as
             base + i2*s2 + i1*s1 + j  (i2 < n2, i1 < n1, j < run); cache regions add pos*hd/2

Buffers are bound through a pointer table of two 64-bit entries per slot (the parity-0 and
parity-1 copy; single-buffered slots repeat the one address). Global slots come first, then
``NPER`` slots per layer. The kernel's sync workspace holds the error slot, one counter per event
and the decode-loop counter that argmax bumps once per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mkc.errors import IRCheckError
from mkc.schedule.ir import Schedule
from mkc.taskgraph import names
from mkc.taskgraph.ir import TASK_KINDS, Region, TaskGraph
from mkc.taskgraph.kinds import KIND, STEP_END, STEP_END_KINDS, STEP_START

SENTINEL = 0x7FA5A5A5  # docs/sync.md
CANON_NAN = 0x7FC00000

GLOBAL_SLOTS = ("embed", "final_norm", "lm_head", "inv_freq", "x0", "logits", "amax_part", "amax_idx",
                "next_ids", "ids", "tokens", "lm_cand", "xn0", "xss0")
LAYER_ROLES = ("in_norm", "wq", "wk", "wv", "bq", "bk", "bv", "qnorm", "knorm", "wo", "post_norm", "wg", "wu",
               "wd", "q", "attn", "xa", "h", "xm", "kc", "vc", "kr", "ao", "alse", "xmp", "xnm", "xssm", "xna", "xssa", "dp", "qp")
_WEIGHT_ROLE = {"input_norm": "in_norm", "q": "wq", "k": "wk", "v": "wv", "q_bias": "bq", "k_bias": "bk",
                "v_bias": "bv", "q_norm": "qnorm", "k_norm": "knorm", "o": "wo", "post_norm": "post_norm",
                "gate": "wg", "up": "wu", "down": "wd"}
_ACT_ROLE = {"q": "q", "attn": "attn", "xa": "xa", "h": "h", "xm": "xm", "k_cache": "kc", "v_cache": "vc", "kr": "kr",
             "ao": "ao", "alse": "alse", "xmp": "xmp", "xnm": "xnm", "xssm": "xssm", "xna": "xna", "xssa": "xssa", "dp": "dp", "qp": "qp"}
_GLOBAL_BUF = {"x0": "x0", "logits": "logits", "amax_part": "amax_part", "amax_idx": "amax_idx", names.LM_CAND: "lm_cand",
               "next_ids": "next_ids", "ids": "ids", "inv_freq": "inv_freq", names.EMBED: "embed", "xn0": "xn0", "xss0": "xss0",
               names.FINAL_NORM: "final_norm", names.LM_HEAD: "lm_head"}

HEADER = ("HDR_QUEUE", "HDR_RECORDS", "HDR_WAITS", "HDR_SIGS", "HDR_REGIONS", "HDR_N_EVENTS", "HDR_N_ARGMAX",
          "HDR_N_WORKERS", "HDR_VERSION")
HDR_SIZE = 16
RECORD = ("T_KIND", "T_LAYER", "T_A0", "T_A1", "T_A2", "T_A3", "T_WAIT_OFF", "T_N_WAIT", "T_SIG_OFF", "T_N_SIG",
          "T_REARM_OFF", "T_N_REARM", "T_ID", "T_FLAGS")
T_SIZE = 16
N_ARGS = 4  # T_A0..T_A3
WAIT = ("WT_EVENT", "WT_THRESHOLD", "WT_REG_OFF", "WT_N_REG")
REGION = ("RG_SLOT", "RG_FLAGS", "RG_BASE", "RG_RUN", "RG_N1", "RG_S1", "RG_N2", "RG_S2")
RF_PARITY, RF_CACHE = 1, 2
# TF_STEP_FIRST: the first task of its worker's queue; nothing on the worker has waited yet in the
# step, so a task that reads earlier steps' data before its waits (attention) waits for the loop
# counter first (docs/sync.md "Attention's loads before its wait")
TF_WAIT_LOOP, TF_SIGNAL_LOOP, TF_STEP_FIRST = 1, 2, 4
# sync workspace (uint32): error slot first, then one counter per event, then the loop counter
# then the device clock (the step and position after the last one run: argmax advances it), then
# the token settings the host writes before a launch that changes them (Megakernel._set_token_words):
# flags (TOKF_*), the sampler's settings (fp32 as bits), the decode control block's and the token
# stream's addresses. In memory, not kernel arguments: nothing of them is live in registers.
WORKSPACE = ("WS_ABORT", "WS_CLAIM", "WS_WORKER", "WS_TASK", "WS_EVENT", "WS_SEEN", "WS_STEP", "WS_WANT", "WS_KIND",
             "WS_CLK_STEP", "WS_CLK_POS", "WS_TOK_FLAGS", "WS_TEMP", "WS_TOPK", "WS_TOPP", "WS_MINP", "WS_SEED_LO",
             "WS_SEED_HI", "WS_CTL_LO", "WS_CTL_HI", "WS_STREAM_LO", "WS_STREAM_HI")
WS_COUNTERS = 32
TOKEN_WORDS = WORKSPACE[WORKSPACE.index("WS_TOK_FLAGS"):]
# WS_TOK_FLAGS: the decode control block is used; the token stream is written; temperature alone
# (Gumbel-max in the LM head); a top-k/top-p/min-p filter (the argmax task samples); a top-k of at
# most lower.LM_CAND (the LM-head tiles keep their largest logits: the sampler's candidate path);
# a top-p and/or min-p filter without a top-k (the LM-head tiles also give their Gumbel-max winners:
# the sampler's rejection path, sampling.cuh sample_pdraw)
TOKF_CTL, TOKF_STREAM, TOKF_GUMBEL, TOKF_FILTER, TOKF_CAND, TOKF_PDRAW = 1, 2, 4, 8, 16, 32
FPARAMS = ("FP_EPS", "FP_ROPE_SCALING", "FP_ATTN_SCALE")
VERSION = 2  # 2: four task arguments (qkv head slices)
# the kernel's parameters, in order: the launch ABI every driver packs (the trace buffer is null
# and its sizes 0 unless the kernel was generated with the per-task trace)
KERNEL_ARGS: tuple[tuple[str, str], ...] = (
    ("tab", "ptr"), ("ptrs", "ptr"), ("fparams", "ptr"), ("ws", "ptr"),
    ("step0", "i32"), ("nsteps", "i32"), ("pos0", "i32"), ("nforced", "i32"), ("spin_limit", "i32"),
    ("trace", "ptr"), ("trace_steps", "i32"), ("trace_tasks", "i32"),
)
# step0 < 0: the step and position come from the device clock (a step captured in a CUDA graph)
MAX_EOS = 4  # stop tokens the decode control block holds


def ctl_layout(B: int, L: int) -> dict[str, int]:
    """Word offsets of the decode control block (int32), which ``Megakernel.decode`` uploads and
    the kernel's embed / argmax / step loop read: per-row prompt lengths and budgets, the stop
    tokens (count, then up to ``MAX_EOS`` ids), then what the argmax tasks write: each row's stopped
    flag and, per step of the launch, whether every row had stopped after it (the host sets it to 1,
    the task of a row still going clears it)."""
    return dict(CTL_PLEN=0, CTL_MAXNEW=B, CTL_NEOS=2 * B, CTL_EOS=2 * B + 1, CTL_STOP=2 * B + 1 + MAX_EOS,
                CTL_DONE=3 * B + 1 + MAX_EOS, CTL_WORDS=3 * B + 1 + MAX_EOS + L)


def stream_words(B: int, L: int) -> int:
    """The host-mapped token stream: words 0..B-1 count the steps published for each row (the argmax
    task of the row writes it; the host takes the least), then tokens [L, B]."""
    return B + L * B


def slot_of(name: str) -> int | None:
    """Pointer-table slot of a task-graph buffer (None for ``pos``, which is a kernel argument)."""
    if name in _GLOBAL_BUF:
        return GLOBAL_SLOTS.index(_GLOBAL_BUF[name])
    if name.startswith("model.layers."):
        rest = name[len("model.layers."):]
        layer, _, tail = rest.partition(".")
        for role, hf in names.LAYER_WEIGHTS.items():
            if tail == hf:
                return layer_slot(int(layer), _WEIGHT_ROLE[role])
    head, _, layer = name.rpartition(".")
    if head in _ACT_ROLE and layer.isdigit():
        return layer_slot(int(layer), _ACT_ROLE[head])
    return None


def layer_slot(layer: int, role: str) -> int:
    return len(GLOBAL_SLOTS) + layer * len(LAYER_ROLES) + LAYER_ROLES.index(role)


def n_slots(n_layers: int) -> int:
    return len(GLOBAL_SLOTS) + n_layers * len(LAYER_ROLES)


def enums() -> list[list[str]]:
    """The C enums of the table layout, printed by the template."""
    def seq(items, prefix=""):
        return [f"{prefix}{x} = {i}" for i, x in enumerate(items)]

    return [
        [f"K_{k.upper()} = {i}" for i, k in enumerate(TASK_KINDS)],
        [f"S_{s.upper()} = {i}" for i, s in enumerate(GLOBAL_SLOTS)] + [f"NGLOBAL = {len(GLOBAL_SLOTS)}"],
        [f"R_{r.upper()} = {i}" for i, r in enumerate(LAYER_ROLES)] + [f"NPER = {len(LAYER_ROLES)}"],
        seq(HEADER),
        seq(RECORD) + [f"T_SIZE = {T_SIZE}"],
        seq(WAIT) + [f"WT_SIZE = {len(WAIT)}"],
        seq(REGION) + [f"RG_SIZE = {len(REGION)}"],
        [f"RF_PARITY = {RF_PARITY}", f"RF_CACHE = {RF_CACHE}", f"TF_WAIT_LOOP = {TF_WAIT_LOOP}",
         f"TF_SIGNAL_LOOP = {TF_SIGNAL_LOOP}", f"TF_STEP_FIRST = {TF_STEP_FIRST}"],
        seq(WORKSPACE) + [f"WS_COUNTERS = {WS_COUNTERS}"],
        [f"TOKF_CTL = {TOKF_CTL}", f"TOKF_STREAM = {TOKF_STREAM}", f"TOKF_GUMBEL = {TOKF_GUMBEL}",
         f"TOKF_FILTER = {TOKF_FILTER}", f"TOKF_CAND = {TOKF_CAND}", f"TOKF_PDRAW = {TOKF_PDRAW}"],
        seq(FPARAMS),
    ]


def double_buffered(tg: TaskGraph, sync: str) -> tuple[str, ...]:
    """Buffers with two parity copies: in nan mode, every activation some event polls."""
    if sync != "nan":
        return ()
    polled = {r.buffer for e in tg.events for r in e.regions}
    return tuple(b.name for b in tg.buffers if b.name in polled and b.role in ("act", "output"))


def region_desc(region: Region, shape: tuple[int, ...], dtype: str, role: str, parity: bool) -> list[int]:
    """One region as (slot, flags, base, run, n1, s1, n2, s2) over 32-bit words."""
    slot = slot_of(region.buffer)
    if slot is None:
        raise IRCheckError(f"region of {region.buffer} cannot be polled: no pointer slot")
    box = region.box
    if role == "cache":
        if dtype != "bf16" or len(shape) != 4:
            raise IRCheckError(f"cache {region.buffer} must be bf16 [B, nkv, L, hd], is {dtype} {list(shape)}")
        (b0, b1), (h0, h1), _, (d0, d1) = box
        nkv, L, hd = shape[1], shape[2], shape[3]
        if d0 % 2 or d1 % 2 or hd % 2:
            raise IRCheckError(f"cache region {box} of {region.buffer} is not made of whole 32-bit words")
        hw = hd // 2
        return [slot, RF_CACHE, (b0 * nkv + h0) * L * hw + d0 // 2, (d1 - d0) // 2, h1 - h0, L * hw, b1 - b0,
                nkv * L * hw]
    if dtype not in ("f32", "i32"):
        raise IRCheckError(f"polled buffer {region.buffer} is {dtype}; only f32/i32 activations can be polled")
    flags = RF_PARITY if parity else 0
    if len(shape) == 1:
        (a0, a1), = box
        return [slot, flags, a0, a1 - a0, 1, 0, 1, 0]
    if len(shape) == 2:
        (r0, r1), (c0, c1) = box
        n = shape[1]
        if c0 == 0 and c1 == n:
            return [slot, flags, r0 * n, (r1 - r0) * n, 1, 0, 1, 0]
        return [slot, flags, r0 * n + c0, c1 - c0, r1 - r0, n, 1, 0]
    if len(shape) == 3:  # [B, splits, N]: runs of columns, n1 splits, n2 batch rows
        (r0, r1), (s0, s1), (c0, c1) = box
        ns, n = shape[1], shape[2]
        if c0 == 0 and c1 == n:
            return [slot, flags, (r0 * ns + s0) * n, (s1 - s0) * n, r1 - r0, ns * n, 1, 0]
        return [slot, flags, (r0 * ns + s0) * n + c0, c1 - c0, s1 - s0, n, r1 - r0, ns * n]
    raise IRCheckError(f"polled activation {region.buffer} has {len(shape)} dimensions; 1 to 3 are supported")


@dataclass(frozen=True)
class Tables:
    ints: np.ndarray  # int32, the whole table
    n_events: int
    n_argmax: int
    double_buffered: tuple[str, ...]

    @property
    def ws_words(self) -> int:
        return WS_COUNTERS + self.n_events + 1

    def header(self, key: str) -> int:
        return int(self.ints[HEADER.index(key)])

    def record(self, worker: int, i: int) -> np.ndarray:
        q = self.header("HDR_QUEUE") + 2 * worker
        first = int(self.ints[q])
        at = self.header("HDR_RECORDS") + (first + i) * T_SIZE
        return self.ints[at: at + T_SIZE]

    def wait_entries(self, worker: int, i: int) -> np.ndarray:
        rec = self.record(worker, i)
        w0, n = int(rec[RECORD.index("T_WAIT_OFF")]), int(rec[RECORD.index("T_N_WAIT")])
        at = self.header("HDR_WAITS")
        return self.ints[at + w0 * len(WAIT): at + (w0 + n) * len(WAIT)].reshape(n, len(WAIT))


def build_tables(tg: TaskGraph, sched: Schedule) -> Tables:
    """Pack ``sched``'s queues of ``tg``'s tasks into the kernel's int32 tables."""
    sync = sched.sync
    bufs = {b.name: b for b in tg.buffers}
    dbuf = set(double_buffered(tg, sync))
    n_events = len(tg.events)
    kind_id = {k: i for i, k in enumerate(TASK_KINDS)}

    regions: list[list[int]] = []
    # each event's regions, contiguous in the region list (nan mode polls them)
    event_regions: list[tuple[int, int]] = []
    for e in tg.events:
        first = len(regions)
        for r in e.regions:
            b = bufs[r.buffer]
            if sync == "nan" and b.role != "cache" and r.buffer not in dbuf:
                raise IRCheckError(f"nan mode polls {r.buffer}, which is neither a cache nor double-buffered")
            regions.append(region_desc(r, b.shape, b.dtype, b.role, r.buffer in dbuf))
        event_regions.append((first, len(regions) - first))
    waits: list[list[int]] = []
    sigs: list[int] = []
    records: list[list[int]] = []
    queue: list[tuple[int, int]] = []
    n_argmax = sum(1 for t in tg.tasks if t.kind in STEP_END_KINDS)
    for q in sched.queues:
        queue.append((len(records), len(q)))
        for slot, tid in enumerate(q):
            t = tg.tasks[tid]
            w0 = len(waits)
            for e in t.waits:
                r0, nr = event_regions[e]
                waits.append([e, int(sched.thresholds[e]), r0, nr])
            s0 = len(sigs)
            sigs.extend(int(e) for e in t.signals)
            a0 = len(regions)
            if sync == "nan" and t.rearm:
                for r in t.writes:
                    if r.buffer in dbuf:
                        b = bufs[r.buffer]
                        regions.append(region_desc(r, b.shape, b.dtype, b.role, True))
            role = KIND[t.kind].loop_role
            flags = ((TF_WAIT_LOOP if role == STEP_START else 0) | (TF_SIGNAL_LOOP if role == STEP_END else 0)
                     | (TF_STEP_FIRST if slot == 0 else 0))
            if len(t.args) > N_ARGS:
                raise IRCheckError(f"task {t.id} ({t.kind}) has {len(t.args)} arguments; a record holds {N_ARGS}")
            args = list(t.args) + [0] * (N_ARGS - len(t.args))
            rec = [kind_id[t.kind], t.layer, *args, w0, len(t.waits), s0, len(t.signals), a0,
                   len(regions) - a0, t.id, flags]
            records.append(rec + [0] * (T_SIZE - len(rec)))

    header = [0] * HDR_SIZE
    parts: list[np.ndarray] = []
    at = HDR_SIZE

    def section(key: str, rows: list, width: int) -> None:
        nonlocal at
        header[HEADER.index(key)] = at
        arr = np.asarray(rows, dtype=np.int64).reshape(-1) if rows else np.zeros(0, dtype=np.int64)
        if arr.size != len(rows) * width:
            raise IRCheckError(f"table section {key} is ragged")
        parts.append(arr)
        at += arr.size

    section("HDR_QUEUE", [list(x) for x in queue], 2)
    section("HDR_RECORDS", records, T_SIZE)
    section("HDR_WAITS", waits, len(WAIT))
    section("HDR_SIGS", sigs, 1)
    section("HDR_REGIONS", regions, len(REGION))
    header[HEADER.index("HDR_N_EVENTS")] = n_events
    header[HEADER.index("HDR_N_ARGMAX")] = n_argmax
    header[HEADER.index("HDR_N_WORKERS")] = sched.num_workers
    header[HEADER.index("HDR_VERSION")] = VERSION
    ints = np.concatenate([np.asarray(header, dtype=np.int64)] + parts)
    if ints.max(initial=0) >= 2**31 or ints.min(initial=0) < -(2**31):
        raise IRCheckError("a table entry does not fit in int32")
    return Tables(ints.astype(np.int32), n_events, n_argmax, tuple(sorted(dbuf)))
