"""The compile pipeline: named stages in one visible list, each writing its IR to the build dir.

    capture  -> graph.json       (mkc.capture)
    lower    -> tasks.json       (mkc.taskgraph)
    schedule -> schedule.json    (mkc.schedule, one per batch size)
    verify   -> verify.json      (mkc.verify; an unsafe schedule stops the build)
    codegen  -> kernel.cu / kernel.hip + tables.npz (mkc.codegen)

A build directory holds one sub-directory per batch size (``b1/``, ``b8/``...) with every
intermediate and ``report.json``, plus ``manifest.json`` at the top. Each stage's output can be
re-loaded and the later stages re-run from it (``mkc rerun DIR/b1 --from schedule``).
The directory is written under a temporary name and renamed at the end, so a failed build
leaves nothing half-written.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mkc.errors import MkcError
from mkc.targets.spec import Target, get_target

STAGES = ("capture", "lower", "schedule", "verify", "codegen")
MAX_BATCH = 64


@dataclass
class Options:
    target: str = "h200"
    batches: tuple[int, ...] = (1,)
    max_seq_len: int = 4096
    sync: str | None = None  # None: the target's default
    method: str = "cpsat"
    time_limit: float = 10.0
    stop_after: str = "codegen"
    compile_binary: bool = False  # also run nvcc/clang on the emitted source
    calibration: str | None = None  # cost-model calibration file (mkc run --trace writes one)


@dataclass
class StageLog:
    quiet: bool = False
    times: dict[str, float] = field(default_factory=dict)

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[mkc] {msg}", file=sys.stderr, flush=True)


def check_batches(batches: tuple[int, ...]) -> None:
    bad = [b for b in batches if not 1 <= b <= MAX_BATCH]
    if bad or not batches:
        raise MkcError(f"batch size {bad or batches} is not supported: mkc supports batch sizes 1 to {MAX_BATCH}")


def _timed(log: StageLog, name: str, fn: Callable, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    dt = time.perf_counter() - t0
    log.times[name] = log.times.get(name, 0.0) + dt
    log(f"{name:<9} {dt:6.2f} s")
    return out


def compile_model(model, out: str | Path, opts: Options, log: StageLog | None = None) -> Path:
    """Run every stage for every batch size; returns the build directory."""
    from mkc.capture import capture, resolve  # noqa: WPS433 (stage imports stay local)

    log = log or StageLog()
    target = get_target(opts.target)
    check_batches(opts.batches)
    sync = opts.sync or target.default_sync
    if sync not in ("atomic", "nan"):
        raise MkcError(f"unknown sync mode {sync!r}; choose atomic or nan")
    if opts.stop_after not in STAGES:
        raise MkcError(f"unknown stage {opts.stop_after!r}; stages: {', '.join(STAGES)}")
    if opts.calibration:
        from mkc.schedule.cost import load_calibration

        load_calibration(opts.calibration)  # a bad file stops the build before the long stages
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise MkcError(f"{out} exists and is not an mkc build directory; choose another --out")
    entry = resolve(model)
    made_parent = not out.parent.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # same filesystem: rename is atomic
    try:
        reports = {}
        for batch in opts.batches:
            log(f"{entry.name} batch {batch} -> {target.name} ({sync})")
            bdir = tmp / f"b{batch}"
            bdir.mkdir()
            graph = _timed(log, "capture", capture, entry, batch, opts.max_seq_len)
            graph.save(bdir / "graph.json")
            reports[batch] = run_from_graph(graph, bdir, target, sync, opts, log, model_name=entry.name)
        manifest = {
            "model": entry.name,
            "target": target.name,
            "sync": sync,
            "batches": list(opts.batches),
            "max_seq_len": opts.max_seq_len,
            "stages": list(STAGES[: STAGES.index(opts.stop_after) + 1]),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        (tmp / "report.json").write_text(json.dumps({str(b): r for b, r in reports.items()}, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if made_parent and not any(out.parent.iterdir()):
            out.parent.rmdir()
        raise
    return out


def run_from_graph(graph, bdir: Path, target: Target, sync: str, opts: Options, log: StageLog, model_name: str) -> dict:
    """Stages after capture for one batch size; writes their outputs and report.json into bdir."""
    report: dict = {
        "model": model_name,
        "target": target.name,
        "batch": graph.batch,
        "max_seq_len": graph.max_seq_len,
        "sync": sync,
        "graph": {"ops": graph.op_counts(), "param_bytes": graph.param_bytes(), "layers": graph.model.n_layers},
    }
    stop = STAGES.index(opts.stop_after)
    if stop >= STAGES.index("lower"):
        from mkc.taskgraph import lower, summary

        tg = _timed(log, "lower", lower, graph, target)
        tg.check()
        tg.save(bdir / "tasks.json")
        report["tasks"] = summary(tg)
        report.update(run_from_tasks(tg, bdir, target, sync, opts, log))
    report["seconds"] = {k: round(v, 3) for k, v in log.times.items()}
    (bdir / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def run_from_tasks(tg, bdir: Path, target: Target, sync: str, opts: Options, log: StageLog) -> dict:
    report: dict = {}
    stop = STAGES.index(opts.stop_after)
    if stop < STAGES.index("schedule"):
        return report
    from mkc.schedule import schedule
    from mkc.schedule.cost import DEFAULT_COST, load_calibration

    cost = load_calibration(opts.calibration) if opts.calibration else DEFAULT_COST
    if opts.calibration:
        log(f"cost model calibrated by {opts.calibration}: " + ", ".join(f"{k} x{v:g}" for k, v in cost.kind_scale.items()))
    sched = _timed(
        log, "schedule", schedule, tg, target, sync=sync, method=opts.method, time_limit=opts.time_limit, progress=log,
        cost=cost,
    )
    sched.check(len(tg.tasks))
    sched.save(bdir / "schedule.json")
    report["schedule"] = schedule_summary(sched)
    report["schedule"]["kind_scale"] = dict(cost.kind_scale)
    log(
        f"makespan {sched.makespan:.1f} us, lower bound {sched.lower_bound:.1f} us "
        f"(gap {100 * (sched.makespan / sched.lower_bound - 1):.1f} %), method {sched.method}"
    )
    report.update(run_from_schedule(tg, sched, bdir, target, opts, log))
    return report


def run_from_schedule(tg, sched, bdir: Path, target: Target, opts: Options, log: StageLog) -> dict:
    report: dict = {}
    stop = STAGES.index(opts.stop_after)
    if stop < STAGES.index("verify"):
        return report
    from mkc.errors import VerificationError
    from mkc.verify.verifier import verify

    vr = _timed(log, "verify", verify, tg, sched, target)
    (bdir / "verify.json").write_text(json.dumps(vr.to_dict(), indent=1) + "\n")
    report["verify"] = {"ok": vr.ok, "checks": [c.name for c in vr.checks]}
    if not vr.ok:
        raise VerificationError(f"schedule for batch {sched.batch} is unsafe; no kernel written:\n{vr.text()}")
    if stop < STAGES.index("codegen"):
        return report
    from mkc.codegen import emit

    paths = _timed(log, "codegen", emit, tg, sched, target, bdir)
    report["kernel"] = {k: str(Path(v).name) for k, v in paths.items()}
    if opts.compile_binary:
        from mkc.codegen import build_binary

        binary = _timed(log, "build", build_binary, bdir, target)
        report["kernel"]["binary"] = Path(binary).name
    return report


def schedule_summary(sched) -> dict:
    lb = sched.lower_bound
    out = {
        "method": sched.method,
        "workers": sched.num_workers,
        "makespan_us": round(sched.makespan, 3),
        "lower_bound_us": round(lb, 3),
        "gap_pct": round(100 * (sched.makespan / lb - 1), 2) if lb else None,
    }
    for k, v in sched.stats:
        out[k] = v
    return out


def rerun(bdir: str | Path, from_stage: str, opts: Options, log: StageLog | None = None) -> Path:
    """Re-run the stages from ``from_stage`` on in a batch directory, starting from the saved output
    of the stage before it (graph.json, tasks.json or schedule.json). The directory is rebuilt in a
    copy and swapped in at the end, so a failure leaves the old one untouched."""
    from mkc.capture.graph import Graph
    from mkc.schedule.ir import Schedule
    from mkc.taskgraph.ir import TaskGraph

    log = log or StageLog()
    bdir = Path(bdir)
    order = STAGES[1:]
    if from_stage not in order:
        raise MkcError(f"cannot re-run from {from_stage!r}; choose one of {', '.join(order)} (capture: use mkc compile)")
    need = {"lower": "graph.json", "schedule": "tasks.json", "verify": "schedule.json", "codegen": "schedule.json"}[from_stage]
    if not (bdir / need).exists():
        raise MkcError(f"{bdir} has no {need}: it is not a batch directory of an mkc build (e.g. build/x/b1)")
    old = json.loads((bdir / "report.json").read_text()) if (bdir / "report.json").exists() else {}
    tmp = Path(tempfile.mkdtemp(prefix=f".{bdir.name}.", dir=bdir.parent))
    try:
        for f in bdir.iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        if from_stage == "lower":
            graph = Graph.load(tmp / "graph.json")
            target = get_target(opts.target)
            sync = opts.sync or old.get("sync") or target.default_sync
            report = run_from_graph(graph, tmp, target, sync, opts, log, model_name=old.get("model", graph.model.arch))
        else:
            tg = TaskGraph.load(tmp / "tasks.json")
            target = get_target(tg.target)
            if from_stage == "schedule":
                sync = opts.sync or old.get("sync") or target.default_sync
                report = {**old, **run_from_tasks(tg, tmp, target, sync, opts, log)}
            else:
                sched = Schedule.load(tmp / "schedule.json")
                report = {**old, **run_from_schedule(tg, sched, tmp, target, opts, log)}
            (tmp / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        backup = bdir.with_name(f".{bdir.name}.old")
        bdir.rename(backup)
        tmp.rename(bdir)
        shutil.rmtree(backup)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return bdir
