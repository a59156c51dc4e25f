"""mkc's command line: compile, models, verify, inspect, run, bench."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
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
    p.add_argument("--force", action="store_true",
                   help="replace an existing build directory at --out (never one holding files mkc did not write)")
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="scale the cost model's per-kind task times by a calibration file "
                        "(mkc run DIR --trace T.json writes T.calibration.json)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")


def _default_out(model, target: str) -> str:
    p = Path(str(model)).expanduser()
    # `mkc compile .` names the build after the folder, not after ''
    name = p.resolve().name if p.exists() else p.name
    return f"build/{name or 'model'}-{target}"


def cmd_compile(a) -> int:
    from mkc.pipeline import Options, StageLog, check_batches, check_options, compile_model

    out = a.out or _default_out(a.model, a.target)
    opts = Options(target=a.target, batches=a.batch, max_seq_len=a.max_seq_len, sync=a.sync, method=a.method,
                   time_limit=a.time_limit, stop_after=a.stop_after, compile_binary=a.build,
                   calibration=a.calibration, force=a.force)
    check_batches(opts.batches)
    check_options(opts)
    path = compile_model(a.model, out, opts, StageLog(quiet=a.quiet))
    rows = []
    for b in a.batch:
        bdir = path / f"b{b}"
        rep = json.loads((bdir / "report.json").read_text())
        kern = rep.get("kernel", {}).get("source")
        kern = bdir / kern if kern else next(iter(sorted(bdir.glob("kernel.cu")) + sorted(bdir.glob("kernel.hip"))), None)
        rows.append({"batch": b, "dir": str(bdir), "report": str(bdir / "report.json"),
                     "kernel": str(kern) if kern else None,
                     "makespan_us": rep.get("schedule", {}).get("makespan_us"),
                     "memory_bytes": rep.get("memory", {}).get("total")})
    if a.json:
        print(json.dumps({"build": str(path), "manifest": str(path / "manifest.json"), "batches": rows}, indent=1))
        return 0
    print(f"build directory: {path}")
    for r in rows:
        print(f"  batch {r['batch']}: report {r['report']}" + (f", kernel {r['kernel']}" if r["kernel"] else ""))
    return 0


def cmd_rerun(a) -> int:
    from mkc.pipeline import Options, StageLog, rerun

    opts = Options(target=a.target, sync=a.sync, method=a.method, time_limit=a.time_limit,
                   calibration=a.calibration)
    path = rerun(a.dir, a.from_stage, opts, StageLog(quiet=a.quiet))
    print(f"re-ran {a.from_stage} onwards in {path}")
    return 0


def cmd_models(a) -> int:
    from mkc.capture import list_models

    rows = list_models()
    if not rows:
        from mkc.capture.registry import MODELS_DIR

        raise MkcError(f"no bundled models found in {MODELS_DIR}; the registry ships with a checkout of mkc "
                       f"(pip install -e .). A local Hugging Face folder works with any install: mkc compile DIR")
    if a.json:
        print(json.dumps([{"name": m.name, "architecture": m.arch, "family": m.family, "layers": m.layers,
                           "hidden": m.hidden, "params": m.params, "bf16_bytes": m.bytes} for m in rows], indent=1))
        return 0
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

    def load(d: Path):
        out = []
        for name, cls in (("tasks.json", TaskGraph), ("schedule.json", Schedule)):
            try:
                out.append(cls.load(d / name))
            except MkcError:
                raise
            except Exception as e:  # noqa: BLE001 - a damaged file fails in json, in the IR's checks, anywhere
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise MkcError(f"cannot read {d / name}: {first}. The build is damaged: compile it again, or "
                               f"mkc rerun {d} --from an earlier stage") from None
        return (d, *out)

    if not bdir.is_dir():
        raise MkcError(f"{bdir} is not a directory")
    if not (bdir / "schedule.json").exists():
        subs = sorted(p for p in bdir.glob("b*") if (p / "schedule.json").exists())
        if not subs:
            raise MkcError(f"{bdir} holds no schedule.json (nor b*/schedule.json); run `mkc compile` first")
        return [load(s) for s in subs]
    return [load(bdir)]


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

    ok, results = True, []
    for bdir, tg, sched in _load_stage(Path(a.dir)):
        rep = verify(tg, sched, get_target(sched.target))
        ok &= rep.ok
        if a.json:
            results.append({"dir": str(bdir), **rep.to_dict()})
            continue
        print(f"{bdir}: {'SAFE' if rep.ok else 'UNSAFE'}")
        print(rep.text())
    if a.json:
        print(json.dumps(results, indent=1))
    return 0 if ok else 1


def cmd_inspect(a) -> int:
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        raise MkcError("mkc inspect draws with matplotlib, which is not installed; it is in mkc's plot extra: "
                       "pip install 'mkc[plot]' (or pip install -e '.[plot]' in a checkout)") from None
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


class _Parser(argparse.ArgumentParser):
    """Every subcommand takes --debug/-v too (after the command, where users type it)."""

    def add_subparsers(self, **kw):
        action = super().add_subparsers(**kw)
        add = action.add_parser

        def add_parser(name, **kw2):
            sp = add(name, **kw2)
            sp.add_argument("-v", "--verbose", "--debug", dest="debug", action="store_true", default=argparse.SUPPRESS,
                            help="show the traceback of an error")
            return sp

        action.add_parser = add_parser
        return action


def build_parser() -> argparse.ArgumentParser:
    from mkc.version import __version__

    p = _Parser(
        prog="mkc",
        description="mkc compiles a Hugging Face decoder LLM into one persistent GPU kernel per decode step, "
        "with a statically scheduled and statically verified task queue per SM.",
    )
    p.add_argument("--version", action="version", version=f"mkc {__version__}")
    p.add_argument("-v", "--verbose", "--debug", dest="debug", action="store_true", default=False,
                   help="show the traceback of an error")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    _add_compile(sub)
    rr = sub.add_parser("rerun", help="re-run the later stages of a build from a saved intermediate",
                        description="Re-run the stages from --from on in one batch directory (e.g. build/x/b1), "
                        "starting from the previous stage's saved output: lower <- graph.json, schedule <- tasks.json, "
                        "verify/codegen <- schedule.json.")
    rr.add_argument("dir", help="a batch directory of a build (holds graph.json, tasks.json, ...)")
    rr.add_argument("--from", dest="from_stage", required=True, choices=RERUN_STAGES,
                    help="the first stage to run again, from the saved output of the one before it")
    rr.add_argument("--target", default=None,
                    help="the build's target (the default; a rerun never retargets: compile again for another GPU)")
    rr.add_argument("--sync", choices=SYNC_MODES, default=None, help="sync mode (default: the build's)")
    rr.add_argument("--method", choices=METHODS, default=None, help="scheduler (default: the build's)")
    rr.add_argument("--time-limit", type=float, default=None, help="CP-SAT time budget in seconds (default: the build's)")
    rr.add_argument("--calibration", default=None, metavar="FILE",
                    help="cost-model calibration file (as for compile; default: the build's)")
    rr.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    m = sub.add_parser("models", help="list the bundled models", description="List registry models with size and layers. "
                       "Registry models have seeded random weights; a local Hugging Face folder brings its own.")
    m.add_argument("--json", action="store_true", help="print the list as JSON")
    v = sub.add_parser("verify", help="statically verify a build's schedules, or run the mutation campaign",
                       description="Prove a schedule safe (exit 0) or name what is unsafe (exit 1). "
                       "With --mutants N, generate N mutated schedules and check the verifier against an oracle.")
    v.add_argument("dir", nargs="?", help="build directory (or one batch sub-directory)")
    v.add_argument("--mutants", type=int, default=0, help="run a mutation campaign of N mutants instead")
    v.add_argument("--seed", type=int, default=0, help="seed of the mutation campaign (default: 0)")
    v.add_argument("--json", action="store_true", help="print each report as JSON (verify.json's format)")
    i = sub.add_parser("inspect", help="draw a build's schedule (Gantt PNG + Perfetto trace)",
                       description="Write schedule.png and schedule.trace.json next to each schedule.json.")
    i.add_argument("dir", help="build directory")
    r = sub.add_parser("run", help="run a compiled model on the GPU: text or token ids in, text or ids out",
                       description="Load a build directory's kernel on the GPU and generate. Text prompts use the "
                       "model folder's tokenizer and the text is printed as it is generated; registry models and "
                       "folders without a tokenizer take --prompt-ids. Each prompt is one batch row; the smallest "
                       "compiled batch that holds the rows is used (the rest is padding).")
    r.add_argument("dir", help="build directory from `mkc compile`")
    r.add_argument("--prompt", action="append", default=None, metavar="TEXT",
                   help="a text prompt (repeatable: one batch row each); needs a tokenizer in the model folder")
    r.add_argument("--prompts-file", default=None, metavar="FILE", help="text prompts, one per line (one row each)")
    r.add_argument("--chat", action="store_true", help="wrap each text prompt in the tokenizer's chat template")
    r.add_argument("--prompt-ids", action="append", default=None, metavar="IDS",
                   help="comma-separated prompt token ids (repeatable: one row each; default: 1)")
    r.add_argument("--max-new-tokens", type=int, default=32, help="new tokens per row at most (default: 32)")
    r.add_argument("--eos-token-id", default=None, metavar="IDS",
                   help="stop token id(s), comma separated, or 'none' (default: the model folder's "
                        "generation_config.json / config.json; a registry model has none)")
    r.add_argument("--do-sample", dest="do_sample", action="store_true", default=None,
                   help="sample (transformers' defaults: temperature 1.0, top-k 50, top-p 1.0) instead of greedy")
    r.add_argument("--greedy", dest="do_sample", action="store_false",
                   help="decode greedily even where the folder's generation_config.json asks for sampling")
    r.add_argument("--temperature", type=float, default=None, help="sampling temperature (with --do-sample)")
    r.add_argument("--top-k", type=int, default=None, help="sample from the k likeliest tokens (with --do-sample; 0: all)")
    r.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass (with --do-sample)")
    r.add_argument("--min-p", type=float, default=None, help="drop tokens below min-p x the top probability (with --do-sample)")
    r.add_argument("--seed", type=int, default=None, help="sampler seed: the same seed reproduces a run (default: 0)")
    r.add_argument("--prefill", choices=("auto", "torch", "kernel"), default="auto",
                   help="how the prompt fills the KV cache: a batched torch forward, token by token in the kernel, or "
                        "auto (torch from 16 prompt tokens on; default)")
    r.add_argument("--batch", type=int, default=None,
                   help="the compiled batch to run on (default: the smallest that holds the rows)")
    r.add_argument("--weights", default=None, metavar="DIR",
                   help="local HF folder whose checkpoint to load (default: the build's model folder, as recorded "
                        "in its manifest; a registry model's seeded random weights)")
    r.add_argument("--random-weights", action="store_true",
                   help="run a folder without a checkpoint on seeded random weights (otherwise it is refused)")
    r.add_argument("--trace", default=None, metavar="OUT.json",
                   help="build the kernel with the per-task device trace and write a Perfetto/Chrome trace of the "
                        "first traced steps (measured next to predicted), a Gantt PNG beside it and a summary")
    b = sub.add_parser("bench", help="benchmark mkc against eager, CUDA graph and torch.compile (GPU)",
                       description="Measure read bandwidth, then time mkc and PyTorch baselines per batch size in one run.")
    b.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=f"as for compile (default: {DEFAULT_MODEL})")
    b.add_argument("--batch", type=_batches, default=(1,), help="batch size(s), comma separated (default: 1)")
    b.add_argument("--target", default="h200", help="the GPU the benchmark runs on (default: h200)")
    b.add_argument("--context", type=int, default=512, help="context length (cache position) timed at (default: 512)")
    b.add_argument("--max-seq-len", type=int, default=1024, help="KV cache length in tokens (default: 1024)")
    b.add_argument("--iters", type=int, default=200, help="timed iterations per measurement (default: 200)")
    b.add_argument("--out", default="bench-out", help="directory for JSON, markdown and PNG results")
    b.add_argument("--autotune", action="store_true",
                   help="also torch.compile(mode='max-autotune-no-cudagraphs') in a CUDA graph (minutes of autotuning)")
    return p


COMMANDS = {"compile": cmd_compile, "rerun": cmd_rerun, "models": cmd_models, "verify": cmd_verify, "inspect": cmd_inspect,
            "run": cmd_run, "bench": cmd_bench}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if not a.cmd:
        parser.print_help()
        return 2
    debug = getattr(a, "debug", False)
    try:
        return COMMANDS[a.cmd](a)
    except MkcError as e:
        if debug:
            traceback.print_exc()
        print(f"mkc: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # e.g. `mkc models | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("mkc: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug in mkc: one line, the traceback on request
        if debug:
            traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"mkc: internal error: {type(e).__name__}: {first}" +
              ("" if debug else "\nrun with --debug for the traceback"), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
