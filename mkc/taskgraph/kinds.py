"""The task kinds: one row per kind, read by lowering, the simulator, the cost model, the tables,
the verifier, the oracle and the pictures.

Adding a kind means a row here, a ``lower_<kind>`` in lower.py, a ``_<kind>`` method of the CPU
simulator (simulate.py) and a ``case K_<KIND>`` of the device code's ``run_task``;
tests/test_kinds.py fails until all of them exist. The order of ``KINDS`` is the numbering the
device code switches on (``K_EMBED = 0`` ...): append, never reorder.

``B`` batch, ``H`` hidden, ``I`` intermediate, ``hd`` head_dim, ``nh``/``nkv`` heads, ``L`` max_seq_len.
Activation buffers are fp32 ``[B, N]``; caches are ``[B, nkv, L, hd]``; ``l`` is ``task.layer``.

==========  =====================  ===================================================================
kind        args                   what it does
==========  =====================  ===================================================================
embed       c0, c1                 x0[:, c0:c1] = embed_table[ids[b], c0:c1]  (ids: ``ids`` buffer)
qkv         h0, h1, p0, p1         the pairs [h0*hd/2 + p0, (h1-1)*hd/2 + p1) of the concatenated
                                   (q | k | v) head space (nh + 2*nkv heads of hd rows, hd/2 pairs
                                   each): head h takes pairs [pa, pb), p0 in the first head, p1 in the
                                   last, whole heads between (tiling.qkv_segments). Rows of a q/k head:
                                   pa..pb and hd/2+pa..hd/2+pb (the RoPE pairs (i, i + hd/2)); of a v
                                   head: 2*pa..2*pb. Whole heads are (p0, p1) = (0, hd/2); otherwise
                                   a slice of one head or a run of at most hd/2 pairs crossing one
                                   head boundary, in even pair counts.
                                   y = rmsnorm(x_in) @ W_rows.T (+bias); q/k heads: RoPE at ``pos``;
                                   q rows -> q[l][:, rows]; k/v rows -> k_cache[l] / v_cache[l] at pos.
                                   With q/k norm (Qwen3) the norm needs whole heads, so qkv leaves q
                                   and k raw: q rows -> q[l], k rows -> kr[l][:, rows]; attn norms them
attn        b, g, s                the n_rep query heads of kv head g for batch row b, causal over
                                   split s of the cache positions [0, pos]: [s*T/S, (s+1)*T/S) with
                                   T = pos + 1 and S = dims["attn_split"] (only the last split reaches
                                   pos); with P = dims["attn_split_pos"] the last ceil(T / P) splits
                                   share [0, pos] that way and the others are empty
                                   (tiling.attn_split_range).
                                   S == 1: -> attn[l][b, g*n_rep*hd : (g+1)*n_rep*hd]; S > 1:
                                   the split's softmax-normalised output -> ao[l][b, s, same columns]
                                   and its log-sum-exp per head -> alse[l][b, s, g*n_rep : (g+1)*n_rep]
                                   (0 and -inf for a split with no positions).
                                   With q/k norm: q = RoPE(q_norm(q[l])); the last split also appends
                                   the new key RoPE(k_norm(kr[l][b, g])) -> k_cache[l][b, g] at pos
                                   (every split reads [0, pos) of the cache there)
oproj       r0, r1                 xa[l][:, r0:r1] = x_in[:, r0:r1] + attn[l] @ Wo[r0:r1].T; with S > 1
                                   attn[l][b, head] = sum_s softmax_s(alse[l][b, :, head]) ao[l][b, s, head]
gateup      r0, r1                 h[l][:, r0:r1] = silu(rmsnorm(xa[l]) @ Wg[r0:r1].T) * (.. @ Wu[r0:r1].T)
down        r0, r1                 xm[l][:, r0:r1] = xa[l][:, r0:r1] + h[l] @ Wd[r0:r1].T
lmhead      r0, r1, t              logits[:, r0:r1] = rmsnorm_final(x_last) @ W_lm[r0:r1].T, and tile
                                   t's per-row max -> amax_part[:, t] (f32) and the first (lowest)
                                   vocabulary index reaching it -> amax_idx[:, t] (i32)
argmax      b0, b1                 rows b0..b1-1: next_ids[b] = amax_idx[b, t*] where t* is the first
                                   tile whose amax_part[b, t] is the row's maximum (ties: lowest
                                   index), or the row sampled with a filter; one task per row at
                                   batch > 1 by default (lower.argmax_tasks), so rows sample at once
downk       r0, r1, k0, k1         down over chunk c = k0 / KC of h (KC = I / dims["down_split"]):
                                   y[:, r0:r1] = prev[:, r0:r1] + h[l][:, k0:k1] @ Wd[r0:r1, k0:k1].T,
                                   prev = xa[l] for the first chunk, else xmp[l][c - 1]; y = xm[l]
                                   for the last chunk, else xmp[l][c]. The chunks of a row tile add
                                   in chunk order (deterministic), and chunk c waits only for the
                                   gate/up tiles of its columns of h (lower.lower_downk, batch 1)
downp       r0, r1, k0, k1         down's partial product over chunk c = k0 / KC of h (KC = I /
                                   dims["down_sum"]): dp[l][c][:, r0:r1] = h[l][:, k0:k1] @
                                   Wd[r0:r1, k0:k1].T. A chunk's tasks stage a 1/C of h, so a phase
                                   of them moves 1/C of down's L2 bytes (lower.lower_down_sum)
dsum        r0, r1                 xm[l][:, r0:r1] = xa[l][:, r0:r1] + dp[l][0][:, r0:r1] + ... +
                                   dp[l][C-1][:, r0:r1], added in that order (deterministic); with
                                   xn_bf16 also xm's normed companions, as down writes them
qkvp        r0, r1, k0, k1         qkv's partial product over chunk c = k0 / KC of the normed input
                                   (KC = H / dims["qkv_sum"]; xn_bf16's bf16 copy, 1/rms not applied):
                                   qp[l][c][:, r0:r1] = xn[:, k0:k1] @ Wqkv[r0:r1, k0:k1].T, rows of
                                   the concatenated (q | k | v) matrix. Attention adds the chunks in
                                   order, scales by 1/rms, adds the bias, norms (q/k norm) and rotates
                                   q and k, and its last split appends the key and value at pos
                                   (lower.lower_qkvp)
==========  =====================  ===================================================================

``x_in`` of layer 0 is ``x0``; of layer l > 0 it is ``xm[l-1]``; ``x_last`` is ``xm[n_layers-1]``.
On disk (tasks.json) and in ``Task.args`` the arguments stay a plain tuple of ints; ``args_of``
names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# Loop roles: the kernel's decode loop orders step s+1 after step s through a loop counter that
# every STEP_END task bumps once per step and every STEP_START task waits for from the second step.
STEP_START = "start"
STEP_END = "end"

# Shared-memory rules (lower.SMEM_RULES sizes each): staged input + weight pipeline
# (taskgraph/smem.py's smem_plan), the attention working set (attn_smem), or a few reduction slots.
SMEM_GEMV, SMEM_ATTN, SMEM_SMALL = "gemv", "attn", "small"


class EmbedArgs(NamedTuple):
    c0: int
    c1: int


class QkvArgs(NamedTuple):
    h0: int
    h1: int
    p0: int
    p1: int


class AttnArgs(NamedTuple):
    b: int
    g: int
    s: int


class RowArgs(NamedTuple):
    r0: int
    r1: int


class DownkArgs(NamedTuple):
    r0: int
    r1: int
    k0: int
    k1: int


class LmheadArgs(NamedTuple):
    r0: int
    r1: int
    t: int


class NoArgs(NamedTuple):
    pass


class BatchArgs(NamedTuple):
    b0: int
    b1: int


@dataclass(frozen=True)
class TaskKind:
    name: str
    # a GEMV over a weight matrix: staged input and a weight pipeline whose first stages the task
    # before it on the worker prefetches; tensor-core rate in the cost model
    gemv: bool
    # a device trace's measured/predicted ratio scales its cost (attention is not: its time grows
    # with the position, and a trace's first steps sit at short positions)
    calibrated: bool
    loop_role: str | None  # STEP_START, STEP_END or None
    Args: type  # a NamedTuple naming Task.args
    color: str  # in every picture of a schedule
    smem: str  # SMEM_GEMV, SMEM_ATTN or SMEM_SMALL


KINDS: tuple[TaskKind, ...] = (
    TaskKind("embed", gemv=False, calibrated=True, loop_role=STEP_START, Args=EmbedArgs, color="#7f7f7f", smem=SMEM_SMALL),
    TaskKind("qkv", gemv=True, calibrated=True, loop_role=None, Args=QkvArgs, color="#1f77b4", smem=SMEM_GEMV),
    TaskKind("attn", gemv=False, calibrated=False, loop_role=None, Args=AttnArgs, color="#d62728", smem=SMEM_ATTN),
    TaskKind("oproj", gemv=True, calibrated=True, loop_role=None, Args=RowArgs, color="#ff7f0e", smem=SMEM_GEMV),
    TaskKind("gateup", gemv=True, calibrated=True, loop_role=None, Args=RowArgs, color="#2ca02c", smem=SMEM_GEMV),
    TaskKind("down", gemv=True, calibrated=True, loop_role=None, Args=RowArgs, color="#9467bd", smem=SMEM_GEMV),
    TaskKind("lmhead", gemv=True, calibrated=True, loop_role=None, Args=LmheadArgs, color="#8c564b", smem=SMEM_GEMV),
    TaskKind("argmax", gemv=False, calibrated=True, loop_role=STEP_END, Args=BatchArgs, color="#e377c2", smem=SMEM_SMALL),
    TaskKind("downk", gemv=True, calibrated=True, loop_role=None, Args=DownkArgs, color="#c5b0d5", smem=SMEM_GEMV),
    TaskKind("downp", gemv=True, calibrated=True, loop_role=None, Args=DownkArgs, color="#8064a2", smem=SMEM_GEMV),
    TaskKind("dsum", gemv=False, calibrated=True, loop_role=None, Args=RowArgs, color="#b5a3d0", smem=SMEM_SMALL),
    TaskKind("qkvp", gemv=True, calibrated=True, loop_role=None, Args=DownkArgs, color="#6baed6", smem=SMEM_GEMV),
)
KIND: dict[str, TaskKind] = {k.name: k for k in KINDS}

TASK_KINDS = tuple(k.name for k in KINDS)
GEMV_KINDS = tuple(k.name for k in KINDS if k.gemv)
CALIBRATED_KINDS = tuple(k.name for k in KINDS if k.calibrated)
STEP_START_KINDS = tuple(k.name for k in KINDS if k.loop_role == STEP_START)
STEP_END_KINDS = tuple(k.name for k in KINDS if k.loop_role == STEP_END)


def args_of(task) -> NamedTuple:
    """``task.args`` (a Task or a Draft) under its kind's names."""
    return KIND[task.kind].Args(*task.args)
