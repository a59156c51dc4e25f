"""The token end on the GPU: sampling's cost over greedy, the per-call overhead of mk(ids, pos)
against the in-loop step, and the early exit. Random-weight models from tests/gpu_fixtures.py.

    python scripts/bench_tokens.py [--models llama-3.2-1b,qwen3-0.6b] [--batches 1,8] [--steps 120] [--paired]
        [--ab-options '{"consumer_regs": 0}' ...]

Prints a markdown table (and --json PATH writes the rows). Target (issue #16): sampling <= 3 % of a
greedy step at batch 1; a step call <= 30 us over the in-loop step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _time(fn, reps: int = 5) -> float:
    import torch

    fn()  # warm up
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def _time_paired(fa, fb, reps: int = 8) -> tuple[float, float, float]:
    """fa and fb timed in alternation, ``reps`` rounds, each round's order the other way round: (best
    of fa, best of fb, median over the rounds of fb / fa - 1). Both see the same GPU state (clocks,
    temperature, memory placement), which between processes, or minutes apart, moved a greedy step by up to 2 % (BENCHMARKS.md,
    twentieth session)."""
    import statistics

    import torch

    fa(); fb()  # warm up
    torch.cuda.synchronize()
    ta, tb = [], []
    for r in range(reps):
        # ab, ba, ab, ...: with fb always second, a greedy row (builds that differ only in the
        # sampler's code) moved -0.2 to -0.27 % in three calls (thirty-fourth session)
        pair = ((fa, ta), (fb, tb))
        for f, out in (pair if r % 2 == 0 else pair[::-1]):
            t0 = time.perf_counter()
            f()
            torch.cuda.synchronize()
            out.append(time.perf_counter() - t0)
    return min(ta), min(tb), statistics.median(b / a - 1.0 for a, b in zip(ta, tb))


def _cases() -> dict:
    from mkc.sampling import Sampling

    return {"greedy": None, "temperature 0.8": Sampling(temperature=0.8, seed=1),
            "top-k 50": Sampling(temperature=0.8, top_k=50, seed=1),
            "top-p 0.9": Sampling(temperature=0.8, top_p=0.9, seed=1),
            "top-p 0.5": Sampling(temperature=0.8, top_p=0.5, seed=1),
            "top-p 0.9 + min-p 0.05": Sampling(temperature=0.8, top_p=0.9, min_p=0.05, seed=1),
            "top-k 50 + top-p 0.9 + min-p 0.05": Sampling(temperature=0.8, top_k=50, top_p=0.9, min_p=0.05, seed=1)}


AB_CASES = ("greedy", "top-k 50", "top-p 0.9", "top-p 0.5", "top-p 0.9 + min-p 0.05", "top-k 50 + top-p 0.9 + min-p 0.05")


def bench_ab(model: str, batch: int, steps: int, specs: list[str]) -> list[dict]:
    """Per CodegenOptions spec (JSON): a second Megakernel of the same task graph and schedule built
    with those options (every kernel of it: greedy, temperature-only, filtered), and each case of
    AB_CASES decoded on the default build and on it in alternation (_time_paired): the median of the
    rounds' ratios is the change, measured in one process. A spec of "{}" is the A/A control: a second
    instance of the default build (its own buffers, the same kernels). In the thirty-fourth session
    it ran every filtered step 0.04-0.43 % faster than the first (llama-3.2-1b b1, an H100), so a
    change is read against the A/A rows of the same call."""
    import numpy as np

    from gpu_fixtures import hf_models, megakernel
    from mkc.codegen.render import CodegenOptions

    hf = hf_models(model)
    mk = megakernel(hf, batch, "atomic", options=CodegenOptions())  # the default build, whatever $MKC_TEST_OPTIONS says
    rng = np.random.default_rng(0)
    rows = rng.integers(1, hf.vocab, (batch, 4)).tolist()
    n_steps = 4 + steps - 1
    cases = _cases()
    out = []
    for spec in specs:
        mk_b = megakernel(hf, batch, "atomic", options=CodegenOptions(**json.loads(spec)))
        for name in AB_CASES:
            smp = cases[name]
            if smp is not None:  # each build's sampling kernels built (and checked to match) before the timing
                mk.prepare_sampling(filtered=True); mk_b.prepare_sampling(filtered=True)
            ta, tb, med = _time_paired(lambda: mk.decode(rows, steps, sampling=smp), lambda: mk_b.decode(rows, steps, sampling=smp))
            same = mk.decode(rows, steps, sampling=smp) == mk_b.decode(rows, steps, sampling=smp)
            what = "A/A, the default built again" if json.loads(spec) == {} else spec
            out.append(dict(model=model, batch=batch, what=f"decode, {name}: {what} against the default (paired)",
                            us_per_step=tb / n_steps * 1e6, us_default=ta / n_steps * 1e6, change_pct=100 * med,
                            same_tokens=bool(same)))
        del mk_b
    return out


def bench(model: str, batch: int, steps: int, exact_too: bool = False, paired: bool = False) -> list[dict]:
    import numpy as np
    import torch

    from gpu_fixtures import hf_models, megakernel

    hf = hf_models(model)
    from mkc.codegen.render import CodegenOptions

    # MKC_TOKENS_OPTIONS: CodegenOptions fields as JSON (the sampling kernels of an experiment);
    # MKC_TOKENS_LOWER: lower()'s knobs as JSON (e.g. {"argmax_tasks": 1}: one argmax task for every row)
    mk = megakernel(hf, batch, "atomic", lower_kw=json.loads(os.environ.get("MKC_TOKENS_LOWER", "{}")),
                    options=CodegenOptions(**json.loads(os.environ.get("MKC_TOKENS_OPTIONS", "{}"))))
    rng = np.random.default_rng(0)
    rows = rng.integers(1, hf.vocab, (batch, 4)).tolist()
    P = 4
    n_steps = P + steps - 1
    rows_out = []

    def per_step(smp) -> float:
        return _time(lambda: mk.decode(rows, steps, sampling=smp)) / n_steps

    greedy = per_step(None)
    cases = _cases()
    for name, smp in cases.items():
        if paired and smp is not None:
            # each filter against greedy runs in alternation (the table's greedy row stays the first run)
            g, t, med = _time_paired(lambda: mk.decode(rows, steps, sampling=None), lambda: mk.decode(rows, steps, sampling=smp))
            rows_out.append(dict(model=model, batch=batch, what=f"decode, {name} (paired with greedy {g / n_steps * 1e6:.1f} us)",
                                 us_per_step=t / n_steps * 1e6, over_greedy_pct=100 * med))
            continue
        t = greedy if smp is None else per_step(smp)
        rows_out.append(dict(model=model, batch=batch, what=f"decode, {name}", us_per_step=t * 1e6,
                             over_greedy_pct=100 * (t - greedy) / greedy))
    # MKC_FILTER_OPTIONS='{"pipe_ksplit": 0};{...}': the filtered sampler's kernel alone built with
    # these CodegenOptions fields too (the greedy kernel keeps its own), each timed on the filters
    for spec in [x for x in os.environ.get("MKC_FILTER_OPTIONS", "").split(";") if x.strip()]:
        import dataclasses

        from mkc.codegen.render import generate

        fo = dataclasses.replace(mk._options, **json.loads(spec))
        src, cfg, _ = generate(mk.tg, mk.sched, mk.target, fo)
        if (cfg.threads, cfg.smem_bytes) != (mk.cfg.threads, mk.cfg.smem_bytes):
            # the runtime launches every kernel of a build with the greedy kernel's block (a producer
            # warp, consumer_regs=0, is 288 threads against the warpgroup's 384: the twenty-fourth
            # session's CALL=4 died here with CUDA_ERROR_INVALID_VALUE)
            print(f"filter kernel {spec}: launch shape {cfg.threads} threads / {cfg.smem_bytes} B differs from the "
                  f"greedy kernel's {mk.cfg.threads} / {mk.cfg.smem_bytes}: not timed", file=sys.stderr)
            continue
        kept = mk._sampling_kernels.get("filter")
        mk._sampling_kernels["filter"] = mk.driver.load(mk._compile(src, out_dir=None), cfg.kernel_name, cfg.smem_bytes)
        for name in ("top-k 50", "top-p 0.9", "top-k 50 + top-p 0.9 + min-p 0.05"):
            t = per_step(cases[name])
            rows_out.append(dict(model=model, batch=batch, what=f"decode, {name}, filter kernel {spec}", us_per_step=t * 1e6,
                                 over_greedy_pct=100 * (t - greedy) / greedy))
        mk._sampling_kernels["filter"] = kept
    if exact_too:
        # the same build without the rejection sampler (CodegenOptions(sample_pdraw=False)): before/after
        from mkc.codegen.render import CodegenOptions

        mk_b = megakernel(hf, batch, "atomic", options=CodegenOptions(pdraw_bound=False))
        for name in ("top-p 0.9", "top-p 0.5"):
            t = _time(lambda: mk_b.decode(rows, steps, sampling=cases[name])) / n_steps
            rows_out.append(dict(model=model, batch=batch, what=f"decode, {name}, no tile bounds (always the pass)",
                                 us_per_step=t * 1e6, over_greedy_pct=100 * (t - greedy) / greedy))
        del mk_b
        mk_x = megakernel(hf, batch, "atomic", options=CodegenOptions(sample_pdraw=False))
        g_x = _time(lambda: mk_x.decode(rows, steps, sampling=None)) / n_steps
        for name in ("greedy", "top-p 0.9", "top-p 0.5", "top-p 0.9 + min-p 0.05"):
            smp = cases[name]
            t = g_x if smp is None else _time(lambda: mk_x.decode(rows, steps, sampling=smp)) / n_steps
            rows_out.append(dict(model=model, batch=batch, what=f"decode, {name}, exact path only", us_per_step=t * 1e6,
                                 over_greedy_pct=100 * (t - g_x) / g_x))
    # one launch per step: host ids, and ids already on the GPU (the previous step's token)
    ids_host = torch.tensor([r[0] for r in rows])
    ids_dev = ids_host.cuda()
    for label, ids in (("mk(ids, pos), CPU ids", ids_host), ("mk(ids, pos), CUDA ids", ids_dev)):
        def loop():
            mk.reset()
            for t in range(n_steps):
                mk(ids, t)
            mk.synchronize()
        t = _time(loop) / n_steps
        rows_out.append(dict(model=model, batch=batch, what=label, us_per_step=t * 1e6,
                             over_greedy_pct=100 * (t - greedy) / greedy, us_over_in_loop=(t - greedy) * 1e6))
    # early exit: every row stops at its 10th new token
    first = mk.decode(rows, 10)
    eos = list({r[-1] for r in first})[:4]
    t = _time(lambda: mk.decode(rows, steps, eos_token_id=eos))
    rows_out.append(dict(model=model, batch=batch, what=f"decode {steps}, EOS at token <= 10 ({mk.step} steps ran)",
                         us_per_step=t * 1e6 / max(1, mk.step), total_ms=t * 1e3))
    return rows_out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="llama-3.2-1b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--steps", type=int, default=120)  # gpu_fixtures.MAX_SEQ is 128
    ap.add_argument("--json")
    ap.add_argument("--paired", action="store_true",
                    help="time each sampling case in alternation with greedy runs: the median ratio over 8 rounds, in turn ab and ba")
    ap.add_argument("--ab-options", nargs="*", default=[],
                    help="CodegenOptions fields as JSON: a build with them against the default one, each case in alternation (only these rows)")
    ap.add_argument("--no-aa", action="store_true",
                    help="with --ab-options: no A/A rows (by default the default build is also timed against a second "
                         "instance of itself first: its rows are the bench's own bias and spread, which a change must exceed)")
    ap.add_argument("--exact-too", action="store_true",
                    help="also builds without the tiles' bounds and without the rejection sampler (top-p / min-p alone): before/after")
    a = ap.parse_args()
    out = []
    for m in a.models.split(","):
        for b in (int(x) for x in a.batches.split(",")):
            specs = a.ab_options if a.no_aa else ["{}"] + a.ab_options
            out += bench_ab(m, b, a.steps, specs) if a.ab_options else bench(m, b, a.steps, a.exact_too, a.paired)
    if a.ab_options:
        print("| model | batch | what | default us/step | us/step | change | same tokens |")
        print("|---|---|---|---|---|---|---|")
        for r in out:
            print(f"| {r['model']} | {r['batch']} | {r['what']} | {r['us_default']:.1f} | {r['us_per_step']:.1f} | "
                  f"{r['change_pct']:+.2f} % | {r['same_tokens']} |")
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1))
        return
    print("| model | batch | what | us/step | over greedy | note |")
    print("|---|---|---|---|---|---|")
    for r in out:
        note = f"{r['us_over_in_loop']:+.1f} us over the in-loop step" if "us_over_in_loop" in r else (
            f"{r['total_ms']:.2f} ms total" if "total_ms" in r else "")
        pct = f"{r['over_greedy_pct']:+.2f} %" if "over_greedy_pct" in r else ""
        print(f"| {r['model']} | {r['batch']} | {r['what']} | {r['us_per_step']:.1f} | {pct} | {note} |")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
