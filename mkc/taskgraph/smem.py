"""Shared-memory plan of the device code: one formula that lowering and codegen both use.

GEMV-like tasks stage their fp32 input activations ``[B, kc]`` in shared memory one K-chunk at a
time and stream weights through a pipeline of ``stages`` buffers of ``stage_bytes`` each. The
chunk ``kc`` is the largest multiple of 256 (or of 64 where no multiple of 256 fits, as at
batch > 32 on 64 KiB targets), at most K, whose staging fits the block's budget minus two weight
pipelines (this task's and the next task's prefetch), so every batch size 1..64 fits every target.
"""

from __future__ import annotations

from dataclasses import dataclass

from mkc.target import Target
from mkc.taskgraph.kinds import GEMV_KINDS  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class SmemPlan:
    kc: int  # K-chunk of staged input, elements
    stages: int  # weight pipeline stages
    stage_bytes: int

    def gemv_bytes(self, batch: int, k: int) -> int:
        return 4 * batch * min(k, self.kc) + self.stages * self.stage_bytes


def smem_plan(target: Target, batch: int, k_max: int) -> SmemPlan:
    budget = target.smem_per_block
    stage_bytes = 16 * 1024 if budget >= 128 * 1024 else 4 * 1024
    stages = 4
    # leave room for this task's weight pipeline and the next task's prefetched one
    staging = budget - 2 * stages * stage_bytes
    per_row = staging // (4 * batch)
    # 64 KiB targets at batch > 32 cannot stage 256 columns: fall back to a multiple of 64
    kc = per_row // 256 * 256 or max(64, per_row // 64 * 64)
    kc = min(kc, -(-k_max // 256) * 256)
    return SmemPlan(kc, stages, stage_bytes)


def attn_smem(batch: int, n_rep: int, head_dim: int, chunk: int = 64) -> int:
    """Attention per (batch row, kv head): q of n_rep heads, a chunk of K and V rows, scores."""
    return 4 * n_rep * head_dim + 2 * 2 * chunk * head_dim + 4 * n_rep * chunk + 1024
