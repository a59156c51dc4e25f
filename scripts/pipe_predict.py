"""Predicted beside measured for scripts/gpu_bench.py rows, on the CPU machine.

    PYTHONPATH=.:scripts:tests python3 scripts/pipe_predict.py --calibration docs/bench/calibration-llama-3.2-1b-b1.json \
        --measured ab.jsonl --variants b1-atomic,b1-atomic-cpsat,b1-atomic-dsplit2

For each variant: the same task graph and schedule gpu_bench times (loaded from $MKC_SCHED_CACHE
where prebuild.py saved it), replayed by the pipelined model (mkc.schedule.pipemodel) under the
calibration file's constants, next to the scheduler's own prediction, the scheduler's model under
the calibration's per-kind factors replaying the variant's queues, and, from a gpu_bench report
(--measured), the measured time. gpu_bench writes a calibration per traced row with $MKC_CAL_DIR.
"""

from __future__ import annotations

import argparse
import json

from gpu_bench import variant_plan

from mkc.codegen.render import plan_for
from mkc.schedule.cost import load_calibration
from mkc.schedule.cost import durations
from mkc.schedule.pipemodel import pipelined_timeline
from mkc.schedule.timeline import Deps, timeline
from mkc.target import get_target


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibration", required=True, help="a calibration file with a pipeline object (mkc run --trace)")
    ap.add_argument("--measured", default=None, help="a gpu_bench --report file (JSON lines)")
    ap.add_argument("--variants", required=True, help="comma-separated gpu_bench variants")
    ap.add_argument("--max-seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3, help="decode steps the model replays (the last one is reported)")
    a = ap.parse_args()
    cost = load_calibration(a.calibration)
    measured = {}
    if a.measured:
        for line in open(a.measured):
            r = json.loads(line)
            measured[r["variant"]] = 1000 * r["ms_per_token"]
    print("| variant | measured (us) | pipelined model | scheduler's model | scheduler's model, calibrated |")
    print("|---|---|---|---|---|")
    for v in a.variants.split(","):
        tg, sched, options = variant_plan(v, a.max_seq)
        target = get_target(tg.target)
        # the pages of the kernel gpu_bench built (a variant's options may drop the pipeline)
        slots = plan_for(tg, target, options).pipe_slots
        # per step as the timed launch measures it: the last step's end less the one before's
        p = pipelined_timeline(tg, sched.queues, target, cost, steps=max(a.steps, 2), pipe_slots=slots).period_us()[-1]
        m = measured.get(v)

        def ratio(x):
            return f" ({x / m:.2f}x)" if m else ""

        own = f"{sched.makespan:.1f}{ratio(sched.makespan)}" if sched.makespan else "-"
        # the scheduler's model under the calibration's per-kind factors, replaying this variant's
        # queues (what `mkc compile --calibration FILE` would predict for them)
        start, end = timeline(Deps.from_taskgraph(tg), durations(tg, target, cost), sched.queues)
        cal = max(end) - min(start)
        print(f"| {v} | {m:.1f} | {p:.1f}{ratio(p)} | {own} | {cal:.1f}{ratio(cal)} |" if m else
              f"| {v} | - | {p:.1f} | {own} | {cal:.1f} |")


if __name__ == "__main__":
    main()
