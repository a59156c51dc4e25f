"""The schedule: per-worker queues of tasks, predicted times, and the kernel's resource plan.

One worker is one resident thread block (one per SM). Each worker runs its queue in order,
once per decode step; a task waits on its events (counter >= threshold * (step + 1) in atomic
mode, no sentinel word in the event's regions in NaN mode) before it computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from mkc.errors import IRCheckError
from mkc.irjson import load_json, save_json

SYNC_MODES = ("atomic", "nan")
METHODS = ("round_robin", "list", "cpsat", "cpsat_place")  # how build.schedule places tasks


@dataclass(frozen=True)
class KernelPlan:
    """What the emitted kernel allocates; the verifier checks the schedule fits it."""

    threads: int  # threads per block
    smem_bytes: int  # dynamic shared memory per block
    regs_per_thread: int  # upper bound the kernel is compiled with (launch bounds)
    max_queue_len: int  # entries per worker queue the table holds
    max_waits: int  # events one task may wait on
    max_signals: int  # events one task may signal


@dataclass(frozen=True)
class Schedule:
    target: str
    batch: int
    sync: str  # atomic | nan
    num_workers: int
    queues: tuple[tuple[int, ...], ...]  # per worker, task ids in execution order
    start: tuple[float, ...]  # predicted start per task id, microseconds
    end: tuple[float, ...]
    thresholds: tuple[int, ...]  # per event id: count that means "fired" in one step (== triggers)
    plan: KernelPlan
    method: str  # round_robin | list | cpsat | cpsat_place
    makespan: float
    lower_bound: float
    stats: tuple[tuple[str, float], ...] = ()  # makespans of the baselines, solver status, ...

    def stat(self, key: str, default: float = float("nan")) -> float:
        return dict(self.stats).get(key, default)

    def worker_of(self) -> dict[int, int]:
        return {t: w for w, q in enumerate(self.queues) for t in q}

    def check(self, n_tasks: int | None = None) -> "Schedule":
        problems: list[str] = []
        if self.sync not in SYNC_MODES:
            problems.append(f"sync mode {self.sync!r} is not one of {SYNC_MODES}")
        if len(self.queues) != self.num_workers:
            problems.append(f"{len(self.queues)} queues for {self.num_workers} workers")
        seen: dict[int, int] = {}
        for w, q in enumerate(self.queues):
            for t in q:
                if t in seen:
                    problems.append(f"task {t} queued on worker {seen[t]} and worker {w}")
                seen[t] = w
        n = n_tasks if n_tasks is not None else len(self.start)
        missing = set(range(n)) - set(seen)
        if missing:
            problems.append(f"{len(missing)} tasks not queued, e.g. {sorted(missing)[:5]}")
        if len(self.start) != n or len(self.end) != n:
            problems.append(f"start/end have {len(self.start)}/{len(self.end)} entries for {n} tasks")
        if problems:
            raise IRCheckError("Schedule check failed:\n  " + "\n  ".join(problems[:50]))
        return self

    def save(self, path) -> None:
        save_json(self, path)

    @staticmethod
    def load(path) -> "Schedule":
        return load_json(Schedule, path).check()
