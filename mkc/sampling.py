"""How the megakernel picks each next token (``Megakernel.decode(..., sampling=...)``).

Temperature 0 is greedy (the default: the kernel's unchanged argmax path). Otherwise the kernel
samples softmax(logits / temperature) restricted, in Hugging Face's order, to the top-k tokens,
then the smallest top set holding top-p of the (renormalised) mass, then the tokens whose
probability is at least min-p times the largest; ties at a threshold are kept. The draw is
Gumbel-max with counter-based noise, Philox4x32-10 keyed by the seed and counted by (vocabulary
index, batch row, position), so one seed reproduces a run bit for bit, however it is split into
launches. ``tests/sampling_ref.py`` is the numpy twin of the device code (``sampling.cuh``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k
    top_p: float = 1.0  # 1: no top-p
    min_p: float = 0.0  # 0: no min-p
    seed: int = 0  # 0 <= seed < 2**64

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def check(self) -> list[str]:
        """What is wrong with these settings (empty when they can be used)."""
        out = []
        t = self.temperature
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
            out.append(f"temperature must be a finite number >= 0 (0: greedy), got {t!r}")
        if not (isinstance(self.top_k, int) and not isinstance(self.top_k, bool) and self.top_k >= 0):
            out.append(f"top_k must be an int >= 0 (0: off), got {self.top_k!r}")
        if not (isinstance(self.top_p, (int, float)) and 0.0 < self.top_p <= 1.0):
            out.append(f"top_p must be in (0, 1] (1: off), got {self.top_p!r}")
        if not (isinstance(self.min_p, (int, float)) and 0.0 <= self.min_p <= 1.0):
            out.append(f"min_p must be in [0, 1] (0: off), got {self.min_p!r}")
        if not (isinstance(self.seed, int) and not isinstance(self.seed, bool) and 0 <= self.seed < 2**64):
            out.append(f"seed must be an int in [0, 2**64), got {self.seed!r}")
        return out

    def filtered(self, vocab: int) -> bool:
        """A top-k, top-p or min-p threshold applies (as the kernel sees the fp32 settings)."""
        return not self.greedy and (0 < self.top_k < vocab or np.float32(self.top_p) < np.float32(1.0)
                                    or np.float32(self.min_p) > 0)

    def kernel_words(self, vocab: int) -> tuple[int, list[int]]:
        """The workspace's token flags (``tables.TOKF_GUMBEL`` / ``TOKF_FILTER`` [+ ``TOKF_CAND`` or ``TOKF_PDRAW``]) and sampler words
        (``WS_TEMP`` .. ``WS_SEED_HI``: fp32 as bits) for a build of this vocabulary."""
        from mkc.codegen import tables as T
        from mkc.taskgraph.lower import LM_CAND

        flags = 0 if self.greedy else (T.TOKF_FILTER if self.filtered(vocab) else T.TOKF_GUMBEL)
        if flags == T.TOKF_FILTER and 0 < self.top_k <= LM_CAND and self.top_k < vocab:
            flags |= T.TOKF_CAND  # the top-k set lies among the LM-head tiles' candidates
        elif flags == T.TOKF_FILTER and not 0 < self.top_k < vocab:
            flags |= T.TOKF_PDRAW  # top-p / min-p alone: the walk down the tiles' Gumbel candidates (or rejection rounds)
        bits = [int(np.array(x, dtype=np.float32).view(np.uint32)) for x in (self.temperature, self.top_p, self.min_p)]
        k = self.top_k if self.top_k < vocab else 0
        return flags, [bits[0], int(k), bits[1], bits[2], self.seed & 0xFFFFFFFF, self.seed >> 32]


GREEDY = Sampling()
