"""Helpers for the code generator's tests: model shapes, graphs, task graphs and a plain schedule.

``rr_schedule`` deals tasks to workers round robin in task-id order (lowering emits tasks in
dependency order), with the kernel plan the code generator needs. It does not go through
``mkc.schedule`` so codegen tests do not depend on the solver (or on ortools being installed).
"""

from __future__ import annotations

from mkc.capture.canonical import build_graph, rope_inv_freq
from mkc.capture.graph import ModelInfo
from mkc.capture.registry import MODELS_DIR, read_config  # noqa: F401 - gpu_fixtures takes MODELS_DIR from here
from mkc.capture.registry import model_info as _model_info
from mkc.schedule.ir import KernelPlan, Schedule
from mkc.target import Target, get_target


def rope_theta(name: str) -> float:
    cfg = read_config(name)
    return float(cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))


def model_info(name: str) -> tuple[ModelInfo, float]:
    """(ModelInfo, rope theta) of a bundled model, from its config.json alone (no transformers)."""
    return _model_info(name), rope_theta(name)


def shape_graph(name: str, batch: int = 1, max_seq_len: int = 512):
    info, theta = model_info(name)
    return build_graph(info, batch, max_seq_len, rope_inv_freq(info.head_dim, theta))


def taskgraph(name: str, batch: int = 1, max_seq_len: int = 512, target: str | Target = "h200"):
    from mkc.taskgraph import lower

    target = get_target(target) if isinstance(target, str) else target
    return lower(shape_graph(name, batch, max_seq_len), target)


def rr_schedule(tg, target: str | Target = "h200", sync: str = "atomic", workers: int | None = None,
                threads: int | None = None) -> Schedule:
    target = get_target(target) if isinstance(target, str) else target
    if threads is None:  # what the device plan launches (a producer warp beside 256 consumers at batch 1)
        threads = tg.plan.launch_threads if tg.plan is not None and tg.target == target.name else 256
    W = min(workers or target.sms, target.sms)
    queues = [[] for _ in range(W)]
    for t in tg.tasks:
        queues[t.id % W].append(t.id)
    n = len(tg.tasks)
    plan = KernelPlan(threads=threads, smem_bytes=0, regs_per_thread=min(255, 65536 // threads // 8 * 8), max_queue_len=max(len(q) for q in queues),
                      max_waits=max(len(t.waits) for t in tg.tasks), max_signals=max(len(t.signals) for t in tg.tasks))
    return Schedule(target.name, tg.batch, sync, W, tuple(tuple(q) for q in queues), tuple([0.0] * n),
                    tuple([0.0] * n), tuple(e.triggers for e in tg.events), plan, "round_robin", 0.0, 0.0).check(n)
