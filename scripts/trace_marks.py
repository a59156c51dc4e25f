"""The marks inside a sampled step's argmax and LM-head tasks under CodegenOptions specs, one
process (a developer's tool, issue #16): what `mkc run DIR --trace` prints for the default, for each
spec, averaged over the traced steps after the first, so a change's effect on a mark is read off
directly where a paired bench cannot resolve it (a bench's spread is ~0.4 % of a step, ~3 us).

    python scripts/trace_marks.py .builds/llama-b1 --specs '{}' '{"kth_exit": true}' \
        [--top-k 50] [--top-p 1.0] [--steps 24]

With --greedy (issue #13) it traces greedy steps instead, prints the layers' marks too and what each
phase of a layer adds to the chain on which HBM idles (mkc.trace.chain_summary).

The kernels (CodegenOptions(trace=True, **spec)) come from the compile cache: prebuild.py
--build-dirs DIR --trace with MKC_TRACE_SPECS set to the same specs, ';'-separated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KINDS = ("argmax", "lmhead")
LAYER_KINDS = ("qkv", "attn", "oproj", "gateup", "down")


def main() -> int:
    import torch

    from mkc.capture.weights import load_weights
    from mkc.codegen.render import CodegenOptions
    from mkc.generation import generate_rows
    from mkc.runtime import Megakernel
    from mkc.sampling import Sampling
    from mkc.trace import chain_summary, format_chain, mark_summary, summarize

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir", help="an `mkc compile` directory of one batch size (its b1/ is taken)")
    ap.add_argument("--specs", nargs="+", default=["{}"], help="CodegenOptions fields as JSON, one per kernel")
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--greedy", action="store_true", help="greedy steps (the greedy kernel); the layers' chain")
    a = ap.parse_args()
    subs = sorted(Path(a.build_dir).glob("b*/tasks.json"))
    manifest = Path(a.build_dir) / "manifest.json"
    if not subs or not manifest.exists():
        sys.exit(f"{a.build_dir}: not an `mkc compile` directory (no b*/tasks.json or manifest.json)")
    bdir, model = subs[0].parent, json.loads(manifest.read_text())["model"]
    weights = load_weights(model, torch.bfloat16, device="cuda", notify=lambda m: None)
    smp = Sampling(temperature=1.0, top_k=a.top_k, top_p=a.top_p, seed=1)
    what = "greedy" if a.greedy else f"top-k {a.top_k}, top-p {a.top_p}"
    print(f"{bdir}: {what}; mean us after each task's waits end, traced steps 1..")
    for spec in a.specs:
        mk = Megakernel.from_build_dir(bdir, weights, options=CodegenOptions(trace=True, **json.loads(spec)))
        if not a.greedy:
            mk.prepare_sampling(filtered=True)
        generate_rows(mk, [[1]], a.steps, sampling=None if a.greedy else smp)
        measured, marks = mk.trace(), mk.trace_marks()
        steps = np.asarray(marks).shape[0]
        rows = [mark_summary(mk.tg, measured, marks, step=s) for s in range(1, steps)]
        summ = summarize(mk.tg, mk.sched, measured)
        step_us, period = summ["step_us"][1:], summ["period_us"]
        # (the span overstates a step of a one-launch loop: the last phase's early finishers start
        # waiting on the next step; the period is what a step adds)
        print(f"  {spec}: traced step period {np.mean(period):.1f} us, span {np.mean(step_us):.1f} us "
              f"(steps 1-{steps - 1})")
        for kind in (KINDS + LAYER_KINDS if a.greedy else KINDS):
            names = [n for n in rows[0].get(kind, {})]
            vals = {n: np.mean([r[kind][n] for r in rows if n in r.get(kind, {})]) for n in names}
            print(f"    {kind:7s} " + ", ".join(f"{n} {v:.2f}" for n, v in vals.items()))
        if a.greedy:  # (issue #13) what each phase adds to a layer, over the traced steps after the first
            print("    " + format_chain(chain_summary(mk.tg, measured, steps=range(1, steps))).replace("\n", "\n    "))
        del mk
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
