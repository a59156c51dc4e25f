"""Time the megakernel on the GPU and print the results table (of this run and of the gpu tests).

    python3 scripts/gpu_bench.py [--variants b1-atomic,b1-nan] [--report gpu_report.jsonl]

llama-3.2-1b shape with random bf16 weights: ms/token of the one-launch decode loop
(``generate``: N steps in one launch, CUDA events, median of 3 after a warm-up), and wall time
of one ``__call__`` (one launch + sync + error check). Floor: the bytes a step streams
(``mkc.bench.model_bytes``: weights with an untied embedding as one row per batch row, plus the KV
read, averaged over the timed steps' positions) / 4.2 TB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

READ_BW = 4.2e12  # measured H200 read bandwidth (docs/design.md "Measured on the H200")
_CARD_BW: list[float] = []


def card_read_bw() -> float:
    """The read bandwidth of the card the rows run on, measured once a process (mkc.bench's 4 GiB
    sum, as `mkc bench` measures it): READ_BW is the H200's, and an H100 reads ~3.1 TB/s."""
    if not _CARD_BW:
        from mkc.bench import read_bandwidth

        _CARD_BW.append(read_bandwidth())
    return _CARD_BW[0]


def random_weights(tg, seed: int = 0) -> dict:
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    out = {}
    for b in tg.buffers:
        if b.role == "weight":
            if len(b.shape) == 1:
                out[b.name] = (1.0 + 0.1 * torch.randn(b.shape, device="cuda", generator=g)).bfloat16()
            else:
                out[b.name] = (0.02 * torch.randn(b.shape, device="cuda", generator=g)).bfloat16()
    return out


VARIANTS = {
    # name: (model, batch, sync, scheduler, codegen options)
    "b1-atomic": ("llama-3.2-1b", 1, "atomic", "list", {}),
    "b1-nan": ("llama-3.2-1b", 1, "nan", "list", {}),
    "b1-atomic-U16": ("llama-3.2-1b", 1, "atomic", "list", {"loads_in_flight": 16}),
    "b1-atomic-G4": ("llama-3.2-1b", 1, "atomic", "list", {"rows_per_warp": 4}),
    "b1-atomic-rr": ("llama-3.2-1b", 1, "atomic", "round_robin", {}),
    "b1-atomic-cpsat": ("llama-3.2-1b", 1, "atomic", "cpsat", {}),
    "b1-atomic-nopreload": ("llama-3.2-1b", 1, "atomic", "list", {"preload": False}),
    "b1-nan-nopreload": ("llama-3.2-1b", 1, "nan", "list", {"preload": False}),
    "b1-atomic-mma": ("llama-3.2-1b", 1, "atomic", "list", {"mma": True}),
    # batch 1 on tensor cores with the weight pipeline (16-row tiles, bf16 inputs)
    "b1-atomic-mmapipe": ("llama-3.2-1b", 1, "atomic", "list", {"mma": True, "pipe": True}),
    "b1-atomic-mmapipe-if0": ("llama-3.2-1b", 1, "atomic", "list", {"mma": True, "pipe": True, "pipe_inflight": 0}),
    # batch >= 2 runs the GEMV kinds on tensor cores (mma.sync); "-ffma" is the fp32 FMA path before it
    "b8-atomic": ("llama-3.2-1b", 8, "atomic", "list", {}),
    "b8-nan": ("llama-3.2-1b", 8, "nan", "list", {}),
    "b8-atomic-ffma": ("llama-3.2-1b", 8, "atomic", "list", {"mma": False}),
    "b32-atomic": ("llama-3.2-1b", 32, "atomic", "list", {}),
    "b2-atomic": ("llama-3.2-1b", 2, "atomic", "list", {}),
    "b4-atomic": ("llama-3.2-1b", 4, "atomic", "list", {}),
    "b16-atomic": ("llama-3.2-1b", 16, "atomic", "list", {}),
    "b32-atomic-ffma": ("llama-3.2-1b", 32, "atomic", "list", {"mma": False}),
    "b8-atomic-U8": ("llama-3.2-1b", 8, "atomic", "list", {"loads_in_flight": 8}),
    "b32-atomic-U8": ("llama-3.2-1b", 32, "atomic", "list", {"loads_in_flight": 8}),
    "b8-atomic-ring0": ("llama-3.2-1b", 8, "atomic", "list", {"ring_stages": 0}),
    "b8-atomic-ring4": ("llama-3.2-1b", 8, "atomic", "list", {"ring_stages": 4}),
    "b8-atomic-ring6-U2": ("llama-3.2-1b", 8, "atomic", "list", {"ring_stages": 6, "loads_in_flight": 2}),
    "b32-atomic-ring3": ("llama-3.2-1b", 32, "atomic", "list", {"ring_stages": 3}),
    "q8-b8-atomic-ring0": ("qwen3-8b", 8, "atomic", "list", {"ring_stages": 0}),
    "q8-b8-atomic-ring4": ("qwen3-8b", 8, "atomic", "list", {"ring_stages": 4}),
    "q8-b8-atomic-ring6-U2": ("qwen3-8b", 8, "atomic", "list", {"ring_stages": 6, "loads_in_flight": 2}),
    "q8-b1-atomic": ("qwen3-8b", 1, "atomic", "list", {}),
    "q8-b1-atomic-ring0": ("qwen3-8b", 1, "atomic", "list", {"ring_stages": 0}),
    "b1-atomic-ring0": ("llama-3.2-1b", 1, "atomic", "list", {"ring_stages": 0}),
    "b1-atomic-ring4": ("llama-3.2-1b", 1, "atomic", "list", {"ring_stages": 4}),
    "q8-b1-atomic-av16": ("qwen3-8b", 1, "atomic", "list", {"av_batch": 16}),
    "q8-b1-atomic-av32": ("qwen3-8b", 1, "atomic", "list", {"av_batch": 32}),
    "b1-atomic-av32": ("llama-3.2-1b", 1, "atomic", "list", {"av_batch": 32}),
    "q8-b8-atomic-av32": ("qwen3-8b", 8, "atomic", "list", {"av_batch": 32}),
    "q8-b8-atomic": ("qwen3-8b", 8, "atomic", "list", {}),
    "q8-b8-atomic-U6": ("qwen3-8b", 8, "atomic", "list", {"loads_in_flight": 6}),
    "q8-b8-atomic-U8": ("qwen3-8b", 8, "atomic", "list", {"loads_in_flight": 8}),
}
# the batch-1 kernels without the cross-task weight pipeline (weights through registers, as before it)
VARIANTS.update({f"{v}-nopipe": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe": False})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic")})
# attention: its first K/V rows and immutables loaded after the wait (the baseline of the early
# loads, CodegenOptions.attn_early), and 8 16-byte V loads in flight instead of 4
VARIANTS.update({f"{v}-attnlate": (*VARIANTS[v][:4], {**VARIANTS[v][4], "attn_early": False})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "b8-atomic", "q8-b8-atomic")})
VARIANTS.update({f"{v}-av8": (*VARIANTS[v][:4], {**VARIANTS[v][4], "av_batch": 8})
                 for v in ("b1-atomic", "q8-b1-atomic", "b8-atomic")})
# task records read during the task before it instead of at the task's start (CodegenOptions.task_ahead;
# "-noahead" is the default since it did not pay, kept as the name of the measured baseline)
VARIANTS.update({f"{v}-ahead": (*VARIANTS[v][:4], {**VARIANTS[v][4], "task_ahead": True})
                 for v in ("b1-atomic", "q8-b1-atomic", "b8-atomic")})
VARIANTS.update({f"{v}-noahead": (*VARIANTS[v][:4], {**VARIANTS[v][4], "task_ahead": False})
                 for v in ("b1-atomic", "q8-b1-atomic", "b8-atomic")})
# relaxed counter polls and one acquire fence per wait (CodegenOptions.acquire_once, docs/sync.md)
VARIANTS.update({f"{v}-acq1": (*VARIANTS[v][:4], {**VARIANTS[v][4], "acquire_once": True})
                 for v in ("b1-atomic", "b8-atomic", "q8-b1-atomic", "q8-b8-atomic")})
# o-proj's early combine (CodegenOptions.lean_comb, on by default) against the combine after the
# split weights
VARIANTS.update({f"{v}-nocomb": (*VARIANTS[v][:4], {**VARIANTS[v][4], "lean_comb": False})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic")})
# fewer pages in the weight pipeline (CodegenOptions.pipe_pages): fewer bytes queued at HBM per SM
VARIANTS.update({f"{v}-pages{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_pages": n})
                 for v in ("b1-atomic", "q8-b1-atomic") for n in (4, 6, 8, 10, 11, 12)})
# qkv tiles within a head only (lower(qkv_cross=False)): 96 tasks of 32 rows on llama-3.2-1b, not 128 of 24
# (the measured baseline of qkv_cross_pays; at batch 8 and with NaN sentinels the default already)
VARIANTS.update({f"{v}-nocross": (*VARIANTS[v][:4], {**VARIANTS[v][4], "qkv_cross": False})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "b8-atomic", "q8-b8-atomic", "b32-atomic")})
VARIANTS.update({f"{v}-cross": (*VARIANTS[v][:4], {**VARIANTS[v][4], "qkv_cross": True})
                 for v in ("b1-nan", "b8-atomic", "q8-b8-atomic", "b32-atomic")})
# attention splits per kv head other than attn_splits' choice (lower(attn_split=N); 8 at batch 1, cache 512)
VARIANTS.update({f"{v}-split{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "attn_split": n})
                 for v in ("b1-atomic", "q8-b1-atomic") for n in (4, 12, 16)})
# attention splits that grow with the context (lower(attn_split_pos=P): ceil((pos + 1) / P) of them hold
# positions); -sp0 is every split at every position, the default (the others measured slower)
VARIANTS.update({f"{v}-sp{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "attn_split_pos": n})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic") for n in (0, 16, 32, 64)})
# the counter spin's sleeps (CodegenOptions.spin_max_ns, default 256 ns, after spin_hot = 64 polls):
# at most 32 ns between polls (-spin32), or no sleep at all (-nosleep)
VARIANTS.update({f"{v}-spin32": (*VARIANTS[v][:4], {**VARIANTS[v][4], "spin_max_ns": 32})
                 for v in ("b1-atomic", "q8-b1-atomic", "b8-atomic")})
VARIANTS.update({f"{v}-nosleep": (*VARIANTS[v][:4], {**VARIANTS[v][4], "spin_hot": 1 << 30})
                 for v in ("b1-atomic", "q8-b1-atomic", "b8-atomic")})
# nan mode: the sentinel polls word by word (the baseline of the 16-byte polls), each armed unit spun on
# in turn or re-polled together, and other counts of polls in flight (default 4)
VARIANTS.update({f"{v}-pollw": (*VARIANTS[v][:4], {**VARIANTS[v][4], "poll_vec": False})
                 for v in ("b1-nan", "b8-nan")})
VARIANTS.update({f"{v}-seq": (*VARIANTS[v][:4], {**VARIANTS[v][4], "poll_reissue": False})
                 for v in ("b1-nan", "b8-nan")})
VARIANTS.update({f"{v}-reissue": (*VARIANTS[v][:4], {**VARIANTS[v][4], "poll_reissue": True})
                 for v in ("b1-nan", "b8-nan")})
VARIANTS.update({f"{v}-poll{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "poll_batch": n})
                 for v in ("b1-nan", "b8-nan") for n in (1, 2, 8, 16)})
# greedy steps on the kernel with the sampling code (Megakernel(split_sampler=False)) instead of the
# greedy kernel: what the sampler's code costs a greedy step when it is in the kernel
VARIANTS.update({f"{v}-onekernel": (*VARIANTS[v][:4], {**VARIANTS[v][4], "one_kernel": True})
                 for v in ("b1-atomic", "b8-atomic", "q8-b1-atomic", "b1-nan", "b8-nan")})
# the same with the filtered sampler's functions out of line (CodegenOptions.sampler_inline=False):
# whether its code inlined into the kernel is what slows the layers' tasks
VARIANTS["b1-atomic-onekernel-outline"] = (*VARIANTS["b1-atomic"][:4], {"one_kernel": True, "sampler_inline": False})
# the consumers' registers (CodegenOptions.consumer_regs; by default 200, 216 from batch 32, since the
# twenty-third session): 0 (a producer warp, the kernels before), 200 (the producer warpgroup keeps
# 104) and 232 (40)
VARIANTS.update({f"{v}-rs{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "consumer_regs": n})
                 for v in ("b1-atomic", "b1-nan", "b8-atomic", "b8-nan", "b32-atomic", "q8-b1-atomic", "q8-b8-atomic",
                           "b1-atomic-onekernel") for n in (0, 200, 232)})
VARIANTS.update({f"b32-atomic-rs{n}": (*VARIANTS["b32-atomic"][:4], {**VARIANTS["b32-atomic"][4], "consumer_regs": n})
                 for n in (208, 216, 224)})
# the L2 prefetcher (CodegenOptions.l2_ahead): N pages past the copier
VARIANTS.update({f"{v}-l2a{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "l2_ahead": n})
                 for v in ("b1-atomic", "b1-nan", "b8-atomic", "b32-atomic", "q8-b1-atomic", "q8-b8-atomic")
                 for n in (2, 4, 8, 16, 32)})
# gate/up's output h in bf16 (lower(h_bf16=True), atomic counters, tensor-core batches), and not
VARIANTS.update({f"{v}-hbf16": (*VARIANTS[v][:4], {**VARIANTS[v][4], "h_bf16": True})
                 for v in ("b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
VARIANTS.update({f"{v}-hf32": (*VARIANTS[v][:4], {**VARIANTS[v][4], "h_bf16": False})
                 for v in ("b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
# unsplit attention's output in bf16 (lower(attn_bf16=True)), alone and with h in bf16, and neither
VARIANTS.update({f"{v}-abf16": (*VARIANTS[v][:4], {**VARIANTS[v][4], "attn_bf16": True, "h_bf16": False})
                 for v in ("b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
VARIANTS.update({f"{v}-bf16both": (*VARIANTS[v][:4], {**VARIANTS[v][4], "attn_bf16": True, "h_bf16": True})
                 for v in ("b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
VARIANTS.update({f"{v}-f32acts": (*VARIANTS[v][:4], {**VARIANTS[v][4], "attn_bf16": False, "h_bf16": False})
                 for v in ("b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
# the residual stream's producers write its normed bf16 copies for qkv, gate/up and the LM head to
# stage as they are (lower(xn_bf16=True), forty-third session), and not
VARIANTS.update({f"{v}-xn": (*VARIANTS[v][:4], {**VARIANTS[v][4], "xn_bf16": True})
                 for v in ("b2-atomic", "b4-atomic", "b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic") if v in VARIANTS})
VARIANTS.update({f"{v}-noxn": (*VARIANTS[v][:4], {**VARIANTS[v][4], "xn_bf16": False})
                 for v in ("b2-atomic", "b4-atomic", "b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic") if v in VARIANTS})
# the readers' sums of squares with every load of a warp's rows in flight at once (CodegenOptions.xss_wide,
# the default since the forty-fourth session), and a row at a time as before
VARIANTS.update({f"{v}-xsw": (*VARIANTS[v][:4], {**VARIANTS[v][4], "xss_wide": True})
                 for v in ("b4-atomic", "b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
VARIANTS.update({f"{v}-noxsw": (*VARIANTS[v][:4], {**VARIANTS[v][4], "xss_wide": False})
                 for v in ("b4-atomic", "b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
# the output block's rows B + 2 floats apart (CodegenOptions.out_pad=2; taskgraph/plan.py OUT_PAD), and B apart
VARIANTS.update({f"{v}-opad": (*VARIANTS[v][:4], {**VARIANTS[v][4], "out_pad": 2})
                 for v in ("b4-atomic", "b8-atomic", "b8-nan", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
VARIANTS.update({f"{v}-noopad": (*VARIANTS[v][:4], {**VARIANTS[v][4], "out_pad": 0})
                 for v in ("b4-atomic", "b8-atomic", "b8-nan", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
# down's partial products over N chunks of h, then their sums (lower(down_sum=N): downp and dsum tasks)
VARIANTS.update({f"{v}-ds{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "down_sum": n})
                 for v in ("b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic") for n in (2, 4, 8)})
# (the defaults before the forty-fifth session at batch 32: unsplit down, no padded output rows)
VARIANTS.update({f"{v}-nods": (*VARIANTS[v][:4], {**VARIANTS[v][4], "down_sum": 1})
                 for v in ("b32-atomic", "q8-b8-atomic")})
# qkv's partial products over N chunks of the normed input, added by attention (lower(qkv_sum=N): qkvp tasks)
VARIANTS.update({f"{v}-qs{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "qkv_sum": n})
                 for v in ("b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic") for n in (2, 4, 8)})
VARIANTS.update({f"{v}-noqs": (*VARIANTS[v][:4], {**VARIANTS[v][4], "qkv_sum": 1})
                 for v in ("b16-atomic", "b32-atomic", "q8-b8-atomic")})
VARIANTS["b32-atomic-prev45"] = (*VARIANTS["b32-atomic"][:4], {**VARIANTS["b32-atomic"][4], "down_sum": 1, "out_pad": 0})
# held accumulators for two tiles at batch 32 (CodegenOptions.mma_hold_floats=32: its qkv tasks)
VARIANTS.update({f"{v}-hold32": (*VARIANTS[v][:4], {**VARIANTS[v][4], "mma_hold_floats": 32})
                 for v in ("b16-atomic", "b32-atomic")})
# the epilogues' items in 4 x 8 tiles a warp (CodegenOptions.epi_tiles)
VARIANTS.update({f"{v}-epit": (*VARIANTS[v][:4], {**VARIANTS[v][4], "epi_tiles": True})
                 for v in ("b8-atomic", "b8-nan", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
# (-noepit: the default since the twenty-sixth session's measurements; -epit above turns them on)
VARIANTS.update({f"{v}-noepit": (*VARIANTS[v][:4], {**VARIANTS[v][4], "epi_tiles": False})
                 for v in ("b8-atomic", "b8-nan", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
# the defaults before the twenty-sixth session: f32 activations, the epilogues' items by column
VARIANTS.update({f"{v}-prev": (*VARIANTS[v][:4], {**VARIANTS[v][4], "attn_bf16": False, "h_bf16": False, "epi_tiles": False})
                 for v in ("b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
VARIANTS["b8-nan-prev"] = (*VARIANTS["b8-nan"][:4], {**VARIANTS["b8-nan"][4], "epi_tiles": False})
# o-proj's and down's residual loaded once their input is staged (CodegenOptions.resid_early)
VARIANTS.update({f"{v}-rese": (*VARIANTS[v][:4], {**VARIANTS[v][4], "resid_early": True})
                 for v in ("b1-atomic", "b1-nan", "b8-atomic", "b32-atomic", "q8-b1-atomic")})
# the tile sums by (row, batch column), as before CodegenOptions.tile_sum_frag
VARIANTS.update({f"{v}-tsrow": (*VARIANTS[v][:4], {**VARIANTS[v][4], "tile_sum_frag": False})
                 for v in ("b8-atomic", "b8-nan", "b16-atomic", "b32-atomic", "q8-b8-atomic")})
# greedy steps on the kernel with the sampler as before CodegenOptions.sampler_lean (its index
# arithmetic hoisted, the rejection pass double-buffered: the kernel spills)
VARIANTS.update({f"{v}-onekernel-fat": (*VARIANTS[v][:4], {**VARIANTS[v][4], "one_kernel": True, "sampler_lean": False})
                 for v in ("b1-atomic", "b8-atomic", "q8-b1-atomic")})
# down-proj split over N chunks of h (lower(down_split=N), downk tasks), with each of the three schedulers
VARIANTS.update({f"{v}-dsplit{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "down_split": n})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "b1-atomic-rr", "b1-atomic-cpsat") for n in (2, 4)})
# the tensor-core tasks' partial sums once per chunk, as before CodegenOptions.mma_hold (its default
# from batch 16), and held where the default does not hold them (-hold)
VARIANTS.update({f"{v}-nohold": (*VARIANTS[v][:4], {**VARIANTS[v][4], "mma_hold": False})
                 for v in ("b8-atomic", "b16-atomic", "b32-atomic", "q8-b8-atomic", "b8-nan")})
VARIANTS.update({f"{v}-hold": (*VARIANTS[v][:4], {**VARIANTS[v][4], "mma_hold": True})
                 for v in ("b8-atomic", "q8-b8-atomic")})
# the three schedulers on every row of #14 (round robin and CP-SAT beside the list schedule's default)
VARIANTS.update({f"{v}-{tag}": (*VARIANTS[v][:3], method, VARIANTS[v][4])
                 for v in ("b8-atomic", "b32-atomic", "q8-b8-atomic") for tag, method in (("rr", "round_robin"), ("cpsat", "cpsat"))})
# the CP-SAT model with placement, hops and pages (#14 item 3, schedule/cpsat_place.py)
VARIANTS.update({f"{v}-place": (*VARIANTS[v][:3], "cpsat_place", VARIANTS[v][4])
                 for v in ("b1-atomic", "b8-atomic", "b32-atomic", "q8-b1-atomic", "q8-b8-atomic")})
VARIANTS["b1-atomic-dsplit4-place"] = ("llama-3.2-1b", 1, "atomic", "cpsat_place", {"down_split": 4})
VARIANTS["q8-b1-atomic-rr"] = ("qwen3-8b", 1, "atomic", "round_robin", {})
VARIANTS["q8-b1-atomic-cpsat"] = ("qwen3-8b", 1, "atomic", "cpsat", {})
VARIANTS.update({f"{v}-dsplit{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "down_split": n})
                 for v in ("q8-b1-atomic-rr", "q8-b1-atomic-cpsat") for n in (2, 4)})
VARIANTS.update({f"b1-atomic-dsplit2-pages{n}": (*VARIANTS["b1-atomic-dsplit2"][:4], {**VARIANTS["b1-atomic-dsplit2"][4], "pipe_pages": n})
                 for n in (10, 11)})
# (the eleventh session's -srbN (CodegenOptions.stage_rows) and -hbf16 (lower(h_bf16=True)) variants
# lost and were removed with their options: BENCHMARKS.md, eleventh session; code at e777675)
# one argmax task for every row (lower(argmax_tasks=1)), the graph before argmax went per row
VARIANTS.update({f"{v}-amax1": (*VARIANTS[v][:4], {**VARIANTS[v][4], "argmax_tasks": 1})
                 for v in ("b8-atomic", "b8-nan", "b32-atomic", "q8-b8-atomic")})
# the list schedule as before the same-worker tie-break (affinity for chains such as downk's)
VARIANTS.update({f"{v}-noaff": (*VARIANTS[v][:4], {**VARIANTS[v][4], "affinity": False})
                 for v in ("b1-atomic", "b8-atomic", "q8-b1-atomic", "b1-atomic-dsplit2")})
# the tensor-core GEMV fed by the weight pipeline (CodegenOptions(pipe=True) from batch 2), with
# other page counts (default 6)
VARIANTS.update({f"{v}-mpipe": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe": True})
                 for v in ("b8-atomic", "b8-nan", "b32-atomic", "q8-b8-atomic")})
VARIANTS.update({f"{v}-mpipe-pages{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe": True, "pipe_pages": n})
                 for v in ("b8-atomic", "b32-atomic", "q8-b8-atomic", "b8-nan") for n in (4, 8, 10, 11)})
# the tensor-core kernels without the weight pipeline (the cp.async ring or registers, the default before it)
VARIANTS.update({f"{v}-ring": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe": False})
                 for v in ("b8-atomic", "b8-nan", "b32-atomic", "q8-b8-atomic", "b4-atomic", "b16-atomic")})
# batch 1: pages of 2048 or 4096 columns (a whole llama-3.2-1b / qwen3-8b row per bulk copy)
VARIANTS.update({f"{v}-cols{c}-pages{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_cols": c, "pipe_pages": n})
                 for v in ("b1-atomic", "q8-b1-atomic", "b1-nan") for c in (2048, 4096) for n in (2, 3, 4, 5)})
# pages of 512, 1024 or 2048 columns (CodegenOptions.pipe_cols): fewer, longer bulk copies per page
VARIANTS.update({f"{v}-mpipe-cols{c}-pages{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe": True, "pipe_cols": c, "pipe_pages": n})
                 for v in ("b8-atomic", "b32-atomic", "q8-b8-atomic", "b8-nan") for c in (512, 1024, 2048) for n in (2, 3, 4, 5, 6, 8)})
# the same kernels with the per-task trace (CodegenOptions.trace): bench adds where a step's time goes,
# per task kind (see kind_times)
VARIANTS.update({f"{v}-trace": (*VARIANTS[v][:4], {**VARIANTS[v][4], "trace": True})
                 for v in ("b8-atomic", "b8-atomic-mpipe", "b8-atomic-mpipe-pages8", "q8-b8-atomic", "q8-b8-atomic-mpipe",
                           "q8-b8-atomic-mpipe-pages8", "b8-atomic-mpipe-cols1024-pages4", "q8-b8-atomic-mpipe-cols1024-pages4",
                           "b32-atomic", "b32-atomic-ring", "b1-atomic", "q8-b1-atomic")})
# traced launches that sample with a filter (the kernel with the filtered sampler): where the batch-8
# filtered step's time goes, per task kind
SAMPLINGS = {"topk50": dict(temperature=0.8, top_k=50, seed=1), "topp09": dict(temperature=0.8, top_p=0.9, seed=1)}
VARIANTS.update({f"{v}-trace-{s}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "trace": True, "trace_sampling": kw})
                 for v in ("b8-atomic", "b1-atomic", "b8-atomic-amax1") for s, kw in SAMPLINGS.items()})
VARIANTS.update({f"b1-atomic-trace-{s}-outline": (*VARIANTS["b1-atomic"][:4], {"trace": True, "trace_sampling": kw,
                                                                                "sampler_inline": False})
                 for s, kw in SAMPLINGS.items()})
# nan mode: the input polled in the wait, then staged (as before CodegenOptions.stage_poll, "-nosp"),
# against its staging loads as the polls (the default); the nan rows of qwen3-8b and of batch 32
VARIANTS["q8-b1-nan"] = ("qwen3-8b", 1, "nan", "list", {})
# the list schedule with its last N workers' queues merged into the first N (gpu_bench.crowded): a safe,
# worse schedule, to show the GPU and the cost model see a schedule that differs (issue #14)
VARIANTS.update({f"{v}-crowd{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "crowd": n})
                 for v in ("b1-atomic", "b8-atomic", "b32-atomic", "q8-b1-atomic", "q8-b8-atomic") for n in (4, 12)})
VARIANTS["q8-b8-nan"] = ("qwen3-8b", 8, "nan", "list", {})
VARIANTS["b32-nan"] = ("llama-3.2-1b", 32, "nan", "list", {})
VARIANTS.update({f"{v}-nosp": (*VARIANTS[v][:4], {**VARIANTS[v][4], "stage_poll": False})
                 for v in ("b1-nan", "q8-b1-nan", "b8-nan", "q8-b8-nan", "b32-nan", "b1-nan-cross")})
VARIANTS.update({f"{v}-trace": (*VARIANTS[v][:4], {**VARIANTS[v][4], "trace": True})
                 for v in ("b1-nan", "b1-nan-nosp")})
# the batch-1 staged input in the plain layout (CodegenOptions.xs_planes False: two shared-memory
# wavefronts per 8 lanes' inputs), the baseline of the planes
VARIANTS.update({f"{v}-noplanes": (*VARIANTS[v][:4], {**VARIANTS[v][4], "xs_planes": False})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "q8-b1-nan", "b1-atomic-trace", "b1-atomic-pages12")})
VARIANTS.update({f"{v}-pages{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_pages": n})
                 for v in ("b1-nan", "q8-b1-nan") for n in (8, 10, 12)})
# the batch-1 kernels before this session's planes and pages (8 pages, the plain layout)
VARIANTS.update({f"{v}-noplanes-pages8": (*VARIANTS[v][:4], {**VARIANTS[v][4], "xs_planes": False, "pipe_pages": 8})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic")})
VARIANTS.update({f"{v}-pages8": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_pages": 8})
                 for v in ("b1-atomic", "q8-b1-atomic")})
# the traced kernels of the pipeline's depth and of more attention splits (eighteenth session)
VARIANTS.update({f"{v}-trace": (*VARIANTS[v][:4], {**VARIANTS[v][4], "trace": True})
                 for v in ("b1-atomic-pages12", "b1-atomic-split16", "q8-b1-atomic-pages10")})
# the batch-1 consumers a row per warp (CodegenOptions.pipe_ksplit False: the planes' layout), the
# baseline of the K-split consumers (nineteenth session)
VARIANTS.update({f"{v}-noks": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_ksplit": False})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "q8-b1-nan", "b1-atomic-trace", "q8-b1-atomic-trace")})
# the K-split consumers for some kinds only (CodegenOptions.pipe_ksplit, a mask of render.KSPLIT_BITS):
# the chain's short tasks (qkv, o-proj, down), or all but the LM head
VARIANTS.update({f"{v}-ks{tag}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_ksplit": m})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "b1-atomic-trace", "q8-b1-atomic-trace")
                 for tag, m in (("chain", 1 | 2 | 8), ("nolm", 15), ("nogu", 1 | 2 | 8 | 16))})
# at most N of the pipeline's bulk copies in flight (CodegenOptions.pipe_inflight)
VARIANTS.update({f"{v}-if{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_inflight": n})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "b1-atomic-noks", "q8-b1-atomic-noks", "b1-atomic-trace",
                           "q8-b1-atomic-trace", "b8-atomic", "q8-b8-atomic")
                 for n in (0, 2, 3, 4, 6, 8)})
# the pipeline's pages by 16-byte cp.async rather than bulk copies (CodegenOptions.pipe_ldgsts), with
# the default 3 copies in flight and with N pages (0: every free page)
VARIANTS.update({f"{v}-ldg": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_ldgsts": True})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "b8-atomic", "b32-atomic", "b1-atomic-trace", "b8-nan",
                           "b16-atomic", "q8-b8-atomic")})
VARIANTS.update({f"{v}-ldg-if{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_ldgsts": True, "pipe_inflight": n})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "b8-atomic") for n in (0, 4, 6)})
# no page issued while a task closes (CodegenOptions.pipe_quiet N)
VARIANTS.update({f"{v}-quiet{n}": (*VARIANTS[v][:4], {**VARIANTS[v][4], "pipe_quiet": n})
                 for v in ("b1-atomic", "b1-nan", "q8-b1-atomic", "b2-atomic", "b4-atomic", "b8-atomic", "b8-nan", "b16-atomic",
                           "b32-atomic", "q8-b8-atomic", "b1-atomic-trace")
                 for n in (0, 1, 2, 3, 4)})
DEFAULT = ["b1-atomic", "b1-nan", "b8-atomic", "b32-atomic"]


def kind_times(mk, steps: int = 8, sampling=None) -> dict:
    """A traced launch of ``steps`` steps: per task kind over the last half of them, the median time
    from a task's start (waits satisfied) to its end (outputs published), its median wait, its
    marks' median offsets from the start (also by name, mkc.trace.MARKS), and the median step time
    (last end minus first wait)."""
    import numpy as np

    from mkc.trace import MARKS

    mk.reset()
    # MKC_TRACE_POS0: the traced launch's first position (0 by default), e.g. the mean position of
    # the timed launches, so that the trace's attention sees their context (positions below it read
    # the reset cache: the times, not the values, count here)
    pos0 = int(os.environ.get("MKC_TRACE_POS0", "0"))
    mk._launch(steps, pos0, 1, **({"sampling": sampling} if sampling is not None else {}))
    ws, st, en = mk.trace()
    marks = mk.trace_marks()
    half = slice(steps // 2, steps)
    kinds = [t.kind for t in mk.tg.tasks]
    out = {}
    for k in sorted(set(kinds)):
        idx = [i for i, kk in enumerate(kinds) if kk == k]
        run = (en[half][:, idx] - st[half][:, idx]).ravel()
        wait = (st[half][:, idx] - ws[half][:, idx]).ravel()
        m = marks[half][:, idx, :] - st[half][:, idx, None]
        med = np.nanmedian(m.reshape(-1, m.shape[-1]), axis=0)
        names = MARKS.get(k, ())
        out[k] = dict(n=len(idx), run_us=float(np.nanmedian(run)), wait_us=float(np.nanmedian(wait)),
                      marks_us=[round(float(x), 2) for x in med if not np.isnan(x)],
                      # the same medians by name (mkc.trace.MARKS: e.g. a GEMV's "waiting for pages")
                      marks=({nm: round(float(med[j]), 2) for j, nm in enumerate(names[: len(med)])
                              if nm is not None and not np.isnan(med[j])}))
    step = [float(np.nanmax(en[s]) - np.nanmin(ws[s])) for s in range(steps // 2, steps)]
    out["step_us"] = float(np.median(step))
    return out


def variant_plan(variant: str, max_seq: int):
    """(task graph, schedule, codegen options) of a variant: what bench runs and prebuild.py builds."""
    name, batch, sync, method, opts = VARIANTS[variant]
    from codegen_fixtures import rr_schedule, shape_graph
    from mkc.codegen.render import CodegenOptions
    from mkc.target import get_target
    from mkc.taskgraph import lower

    from mkc.taskgraph.lower import attn_bf16_pays, h_bf16_pays, qkv_cross_pays, xn_bf16_pays

    opts = dict(opts)
    crowd = opts.pop("crowd", 0)  # the schedule's, below
    opts.pop("one_kernel", None)  # bench's
    opts.pop("trace_sampling", None)  # bench's
    affinity = opts.pop("affinity", True)
    tg = lower(shape_graph(name, batch, max_seq), get_target("h200"), qkv_cross=opts.pop("qkv_cross", qkv_cross_pays(batch, sync)),
               attn_split=opts.pop("attn_split", None), down_split=opts.pop("down_split", None),
               argmax_tasks=opts.pop("argmax_tasks", None), attn_split_pos=opts.pop("attn_split_pos", None),
               h_bf16=opts.pop("h_bf16", h_bf16_pays(batch, sync, get_target("h200"))),
               attn_bf16=opts.pop("attn_bf16", attn_bf16_pays(batch, sync, get_target("h200"))),
               xn_bf16=opts.pop("xn_bf16", xn_bf16_pays(batch, sync, get_target("h200"))),
               down_sum=opts.pop("down_sum", None), qkv_sum=opts.pop("qkv_sum", None))
    # CP-SAT takes up to a minute per variant and the GPU machine has no ortools of its own:
    # prebuild.py --variants saves each schedule under $MKC_SCHED_CACHE, the device call loads it
    cache = os.environ.get("MKC_SCHED_CACHE")
    path = Path(cache) / f"{variant}-L{max_seq}.json" if cache else None
    if path is not None and path.exists():
        from mkc.schedule.ir import Schedule

        sched = Schedule.load(path)
    elif method == "round_robin":
        sched = rr_schedule(tg, "h200", sync)
    else:
        import mkc.schedule.baseline as baseline
        import mkc.schedule.cpsat as cpsat
        from mkc.schedule import schedule

        solo = baseline.solo_producers
        if not affinity:  # the schedulers without the same-worker tie-break (baseline.solo_producers)
            baseline.solo_producers = cpsat.solo_producers = lambda deps: [None] * deps.n
        try:
            sched = schedule(tg, "h200", sync=sync, method=method, time_limit=20.0)
        finally:
            baseline.solo_producers = cpsat.solo_producers = solo
    if path is not None and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        sched.save(path)
    if crowd:
        sched = crowded(tg, sched, crowd)
    return tg, sched, CodegenOptions(**opts)


def crowded(tg, sched, n: int):
    """The schedule with the queues of its last n workers merged into its first n, each pair by the
    predicted start (a topological order: both queues follow one schedule's times), the last n
    workers left idle: a schedule that is safe and worse, whose step time the cost model and the GPU
    should both see grow (issue #14: the schedules differ nowhere else)."""
    from dataclasses import replace

    from mkc.schedule.stage import kernel_plan
    from mkc.target import get_target

    W = sched.num_workers
    qs = [list(q) for q in sched.queues]
    for k in range(n):
        qs[k] = sorted(qs[k] + qs[W - n + k], key=lambda t: (sched.start[t], t))
        qs[W - n + k] = []
    return replace(sched, queues=tuple(tuple(q) for q in qs), method=f"{sched.method}+crowd{n}",
                   plan=kernel_plan(tg, get_target(sched.target), qs)).check()


def bench(variant: str, steps: int, max_seq: int) -> dict:
    name, batch, sync, method, opts = VARIANTS[variant]
    import torch

    from mkc.runtime import Megakernel

    t0 = time.perf_counter()
    tg, sched, options = variant_plan(variant, max_seq)
    t_sched = time.perf_counter() - t0
    w = random_weights(tg)
    mk = Megakernel(tg, sched, w, options=options, split_sampler=not opts.get("one_kernel", False))
    from mkc.bench import model_bytes

    # the timed launch runs positions 0 .. steps-1: the mean context is (steps - 1) / 2
    wbytes, kvbytes = model_bytes(tg, (steps - 1) / 2)
    prompt = torch.randint(0, tg.dim("V"), (batch, 1), device="cuda")
    mk.generate(prompt, 8)  # warm-up
    times = []
    for _ in range(3):
        mk.reset()
        mk.ids[0].copy_(prompt[:, 0].int())
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        mk._launch(steps, 0, 1)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / steps)
    ms_tok = statistics.median(times)
    mk.reset()
    calls = []
    for t in range(30):
        c0 = time.perf_counter()
        mk(prompt[:, 0], t)
        calls.append((time.perf_counter() - c0) * 1e3)
    floor = (wbytes + kvbytes) / READ_BW * 1e3
    smp = None
    if opts.get("trace_sampling"):  # the traced launch samples (the filtered sampler's kernel)
        from mkc.sampling import Sampling

        smp = Sampling(**opts["trace_sampling"])
    kt = kind_times(mk, sampling=smp) if options.trace else None
    if kt is not None and os.environ.get("MKC_CAL_DIR") and smp is None:
        # the traced launch's calibration (as `mkc run --trace` writes it): scripts/pipe_predict.py
        # replays the other schedulers' rows of the same call under it
        from mkc.trace import calibration

        cal = Path(os.environ["MKC_CAL_DIR"]) / f"calibration-{variant}.json"
        cal.parent.mkdir(parents=True, exist_ok=True)
        if os.environ.get("MKC_CAL_FIT", "1") != "0":  # 0: the stamps only (the fit takes 20-40 s a row)
            cal.write_text(json.dumps(calibration(mk.tg, mk.sched, mk.trace(), {}), indent=1) + "\n")
        # the raw stamps beside it, so that a cost model can be refitted on the CPU machine
        # (scripts/pipe_predict.py --stamps); the traced launch ran positions pos0..pos0+steps-1
        import numpy as np

        np.savez_compressed(cal.with_suffix(".npz"), stamps=np.stack(mk.trace()), marks=mk.trace_marks())
    if kt is not None:
        print(f"trace {variant}: step {kt['step_us']:.1f} us; " + "; ".join(
            f"{k} x{v['n']} run {v['run_us']:.2f} wait {v['wait_us']:.2f} marks {v['marks'] or v['marks_us']}"
            for k, v in kt.items() if k != "step_us"), flush=True)
    return dict(kinds=kt, test="bench", variant=variant, model=name, batch=batch, sync=sync, method=sched.method, steps=steps, max_seq=max_seq,
                ms_per_token=ms_tok, ms_per_call=statistics.median(calls[5:]), floor_ms=floor,
                pct_of_bw=100 * floor / ms_tok, read_bw_TBps=card_read_bw() / 1e12,
                pct_of_card=100 * (wbytes + kvbytes) / card_read_bw() * 1e3 / ms_tok, predicted_us=sched.makespan, sched_s=t_sched,
                regs=mk.kernel.num_regs, consumer_regs=dict(mk.cfg.consts).get("REG_SPLIT", 0), smem=mk.cfg.smem_bytes, weight_bytes=wbytes, kv_bytes=kvbytes)


def table(rows: list[dict]) -> str:
    lines = []
    tf = [r for r in rows if r["test"] == "teacher_forced"]
    if tf:
        lines.append("teacher-forced (64 steps)      batch sync    worst rel L2  worst/bound  argmax agree")
        for r in tf:
            lines.append(f"  {r['model']:<28} {r['batch']:>5} {r['sync']:<7} {r['worst_rel']:>12.3e} "
                         f"{r['worst_ratio']:>11.3f} {100 * r['argmax_agree']:>11.1f}%")
    gen = [r for r in rows if r["test"] == "generate"]
    if gen:
        lines.append("generate (one launch) == step-by-step greedy: " + ", ".join(
            f"{r['model']} b{r['batch']} {r['sync']}" for r in gen))
    fail = [r for r in rows if r["test"] in ("unsatisfiable_wait", "missing_producer", "nan_weight")]
    for r in fail:
        lines.append(f"failure test {r['test']} ({r['sync']}): ok {r.get('message', '')}")
    b = [r for r in rows if r["test"] == "bench"]
    if b:
        # regs: the kernel's allocation at entry, then (/N) what its consumer warps take (consumer_regs)
        # %4.2TB/s: the streamed bytes over the H200's READ_BW; %card: over this card's, measured
        lines.append(f"benchmark (variant)             batch sync    sched         ms/token  %4.2TB/s  %card  ms/call  floor  regs"
                     f"  (card {b[0].get('read_bw_TBps', 0):.2f} TB/s)")
        for r in b:
            lines.append(f"  {r['variant']:<29} {r['batch']:>5} {r['sync']:<7} {r['method']:<12} "
                         f"{r['ms_per_token']:>8.3f} {r['pct_of_bw']:>8.1f} {r.get('pct_of_card', 0):>6.1f} {r['ms_per_call']:>8.3f} {r['floor_ms']:>6.3f} "
                         f"{r['regs']:>5}{'/' + str(r['consumer_regs']) if r.get('consumer_regs') else ''}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", default=os.environ.get("MKC_GPU_REPORT", ""))
    ap.add_argument("--steps", type=int, default=256, help="steps of the timed launch, from position 0")
    ap.add_argument("--max-seq", type=int, default=512, help="KV cache length of the kernels (>= --steps)")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--variants", default=",".join(DEFAULT), help=f"comma-separated, of {', '.join(VARIANTS)}")
    args = ap.parse_args()
    rows = []
    if not args.no_bench:
        for v in args.variants.split(","):
            try:
                r = bench(v, steps=args.steps, max_seq=args.max_seq)
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                print(f"bench {v} failed: {type(e).__name__}: {e}", flush=True)
                continue
            print(json.dumps(r), flush=True)
            rows.append(r)
            if args.report:
                with open(args.report, "a") as f:
                    f.write(json.dumps(r) + "\n")
    if args.report and Path(args.report).exists():
        rows = [json.loads(x) for x in Path(args.report).read_text().splitlines() if x.strip()]
    print(table(rows))


if __name__ == "__main__":
    main()
