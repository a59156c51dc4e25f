"""Device memory: what one megakernel build needs resident on the GPU, against what the GPU has.

The runtime (``mkc.runtime.Megakernel._alloc``) allocates every buffer of the task graph once:
weights and KV caches in bf16, activations, outputs and constants in 32-bit words (int64 ids as
int32), a second parity copy of every activation an event polls in nan mode, the forced and
sampled token ids of every position, and the int32 tables, sync workspace and pointer table.
Nothing is allocated per step, so this sum is the build's whole footprint.

The GPU does not give all of ``Target.memory_bytes`` to one process: the CUDA/HIP context, the
loaded module and the caching allocator's slack take some. ``reserve`` keeps 5 % plus 1 GiB of
it back; a build fits when its need is at most the rest.

``config_need`` is the same model read off a config, weights and KV cache only: a lower bound of
``need``, so refusing on it before capture never refuses a build the verifier would accept.
"""

from __future__ import annotations

from mkc.target import GiB, Target

RESERVE_FRACTION = 20  # 1/20 = 5 % of the device
RESERVE_FIXED = GiB  # context, module and allocator slack

# Upper bounds (in 32-bit words) of what codegen's tables hold per item; codegen's own sizes are
# smaller (a task record is 16 words, a region 8), so a growing record does not silently outgrow them.
TABLE_WORDS = {"header": 64, "worker": 4, "task": 32, "wait": 8, "signal": 2, "region": 16, "event": 2}
POINTER_SLOT_BYTES = 16  # two 64-bit addresses per slot
SLOTS = {"global": 16, "layer": 32}
TRACE_BYTES_PER_TASK = 8 * 3 * 8  # mkc run --trace: 8 steps x (wait, start, end) int64 per task


def reserve(target: Target) -> int:
    return target.memory_bytes // RESERVE_FRACTION + RESERVE_FIXED


def usable(target: Target) -> int:
    return max(0, target.memory_bytes - reserve(target))


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def need(tg, sched) -> dict[str, int]:
    """Bytes by part: weights, kv_cache, activations, tables (and their total)."""
    polled = {r.buffer for e in tg.events for r in e.regions} if sched.sync == "nan" else set()
    parts = {"weights": 0, "kv_cache": 0, "activations": 0, "tables": 0}
    for b in tg.buffers:
        n = _numel(b.shape)
        if b.role == "weight":
            parts["weights"] += 2 * n
        elif b.role == "cache":
            parts["kv_cache"] += 2 * n
        elif b.role in ("act", "output", "const") and b.name != "ids":
            copies = 2 if b.name in polled and b.role != "const" else 1
            parts["activations"] += 4 * n * copies
    dims = dict(tg.dims)
    L, B = dims.get("L", 0), dims.get("B", getattr(tg, "batch", 1))
    parts["activations"] += 2 * 4 * L * B  # forced ids and argmax tokens per position
    w = TABLE_WORDS
    words = (w["header"] + w["worker"] * sched.num_workers + w["task"] * len(tg.tasks)
             + w["wait"] * sum(len(t.waits) for t in tg.tasks) + w["signal"] * sum(len(t.signals) for t in tg.tasks)
             + w["region"] * (sum(len(e.regions) for e in tg.events) + sum(len(t.writes) for t in tg.tasks))
             + w["event"] * len(tg.events))
    layers = dims.get("n_layers", 0)
    parts["tables"] = (4 * words + POINTER_SLOT_BYTES * (SLOTS["global"] + SLOTS["layer"] * layers)
                       + TRACE_BYTES_PER_TASK * len(tg.tasks))
    parts["total"] = sum(parts.values())
    return parts


def config_need(info, params: int, batch: int, max_seq_len: int) -> dict[str, int]:
    """Weights and KV cache from a ModelInfo and parameter count: a lower bound of ``need``."""
    weights = 2 * params
    kv = 2 * 2 * info.n_layers * batch * info.n_kv_heads * max_seq_len * info.head_dim
    return {"weights": weights, "kv_cache": kv, "total": weights + kv}


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n:.0f} B"


def budget(parts: dict[str, int], target: Target) -> dict:
    """The figures a report shows: the need by part, the device, the reserve, what is left."""
    return {**{k: int(v) for k, v in parts.items()}, "device": target.memory_bytes, "reserve": reserve(target),
            "usable": usable(target), "free_after": usable(target) - int(parts["total"]),
            "fits": target.memory_bytes == 0 or parts["total"] <= usable(target)}


def explain(parts: dict[str, int], target: Target, batch: int, max_seq_len: int, what: str = "") -> str:
    """Why it does not fit, with the figures and the ways out."""
    from mkc.target import TARGETS

    label = {"weights": "weights", "kv_cache": "KV cache", "activations": "activations", "tables": "tables"}
    shown = " + ".join(f"{label.get(k, k)} {gb(v)}" for k, v in parts.items() if k != "total" and v)
    head = (f"{what + ' ' if what else ''}at batch {batch} and --max-seq-len {max_seq_len} needs {gb(parts['total'])} "
            f"of device memory ({shown}), but one {target.name} has {gb(target.memory_bytes)}, of which "
            f"{gb(usable(target))} are usable (5 % and 1 GiB are kept for the CUDA context and allocator).")
    ways = []
    fixed = parts["total"] - parts.get("kv_cache", 0)
    per_pos = parts.get("kv_cache", 0) / max(1, max_seq_len)
    if fixed >= usable(target):
        head += f" The weights alone need {gb(parts.get('weights', 0))}: fewer positions or a smaller batch cannot help."
    else:
        room = int((usable(target) - fixed) // per_pos) if per_pos else 0
        if room >= 1:
            ways.append(f"fewer positions: --max-seq-len {min(room, max_seq_len - 1)} or less fits at batch {batch} "
                        f"(the KV cache takes {gb(per_pos * 1024)} per 1024 positions)")
        per_row = parts.get("kv_cache", 0) / max(1, batch)
        rows = int((usable(target) - fixed) // per_row) if per_row else 0
        if 1 <= rows < batch:
            ways.append(f"a smaller batch: --batch {rows} or less at this --max-seq-len")
    bigger = [t for t in TARGETS.values() if usable(t) >= parts["total"]]
    if bigger:
        ways.append("a GPU with more memory: " + ", ".join(f"--target {t.name} ({gb(t.memory_bytes)})" for t in bigger))
    ways.append("tensor parallelism across several GPUs (not in mkc yet)")
    return head + " Options: " + "; ".join(ways) + "."
