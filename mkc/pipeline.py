"""The compile pipeline: named stages in one visible list, each writing its IR to the build dir.

    capture  -> graph.json       (mkc.capture)
    lower    -> tasks.json       (mkc.taskgraph)
    schedule -> schedule.json    (mkc.schedule, one per batch size)
    verify   -> verify.json      (mkc.verify; an unsafe schedule stops the build)
    codegen  -> kernel.cu / kernel.hip + tables.npz (mkc.codegen)

A build directory holds one sub-directory per batch size (``b1/``, ``b8/``...) with every
intermediate and ``report.json``, plus ``manifest.json`` at the top. Each stage's output can be
re-loaded and the later stages re-run from it (``mkc rerun DIR/b1 --from schedule``).
``STAGES`` is that list as data: compile, ``--stop-after`` and ``rerun --from`` all walk it.
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
from typing import Any, Callable

from mkc.errors import MkcError
from mkc.target import Target, get_target

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




@dataclass
class Build:
    """One batch size on its way through the stages: what each stage hands the next, and the report."""

    bdir: Path
    target: Target
    sync: str
    opts: Options
    log: StageLog
    report: dict  # report.json; capture (or re-running from graph.json) starts it with _header
    entry: Any = None  # the registry entry (capture only)
    batch: int = 0
    graph: Any = None
    tg: Any = None
    sched: Any = None


@dataclass(frozen=True)
class Stage:
    name: str
    input_file: str | None  # what ``rerun --from`` this stage starts from (None: the model itself)
    output_file: str  # written into the batch directory ("kernel.*": kernel.cu or kernel.hip, tables.npz)
    run: Callable[[Build], None]


def _capture(b: Build) -> None:
    from mkc.capture import capture

    b.graph = _timed(b.log, "capture", capture, b.entry, b.batch, b.opts.max_seq_len)
    b.graph.save(b.bdir / "graph.json")
    b.report = _header(b.graph, b.target, b.sync, b.entry.name)


def _lower(b: Build) -> None:
    from mkc.taskgraph import lower, summary

    b.tg = _timed(b.log, "lower", lower, b.graph, b.target)
    b.tg.check()
    b.tg.save(b.bdir / "tasks.json")
    b.report["tasks"] = summary(b.tg)


def _schedule(b: Build) -> None:
    from mkc.schedule import schedule
    from mkc.schedule.cost import DEFAULT_COST, load_calibration

    opts, log = b.opts, b.log
    cost = load_calibration(opts.calibration) if opts.calibration else DEFAULT_COST
    if opts.calibration:
        log(f"cost model calibrated by {opts.calibration}: " + ", ".join(f"{k} x{v:g}" for k, v in cost.kind_scale.items()))
    sched = _timed(
        log, "schedule", schedule, b.tg, b.target, sync=b.sync, method=opts.method, time_limit=opts.time_limit,
        progress=log, cost=cost,
    )
    sched.check(len(b.tg.tasks))
    sched.save(b.bdir / "schedule.json")
    b.sched = sched
    b.report["schedule"] = schedule_summary(sched)
    b.report["schedule"]["kind_scale"] = dict(cost.kind_scale)
    log(
        f"makespan {sched.makespan:.1f} us, lower bound {sched.lower_bound:.1f} us "
        f"(gap {100 * (sched.makespan / sched.lower_bound - 1):.1f} %), method {sched.method}"
    )


def _verify(b: Build) -> None:
    from mkc.errors import VerificationError
    from mkc.verify import verify

    vr = _timed(b.log, "verify", verify, b.tg, b.sched, b.target)
    (b.bdir / "verify.json").write_text(json.dumps(vr.to_dict(), indent=1) + "\n")
    b.report["verify"] = {"ok": vr.ok, "checks": [c.name for c in vr.checks]}
    if not vr.ok:
        raise VerificationError(f"schedule for batch {b.sched.batch} is unsafe; no kernel written:\n{vr.text()}")


def _codegen(b: Build) -> None:
    from mkc.codegen import emit

    paths = _timed(b.log, "codegen", emit, b.tg, b.sched, b.target, b.bdir)
    b.report["kernel"] = {k: str(Path(v).name) for k, v in paths.items()}
    if b.opts.compile_binary:
        from mkc.codegen import build_binary

        binary = _timed(b.log, "build", build_binary, b.bdir, b.target)
        b.report["kernel"]["binary"] = Path(binary).name


STAGES = (
    Stage("capture", None, "graph.json", _capture),
    Stage("lower", "graph.json", "tasks.json", _lower),
    Stage("schedule", "tasks.json", "schedule.json", _schedule),
    Stage("verify", "schedule.json", "verify.json", _verify),
    Stage("codegen", "schedule.json", "kernel.*", _codegen),
)
STAGE_NAMES = tuple(st.name for st in STAGES)
RERUN_STAGES = tuple(st.name for st in STAGES if st.input_file)  # rerun --from these


def _stage_index(name: str) -> int:
    return STAGE_NAMES.index(name)


def _run_stages(b: Build, first: str, last: str) -> None:
    for st in STAGES[_stage_index(first): _stage_index(last) + 1]:
        st.run(b)


def _header(graph, target: Target, sync: str, model_name: str) -> dict:
    """The report's first fields, known once there is a graph."""
    return {
        "model": model_name,
        "target": target.name,
        "batch": graph.batch,
        "max_seq_len": graph.max_seq_len,
        "sync": sync,
        "graph": {"ops": graph.op_counts(), "param_bytes": graph.param_bytes(), "layers": graph.model.n_layers},
    }


def _write_report(b: Build, with_seconds: bool) -> None:
    """``seconds``: the stage times of this StageLog so far (over the batch sizes before this one too).
    A re-run from a task graph or a schedule keeps the build's times."""
    if with_seconds:
        b.report["seconds"] = {k: round(v, 3) for k, v in b.log.times.items()}
    (b.bdir / "report.json").write_text(json.dumps(b.report, indent=1) + "\n")


def compile_model(model, out: str | Path, opts: Options, log: StageLog | None = None) -> Path:
    """Run every stage up to ``opts.stop_after`` for every batch size; returns the build directory."""
    from mkc.capture import resolve  # noqa: WPS433 (stage imports stay local)
    from mkc.schedule.ir import SYNC_MODES

    log = log or StageLog()
    target = get_target(opts.target)
    check_batches(opts.batches)
    sync = opts.sync or target.default_sync
    if sync not in SYNC_MODES:
        raise MkcError(f"unknown sync mode {sync!r}; choose {' or '.join(SYNC_MODES)}")
    if opts.stop_after not in STAGE_NAMES:
        raise MkcError(f"unknown stage {opts.stop_after!r}; stages: {', '.join(STAGE_NAMES)}")
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
            b = Build(tmp / f"b{batch}", target, sync, opts, log, {}, entry=entry, batch=batch)
            b.bdir.mkdir()
            _run_stages(b, "capture", opts.stop_after)
            _write_report(b, with_seconds=True)
            reports[batch] = b.report
        manifest = {
            "model": entry.name,
            "target": target.name,
            "sync": sync,
            "batches": list(opts.batches),
            "max_seq_len": opts.max_seq_len,
            "stages": list(STAGE_NAMES[: _stage_index(opts.stop_after) + 1]),
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
    of the stage before it (that stage's ``input_file``). ``--from codegen`` verifies again first: no
    kernel is written for a schedule this run has not proven safe. The directory is rebuilt in a copy
    and swapped in at the end, so a failure leaves the old one untouched."""
    from mkc.capture.graph import Graph
    from mkc.schedule.ir import Schedule
    from mkc.taskgraph.ir import TaskGraph

    log = log or StageLog()
    bdir = Path(bdir)
    if from_stage not in RERUN_STAGES:
        raise MkcError(f"cannot re-run from {from_stage!r}; choose one of {', '.join(RERUN_STAGES)} "
                       f"(capture: use mkc compile)")
    need = STAGES[_stage_index(from_stage)].input_file
    if not (bdir / need).exists():
        raise MkcError(f"{bdir} has no {need}: it is not a batch directory of an mkc build (e.g. build/x/b1)")
    old = json.loads((bdir / "report.json").read_text()) if (bdir / "report.json").exists() else {}
    first = "verify" if from_stage == "codegen" else from_stage
    tmp = Path(tempfile.mkdtemp(prefix=f".{bdir.name}.", dir=bdir.parent))
    try:
        for f in bdir.iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        if first == "lower":
            # a new task graph: the report starts again from the graph (and times this run)
            graph = Graph.load(tmp / "graph.json")
            target = get_target(opts.target)
            sync = opts.sync or old.get("sync") or target.default_sync
            b = Build(tmp, target, sync, opts, log, _header(graph, target, sync, old.get("model", graph.model.arch)),
                      graph=graph)
        else:
            tg = TaskGraph.load(tmp / "tasks.json")
            target = get_target(tg.target)
            sync = opts.sync or old.get("sync") or target.default_sync
            b = Build(tmp, target, sync, opts, log, dict(old), tg=tg)
            if first != "schedule":
                b.sched = Schedule.load(tmp / "schedule.json")
        _run_stages(b, first, opts.stop_after)
        _write_report(b, with_seconds=first == "lower")
        backup = bdir.with_name(f".{bdir.name}.old")
        bdir.rename(backup)
        tmp.rename(bdir)
        shutil.rmtree(backup)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return bdir


def build_target(bdir: str | Path):
    """The target a batch directory was compiled for (its report.json says, else its tasks.json)."""
    import json

    bdir = Path(bdir)
    for name in ("report.json", "tasks.json"):
        if (bdir / name).exists():
            found = json.loads((bdir / name).read_text()).get("target")
            if found:
                return get_target(found)
    raise MkcError(f"{bdir} is not a batch directory of an mkc build (no report.json or tasks.json)")
