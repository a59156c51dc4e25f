"""The host side of ``Megakernel.decode``: checking its arguments, the per-row prompts, budgets and
stop tokens as the kernel's decode control block (``tables.ctl_layout``), and reading the new
tokens back from the token log. Pure Python: no device.

The kernel's rule, which ``row_outputs`` mirrors: at step k row b is fed ``rows[b][k]`` while
``k < len(rows[b])``, else its own previous token; the token it emits at step ``len(rows[b]) - 1 + j``
is its j-th new token; it stops after ``max_new[b]`` new tokens or after one in the stop set (kept).
After the first step k0 after which every row has stopped, steps k0 + 1 runs (every block sees the
flag only from step k0 + 2 on: tokens.cuh) and the launch ends: ``min(nsteps, k0 + 2)`` steps ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mkc.codegen import tables as T
from mkc.errors import MkcError


@dataclass(frozen=True)
class DecodePlan:
    plens: tuple[int, ...]  # per batch row (padding: 0)
    max_new: tuple[int, ...]  # per batch row (padding: 0, stopped from the start)
    eos: tuple[int, ...]  # at most T.MAX_EOS
    n_rows: int  # rows given (the rest is padding)
    nsteps: int  # steps of the launch, if no row stops early

    def ids(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """The forced tokens as the kernel's ids buffer, [max prompt length, B] int32 (0 past a row's end)."""
        B, P = len(self.plens), max(self.plens)
        out = np.zeros((P, B), dtype=np.int32)
        for b, r in enumerate(rows):
            out[: len(r), b] = r
        return out

    def ctl_head(self) -> np.ndarray:
        """The words of the control block the host writes: prompt lengths, budgets, stop tokens, the
        rows' stop flags (0; argmax sets them at step 0) and, for each step of the launch, the
        all-stopped flag at 1 (an argmax task with a row still going clears it: tokens.cuh)."""
        B = len(self.plens)
        at = T.ctl_layout(B, 1)
        head = np.zeros(at["CTL_DONE"] + self.nsteps, dtype=np.int32)
        head[at["CTL_DONE"]:] = 1
        head[at["CTL_PLEN"]: at["CTL_PLEN"] + B] = self.plens
        head[at["CTL_MAXNEW"]: at["CTL_MAXNEW"] + B] = np.minimum(self.max_new, 2**31 - 1)
        head[at["CTL_NEOS"]] = len(self.eos)
        head[at["CTL_EOS"]: at["CTL_EOS"] + len(self.eos)] = self.eos
        return head


def _int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise MkcError(f"{what} must be an int, got {x!r}")
    return int(x)


def stop_ids(eos_token_id, vocab: int) -> tuple[int, ...]:
    """None, an int, or a list of up to ``T.MAX_EOS`` ints in [0, vocab)."""
    if eos_token_id is None:
        return ()
    ids = [eos_token_id] if isinstance(eos_token_id, (int, np.integer)) else list(eos_token_id)
    if len(ids) > T.MAX_EOS:
        raise MkcError(f"eos_token_id has {len(ids)} ids; the kernel stops on at most {T.MAX_EOS}")
    out = tuple(_int(e, "eos_token_id") for e in ids)
    for e in out:
        if not 0 <= e < vocab:
            raise MkcError(f"eos_token_id {e} is outside the vocabulary [0, {vocab})")
    return out


def as_rows(rows) -> list[list[int]]:
    """Rows of ids as lists of Python ints (a 2-D array or tensor is a list of rows)."""
    if hasattr(rows, "tolist"):
        rows = rows.tolist()
    return [r.tolist() if hasattr(r, "tolist") else list(r) for r in rows]


def plan_decode(rows, max_new_tokens, eos_token_id, *, batch: int, vocab: int, max_seq_len: int,
                start_pos: int = 0) -> DecodePlan:
    """Check ``decode``'s arguments against the build (batch, vocabulary, max_seq_len) and plan the launch.
    Rows may be lists, numpy arrays or (CPU) tensors of ids."""
    rows = as_rows(rows)
    if not rows:
        raise MkcError("decode needs at least one row of token ids")
    if len(rows) > batch:
        raise MkcError(f"{len(rows)} rows given, the kernel was compiled for batch {batch}")
    for b, r in enumerate(rows):
        if not r:
            raise MkcError(f"row {b} has no token ids; every row needs at least one (padding rows are left out)")
        for k, t in enumerate(r):
            t = _int(t, f"token {k} of row {b}")
            if not 0 <= t < vocab:
                raise MkcError(f"token id {t} of row {b} (position {k}) is outside the vocabulary [0, {vocab})")
    if isinstance(max_new_tokens, (int, np.integer)) and not isinstance(max_new_tokens, bool):
        mx = [int(max_new_tokens)] * len(rows)
    else:
        mx = [_int(m, "max_new_tokens") for m in max_new_tokens]
        if len(mx) != len(rows):
            raise MkcError(f"max_new_tokens has {len(mx)} entries for {len(rows)} rows")
    if any(m < 0 for m in mx):
        raise MkcError(f"max_new_tokens must be >= 0, got {min(mx)}")
    start_pos = _int(start_pos, "start_pos")
    if start_pos < 0:
        raise MkcError(f"start_pos must be >= 0, got {start_pos}")
    pad = batch - len(rows)
    plens = tuple(len(r) for r in rows) + (0,) * pad
    max_new = tuple(mx) + (0,) * pad
    nsteps = max(p + m - 1 if m > 0 else p for p, m in zip(plens, max_new))
    if start_pos + nsteps > max_seq_len:
        worst = max(range(len(rows)), key=lambda b: plens[b] + max_new[b])
        raise MkcError(f"row {worst}: {plens[worst]} prompt tokens + {max_new[worst]} new from position {start_pos} "
                       f"need positions up to {start_pos + nsteps - 1}, past max_seq_len {max_seq_len}")
    return DecodePlan(plens, max_new, stop_ids(eos_token_id, vocab), len(rows), nsteps)


def steps_run(done: np.ndarray, nsteps: int) -> int:
    """Steps the launch ran, from the kernel's per-step all-stopped flags (``ctl[CTL_DONE:]``)."""
    hit = np.flatnonzero(np.asarray(done[:nsteps]) != 0)
    return nsteps if hit.size == 0 else min(nsteps, int(hit[0]) + 2)


def row_outputs(log: np.ndarray, plan: DecodePlan, steps: int | None = None) -> list[list[int]]:
    """Each given row's new tokens from the token log [steps, B] (the first ``steps`` steps): EOS
    included, nothing after it, at most its budget."""
    steps = log.shape[0] if steps is None else steps
    eos = set(plan.eos)
    out = []
    for b in range(plan.n_rows):
        toks = []
        for k in range(plan.plens[b] - 1, min(steps, plan.plens[b] - 1 + plan.max_new[b])):
            t = int(log[k, b])
            toks.append(t)
            if t in eos:
                break
        out.append(toks)
    return out
