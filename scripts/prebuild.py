"""Build, on the CPU machine, the cubins a GPU run will need, so the device call only runs them.

    MKC_CACHE_DIR=.cache/mkc python scripts/prebuild.py [--tests] [--folders] [--bench llama-3.2-1b:1,8,32 ...] [--trace]
        [--variants b1-atomic,b1-atomic-acq1] [--tokens-bench] [--ptxas-report]

``--trace`` adds the CodegenOptions(trace=True) kernels: those of the gpu trace test (with --tests)
and, for every --bench model and batch, the one `mkc run DIR --trace OUT.json` loads for a build
made by `mkc compile MODEL --batch B --max-seq-len N` (the same pipeline options); for
--build-dirs also those of each spec in $MKC_TRACE_SPECS (';'-separated CodegenOptions JSON,
scripts/trace_marks.py's).

Cubins land in the cache keyed by a hash of source and flags (mkc.targets.nvidia.compiler); carry
``.cache`` to the device machine and point MKC_CACHE_DIR there. Build directories go to /tmp.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]


def kernels(label, tg, sched, target, options=None, sampling=True):
    """The kernels Megakernel builds for this plan: the greedy one (CodegenOptions.sampler False)
    and, where the run samples, the one with the sampler and the temperature-only one (each built
    on the first launch it serves)."""
    from dataclasses import replace

    from mkc.codegen.render import CodegenOptions, generate

    # $MKC_TEST_OPTIONS: CodegenOptions fields as JSON, as tests/gpu_fixtures.py megakernel takes them
    o = options or CodegenOptions(**json.loads(os.environ.get("MKC_TEST_OPTIONS", "{}")))
    for smp, filt, tag in ((False, True, ""), (True, True, " sampler"), (True, False, " gumbel"))[:3 if sampling else 1]:
        src, cfg, _ = generate(tg, sched, target, replace(o, sampler=smp, sample_filter=filt))
        yield f"{label}{tag}", src, cfg.arch


# the cases of test_trace_stamps_every_task_and_changes_nothing (tests/test_gpu_megakernel.py)
TRACE_TEST_CASES = (("tiny-llama", 1, "atomic"), ("tiny-qwen3", 8, "nan"))


def test_sources(trace: bool = False):
    from codegen_fixtures import rr_schedule, shape_graph
    from gpu_fixtures import default_lower_kw

    from mkc.codegen.render import CodegenOptions, generate
    from mkc.target import get_target
    from mkc.taskgraph import lower

    cases = {(m, b, s) for m in ("tiny-llama", "tiny-qwen2", "tiny-qwen3", "llama-3.2-1b", "qwen3-0.6b")
             for b in (1, 8) for s in ("atomic", "nan")}
    cases |= {("tiny-qwen3", 2, "atomic"), ("tiny-qwen3", 2, "nan")}
    # tests/test_gpu_tokens.py's batches
    cases |= {("tiny-llama", 4, "atomic"), ("tiny-llama", 4, "nan"), ("tiny-llama", 2, "atomic"),
              ("tiny-llama", 2, "nan"), ("tiny-qwen3", 4, "nan"), ("tiny-qwen2", 2, "atomic"),
              ("llama-3.2-1b", 2, "atomic")}
    for m, b, s in sorted(cases):
        tg = lower(shape_graph(m, b, 128), get_target("h200"), **default_lower_kw(b, s))
        # tests/test_gpu_tokens.py samples with atomic kernels
        yield from kernels(f"test {m} b{b} {s}", tg, rr_schedule(tg, "h200", s), "h200", sampling=s == "atomic")
    # test_teacher_forced_logits_other_attention_splits
    for split, s, per in ((4, "atomic", None), (4, "nan", None), (16, "atomic", None), (8, "atomic", 5), (8, "nan", 5),
                          (8, "atomic", 0)):
        tg = lower(shape_graph("llama-3.2-1b", 1, 128), get_target("h200"),
                   **default_lower_kw(1, s, dict(attn_split=split, attn_split_pos=per)))
        yield from kernels(f"test llama-3.2-1b b1 {s} split {split} per {per}", tg, rr_schedule(tg, "h200", s), "h200",
                           sampling=False)
    # test_teacher_forced_logits_split_k_down
    for split, s in ((2, "atomic"), (4, "nan")):
        tg = lower(shape_graph("llama-3.2-1b", 1, 128), get_target("h200"), **default_lower_kw(1, s, dict(down_split=split)))
        yield from kernels(f"test llama-3.2-1b b1 {s} down split {split}", tg, rr_schedule(tg, "h200", s), "h200",
                           sampling=False)
    # test_teacher_forced_logits_down_partial_sums
    from test_gpu_megakernel import DSUM_CASES

    for m, b, n in DSUM_CASES:
        tg = lower(shape_graph(m, b, 128), get_target("h200"), **default_lower_kw(b, "atomic", dict(down_sum=n)))
        yield from kernels(f"test {m} b{b} atomic down_sum {n}", tg, rr_schedule(tg, "h200", "atomic"), "h200",
                           sampling=False)
    # test_teacher_forced_logits_qkv_partial_sums
    from test_gpu_megakernel import QSUM_CASES

    for m, b, n in QSUM_CASES:
        tg = lower(shape_graph(m, b, 128), get_target("h200"), **default_lower_kw(b, "atomic", dict(qkv_sum=n, attn_split=1)))
        yield from kernels(f"test {m} b{b} atomic qkv_sum {n}", tg, rr_schedule(tg, "h200", "atomic"), "h200",
                           sampling=False)
    # test_teacher_forced_logits_tensor_core_paths
    from test_gpu_megakernel import MMA_CASES

    for m, b, s, opts in MMA_CASES:
        tg = lower(shape_graph(m, b, 128), get_target("h200"), **default_lower_kw(b, s))
        yield from kernels(f"test {m} b{b} {s} {opts}", tg, rr_schedule(tg, "h200", s), "h200",
                           CodegenOptions(**opts), sampling=False)
    # test_tile_sums_in_fragment_order_give_the_same_bits
    from test_gpu_megakernel import SAME_BITS_OPTIONS, TILE_SUM_CASES

    for m, b, s in TILE_SUM_CASES:
        tg = lower(shape_graph(m, b, 128), get_target("h200"), **default_lower_kw(b, s))
        for o in [{}] + SAME_BITS_OPTIONS:
            yield from kernels(f"test {m} b{b} {s} same bits {o}", tg, rr_schedule(tg, "h200", s), "h200",
                               CodegenOptions(**o), sampling=False)
    # test_early_residual_gives_the_same_bits_at_batch_1 (its default kernels are the cases' above)
    from test_gpu_megakernel import RESID_CASES

    for m, s in RESID_CASES:
        tg = lower(shape_graph(m, 1, 128), get_target("h200"), **default_lower_kw(1, s))
        yield from kernels(f"test {m} b1 {s} resid_early", tg, rr_schedule(tg, "h200", s), "h200",
                           CodegenOptions(resid_early=True), sampling=False)
    # test_pages_by_cp_async_give_the_same_bits and test_quiet_window_gives_the_same_bits (the
    # default kernels: b1's are the cases' above)
    from test_gpu_megakernel import LDGSTS_CASES, QUIET_OPTIONS

    for m, b, s in LDGSTS_CASES:
        tg = lower(shape_graph(m, b, 128), get_target("h200"), **default_lower_kw(b, s))
        for o in ({}, {"pipe_ldgsts": True}, *QUIET_OPTIONS):
            yield from kernels(f"test {m} b{b} {s} pipe_ldgsts {o}", tg, rr_schedule(tg, "h200", s), "h200",
                               CodegenOptions(**o), sampling=False)
    # test_bf16_h_gives_the_same_logits_bit_for_bit
    from test_gpu_megakernel import H_BF16_CASES

    for m, b, opts in H_BF16_CASES:
        for kw in ({"h_bf16": False, "attn_bf16": False}, {"h_bf16": True, "attn_bf16": False},
                   {"h_bf16": True, "attn_bf16": True}):
            tg = lower(shape_graph(m, b, 128), get_target("h200"), **kw)
            yield from kernels(f"test {m} b{b} atomic h_bf16 {kw} {opts}", tg, rr_schedule(tg, "h200", "atomic"), "h200",
                               CodegenOptions(**opts), sampling=False)
    # test_teacher_forced_logits_normed_bf16_inputs and test_normed_bf16_inputs_give_the_same_bits_run_to_run
    from test_gpu_megakernel import XN_CASES

    for m, b, opts in XN_CASES + [("llama-3.2-1b", 32, {"xn": False})]:
        opts = dict(opts)
        kw = default_lower_kw(b, "atomic", {"xn_bf16": opts.pop("xn", True)})
        tg = lower(shape_graph(m, b, 128), get_target("h200"), **kw)
        yield from kernels(f"test {m} b{b} atomic xn_bf16={kw['xn_bf16']} {opts}", tg, rr_schedule(tg, "h200", "atomic"),
                           "h200", CodegenOptions(**opts), sampling=False)
    # test_walk_draws_the_exact_paths_token_on_a_full_vocabulary; the rejection rounds' cases of
    # test_sampling_matches_the_numpy_reference_draw_for_draw and
    # test_candidate_path_on_a_full_vocabulary_matches_the_numpy_reference
    tg = lower(shape_graph("llama-3.2-1b", 1, 128), get_target("h200"), **default_lower_kw(1, "atomic"))
    for walk in (True, False):
        yield from kernels(f"test llama-3.2-1b b1 atomic pdraw_walk={walk}", tg, rr_schedule(tg, "h200", "atomic"), "h200",
                           CodegenOptions(pdraw_walk=walk))
    tg = lower(shape_graph("tiny-llama", 4, 128), get_target("h200"), **default_lower_kw(4, "atomic"))
    yield from kernels("test tiny-llama b4 atomic pdraw_walk=False", tg, rr_schedule(tg, "h200", "atomic"), "h200",
                       CodegenOptions(pdraw_walk=False))
    # test_lmhead_tiles_candidates_are_their_largest_logits (the radix select and tile_hist)
    for b in (1, 2):
        tg = lower(shape_graph("llama-3.2-1b", b, 128), get_target("h200"), **default_lower_kw(b, "atomic"))
        for hist in (False, True):
            yield from kernels(f"test llama-3.2-1b b{b} atomic tile_hist={hist}", tg, rr_schedule(tg, "h200", "atomic"),
                               "h200", CodegenOptions(tile_hist=hist))
    # test_candidate_path_at_batch_8_with_a_warp_per_row
    tg = lower(shape_graph("llama-3.2-1b", 8, 128), get_target("h200"), **default_lower_kw(8, "atomic"))
    yield from kernels("test llama-3.2-1b b8 atomic lm_rows_at_once", tg, rr_schedule(tg, "h200", "atomic"), "h200",
                       CodegenOptions(lm_rows_at_once=True))
    for m, b, s in TRACE_TEST_CASES if trace else ():
        tg = lower(shape_graph(m, b, 128), get_target("h200"), **default_lower_kw(b, s))
        yield from kernels(f"test {m} b{b} {s} trace", tg, rr_schedule(tg, "h200", s), "h200",
                           CodegenOptions(trace=True), sampling=False)


def bench_sources(specs, max_seq_len: int, trace: bool = False):
    """The kernels `mkc bench` will build: the same pipeline and options as mkc.compile."""
    from mkc.codegen.render import CodegenOptions, generate
    from mkc.pipeline import Options, StageLog, compile_model
    from mkc.schedule.ir import Schedule
    from mkc.target import get_target
    from mkc.taskgraph.ir import TaskGraph

    for spec in specs:
        model, batches = spec.split(":")
        for b in (int(x) for x in batches.split(",")):
            out = Path(f"/tmp/mkc-prebuild/{model}-b{b}")
            compile_model(model, out, Options(batches=(b,), max_seq_len=max_seq_len, force=True), StageLog(quiet=True))
            tg = TaskGraph.load(out / f"b{b}" / "tasks.json")
            sched = Schedule.load(out / f"b{b}" / "schedule.json")
            yield from kernels(f"bench {model} b{b}", tg, sched, get_target("h200"), sampling=False)
            if trace:
                yield from kernels(f"bench {model} b{b} trace", tg, sched, get_target("h200"), CodegenOptions(trace=True),
                                   sampling=False)


def build_dir_sources(dirs, trace: bool = False):
    """The kernels `mkc run DIR` (and with --trace, `mkc run DIR --trace`) loads for build directories
    `mkc compile` made here."""
    from mkc.codegen.render import CodegenOptions, generate
    from mkc.schedule.ir import Schedule
    from mkc.target import get_target
    from mkc.taskgraph.ir import TaskGraph

    for d in dirs:
        for sub in sorted(Path(d).glob("b*/tasks.json")):
            tg, sched = TaskGraph.load(sub), Schedule.load(sub.parent / "schedule.json")
            for opts in [None] + ([CodegenOptions(trace=True)] if trace else []):
                yield from kernels(f"dir {sub.parent}{' trace' if opts else ''}", tg, sched, get_target(tg.target), opts)
            # $MKC_TRACE_SPECS (';'-separated CodegenOptions JSON): scripts/trace_marks.py's kernels
            for spec in [x for x in os.environ.get("MKC_TRACE_SPECS", "").split(";") if x.strip()] if trace else ():
                yield from kernels(f"dir {sub.parent} trace {spec}", tg, sched, get_target(tg.target),
                                   CodegenOptions(trace=True, **json.loads(spec)))


def folder_sources():
    """The kernels of the gpu tests that compile saved model folders on the GPU machine
    (tests/test_gpu_checkpoint.py, tests/test_gpu_text.py): the same folders and compile options."""
    from test_gpu_checkpoint import _save_folder
    from text_fixtures import save_text_model

    from mkc.codegen.render import generate
    from mkc.pipeline import Options, StageLog, compile_model
    from mkc.schedule.ir import Schedule
    from mkc.target import get_target
    from mkc.taskgraph.ir import TaskGraph

    root = Path(tempfile.mkdtemp(prefix="mkc-prebuild-folders-"))
    folders = [(_save_folder(m, root / m / "download" / m), (1,), 64) for m in ("tiny-llama", "tiny-qwen3")]
    text = root / "text" / "download" / "tiny-text-llama"
    save_text_model(text)
    folders.append((text, (1, 4), 128))  # mkc compile DIR --batch 1,4 --max-seq-len 128
    for folder, batches, seq in folders:
        out = folder.parent.parent / "build"
        compile_model(str(folder), out, Options(batches=batches, max_seq_len=seq), StageLog(quiet=True))
        for b in batches:
            tg = TaskGraph.load(out / f"b{b}" / "tasks.json")
            yield from kernels(f"folder {folder.name} b{b}", tg, Schedule.load(out / f"b{b}" / "schedule.json"),
                               get_target("h200"))


def variant_sources(variants, max_seq: int = 512):
    """The kernels of scripts/gpu_bench.py --variants (its max_seq 512)."""
    from gpu_bench import variant_plan

    from mkc.codegen.render import generate
    from mkc.target import get_target

    from dataclasses import replace

    from gpu_bench import VARIANTS

    for v in variants:
        tg, sched, options = variant_plan(v, max_seq)
        # greedy steps: the greedy kernel, or (-onekernel) the one with the sampler
        src, cfg, _ = generate(tg, sched, get_target("h200"), replace(options, sampler=bool(VARIANTS[v][4].get("one_kernel"))))
        yield f"variant {v}", src, cfg.arch
        if VARIANTS[v][4].get("trace_sampling"):  # its traced launch samples with a filter
            src, cfg, _ = generate(tg, sched, get_target("h200"), replace(options, sampler=True))
            yield f"variant {v} sampler", src, cfg.arch


def tokens_bench_sources():
    """scripts/bench_tokens.py --exact-too: llama-3.2-1b batch 1 (a test kernel), without the tiles' bounds,
    without the rejection sampler; with $MKC_TOKENS_OPTIONS, also the kernels of those options; with
    $MKC_TOKENS_AB, those of each spec of bench_tokens.py --ab-options."""
    from codegen_fixtures import rr_schedule, shape_graph

    from mkc.codegen.render import CodegenOptions, generate
    from mkc.target import get_target
    from mkc.taskgraph import lower

    tg = lower(shape_graph("llama-3.2-1b", 1, 128), get_target("h200"))
    extra = os.environ.get("MKC_TOKENS_OPTIONS")
    for o in (CodegenOptions(), CodegenOptions(pdraw_bound=False), CodegenOptions(sample_pdraw=False)) + \
            ((CodegenOptions(**json.loads(extra)),) if extra else ()):
        yield from kernels(f"tokens bench llama-3.2-1b b1 sample_pdraw={o.sample_pdraw} pdraw_bound={o.pdraw_bound}", tg,
                           rr_schedule(tg, "h200", "atomic"), "h200", o)
    # $MKC_TOKENS_AB='{...};{...}' (bench_tokens.py --ab-options, the same specs): every kernel of a build
    # with those CodegenOptions fields
    for spec in [x for x in os.environ.get("MKC_TOKENS_AB", "").split(";") if x.strip()]:
        yield from kernels(f"tokens bench llama-3.2-1b b1 ab {spec}", tg, rr_schedule(tg, "h200", "atomic"), "h200",
                           CodegenOptions(**json.loads(spec)))
    # $MKC_FILTER_OPTIONS (bench_tokens.py): the filtered sampler's kernel with those fields too
    for spec in [x for x in os.environ.get("MKC_FILTER_OPTIONS", "").split(";") if x.strip()]:
        from dataclasses import replace

        src, cfg, _ = generate(tg, rr_schedule(tg, "h200", "atomic"), get_target("h200"),
                               replace(CodegenOptions(), sampler=True, **json.loads(spec)))
        yield f"tokens bench llama-3.2-1b b1 filter kernel {spec}", src, cfg.arch
    # batch 8 with one argmax task for all rows (MKC_TOKENS_LOWER='{"argmax_tasks": 1}'): the graph
    # before argmax went per row; the per-row kernels are the tests' (--tests)
    if extra:  # batch 8 with those options too (the per-row kernels of the tests' plan)
        tg = lower(shape_graph("llama-3.2-1b", 8, 128), get_target("h200"))
        yield from kernels(f"tokens bench llama-3.2-1b b8 {extra}", tg, rr_schedule(tg, "h200", "atomic"), "h200",
                           CodegenOptions(**json.loads(extra)))
    tg = lower(shape_graph("llama-3.2-1b", 8, 128), get_target("h200"), argmax_tasks=1)
    yield from kernels("tokens bench llama-3.2-1b b8 argmax_tasks=1", tg, rr_schedule(tg, "h200", "atomic"), "h200")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tests", action="store_true",
                    help="the kernels of tests/test_gpu_megakernel.py and tests/test_gpu_tokens.py")
    ap.add_argument("--folders", action="store_true",
                    help="the kernels of tests/test_gpu_checkpoint.py and tests/test_gpu_text.py (saved folders)")
    ap.add_argument("--bench", nargs="*", default=[], help="MODEL:B1,B2 as given to scripts/gpu_all.sh")
    ap.add_argument("--max-seq-len", type=int, default=1024)
    ap.add_argument("--build-dirs", nargs="*", default=[], help="build directories made by mkc compile (their kernels)")
    ap.add_argument("--trace", action="store_true", help="also the per-task trace kernels (mkc run --trace)")
    ap.add_argument("--tokens-bench", action="store_true", help="the kernels of scripts/bench_tokens.py --exact-too")
    ap.add_argument("--variants", default="", help="comma-separated scripts/gpu_bench.py variants")
    ap.add_argument("--variant-max-seq", type=int, default=512, help="as scripts/gpu_bench.py --max-seq")
    ap.add_argument("--only", default=None, help="build only the kernels whose label matches this regular expression")
    ap.add_argument("--ptxas-report", action="store_true",
                    help="also build each kernel with -Xptxas -v (outside the cache) and print its registers, "
                         "spills and warnings")
    a = ap.parse_args()
    os.environ.setdefault("MKC_CACHE_DIR", str(ROOT / ".cache" / "mkc"))
    from mkc.targets.nvidia.compiler import build_cubin

    jobs = (list(test_sources(a.trace)) if a.tests else []) + list(bench_sources(a.bench, a.max_seq_len, a.trace))
    jobs += list(variant_sources([v for v in a.variants.split(",") if v], a.variant_max_seq))
    jobs += list(folder_sources()) if a.folders else []
    jobs += list(tokens_bench_sources()) if a.tokens_bench else []
    jobs += list(build_dir_sources(a.build_dirs, a.trace))
    if a.only:
        jobs = [j for j in jobs if re.search(a.only, j[0])]

    def build(job):
        t = time.time()
        r = build_cubin(job[1], job[2])
        row = (job[0], "cached" if r.cached else "built", f"{time.time() - t:.1f}s")
        if a.ptxas_report:
            # verbose flags hash to another cache key: build it aside so the cache holds what runs
            with tempfile.TemporaryDirectory(prefix="mkc-ptxas-") as tmp:
                v = build_cubin(job[1], job[2], out_dir=tmp, verbose=True)
            regs = re.findall(r"Used (\d+) registers", v.log)
            spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", v.log)
            stack = re.findall(r"(\d+) bytes stack frame", v.log)
            row += (f"regs {','.join(regs)}", f"spill st/ld {','.join('/'.join(x) for x in spills)}",
                    f"stack {','.join(stack)}", f"warnings {len(v.warnings)}")
        return row

    with ThreadPoolExecutor(2) as ex:
        for row in ex.map(build, jobs):
            print(*row, flush=True)


if __name__ == "__main__":
    main()
