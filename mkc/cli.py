"""mkc's command line: compile, models, verify, inspect, run, bench."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mkc.errors import MkcError
from mkc.pipeline import RERUN_STAGES, STAGE_NAMES
from mkc.schedule.ir import METHODS, SYNC_MODES

from mkc.capture.registry import DEFAULT_MODEL


def _batches(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batch takes comma-separated integers, e.g. 1,8,32 (got {text!r})")
    if not vals:
        raise argparse.ArgumentTypeError("--batch needs at least one batch size")
    return vals


def _add_compile(sub) -> None:
    from mkc.target import DEFAULT_TARGET, TARGETS

    p = sub.add_parser(
        "compile",
        help="compile a model into a megakernel build directory",
        description="Capture MODEL, lower it to SM tasks, schedule, verify and emit the kernel source. "
        "Writes graph.json, tasks.json, schedule.json, verify.json, the kernel source and report.json "
        "per batch size under --out.",
    )
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help=f"registry name (see `mkc models`) or a local Hugging Face directory with config.json "
                        f"(default: {DEFAULT_MODEL})")
    p.add_argument("--target", default=DEFAULT_TARGET, help=f"GPU to compile for: {', '.join(TARGETS)} (default: {DEFAULT_TARGET})")
    p.add_argument("--batch", type=_batches, default=(1,), help="batch size(s), comma separated, 1..64 (default: 1)")
    p.add_argument("--max-seq-len", type=int, default=4096, help="KV cache length in tokens (default: 4096)")
    p.add_argument("--sync", choices=SYNC_MODES, default=None,
                   help="synchronisation: atomic counters or NaN-sentinel data polling (default: the target's: atomic on NVIDIA, nan on AMD)")
    p.add_argument("--method", choices=METHODS, default="cpsat",
                   help="scheduler (default: cpsat, warm-started from and never worse than list)")
    p.add_argument("--time-limit", type=float, default=10.0, help="CP-SAT time budget in seconds over all solves of one batch size (deterministic time; default: 10)")
    p.add_argument("--stop-after", choices=STAGE_NAMES, default=STAGE_NAMES[-1],
                   help="stop after this stage (default: codegen)")
    p.add_argument("--build", action="store_true", help="also compile the kernel source with nvcc/clang")
    p.add_argument("--out", default=None, help="build directory (default: build/<model>-<target>)")
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="scale the cost model's per-kind task times by a calibration file "
                        "(mkc run DIR --trace T.json writes T.calibration.json)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def cmd_compile(a) -> int:
    from mkc.pipeline import Options, StageLog, compile_model

    out = a.out or f"build/{Path(str(a.model)).name}-{a.target}"
    opts = Options(target=a.target, batches=a.batch, max_seq_len=a.max_seq_len, sync=a.sync, method=a.method,
                   time_limit=a.time_limit, stop_after=a.stop_after, compile_binary=a.build,
                   calibration=a.calibration)
    if a.max_seq_len < 1:
        raise MkcError("--max-seq-len must be positive")
    path = compile_model(a.model, out, opts, StageLog(quiet=a.quiet))
    print(f"build directory: {path}")
    for b in a.batch:
        bdir = path / f"b{b}"
        kern = sorted(bdir.glob("kernel.*"))
        print(f"  batch {b}: report {bdir / 'report.json'}" + (f", kernel {kern[0]}" if kern else ""))
    return 0


def cmd_rerun(a) -> int:
    from mkc.pipeline import Options, StageLog, rerun

    opts = Options(target=a.target or "h200", sync=a.sync, method=a.method, time_limit=a.time_limit,
                   calibration=a.calibration)
    path = rerun(a.dir, a.from_stage, opts, StageLog(quiet=a.quiet))
    print(f"re-ran {a.from_stage} onwards in {path}")
    return 0


def cmd_models(a) -> int:
    from mkc.capture import list_models

    rows = list_models()
    print(f"{'name':<18} {'architecture':<22} {'layers':>6} {'params':>9} {'bf16 size':>10}")
    for m in rows:
        print(f"{m.name:<18} {m.arch:<22} {m.layers:>6} {_human(m.params, ''):>9} {_human(2 * m.params, 'B'):>10}")
    return 0


def _human(n: float, unit: str) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.2f}{suffix}{unit}"
    return f"{n:.0f}{unit}"


def _load_stage(bdir: Path):
    from mkc.schedule.ir import Schedule
    from mkc.taskgraph.ir import TaskGraph

    if not (bdir / "schedule.json").exists():
        subs = sorted(p for p in bdir.glob("b*") if (p / "schedule.json").exists())
        if not subs:
            raise MkcError(f"{bdir} holds no schedule.json (nor b*/schedule.json); run `mkc compile` first")
        return [(s, TaskGraph.load(s / "tasks.json"), Schedule.load(s / "schedule.json")) for s in subs]
    return [(bdir, TaskGraph.load(bdir / "tasks.json"), Schedule.load(bdir / "schedule.json"))]


def cmd_verify(a) -> int:
    if a.mutants:
        from mkc.verify.mutants import run_campaign

        summary = run_campaign(a.mutants, seed=a.seed, progress=lambda m: print(m, file=sys.stderr, flush=True))
        print(summary.text() if hasattr(summary, "text") else json.dumps(summary, indent=1))
        bad = getattr(summary, "unsafe_accepted", 0) + getattr(summary, "safe_rejected", 0)
        return 1 if bad else 0
    if not a.dir:
        raise MkcError("mkc verify needs a build directory (or --mutants N)")
    from mkc.verify.verifier import verify
    from mkc.target import get_target

    ok = True
    for bdir, tg, sched in _load_stage(Path(a.dir)):
        rep = verify(tg, sched, get_target(sched.target))
        print(f"{bdir}: {'SAFE' if rep.ok else 'UNSAFE'}")
        print(rep.text())
        ok &= rep.ok
    return 0 if ok else 1


def cmd_inspect(a) -> int:
    from mkc.schedule.inspect import gantt_png, perfetto_trace

    for bdir, tg, sched in _load_stage(Path(a.dir)):
        png, trace = bdir / "schedule.png", bdir / "schedule.trace.json"
        gantt_png(tg, sched, png)
        perfetto_trace(tg, sched, trace)
        print(f"{bdir}: Gantt chart {png}, Perfetto trace {trace} (open in ui.perfetto.dev)")
    return 0


def cmd_run(a) -> int:
    from mkc.run import run_cli

    return run_cli(a)


def cmd_bench(a) -> int:
    from mkc.bench import bench_cli

    return bench_cli(a)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mkc",
        description="mkc compiles a Hugging Face decoder LLM into one persistent GPU kernel per decode step, "
        "with a statically scheduled and statically verified task queue per SM.",
    )
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    _add_compile(sub)
    rr = sub.add_parser("rerun", help="re-run the later stages of a build from a saved intermediate",
                        description="Re-run the stages from --from on in one batch directory (e.g. build/x/b1), "
                        "starting from the previous stage's saved output: lower <- graph.json, schedule <- tasks.json, "
                        "verify/codegen <- schedule.json.")
    rr.add_argument("dir", help="a batch directory of a build (holds graph.json, tasks.json, ...)")
    rr.add_argument("--from", dest="from_stage", required=True, choices=RERUN_STAGES)
    rr.add_argument("--target", default=None, help="target for --from lower (default: h200)")
    rr.add_argument("--sync", choices=SYNC_MODES, default=None, help="sync mode (default: the build's)")
    rr.add_argument("--method", choices=METHODS, default="cpsat")
    rr.add_argument("--time-limit", type=float, default=10.0)
    rr.add_argument("--calibration", default=None, metavar="FILE", help="cost-model calibration file (as for compile)")
    rr.add_argument("-q", "--quiet", action="store_true")
    sub.add_parser("models", help="list the bundled models", description="List registry models with size and layers.")
    v = sub.add_parser("verify", help="statically verify a build's schedules, or run the mutation campaign",
                       description="Prove a schedule safe (exit 0) or name what is unsafe (exit 1). "
                       "With --mutants N, generate N mutated schedules and check the verifier against an oracle.")
    v.add_argument("dir", nargs="?", help="build directory (or one batch sub-directory)")
    v.add_argument("--mutants", type=int, default=0, help="run a mutation campaign of N mutants instead")
    v.add_argument("--seed", type=int, default=0, help="seed of the mutation campaign (default: 0)")
    i = sub.add_parser("inspect", help="draw a build's schedule (Gantt PNG + Perfetto trace)",
                       description="Write schedule.png and schedule.trace.json next to each schedule.json.")
    i.add_argument("dir", help="build directory")
    r = sub.add_parser("run", help="run a compiled model on the GPU (greedy decode)",
                       description="Load a build directory's kernel on the GPU and decode greedily.")
    r.add_argument("dir", help="build directory from `mkc compile`")
    r.add_argument("--prompt-ids", default="1", help="comma-separated prompt token ids (default: 1)")
    r.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate (default: 32)")
    r.add_argument("--weights", default=None, help="local HF directory with safetensors (default: seeded random weights)")
    r.add_argument("--trace", default=None, metavar="OUT.json",
                   help="build the kernel with the per-task device trace and write a Perfetto/Chrome trace of the "
                        "first traced steps (measured next to predicted), a Gantt PNG beside it and a summary")
    b = sub.add_parser("bench", help="benchmark mkc against eager, CUDA graph and torch.compile (GPU)",
                       description="Measure read bandwidth, then time mkc and PyTorch baselines per batch size in one run.")
    b.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    b.add_argument("--batch", type=_batches, default=(1,))
    b.add_argument("--target", default="h200")
    b.add_argument("--context", type=int, default=512, help="context length (cache position) timed at (default: 512)")
    b.add_argument("--max-seq-len", type=int, default=1024)
    b.add_argument("--iters", type=int, default=200)
    b.add_argument("--out", default="bench-out", help="directory for JSON, markdown and PNG results")
    return p


COMMANDS = {"compile": cmd_compile, "rerun": cmd_rerun, "models": cmd_models, "verify": cmd_verify, "inspect": cmd_inspect,
            "run": cmd_run, "bench": cmd_bench}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if not a.cmd:
        parser.print_help()
        return 2
    try:
        return COMMANDS[a.cmd](a)
    except MkcError as e:
        print(f"mkc: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # e.g. `mkc models | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("mkc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
