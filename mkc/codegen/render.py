"""Code generation: TaskGraph + Schedule + target -> kernel source (and tables).

Every decision is made here, in Python: the compile-time shapes, the GEMV tiling inside a task
(rows per warp ``G``, loads in flight ``U``, batch rows per pass ``BB``), the output/input
staging sizes and the shared-memory layout. The jinja2 template is a manifest that only prints
them as constants, names the target's dialect header (``mkc/targets/<vendor>/dialect.py`` says
which) and includes the device headers of ``mkc/codegen/include/mkc/``, which
``mkc.codegen.source`` inlines into one file; one set of headers serves every vendor.

The source specialises on shapes only. The schedule (queues, waits, signals, poll regions) is
the int32 table of ``mkc.codegen.tables``; weights, caches and activations are bound through a
pointer table when the kernel is loaded (``mkc.runtime.Megakernel``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import jinja2
import numpy as np

from mkc.errors import IRCheckError, ScheduleError
from mkc.schedule.cost import launched_smem
from mkc.schedule.ir import Schedule
from mkc.backend import for_target
from mkc.target import Target, get_target
from mkc.taskgraph import names
from mkc.taskgraph.ir import TaskGraph
from mkc.taskgraph.kinds import args_of
from mkc.taskgraph.lower import LM_CAND, LM_CAND_HEAD, LM_CAND_NOISE, LM_CAND_WORDS, LM_PREF
from mkc.taskgraph.plan import (PIPE_KS_FLUSH, DevicePlan, PlanKnobs, attn_preload, device_plan, sample_region,
                               sample_sizes, sample_smem)
from mkc.codegen import tables as T
from mkc.codegen.source import inline

TEMPLATE_DIR = Path(__file__).parent / "templates"
KERNEL_TEMPLATE = "kernel.j2"


# o-proj's early combine keeps a thread's loads of the split outputs in registers: at most this
# many float4s (llama-3.2-1b, 8 splits: 16; qwen3-8b's 4,096 columns need 32 and measured 1.2 %
# slower on the H200 with them in flight)
COMB_EARLY_MAX = 16


# from this batch on, lm_rows_at_once selects the LM-head tiles' candidates with a warp per row
# (sampling.cuh lm_candidates_warps); below it the block-wide select has fewer rows to serialise
CAND_WARP_ROWS = 4


# CodegenOptions.pipe_ksplit's bits: the GEMV kinds (kinds.cuh KS_BIT; o-proj's bit is down's
# where the heads' width equals the intermediate size)
KSPLIT_BITS = {"qkv": 1, "oproj": 2, "gateup": 4, "down": 8, "lmhead": 16}
KSPLIT_ALL = sum(KSPLIT_BITS.values())
KSPLIT_CHAIN = KSPLIT_BITS["qkv"] | KSPLIT_BITS["oproj"] | KSPLIT_BITS["down"]
# CodegenOptions.pipe_inflight's default, both paths: bulk copies in flight a block. Each task's
# signal is a release whose fence (MEMBAR.ALL.GPU) waits for every copy the SM has in flight
# (scripts/bench_fence.py, H100: 0.37 us alone, 1.2 / 3.2 / 12.7 us beside 2 / 4 / 11 pages in
# flight), while ~3 pages in flight a block already saturate HBM (2.32 / 3.03 / 3.23 / 3.20 TB/s at
# 1 / 2 / 4 / 11); BENCHMARKS.md, thirty-fifth session
PIPE_INFLIGHT = 3
# CodegenOptions.pipe_quiet's default: no copy issued from a GEMV task's last PIPE_QUIET pages to its
# signal, on the tensor-core path with atomic counters at batch 2..PIPE_QUIET_MAX_B. Where the
# consumers are slower than the stream (llama-3.2-1b b8, H100: 1.1665 / 1.1643 -> 1.1352 / 1.1242
# ms/token, -3.0 % in three calls; b4 -0.9 / 0.0 %, b2 -0.2 %; qwen3-8b b8 0.0 %) every signal takes 0.43 us
# instead of up to 1.7; where the stream is HBM-bound the copies it holds back are the next task's
# first pages, which then start late (b1 +5.2 %, b16 +2.1 %, b32 +3.0 %; nan, whose signals have
# no release fence, +3.6 % at b8). BENCHMARKS.md, thirty-eighth session
PIPE_QUIET = 2
PIPE_QUIET_MAX_B = 8
# stamps per traced task (CodegenOptions.trace): wait start, start, end, then marks inside it
# (common.cuh trace_mark; mkc.trace names them); the kernel's TRACE_STAMPS and the runtime's buffer
TRACE_STAMPS = 13


@dataclass(frozen=True)
class CodegenOptions:
    """Knobs of the emitted code (defaults are what the tests and benchmarks use)."""

    # nan mode: sentinel polls in flight per thread (H200, llama-3.2-1b: 4 beat 8 by 8-9 % at batch 1
    # and 6 % at batch 8, 16 lost 12-24 %; BENCHMARKS.md "Seventh session")
    poll_batch: int = 4
    poll_vec: bool = True  # nan mode: 16-byte polls where a region is 16-byte aligned (False: word by word)
    # nan mode: after the first armed unit is written, the thread's other armed units are polled
    # again together (False: each spun on in turn); None: at batch 1 only (-3.7 % there, +7 % at
    # batch 8, where its registers crowd the tensor-core GEMV)
    poll_reissue: bool | None = None
    preload: bool = True  # GEMV tasks issue their first weight loads before waiting on their inputs
    rows_per_warp: int = 2  # G: weight rows a warp streams at once
    loads_in_flight: int = 0  # U: 16-byte loads per row per lane per batch; 0 = by batch size
    # the LM-head tiles' sampler tails over several rows at once (sampling.cuh: candidates with a
    # warp per row from batch 4, histograms of several rows per pass); False: row after row. At
    # batch 8 it measured -1.7 % (top-k 50) to -2.5 % per filtered step (BENCHMARKS.md, eleventh
    # session); tests/test_gpu_tokens.py test_candidate_path_at_batch_8_with_a_warp_per_row checks
    # the warp-per-row select on cut tiles
    lm_rows_at_once: bool = True
    # the LM-head tiles' histogram counts (the candidates' radix select, the top-p bounds' bins) as
    # one shared-memory add per distinct bin of a warp (mk_warp_count) instead of one per lane: a
    # tile's logits fall in a few bins, where 32 lanes' adds to one word serialise (targets with a
    # warp match: NVIDIA; elsewhere the loops of one add per lane)
    tile_warp_adds: bool = True
    # tensor-core GEMV with the weight pipeline: a task whose rows are one block of at most 16
    # floats of accumulators per warp (1 tile at batch 32, 2 at 16, 4 at 8) keeps them across its
    # K-chunks and sums the warps' partials once, instead of once per chunk (gemv_mma.cuh
    # HOLD_TILES). None: from batch 16 (H200, same call: llama-3.2-1b b32 -3.0 %, b16 -1.0 %, b8
    # +0.2 %, qwen3-8b b8 +3.1 %; BENCHMARKS.md, twelfth session)
    mma_hold: bool | None = None
    # with mma_hold: the accumulator floats a warp may hold per lane (16: one tile at batch 32; 32:
    # two, batch 32's qkv tasks). Not measured yet (twenty-fourth session)
    mma_hold_floats: int = 16
    attn_chunk: int = 256  # positions per attention tile
    av_batch: int = 4  # attention: 16-byte V loads in flight per thread in the weighted sum over positions
    # attention loads its first K/V rows, pointers and q/k-norm immutables before waiting on q
    # (docs/sync.md "Attention's loads before its wait"); False: after it, the baseline to measure against
    attn_early: bool = True
    spin_hot: int = 64  # polls before the spin starts to sleep
    spin_max_ns: int = 256  # longest sleep between polls
    mma: bool | None = None  # tensor-core GEMV; None = where the batch is >= 2 and the target has a bf16 MMA
    # MMA path: weights stream through a ring of this many stages in shared memory filled with cp.async
    # (RING - 1 steps in flight per warp, across unit and task-wait boundaries); 0: registers, double-
    # buffered. None: 3 up to batch 16; past it the staged input needs the shared memory (H200, llama-
    # 3.2-1b, batch 32: 3.01 ms/token with a ring of 3 against 2.27 without; batch 8: 1.32 against 1.53)
    ring_stages: int | None = None
    # per-task device trace: [wait_start, start, end] timer stamps (ns) of every task of the first steps
    # of a launch, written by one thread per block into a buffer passed as three extra kernel arguments
    # (mkc.runtime.Megakernel allocates it, mkc.trace reads it). Off: the source is exactly the untraced one.
    trace: bool = False
    # atomic waits poll their counters relaxed and each polling thread issues one acquire fence after
    # its last poll (docs/sync.md "Acquire once"), instead of an ld.acquire per poll
    acquire_once: bool = False
    # the cross-task weight pipeline (DevicePlan.pipe_slots); None: where the plan has it (NVIDIA
    # sm_90+: batch 1 on the FMA path, batch 2-32 on the tensor-core path, pages of 16 rows,
    # gemv_mma.cuh gemv_task_mma_pipe), False: off (weights through registers or the cp.async ring,
    # as before), True: required
    pipe: bool | None = None
    # at most this many pages in the pipeline, up to 12 (0: 12, taskgraph/plan.py PIPE_DEFAULT_PAGES;
    # 5 on the tensor-core path, PIPE_MMA_PAGES)
    pipe_pages: int = 0
    # a pipeline page's columns: a multiple of 1024 on the FMA path (0: 1024, PIPE_COLS), of 512 on
    # the tensor-core path (0: 1024, PIPE_MMA_COLS: a bulk copy per row of 2 KiB streams faster than
    # one of 1 KiB)
    pipe_cols: int = 0
    # floats past the batch between two rows of the GEMV output block in shared memory, on the
    # tensor-core path (taskgraph/plan.py OUT_PAD, DevicePlan.out_ld; None: the plan's default): the
    # epilogues read it with a warp's lanes on consecutive rows of one batch column, which at a
    # stride of B floats all hit one bank at batch 32 (8 ways at batch 8); at B + 2 two at most
    out_pad: int | None = None
    # each task's record and its thread's wait/signal entries are read while the task before it runs
    # (off: at the task's start); the step loop then holds two records in registers. Measured on the
    # H200 (llama-3.2-1b b1, same call): 0.881 ms/token with it, 0.877 without, so it is off; the
    # tensor-core kernels have no registers for it anyway (spills at batch 32)
    task_ahead: bool = False
    # batch 1 (the weight-pipeline path): o-proj loads the split attention outputs before the
    # split weights are computed, so its input costs one round trip to L2 after the wait instead of
    # two (H200, llama-3.2-1b b1: 0.870 against 0.877 ms/token, same call). Measured and dropped:
    # loading o-proj's and down's residual right after the wait (qwen3-8b +0.9 %), qkv's RoPE angles
    # before the wait (+1 %), an L2 prefetch of the pages ahead of the producer's copies (+28 %)
    lean_comb: bool = True
    # batch 1 (the weight-pipeline path): the staged input in two planes (gemv_fma.cuh xs_at4), so a
    # warp's reads of it beside a weight row are conflict-free 16-byte words. The consumers' dot
    # products were bound by shared-memory wavefronts (per 16 KiB page: 8 warps x 4 KiB of inputs
    # at two wavefronts per 8 lanes, the page's weights and its bulk copies in), at about the
    # HBM's share of an SM, so the pages that landed during a wait were never caught up on
    # (BENCHMARKS.md, eighteenth session). False: the plain layout, as before
    xs_planes: bool = True
    # batch 1 (the weight-pipeline path): the GEMV kinds (KSPLIT_BITS, a mask) whose consumer warps
    # split each page's columns instead of taking a row each (pipe.cuh pipe_rows_ks), so a lane's
    # inputs are read once per page for its 8 rows rather than once per row (their staged input is
    # in the plain layout; xs_planes is for the others). 0 / False: a row per warp everywhere, True:
    # every kind. By
    # default the short tasks of the chain from one layer's down to the next o-proj (H200, same
    # call: llama-3.2-1b b1 0.7976 ms/token with none, 0.7891 with every kind, 0.7826 with these;
    # qwen3-8b b1 4.1131 / 4.1527 / 4.1254: where the streams are HBM-bound, faster consumers only
    # leave more of the ring in flight)
    pipe_ksplit: int = KSPLIT_CHAIN
    # at most this many of the pipeline's bulk copies in flight (issued, not landed; 0: as many as
    # the ring has free pages): the ring still fills while the consumers wait on an event, but
    # while they stream, fewer bytes queue at HBM, and a task's signal (its release fence waits for
    # the SM's copies in flight) comes sooner. None: PIPE_INFLIGHT (H200, llama-3.2-1b b8, two
    # calls: 1.0050 -> 0.9839 and 1.0033 -> 0.9834 ms/token with 3 of its 5 pages; H100, b1, two
    # rounds: 0.9868 / 0.9900 -> 0.9414 / 0.9480 with 3 of 11, 2 and 4 in between, nan b1 -2.2 %,
    # qwen3-8b b1 +0.0 %; the nineteenth session's +10 % at b1 was before the producer warpgroup)
    pipe_inflight: int | None = None
    # the pipeline's pages copied by the producer warp's 16-byte cp.async (LDGSTS, the generic
    # proxy; each lane arrives on the page's mbarrier once its copies have landed) instead of one
    # bulk copy a row: an experiment, whether a task's release fence then stops waiting for the
    # SM's copies in flight (scripts/bench_fence.py --only ldgsts). False: bulk copies
    pipe_ldgsts: bool = False
    # while the consumers close a GEMV task (from the wait for one of its last this many pages to
    # its signal) the producer issues no copy, so the signal's release fence waits for no copy
    # issued since those pages (pipe.cuh PIPE_TAIL). 0: off. None: PIPE_QUIET on the tensor-core
    # path with atomic counters at batch 2..PIPE_QUIET_MAX_B, else off (see there)
    pipe_quiet: int | None = None
    # the sampling code (temperature, top-k/top-p/min-p); False: greedy only, which Megakernel
    # launches for greedy steps (the kernels with it are built on the first sampling launch): the
    # sampler's code merely in the kernel made greedy steps 7 % (batch 1) and 12 % (batch 8) slower
    # on llama-3.2-1b (BENCHMARKS.md, "Eighth session")
    sampler: bool = True
    # with the sampler: the filtered sampler too (top-k/top-p/min-p in the argmax task, the tiles'
    # candidates, histograms and winners); False: temperature alone (Gumbel-max in the LM-head
    # tiles), the kernel Megakernel launches for steps that sample without a filter
    sample_filter: bool = True
    # the filtered sampler's functions inline (MK_OUTLINE __forceinline__) rather than out of line:
    # 1.2-2.7 % faster per filtered step on llama-3.2-1b batch 1 (BENCHMARKS.md, ninth session).
    # None: where it was measured and the GPU sampling tests ran on it, batch 1 with atomic counters
    # and the weight pipeline (sm_90+); elsewhere it spills (118 bytes at batch 1 in nan mode, more
    # on the tensor-core kernels, 168 registers under the pipeline), so they keep the calls
    sampler_inline: bool | None = None
    # top-p / min-p without a top-k: the LM-head tiles' Gumbel candidates first, the walk below
    # (pdraw_walk) or the winner checked, then rejection rounds (sampling.cuh sample_pdraw); False:
    # the exact path alone (the same draws as the walk's: for measurements)
    sample_pdraw: bool = True
    # its checks from the LM-head tiles' mass sums where they decide them (sample_pdraw's bounds)
    # before a pass over the row; False: always the pass. The bins held counts until the twenty-
    # seventh session (each bin valued at an edge: L and U within e^(1/8) of the truth); with masses,
    # top-p 0.9 took 1058.7 -> 1030.5 us a step on an H100 (-2.86 %), the same tokens (the twin: 0.157
    # passes a step instead of 0.357; a pass costs ~77 us in the trace)
    pdraw_bound: bool = True
    # top-p and/or min-p without a top-k: walk down the Gumbel order instead of the rejection rounds.
    # Each LM-head tile also keeps its PD_M best Gumbel scores per row (its bins: 64, not 128, to
    # make room in its block). Argmax takes the first candidate in the set: below the min-p key it
    # is out (exact), else the mass bounds put it in or out, and a pass runs only for a candidate
    # whose bin straddles the top-p threshold. The draw is the exact path's (Gumbel-max over the
    # set); where a tile's candidates run out, the exact path draws. scripts/pdraw_passes.py: 0.043
    # passes a step instead of 0.157 at top-p 0.9, 0.13 instead of 0.86 at top-p 0.5. Against the
    # rejection rounds (H200, llama-3.2-1b b1, alternated): top-p 0.9 -1.0 %, top-p 0.5 -5.0 %,
    # top-p 0.9 + min-p 0.05 -8.3 % a step (BENCHMARKS.md, twenty-eighth session). The tiles'
    # candidates' logits are loaded at once and those below the min-p key dropped before the walk
    # starts (not a load a round): top-p 0.9 + min-p 0.05 -3.1 % more (H100). None: on
    # where a block has a thread per LM-head tile (not the MI300X's 304 tiles: refused if asked)
    pdraw_walk: bool | None = None
    # the top-k path's first candidates (LM_PREF a tile) loaded once into registers by the argmax
    # task, in flight with the tiles' header words, and every pass over them reading them there,
    # not loaded again by each pass. None: at batch 1 (at batch 8 they took the sampling kernel's
    # spills from 12 to 40 bytes)
    cand_held: bool | None = None
    # with cand_held, a top-k without a top-p finds its threshold over the held candidates by
    # halving the key range (sampling.cuh held_kth, one block barrier a step) and draws over the
    # held slots, not with the histogram select's passes, collect and sort (top-k 50 -0.77 % a step
    # on an H200, BENCHMARKS.md twenty-ninth session). An 8-way search, a draw that gathered the set
    # first and the tiles' cut by the same search measured +0.2 to +0.4 % on an H100 (thirtieth
    # session) and are gone.
    cand_bisect: bool = True
    # the LM-head tiles write the Gumbel noise of their first LM_PREF candidates beside them
    # (lower.LM_CAND_NOISE; the Philox chain runs beside the rank loop of their candidates' write),
    # and the held draw reads it, not a Philox chain a slot in the set, one after another in a warp
    # (the draw took 2.2 us of the argmax task on an H200). With kth_exit below also on: top-k 50
    # -0.27 % a step on an H200, within that call's spread, and its draw-for-draw tests passed
    # (BENCHMARKS.md, thirtieth session, CALL=25). Traced (H100, thirty-first session, CALL=28): the
    # held draw 2.76 -> 1.33 us of the argmax task. Only where the held draw runs (cand_held,
    # cand_bisect)
    cand_noise: bool = True
    # the held search also takes the smallest key at or above each split: a count of exactly k ends
    # it (~9 steps instead of ~24 at top-k 50), a larger count raises its floor to that key. Measured
    # +0.11 % on top-k 50 (H200, CALL=25, within the call's +-0.4 % spread): off until a trace of its
    # threshold mark (scripts/trace_marks.py) says whether it pays
    kth_exit: bool = False
    # the LM-head tiles' sampler tails read the tile's logits from the GEMV's output in shared
    # memory (where the tile is one row block), not back through the L2; and their candidates (top-k;
    # the block-wide select, below batch 4) come from one count over 256 bins of the distance to the
    # tile's largest logit (16 an octave): the tokens of the bins above the one where the count passes
    # LM_CAND (16 to 64 of them, ties never split, word 1 the smallest kept key), not four radix
    # passes and two collect passes. A crowded bin (fewer than LM_PREF kept) falls back to the radix
    # select. Traced (H100, thirty-first session, CALL=28, top-k 50): the tile's epilogues to its cut
    # 7.5 -> 3.5 us, its end 4 us earlier. With the four below: -0.31 to -0.60 % on every filtered
    # step (BENCHMARKS.md, "Thirty-first session")
    tile_hist: bool = True
    # the walk's pass over the row (top-p: the row's mass and the mass above a candidate whose bin
    # straddles the threshold, ~0.13 passes a step at top-p 0.5 on a flat row, ~77 us each on an
    # H100) block-wide with the next chunk's loads in flight (row_scan), not a warp's segment of
    # 1,024 tokens loaded, then summed, one after another. Traced (H100, CALL=28, top-p 0.5): the
    # walk's end 18.98 -> 14.43 us after the argmax task's waits (the mean of 7 steps)
    walk_scan: bool = True
    # the held top-k search (cand_bisect) by one count over 256 bins of the key range above the cut
    # and a rank of the reaching bin's keys by one warp (five block barriers), not ~24 halvings
    # (sampling.cuh held_hist_kth; a bin of more than a warp's keys falls back to the halving).
    # Traced (H100, CALL=28, top-k 50): the threshold 7.8 -> 7.4 us after the merged partials (the
    # held loads' round trip is most of it)
    held_hist: bool = True
    # the walk's mass sums in 128 bins of 1/16 a unit of z from each tile's top (the same 8 units as
    # 64 bins of 1/8, the room that cand_noise's words made in the tile's block): a candidate's bin
    # straddles the top-p threshold about half as often, so fewer passes over the row
    # (scripts/pdraw_passes.py, a flat llama-3.2-1b row: 0.107 -> 0.060 a step at top-p 0.5, 0.033
    # either way at 0.9). The draws do not change (a pass only decides what the bounds could not).
    walk_fine: bool = True
    # with cand_held and cand_bisect, a top-k with a top-p (and/or min-p) also takes the held path:
    # top-k's threshold over the held slots as without a top-p, then the set's keys (about k of
    # them) gathered into shared memory, ranked, and the top-p threshold read off their masses from
    # the top (hist_select's result over that set: the same integer masses and target), and the draw
    # over the held slots with the tiles' noise; not two histogram selects over the held slots (each
    # a count, a scan, a collect and a sort). A set of more than SNB keys (ties) takes the selects.
    # With walk_once below (thirty-second session, CALL=30, an H100, alternated, the same tokens):
    # top-k 50 + top-p 0.9 + min-p 0.05 1035.5 -> 1018.3 us a step (-1.63 %; +3.77 % -> +2.30 % over
    # greedy), the steps it does not touch within +-0.3 %; the token tests passed on both
    held_p: bool = True
    # the walk (pdraw_walk): the LM-head tile's Gumbel-max winner is the first of the PD_M best
    # scores its mass-sum pass (lm_histogram) keeps anyway, so a top-p/min-p step skips the
    # epilogue's Gumbel pass (lm_gumbel: every token's Philox chain and two logs, computed again by
    # lm_histogram just after) and the tile writes its winner from that pass. The same words.
    # Measured with held_p (CALL=30, an H100): top-p 0.9 -0.32 %, top-p 0.5 -0.08 %, top-p 0.9 +
    # min-p 0.05 -0.08 % a step, greedy (the same kernel both sides) -0.22 %: within the call's
    # spread. Then traced (CALL=31, an H100, top-p 0.5): the LM-head tile's end 172.33 -> 170.52 us;
    # CALL=31 -0.17 to -0.25 % and CALL=32 (an H100, thirty-third session) -0.22 to -0.24 % on every
    # top-p/min-p step, the same tokens, its 30 token tests passed: on by default since
    walk_once: bool = True
    # batch 1, a filtered step: the argmax task's sampler merges the LM-head tiles' partials itself,
    # every load in flight before any is waited on (the partials', then the tiles' header words and
    # the held slots) and the cut taken between the merge's barriers (sampling.cuh sample_filtered,
    # HELD_EARLY): two block barriers fewer before the held loads and one after the cut. Traced
    # (thirty-third session, CALL=34, an H100, top-k 50): the held slots' keys 6.60 -> 3.83 us after
    # the task's waits, top-k's threshold 9.12 -> 6.72, the task's end 12.65 -> 11.20; the bench
    # -0.54 % (CALL=33) and -0.44 % (CALL=34) on top-k 50, the same tokens; the token tests passed.
    # With p_direct, against the kernel without both (CALL=35, alternated) every filtered step was
    # slower, by 0.17 to 0.70 %, and the traced steps ran ~50 us longer (its stack frame then 120
    # bytes: the held slots kept across the walk's out-of-line call). Its held pick now runs before
    # that call (frame 40 bytes). Against the default with the kernel always timed second
    # (thirty-fourth session, CALL=37, an H100): -0.34 to -0.91 % on every filtered step, greedy
    # -0.22 %; made the default, then measured with each round's order alternated (CALL=38): the
    # kernel without it -0.06 % (top-k 50), -0.10 % (all three), -0.24 to -0.28 % (the top-p steps,
    # whose merge moves into the sampler: partials merged 2.03 -> 2.99 us), greedy +0.05 %; traced,
    # the top-k 50 task ends 0.4 us later with it. Beside an A/A row (CALL=42: the default against a
    # second instance of itself, -0.04 to -0.37 % on the filtered steps) it moved them -0.22 to
    # +0.01 %: not resolved from the bench's own bias. It does not pay measurably: off
    held_early: bool = False
    # held_p's top-p threshold without ranking the set: each key's mass sum over the set's keys at
    # or above it, and the largest key whose sum reaches the target by one shared max (the same key:
    # tests/test_tokens.py's twin); two block barriers, not three, and no warp scan. Traced (top-k
    # 50 + top-p 0.9, an H100): top-p's threshold 2.4 us sooner (CALL=33), 1.3 us (CALL=34); the
    # token tests passed. Alone against the default, both orders (thirty-fourth session, CALL=39, an
    # H100): top-k 50 + top-p 0.9 + min-p 0.05 -0.22 %, greedy +0.16 %; made the default, the
    # kernel without it against it (CALL=40): every filtered step -0.28 to -0.63 %, the top-p steps
    # that it does not touch included, greedy +0.10 %, though its mark (top-p's threshold 1.2 us
    # sooner) moved as before. Then an A/A control (CALL=41: the default against a second instance of
    # itself) ran every filtered step 0.34-0.43 % faster: the second instance's bias, not a cost of
    # p_direct. Beside an A/A row (CALL=42, -0.04 to -0.37 %) p_direct moved them -0.10 to -0.21 %
    # (all three -0.20 against the A/A row's -0.04): not resolved. It does not pay measurably: off
    p_direct: bool = False
    # the LM-head tile's candidates (the block-wide select, batch 1-3) ranked by four threads a slot,
    # each over a quarter of the kept keys, not one thread a slot over all of them (sampling.cuh
    # cand_write_quad: the same ranks). Traced before it (thirty-fourth session, CALL=40, an H100,
    # top-k 50 + top-p 0.9): 4.4 us from the candidates collected to the task's end, where a top-p
    # tile takes 0.7 us from its sums to its end. Not yet run: off
    rank_quad: bool = False
    # the held path's gathers into shared memory (held_hist_kth's reaching bin, held_top_p's set)
    # by one add a warp after a scan of the lanes' counts (dialect mk_warp_take), not one a warp
    # for each of a thread's CAND_HELD slots (mk_warp_slot). Traced (thirty-third session, an H100,
    # top-k 50): the argmax task's end 12.92 -> 10.71 us (CALL=35, with held_early), 12.78 -> 11.75
    # (CALL=36, alone), its traced step no longer; the bench -0.39 to -0.52 % on every filtered step
    # against greedy's -0.27 % (CALL=36); the token tests passed (CALL=35, CALL=36): on by default
    gather_once: bool = True
    # nan mode, the weight-pipeline path (batch 1; on tensor cores without mma_hold, batch 2-8 by
    # default, o-proj excepted: with the held accumulators the polls made ptxas outline the task
    # dispatch and spill 3.7 KB): a GEMV task's staging loads of its input are that input's polls
    # (sync.cuh PollSkip; docs/sync.md "The poll is the load"), so its words cross the L2 once, not
    # once polled and once staged; False: polled in the wait, then staged
    stage_poll: bool = True
    # the filtered sampler's code leaves the layers' registers alone: it reads the thread index where
    # it uses it (common.cuh s_tid), so its index arithmetic is not hoisted out of the task loop into
    # registers held through every layer's tasks, and the rejection sampler's pass keeps one segment's
    # loads in flight per warp, not two. Either alone still spilled; with both the kernel with the
    # filtered sampler has no spills (llama-3.2-1b b1 48 bytes -> 0, qwen3-8b b1 60 -> 0; BENCHMARKS.md
    # seventeenth session). False: as before (the experiment's other side)
    sampler_lean: bool = True
    # the weight pipeline on targets that can move registers between warpgroups (sm_90a and later:
    # Capabilities.reg_realloc). Its producer warp beside 8 consumer warps puts 3 warps on a
    # sub-partition, so ptxas caps every thread at 168 registers (the batch-32 MMA loop then loads
    # its inputs one after another through the same 4 registers, and spills). Instead the producer is
    # a whole warpgroup (4 warps, one of which copies) that gives registers back (setmaxnreg.dec) and
    # the consumer warpgroups take this many per thread (setmaxnreg.inc, a multiple of 8; the
    # producer keeps what the block's launch budget leaves, at least 24). None: 216 at batch 32 and
    # more, 200 below, where the target can, else off (measured on the H200, twenty-third session,
    # against the producer warp: b1 -0.9 to -1.2 %, b1 nan -1.0 to -2.3 %, b8 +0.1 to +0.4 %, b32
    # -0.9 % at 200, -2.9 to -3.2 % at 232, -4.3 to -4.5 % at 216); 0: off (a producer
    # warp, as before); a number: that split, refused by name where the target or the block cannot.
    # Kernels without the weight pipeline have no producer and ignore it.
    consumer_regs: int | None = None
    # the weight pipeline's L2 prefetcher: the producer warpgroup's second warp walks the same pages
    # as the copier and prefetches each into L2 (cp.async.bulk.prefetch.L2), at most this many pages
    # past what the copier has issued, so HBM keeps streaming while the ring is full and the
    # consumers wait on an event. 0: none. Needs the producer warpgroup (consumer_regs).
    l2_ahead: int = 0
    # the tensor-core pipeline's tile sums (gemv_mma.cuh pipe_tile_sum): each warp's partials stored
    # in fragment order (16-byte stores without bank conflicts), summed in pairs in the same order,
    # where the batch is whole 8-column tiles; False: stored by (row, batch column), 8-way bank
    # conflicts at batch 32 (the kernels before)
    tile_sum_frag: bool = True
    # lower(xn_bf16=True)'s readers (qkv, gate/up, the LM head) add the H / 8 sums of squares of their
    # input (gemv_mma.cuh xss_total) with every load of a warp's batch rows issued before the first
    # add, where they fit XSS_WIDE_REGS registers a lane: one L2 round trip after the task's wait
    # instead of one per row (4 at batch 32); the same sums in the same order, so the same bits.
    # False: a row at a time (the forty-third session's kernels). Measured on an H100 (BENCHMARKS.md,
    # forty-fourth session): batch 32 -3.4 % (CALL=99) and -2.5 %, 16 -1.3 %, 8 -1.1 %, 4 -0.1 %, qwen3-8b
    # b8 -0.4 % (CALL=100): on.
    xss_wide: bool = True
    # the GEMV epilogues' items in tiles of 4 rows x 8 batch columns a warp (kinds.cuh epi_item;
    # tensor-core path with the weight pipeline, batch a multiple of 8) rather than 32 rows of one
    # column: the dot products' shared-memory reads without 32-way bank conflicts at batch 32,
    # against 16-byte global stores;
    # and the LM head's per-block maxima with a warp's lanes on consecutive words (twenty-fifth
    # session: the same 32-way conflicts, ~2 us a block of 128 rows at batch 32, 8 blocks a task).
    # False: the rows of one column (the kernels before). Measured on an H100 (twenty-fifth session):
    # b32 -2.5 / -1.3 %, b8 -0.7 %, the same bits. With bf16 activations (the default since the
    # twenty-sixth session) it no longer pays: on an H100, b32 1.8802 / 1.8720 ms against 1.8547
    # without (batch 32's kernel spills 112 / 320 bytes with both, 16 / 32 without), b8 1.1834 /
    # 1.1694 against 1.1695 / 1.1726, b16 1.3935 against 1.3925. Off.
    epi_tiles: bool = False
    # o-proj's and down's residual loaded as soon as their input is staged, into registers, instead
    # of in the epilogue after the dot products (kinds.cuh ResidKind RESID_PF): one L2 round trip
    # off each of their tasks' critical path, on every path and batch where a task is one block whose
    # epilogue items fit RESID_PF_MAX a thread. Measured on an H100 (twenty-fifth session): b1
    # -0.4 / -0.1 %, nan -0.5 %, b8 -0.2 %, b32 +1.1 / +0.4 %: within the spread, off
    resid_early: bool = False

    def knobs(self) -> PlanKnobs:
        """The options that change the device plan."""
        return PlanKnobs(mma=self.mma, ring_stages=self.ring_stages, rows_per_warp=self.rows_per_warp,
                         loads_in_flight=self.loads_in_flight, attn_chunk=self.attn_chunk, pipe=self.pipe,
                         pipe_pages=self.pipe_pages, pipe_cols=self.pipe_cols, out_pad=self.out_pad)


@dataclass(frozen=True)
class KernelConfig:
    """What the kernel is compiled for and how it is launched."""

    model: str
    target: str
    arch: str
    sync: str
    threads: int  # launched per block
    consumer_threads: int  # of which run the tasks (the rest: the weight pipeline's producer warp)
    smem_bytes: int  # dynamic shared memory to launch with
    smem_needed: int  # what the layout uses (<= smem_bytes)
    num_workers: int
    kernel_name: str
    qk_norm: bool
    qkv_bias: bool
    sentinel: int = T.SENTINEL
    canon_nan: int = T.CANON_NAN
    consts: tuple[tuple[str, int], ...] = ()
    B: int = 1
    mma_gemv: bool = False  # GEMV kinds on tensor cores (bf16 staging, mma m16n8k16)
    ring: int = 0  # MMA path: stages of the cp.async weight ring (0: register double buffer)
    trace: bool = False  # per-task timer stamps (CodegenOptions.trace): 3 more kernel arguments

    def const(self, key: str) -> int:
        return dict(self.consts)[key]


def dialect_for(target: Target):
    """The vendor dialect the template prints through (from the target's backend)."""
    return for_target(target).dialect(target)


def source_name(target: Target) -> str:
    """``kernel.cu`` / ``kernel.hip``: the emitted source's file name for ``target``."""
    return f"kernel.{for_target(target).source_ext}"


def plan_for(tg: TaskGraph, target: Target, options: CodegenOptions) -> DevicePlan:
    """The task graph's device plan, or one from the same planner where ``options`` force other
    choices (or a task graph saved before plans existed has none)."""
    knobs = options.knobs()
    if tg.plan is not None and knobs == PlanKnobs():
        return tg.plan
    return device_plan(dict(tg.dims), target, knobs)


# CodegenOptions.consumer_regs=None: what the consumers take, by batch (H200, twenty-third session)
CONSUMER_REGS_AUTO = ((32, 216), (1, 200))


def auto_consumer_regs(plan: DevicePlan, target: Target, batch: int) -> int:
    """CodegenOptions.consumer_regs=None: CONSUMER_REGS_AUTO's count for ``batch`` where the target
    can move registers and the block can split them that way, else 0 (a producer warp)."""
    regs = next(n for b, n in CONSUMER_REGS_AUTO if batch >= b)
    try:
        reg_split(regs, plan, target)
    except IRCheckError:
        return 0
    return regs


def reg_split(consumer_regs: int, plan: DevicePlan, target: Target) -> tuple[int, int]:
    """CodegenOptions.consumer_regs: the threads to launch (the consumers and a producer warpgroup)
    and the registers per thread the producer warpgroup keeps, from the block's launch budget
    (``__launch_bounds__(threads, 1)``: 168 at 384 threads) less what the consumers take."""
    wg = 128  # setmaxnreg adjusts whole warpgroups
    why = []
    if not for_target(target).capabilities(target).reg_realloc:
        why.append(f"{target.name} ({target.arch}) cannot move registers between warpgroups")
    if plan.threads % wg:
        why.append(f"the {plan.threads} consumer threads are not whole warpgroups of {wg}")
    if consumer_regs % 8 or not 24 <= consumer_regs <= 256:
        why.append(f"consumer_regs {consumer_regs} is not a multiple of 8 in [24, 256]")
    threads = plan.threads + wg
    launch = for_target(target).launch_limits(target).regs_for(threads)
    producer = ((threads * launch - plan.threads * consumer_regs) // wg) // 8 * 8
    if not why and producer < 24:
        why.append(f"consumer_regs {consumer_regs} leaves the producer warpgroup {producer} registers per thread "
                   f"(at least 24; the block launches with {launch} per thread)")
    if not why and consumer_regs < launch:
        why.append(f"consumer_regs {consumer_regs} is below the {launch} the block launches with")
    if why:
        raise IRCheckError("CodegenOptions.consumer_regs: " + "; ".join(why))
    return threads, producer


# CodegenOptions.resid_early: at most this many residual values held a thread
RESID_PF_MAX = 4


def pdraw_walks(options: CodegenOptions, ntiles: int, nt: int) -> bool:
    """Whether the filtered sampler walks the Gumbel order (CodegenOptions.pdraw_walk; None: where a
    block has a thread per LM-head tile) rather than running sample_pdraw's rejection rounds."""
    return options.pdraw_walk if options.pdraw_walk is not None else ntiles <= nt


def resid_pf(tg: TaskGraph, B: int, NT: int, out_cap: int, epi_tiles: bool, out_ld: int) -> int:
    """The residual values a thread of an o-proj or down task holds from its staged input to its
    epilogue (CodegenOptions.resid_early): enough for the largest such task of one block (rows up
    to the output block's, out_cap // out_ld), 0 where that is more than RESID_PF_MAX (the epilogue then
    loads them itself, as without the option)."""
    rows = [args_of(t).r1 - args_of(t).r0 for t in tg.tasks if t.kind in ("oproj", "down", "downk")]
    rows = max((r for r in rows if r <= out_cap // out_ld), default=0)
    if epi_tiles:  # (kinds.cuh epi_items: rows rounded up to 4)
        rows = -(-rows // 4) * 4
    n = -(-rows * B // NT)
    return n if n <= RESID_PF_MAX else 0


def kernel_config(tg: TaskGraph, sched: Schedule, target: Target, options: CodegenOptions | None = None) -> KernelConfig:
    """Compile-time constants and the shared-memory layout for ``tg`` scheduled as ``sched``."""
    o = options or CodegenOptions()
    d = dict(tg.dims)
    B, H, I, NH, NKV, HD = d["B"], d["H"], d["I"], d["nh"], d["nkv"], d["hd"]
    V, L, NL, NTILES = d["V"], d["L"], d["n_layers"], d["n_lm_tiles"]
    NREP = NH // NKV
    ATT_SPLIT = d.get("attn_split", 1)  # attention tasks per (batch row, kv head): splits of the sequence
    plan = plan_for(tg, target, o)
    NT = plan.threads  # consumer threads; a producer warp (plan.producer_warps) comes on top
    dialect = dialect_for(target)
    WARP = dialect.warp_size
    problems = []
    for name, k in (("hidden", H), ("intermediate", I), ("heads*head_dim", NH * HD)):
        if k % 8:
            problems.append(f"{name} = {k} is not a multiple of 8 (16-byte weight rows)")
    if HD % 8:
        problems.append(f"head_dim {HD} is not a multiple of 8 (16-byte cache rows)")
    if NT % WARP or NT > 1024 or NT < 4 * WARP:
        problems.append(f"{NT} threads per block is not a multiple of {WARP} in [{4 * WARP}, 1024]")
    elif NT % (HD // 2):
        problems.append(f"{NT} threads per block is not a multiple of head_dim/2 = {HD // 2}")
    # the consumers must be the schedule's; options may add or drop the producer warp (the runtime
    # checks the residency of what it launches)
    if sched.plan.threads not in (NT, NT + WARP):
        problems.append(f"the schedule's kernel plan has {sched.plan.threads} threads per block, the device plan "
                        f"{NT} consumers (+ {WARP} with the weight pipeline's producer): schedule the task graph again")
    if sched.num_workers > target.sms:
        problems.append(f"{sched.num_workers} workers but {target.name} has {target.sms} SMs: not all resident")
    if problems:
        raise IRCheckError("cannot generate the kernel: " + "; ".join(problems))

    launch_threads, producer_regs, consumer_regs = plan.launch_threads, 0, 0
    if plan.producer_warps:  # (a plan without the weight pipeline has no producer to shrink)
        consumer_regs = o.consumer_regs if o.consumer_regs is not None else auto_consumer_regs(plan, target, B)
        if consumer_regs:
            launch_threads, producer_regs = reg_split(consumer_regs, plan, target)
    l2_ahead = o.l2_ahead if plan.pipe_slots > 0 else 0
    if l2_ahead < 0 or (l2_ahead and not consumer_regs):
        raise IRCheckError(f"CodegenOptions.l2_ahead={o.l2_ahead}: a count of pages >= 0, and its prefetch warp is "
                           f"the producer warpgroup's (consumer_regs > 0 on a target that can move registers)")
    if o.trace and not for_target(target).capabilities(target).trace_timer:
        raise ScheduleError(f"the per-task trace needs a device timer; mkc has none for {target.name} ({target.arch})")
    mma, ring = plan.mma, plan.ring
    # lower(h_bf16=True): gate/up's output h in bf16, staged by down as it is (tensor-core path); with
    # NaN sentinels a 16-bit value cannot be its own flag (tables.region_desc polls 32-bit words)
    # (lower(attn_bf16=True): the same for attention's output, o-proj's input)
    h_bf16 = any(b.name == names.h_act(0) and b.dtype == "bf16" for b in tg.buffers)
    attn_bf16 = any(b.name == names.attn_act(0) and b.dtype == "bf16" for b in tg.buffers)
    # (lower(xn_bf16=True): the residual stream's normed bf16 copies, staged by qkv, gate/up, LM head)
    xn_bf16 = any(b.name == names.xn_of("x0") for b in tg.buffers)
    for on, what, flag in ((h_bf16, "h (gate/up's output)", "h_bf16"), (attn_bf16, "attention's output", "attn_bf16"),
                           (xn_bf16, "normed copies of the residual stream", "xn_bf16")):
        if on and (not mma or sched.sync == "nan"):
            raise ScheduleError(f"the task graph keeps {what} in bf16, which needs atomic counters and the tensor-core "
                                f"GEMV; this build has {sched.sync} sync and the {'tensor-core' if mma else 'FMA'} path: "
                                f"lower it again with {flag}=False")
    G, U, BB, KC, out_cap = plan.rows_per_warp, plan.loads_in_flight, plan.batch_rows, plan.kc, plan.out_cap
    out_ld = plan.out_ld or B  # (0: a plan saved before the padding)
    ATT_CH = plan.attn_chunk
    off = plan.offsets()
    mma_consts = dict(KCB=plan.kcb, XST=plan.kcb + 32, RING=ring) if mma else {}
    # the early combine: the pipeline path's o-proj (batch 1) over split attention, where a
    # thread's loads of the splits' outputs fit in COMB_EARLY_MAX float4 registers
    comb_loads = -(-NH * HD // 4 // NT) * ATT_SPLIT
    # the K-split consumers where the plan has room for their partials (a plan saved before it had
    # that room keeps a row per warp)
    # (True: every kind, False: none, else a mask of KSPLIT_BITS)
    if o.pipe_quiet is not None and o.pipe_quiet < 0:
        raise ScheduleError(f"pipe_quiet={o.pipe_quiet!r}: a number of pages, 0 (off) or more")
    quiet = o.pipe_quiet if o.pipe_quiet is not None else (
        PIPE_QUIET if mma and sched.sync == "atomic" and 2 <= B <= PIPE_QUIET_MAX_B else 0)
    ks_mask = KSPLIT_ALL if o.pipe_ksplit is True else int(o.pipe_ksplit)
    if not 0 <= ks_mask <= KSPLIT_ALL:
        raise ScheduleError(f"pipe_ksplit={o.pipe_ksplit!r}: a mask of the GEMV kinds "
                            f"{', '.join(f'{k} {v}' for k, v in KSPLIT_BITS.items())} (0..{KSPLIT_ALL}), True or False")
    part_bytes = next((n for name, _, n in plan.regions if name == "OFF_PART"), 0)
    ksplit = (ks_mask and plan.pipe_slots > 0 and not mma
              and part_bytes >= 4 * 2 * PIPE_KS_FLUSH * plan.pipe_rows * (NT // WARP))
    inflight = o.pipe_inflight if o.pipe_inflight is not None else PIPE_INFLIGHT
    pipe_consts = dict(PIPE_SLOTS=plan.pipe_slots, PIPE_ROWS=plan.pipe_rows, PIPE_COLS=plan.pipe_cols, PIPE_LD=plan.pipe_ld,
                       LEAN_COMB=int(o.lean_comb and plan.pipe_slots > 0 and not mma and ATT_SPLIT > 1
                                     and comb_loads <= COMB_EARLY_MAX),
                       XS_PLANES=int(o.xs_planes and plan.pipe_slots > 0 and not mma),
                       PIPE_KSPLIT=ks_mask if ksplit else 0, PIPE_KS_FLUSH=PIPE_KS_FLUSH,
                       PIPE_INFLIGHT=inflight if 0 < inflight < plan.pipe_slots else 0,
                       PIPE_L2_AHEAD=l2_ahead, PIPE_LDGSTS=int(o.pipe_ldgsts and plan.pipe_slots > 0),
                       # (at most the ring's pages: a slot's tail bit then names one page)
                       PIPE_TAIL=min(int(quiet), plan.pipe_slots) if plan.pipe_slots > 0 and not o.pipe_ldgsts else 0)
    needed = plan.smem_bytes
    if needed > target.smem_per_block:
        raise ScheduleError(f"the kernel needs {needed} bytes of shared memory per block, more than the "
                            f"{target.smem_per_block} {target.name} allows (batch {B}, K-chunk {KC})")
    # the argmax task's scratch: the plan's OFF_SAMPLE region, emitted as SAMPLE_BASE (a plan saved
    # before it had the region gets it here)
    off.pop("OFF_SAMPLE", None)
    _, sample_base, sample_bytes = next((r for r in plan.regions if r[0] == "OFF_SAMPLE"), None) or \
        sample_region(plan.regions, B, NT // WARP)
    SAMPLE_HISTS, SAMPLE_NB = sample_sizes(B, NT // WARP, off.get("OFF_FLAG", 0) - sample_base)
    SAMPLE_SMEM = sample_smem(B, SAMPLE_HISTS, SAMPLE_NB)
    # a larger region holds the scratch at its start: task graphs saved by the versions that left room
    # after it for the filtered sampler's copies (twenty-first and twenty-second sessions) render as they are
    if SAMPLE_SMEM > sample_bytes:
        raise IRCheckError(f"the device plan's sampler region holds {sample_bytes} B, this mkc's sampler needs {SAMPLE_SMEM}: "
                           f"the task graph was saved by another version; compile the model again")
    # the candidate blocks' layout is this mkc's (lower.LM_CAND_WORDS): a task graph saved by a version
    # with another layout would have the kernel write past the buffer the runtime allocates from it
    cand_shape = tuple(tg.buffer(names.LM_CAND).shape)
    if cand_shape != (B, NTILES * LM_CAND_WORDS):
        raise IRCheckError(f"the task graph's {names.LM_CAND} buffer is {cand_shape}, this mkc lays it out as "
                           f"{(B, NTILES * LM_CAND_WORDS)}: it was saved by another version; compile the model again")
    # the LM-head tiles' candidates (sampling.cuh lm_candidates) need their logits' keys in the
    # sampler's region A; without room, or on AMD, the filtered sampler always reads the whole row
    lm_rows = max((args_of(t).r1 - args_of(t).r0 for t in tg.tasks if t.kind == "lmhead"), default=0)
    amax_rows = max((args_of(t).b1 - args_of(t).b0 for t in tg.tasks if t.kind == "argmax"), default=1)
    region_a = max(SAMPLE_HISTS * 2048, 32 * SAMPLE_NB)
    cand_ok = int(4 * lm_rows + 1552 <= region_a)  # keys, 256 bins, 4 words, 64 (key, index) slots
    smem = launched_smem(needed, sched.plan, target)
    hold = o.mma_hold if o.mma_hold is not None else B >= 16
    if o.mma_hold_floats not in (16, 32, 64):
        raise IRCheckError(f"CodegenOptions.mma_hold_floats={o.mma_hold_floats}: 16, 32 or 64 accumulator floats a lane")
    walk = pdraw_walks(o, NTILES, NT)
    pd_walk = o.sampler and o.sample_filter and o.sample_pdraw and o.pdraw_bound and walk
    held = o.cand_held if o.cand_held is not None else B == 1  # (the noise's only reader is the held draw)
    if o.pdraw_walk and o.sampler and NTILES > NT:  # sampling.cuh sample_pwalk: a thread per LM-head tile
        raise IRCheckError(f"CodegenOptions.pdraw_walk needs a thread per LM-head tile: {NTILES} tiles, "
                           f"{NT} threads a block on {target.name}")
    # the epilogues' tiles where they were measured: the weight pipeline's tensor-core path (without
    # it, the cp.async ring or registers, batch 32's greedy kernel spills 12 bytes with them)
    epi_tiles = bool(o.epi_tiles and mma and B % 8 == 0 and plan.pipe_slots > 0)
    consts = dict(
        NT=NT, WARP=WARP, B=B, H=H, I=I, NH=NH, NKV=NKV, HD=HD, NREP=NREP, V=V, NL=NL, L=L, NTILES=NTILES,
        KC=KC, G=G, U=U, BB=BB, OUT_LD=out_ld, QKV_ROWS=out_cap // out_ld, RESID_RB=out_cap // out_ld,
        GATEUP_RB=out_cap // (2 * out_ld), ATT_CH=ATT_CH, **off, SPIN_HOT=o.spin_hot,
        SPIN_MAX_NS=o.spin_max_ns,
        ATT_SPLIT=ATT_SPLIT, ATT_SPAN=d.get("attn_split_pos", 0), DOWN_KC=I // d.get("down_split", 1), DOWN_PC=I // d.get("down_sum", 1), QKV_PC=H // d.get("qkv_sum", 1), ATT_PRE=attn_preload(HD, NT, ATT_CH), ATT_EARLY=int(o.attn_early), POLL_BATCH=o.poll_batch, POLL_VEC=int(o.poll_vec), POLL_REISSUE=int(o.poll_reissue if o.poll_reissue is not None else B == 1), AV_BATCH=o.av_batch, PRELOAD=int(o.preload), TOKENS_CAP=L, ACQUIRE_ONCE=int(o.acquire_once), SAMPLER=int(o.sampler), SAMPLE_FILTER=int(o.sampler and o.sample_filter), SAMPLER_INLINE=int(o.sampler and o.sample_filter and (o.sampler_inline if o.sampler_inline is not None else
                                                                               B == 1 and sched.sync == "atomic" and plan.pipe_slots > 0)), SAMPLE_PDRAW=int(o.sampler and o.sample_filter and o.sample_pdraw), SAMPLER_LEAN=int(o.sampler and o.sample_filter and o.sampler_lean), PDRAW_BOUND=int(o.sampler and o.sample_filter and o.sample_pdraw and o.pdraw_bound), PDRAW_WALK=int(pd_walk), WALK_ONCE=int(pd_walk and o.walk_once), CAND_HELD_ON=int(held), CAND_BISECT=int(o.cand_bisect), KTH_EXIT=int(o.kth_exit), TILE_HIST=int(o.tile_hist), WALK_SCAN=int(o.walk_scan), HELD_HIST=int(o.held_hist), WALK_FINE=int(o.walk_fine), HELD_P=int(o.held_p and held and o.cand_bisect), P_DIRECT=int(o.p_direct), GATHER_ONCE=int(o.gather_once), RANK_QUAD=int(o.rank_quad), HELD_EARLY=int(o.sampler and o.sample_filter and o.held_early and held and o.cand_bisect and B == 1 and NTILES <= NT), CAND_NOISE=int(o.cand_noise and held and o.cand_bisect), TASK_AHEAD=int(o.task_ahead), **mma_consts,
        **pipe_consts,
        **T.ctl_layout(B, L), MAX_EOS=T.MAX_EOS, SAMPLE_SMEM=SAMPLE_SMEM,
        SAMPLE_HISTS=SAMPLE_HISTS, SAMPLE_NB=SAMPLE_NB, SAMPLE_BASE=sample_base,
        LM_CAND=LM_CAND, LM_PREF=LM_PREF, LM_CAND_HEAD=LM_CAND_HEAD, LM_CAND_NOISE=LM_CAND_NOISE, LM_CAND_WORDS=LM_CAND_WORDS, LM_ROWS=max(lm_rows, 1), CAND_OK=cand_ok,
        AMAX_ROWS=amax_rows, LM_ROWS_AT_ONCE=int(o.lm_rows_at_once),
        LM_CAND_WARPS=int(o.lm_rows_at_once and B >= CAND_WARP_ROWS), TILE_WARP_ADDS=int(o.tile_warp_adds and for_target(target).capabilities(target).warp_match),
        MMA_HOLD=int(hold), HOLD_FLOATS=o.mma_hold_floats, TILE_SUM_FRAG=int(o.tile_sum_frag and mma and B % 8 == 0),
        EPI_TILES=int(epi_tiles), H_BF16=int(h_bf16), ATTN_BF16=int(attn_bf16), XN_BF16=int(xn_bf16),
        XN_GROUP=names.XN_GROUP, XSS_WIDE=int(o.xss_wide and xn_bf16),
        RESID_PF=resid_pf(tg, B, NT, out_cap, epi_tiles, out_ld) if o.resid_early else 0,
        REG_SPLIT=consumer_regs, PRODUCER_REGS=producer_regs,
        STAGE_POLL=int(o.stage_poll and sched.sync == "nan" and plan.pipe_slots > 0 and not (mma and hold)),
    )
    return KernelConfig(
        model=tg.model, target=target.name, arch=target.arch, sync=sched.sync, threads=launch_threads,
        consumer_threads=NT, smem_bytes=smem,
        smem_needed=needed, num_workers=sched.num_workers, kernel_name=dialect.kernel_name,
        qk_norm=bool(d.get("qk_norm", 0)), qkv_bias=bool(d.get("qkv_bias", 0)), consts=tuple(consts.items()), B=B,
        mma_gemv=mma, trace=bool(o.trace), ring=ring,
    )


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


# Constants only one GEMV path defines (kernel_config: the MMA path's K-chunk, staging stride and
# ring). The other path's code still compiles (it is a discarded `if constexpr` branch), so the
# names exist in every build.
_PATH_CONSTS = ("KCB", "XST", "RING", "OFF_RING", "OFF_PIPE", "OFF_MBAR")


def _template_vars(cfg: KernelConfig, target: Target) -> dict:
    have = {k for k, _ in cfg.consts}
    # a producer warp beside the consumers: their barriers count only them (the dialect keys on it)
    macros = (("MKC_BAR_THREADS", cfg.consumer_threads),) if cfg.threads != cfg.consumer_threads else ()
    if dict(cfg.consts).get("SAMPLER_INLINE"):  # CodegenOptions.sampler_inline (the dialect keys on it)
        macros += (("MK_OUTLINE", "__forceinline__"),)
    return dict(cfg=cfg, d=dialect_for(target), consts=cfg.consts, enums=T.enums(), macros=macros,
                fallbacks=tuple((k, 0) for k in _PATH_CONSTS if k not in have), trace_stamps=TRACE_STAMPS)


def config_header(cfg: KernelConfig, target: Target) -> str:
    """The ``mkc/config.cuh`` of ``cfg``: the manifest's prologue (dialect, constants, enums) alone,
    against which any device header compiles as a translation unit of its own."""
    template = _environment().get_template(KERNEL_TEMPLATE)
    body = "".join(template.blocks["config"](template.new_context(_template_vars(cfg, target))))
    return "#pragma once\n" + body


def render(cfg: KernelConfig, target: Target) -> str:
    """The kernel source for ``cfg``: the manifest with the device headers inlined (one file)."""
    template = _environment().get_template(KERNEL_TEMPLATE)
    return inline(template.render(**_template_vars(cfg, target)))


def generate(tg: TaskGraph, sched: Schedule, target: Target | str | None = None,
             options: CodegenOptions | None = None) -> tuple[str, KernelConfig, T.Tables]:
    """Source, kernel config and tables for one (task graph, schedule)."""
    target = get_target(target or sched.target) if not isinstance(target, Target) else target
    if sched.target != target.name or tg.target != target.name:
        raise ScheduleError(f"schedule for {sched.target!r} / task graph for {tg.target!r} used with target "
                            f"{target.name!r}")
    cfg = kernel_config(tg, sched, target, options)
    tables = T.build_tables(tg, sched)
    return render(cfg, target), cfg, tables


def emit(tg: TaskGraph, sched: Schedule, target: Target | str, bdir: str | Path,
         options: CodegenOptions | None = None) -> dict[str, Path]:
    """Write kernel.<ext>, tables.npz and kernel.json into ``bdir``; returns their paths. kernel.<ext>
    is the kernel greedy steps launch (no sampling code) and, where ``options.sampler``,
    kernel.sampling.<ext> the one sampling steps launch (``Megakernel`` builds both from the task
    graph and schedule; these are what it compiles)."""
    target = get_target(target) if isinstance(target, str) else target
    o = options or CodegenOptions()
    source, cfg, tables = generate(tg, sched, target, replace(o, sampler=False))
    bdir = Path(bdir)
    bdir.mkdir(parents=True, exist_ok=True)
    src = bdir / source_name(target)
    src.write_text(source)
    extra = {}
    if o.sampler:
        sampling = bdir / source_name(target).replace("kernel.", "kernel.sampling.", 1)
        sampling.write_text(generate(tg, sched, target, replace(o, sampler=True))[0])
        extra["sampling_source"] = sampling
    tab = bdir / "tables.npz"
    np.savez(tab, ints=tables.ints, n_events=np.int64(tables.n_events), n_argmax=np.int64(tables.n_argmax),
             double_buffered=np.array(tables.double_buffered, dtype=str))
    meta = bdir / "kernel.json"
    meta.write_text(json.dumps(asdict(cfg), indent=1) + "\n")
    return {"source": src, "tables": tab, "meta": meta, **extra}
