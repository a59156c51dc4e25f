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
import os
import shutil
import sys
import tempfile
import threading
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
    force: bool = False  # replace an existing build directory (never one holding files mkc did not write)


# what a manifest records of the options; rerun takes them back from there
RECORDED_OPTIONS = ("sync", "method", "time_limit", "max_seq_len", "stop_after", "compile_binary", "calibration")
# files ``mkc inspect`` draws from a schedule: stale once the schedule changes
DRAWINGS = ("schedule.png", "schedule.trace.json")


@dataclass
class StageLog:
    quiet: bool = False
    times: dict[str, float] = field(default_factory=dict)
    heartbeat: float = 10.0  # seconds between "still running" lines of a long stage (0: none)

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[mkc] {msg}", file=sys.stderr, flush=True)

    def notice(self, msg: str) -> None:
        """What the user must see even with -q: a conversion, a substitution, a doubt about the input."""
        print(f"[mkc] {msg}", file=sys.stderr, flush=True)


def check_batches(batches: tuple[int, ...]) -> None:
    bad = [b for b in batches if not 1 <= b <= MAX_BATCH]
    if bad or not batches:
        raise MkcError(f"batch size {bad or batches} is not supported: mkc supports batch sizes 1 to {MAX_BATCH}")
    twice = sorted({b for b in batches if batches.count(b) > 1})
    if twice:
        raise MkcError(f"batch size {', '.join(map(str, twice))} is given more than once in --batch "
                       f"{','.join(map(str, batches))}; give each batch size once")


def check_options(opts: Options) -> None:
    """The numeric options, before anything expensive runs."""
    if opts.max_seq_len < 1:
        raise MkcError(f"--max-seq-len must be positive (got {opts.max_seq_len})")
    if not opts.time_limit > 0:
        raise MkcError(f"--time-limit must be a positive number of seconds (got {opts.time_limit:g})")


def _timed(log: StageLog, name: str, fn: Callable, *args, **kw):
    t0 = time.perf_counter()
    stop = threading.Event()
    if log.heartbeat > 0 and not log.quiet:
        def beat():  # capture of a large model is a minute of silence otherwise
            while not stop.wait(log.heartbeat):
                log(f"{name:<9} still running, {time.perf_counter() - t0:4.0f} s")

        threading.Thread(target=beat, daemon=True).start()
    try:
        out = fn(*args, **kw)
    finally:
        stop.set()
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
    from mkc.taskgraph.lower import attn_bf16_pays, h_bf16_pays, qkv_cross_pays, xn_bf16_pays

    b.tg = _timed(b.log, "lower", lower, b.graph, b.target, qkv_cross=qkv_cross_pays(b.graph.batch, b.sync),
                  h_bf16=h_bf16_pays(b.graph.batch, b.sync, b.target),
                  attn_bf16=attn_bf16_pays(b.graph.batch, b.sync, b.target),
                  xn_bf16=xn_bf16_pays(b.graph.batch, b.sync, b.target))
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
    mem = next((c for c in vr.checks if c.name == "memory"), None)
    if mem is not None and mem.figures:
        b.report["memory"] = mem.figures
    if vr.failed() == ["memory"]:  # a sound schedule that this GPU cannot hold: the input's fault, not mkc's
        raise MkcError(f"batch {b.sched.batch} does not fit {b.target.name}; no kernel written: {mem.errors[0]}")
    if not vr.ok:
        raise VerificationError(f"schedule for batch {b.sched.batch} is unsafe; no kernel written:\n{vr.text()}")


def _codegen(b: Build) -> None:
    from mkc.codegen import emit

    paths = _timed(b.log, "codegen", emit, b.tg, b.sched, b.target, b.bdir)
    b.report["kernel"] = {k: str(Path(v).name) for k, v in paths.items()}
    if b.tg.plan is not None:
        # what the emitted kernel launches (codegen options make the plan's producer warp a warpgroup)
        cfg = json.loads(Path(paths["meta"]).read_text())
        plan = b.report["kernel"]["plan"] = b.tg.plan.summary(cfg["threads"], dict(cfg["consts"]).get("REG_SPLIT", 0))
        b.log(f"kernel    GEMVs on {plan['gemv']}, weights through {plan['weights']}; {plan['threads']} threads, "
              f"{plan['smem_bytes'] / 1024:.0f} KiB shared memory per block")
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


def _write_report(b: Build, with_seconds: bool, since: dict[str, float] | None = None) -> None:
    """``seconds``: the stage times of this batch size (the StageLog's times less those at ``since``).
    A re-run from a task graph or a schedule keeps the build's times."""
    if with_seconds:
        since = since or {}
        b.report["seconds"] = {k: round(v - since.get(k, 0.0), 3) for k, v in b.log.times.items()
                               if v - since.get(k, 0.0) > 0}
    (b.bdir / "report.json").write_text(json.dumps(b.report, indent=1) + "\n")


def _open_permissions(path: Path) -> None:
    """mkdtemp makes folders 0700; a build is shared like any output folder (0777 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    path.chmod(0o777 & ~mask)


# the names compile and rerun write into a build; a manifest lists them as they are written
def _written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


_MKC_NAMES = {"manifest.json", "report.json", "graph.json", "tasks.json", "schedule.json", "verify.json",
              "tables.npz", *DRAWINGS}


def _mkc_name(rel: str) -> bool:
    """A name mkc writes, where it writes it: at the top, or directly in a batch directory."""
    p = Path(rel)
    return len(p.parts) <= 2 and (p.name in _MKC_NAMES or p.name.startswith("kernel."))


def _foreign_files(out: Path) -> list[str]:
    """Files in an existing build that mkc did not write (the manifest's list; older builds: mkc's names)."""
    try:
        listed = set(json.loads((out / "manifest.json").read_text()).get("files") or ())
    except (OSError, ValueError, AttributeError):
        listed = set()
    found = _written(out)
    if listed:
        return [f for f in found if f not in listed]
    return [f for f in found if not _mkc_name(f)]


def _check_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise MkcError(f"--out {out} is a file, not a directory; choose another --out")
    if not out.exists() or not any(out.iterdir()):
        return
    if not (out / "manifest.json").exists():
        raise MkcError(f"{out} exists and is not an mkc build directory; choose another --out")
    if not force:
        raise MkcError(f"{out} already holds an mkc build; pass --force to replace it, or choose another --out")
    foreign = _foreign_files(out)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise MkcError(f"{out} holds files mkc did not write ({shown}); --force replaces only mkc's own files. "
                       f"Move them away, or choose another --out")


def _source_record(entry) -> dict:
    """What the manifest says about the model: an absolute folder, so that mkc run works from anywhere,
    and the content fingerprint mkc run compares the weights it loads with."""
    from mkc.capture.checkpoint import fingerprint, fingerprint_info

    rec: dict[str, Any] = {"model": entry.name, "model_path": None, "registry": bool(entry.registry)}
    if entry.directory is not None and not entry.registry:
        rec["model"] = rec["model_path"] = str(Path(entry.directory).resolve())
    if entry.module is None:
        src = entry.directory if rec["model_path"] else entry
        rec["fingerprint"], rec["fingerprint_info"] = fingerprint(src), fingerprint_info(src)
    return rec


def check_weights(entry, log: StageLog) -> None:
    """A folder's checkpoint, headers only: a missing, truncated or mismatched tensor stops the build
    (exit 2) here, on the compile machine, instead of at load time on the GPU machine."""
    from mkc.capture.checkpoint import check_checkpoint, checkpoint_of

    if entry.registry or entry.module is not None:
        return
    ckpt = checkpoint_of(entry)
    if ckpt is None:
        return
    if not ckpt.has_weights:
        log.notice(f"{ckpt.directory} has no weights ({ckpt.describe()}): it compiles, but mkc run will need "
                   f"them, or --random-weights")
        return
    for n in check_checkpoint(entry):
        log.notice(n)


def check_memory(entry, opts: Options, target: Target) -> None:
    """Refuse from the config what cannot fit, before minutes of capture: weights and KV cache alone
    (a lower bound of what the verifier's device-memory check proves) against the target's memory."""
    from mkc.capture.registry import count_params, model_info, read_config
    from mkc.verify import memory

    if not target.memory_bytes:
        return
    try:
        cfg = read_config(entry if entry.directory is not None else entry.config)
        info, params = model_info(cfg), count_params(cfg)
    except (KeyError, TypeError, ValueError, MkcError):
        return  # capture explains configs this cannot read; the verifier still checks the memory
    batch = max(opts.batches)
    parts = memory.config_need(info, params, batch, opts.max_seq_len)
    if parts["total"] > memory.usable(target):
        raise MkcError(memory.explain(parts, target, batch, opts.max_seq_len, what=entry.name))


def _warn_positions(entry, opts: Options, log: StageLog) -> None:
    limit = getattr(entry.config, "max_position_embeddings", None)
    if limit and opts.max_seq_len > limit:
        log.notice(f"warning: --max-seq-len {opts.max_seq_len} is above the model's max_position_embeddings "
                   f"({limit}); positions past {limit} were never trained")


def compile_model(model, out: str | Path, opts: Options, log: StageLog | None = None) -> Path:
    """Run every stage up to ``opts.stop_after`` for every batch size; returns the build directory."""
    from mkc.capture import resolve  # noqa: WPS433 (stage imports stay local)
    from mkc.schedule.ir import SYNC_MODES

    log = log or StageLog()
    target = get_target(opts.target)
    check_batches(opts.batches)
    check_options(opts)
    sync = opts.sync or target.default_sync
    if sync not in SYNC_MODES:
        raise MkcError(f"unknown sync mode {sync!r}; choose {' or '.join(SYNC_MODES)}")
    if opts.stop_after not in STAGE_NAMES:
        raise MkcError(f"unknown stage {opts.stop_after!r}; stages: {', '.join(STAGE_NAMES)}")
    if opts.calibration:
        from mkc.schedule.cost import load_calibration

        load_calibration(opts.calibration)  # a bad file stops the build before the long stages
    out = Path(out)
    _check_out(out, opts.force)
    entry = resolve(model)
    if entry.directory is not None and not entry.registry:
        shadow = " (not the bundled registry model of that name)" if entry.shadows_registry else ""
        log.notice(f"model: the folder {Path(entry.directory).resolve()}{shadow}")
    check_memory(entry, opts, target)
    _warn_positions(entry, opts, log)
    check_weights(entry, log)
    record = _source_record(entry)
    made_parent = not out.parent.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # same filesystem: rename is atomic
    except OSError as e:
        raise MkcError(f"cannot create the build directory {out}: {e.strerror or e}") from None
    try:
        _open_permissions(tmp)
        reports = {}
        # One capture per batch size: the exported graph has the batch in every activation shape and in
        # the attention's cache reads, so it cannot be re-batched without re-deriving it.
        for batch in opts.batches:
            log(f"{entry.name} batch {batch} -> {target.name} ({sync})")
            b = Build(tmp / f"b{batch}", target, sync, opts, log, {}, entry=entry, batch=batch)
            b.bdir.mkdir()
            _open_permissions(b.bdir)
            since = dict(log.times)
            _run_stages(b, "capture", opts.stop_after)
            _write_report(b, with_seconds=True, since=since)
            reports[batch] = b.report
        (tmp / "report.json").write_text(json.dumps({str(b): r for b, r in reports.items()}, indent=1) + "\n")
        manifest = {
            **record,
            "mkc_version": _version(),
            "target": target.name,
            "sync": sync,
            "batches": list(opts.batches),
            "max_seq_len": opts.max_seq_len,
            "options": {k: getattr(opts, k) for k in RECORDED_OPTIONS} | {"sync": sync},
            "stages": list(STAGE_NAMES[: _stage_index(opts.stop_after) + 1]),
        }
        _write_manifest(tmp, manifest)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if made_parent and out.parent.exists() and not any(out.parent.iterdir()):
            out.parent.rmdir()
        raise
    return out


def _version() -> str:
    from mkc.version import __version__

    return __version__


def _write_manifest(root: Path, manifest: dict, keep: set[str] | None = None) -> None:
    """``files``: what mkc wrote, so that --force never deletes anything else (``keep``: those of a
    re-run build, whose folders may hold a user's files too)."""
    files = set(_written(root)) if keep is None else keep
    manifest["files"] = sorted(files | {"manifest.json"})
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


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


def rerun(bdir: str | Path, from_stage: str, opts: Options | None = None, log: StageLog | None = None) -> Path:
    """Re-run the stages from ``from_stage`` on in a batch directory, starting from the saved output
    of the stage before it (that stage's ``input_file``). ``--from codegen`` verifies again first: no
    kernel is written for a schedule this run has not proven safe. The directory is rebuilt in a copy
    and swapped in at the end, so a failure leaves the old one untouched.

    The build keeps its target and options: a field of ``opts`` that is None is taken from the
    manifest (``Options(method=None, time_limit=None, target=None)`` keeps them all). Outputs the re-run
    invalidates are refreshed: ``mkc inspect``'s drawings (redrawn where they were), the build's
    top-level report.json and its manifest."""
    from mkc.capture.graph import Graph
    from mkc.schedule.ir import Schedule
    from mkc.taskgraph.ir import TaskGraph

    log = log or StageLog()
    opts = opts or Options()
    bdir = Path(bdir)
    if from_stage not in RERUN_STAGES:
        raise MkcError(f"cannot re-run from {from_stage!r}; choose one of {', '.join(RERUN_STAGES)} "
                       f"(capture: use mkc compile)")
    need = STAGES[_stage_index(from_stage)].input_file
    if not (bdir / need).exists():
        raise MkcError(f"{bdir} has no {need}: it is not a batch directory of an mkc build (e.g. build/x/b1)")
    old = read_json(bdir / "report.json") if (bdir / "report.json").exists() else {}
    root = bdir.parent if (bdir.parent / "manifest.json").exists() else None
    manifest = read_json(root / "manifest.json") if root else {}
    kept = dict(manifest.get("options") or {})
    built_for = build_target(bdir)
    if opts.target and get_target(opts.target).name != built_for.name:
        raise MkcError(f"{bdir} was compiled for {built_for.name}; rerun keeps a build's target. Compile again "
                       f"with --target {get_target(opts.target).name} (and another --out) for {opts.target}")
    target = built_for
    method = opts.method or kept.get("method") or (old.get("schedule") or {}).get("method") or "cpsat"
    time_limit = opts.time_limit if opts.time_limit is not None else kept.get("time_limit", 10.0)
    calibration = opts.calibration if opts.calibration is not None else kept.get("calibration")
    opts = Options(target=target.name, batches=opts.batches, max_seq_len=opts.max_seq_len, sync=opts.sync,
                   method=method, time_limit=time_limit, stop_after=opts.stop_after,
                   compile_binary=opts.compile_binary or bool(kept.get("compile_binary")), calibration=calibration)
    check_options(opts)
    first = "verify" if from_stage == "codegen" else from_stage
    drawn = [d for d in DRAWINGS if (bdir / d).exists()]
    tmp = Path(tempfile.mkdtemp(prefix=f".{bdir.name}.", dir=bdir.parent))
    try:
        _open_permissions(tmp)
        for f in bdir.iterdir():
            if f.is_dir():
                shutil.copytree(f, tmp / f.name)  # a user's sub-folder travels with the batch directory
            elif f.name not in DRAWINGS or first == "verify":
                shutil.copy2(f, tmp / f.name)
        sync = opts.sync or old.get("sync") or kept.get("sync") or target.default_sync
        if first == "lower":
            # a new task graph: the report starts again from the graph (and times this run)
            graph = Graph.load(tmp / "graph.json")
            b = Build(tmp, target, sync, opts, log, _header(graph, target, sync, old.get("model", graph.model.arch)),
                      graph=graph)
        else:
            tg = TaskGraph.load(tmp / "tasks.json")
            b = Build(tmp, target, sync, opts, log, dict(old), tg=tg)
            if first != "schedule":
                b.sched = Schedule.load(tmp / "schedule.json")
        since = dict(log.times)
        _run_stages(b, first, opts.stop_after)
        _write_report(b, with_seconds=first == "lower", since=since)
        if drawn and first != "verify":
            _redraw(tmp, b, drawn, log)
        backup = bdir.with_name(f".{bdir.name}.old")
        bdir.rename(backup)
        tmp.rename(bdir)
        shutil.rmtree(backup)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if root:
        _refresh_build(root, bdir, b, opts)
    return bdir


def read_json(path: Path) -> dict:
    """A build file's JSON object, or one message saying the build is damaged."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise MkcError(f"cannot read {path}: {e} (a damaged build: compile it again)") from None
    if not isinstance(data, dict):
        raise MkcError(f"{path} is not a JSON object (a damaged build: compile it again)")
    return data


def _redraw(bdir: Path, b: Build, drawn: list[str], log: StageLog) -> None:
    """The Gantt chart and trace of the new schedule, where the old ones were."""
    from mkc.schedule.inspect import gantt_png, perfetto_trace

    if "schedule.trace.json" in drawn:
        perfetto_trace(b.tg, b.sched, bdir / "schedule.trace.json")
    if "schedule.png" in drawn:
        try:
            gantt_png(b.tg, b.sched, bdir / "schedule.png")
        except ModuleNotFoundError:
            log.notice(f"{bdir.name}/schedule.png is out of date and was removed: redrawing it needs matplotlib "
                       f"(pip install 'mkc[plot]')")


def _refresh_build(root: Path, bdir: Path, b: Build, opts: Options) -> None:
    """The top-level report and the manifest's stages, options and file list after a re-run."""
    manifest = read_json(root / "manifest.json")
    reports = read_json(root / "report.json") if (root / "report.json").exists() else {}
    key = bdir.name[1:] if bdir.name[1:].isdigit() else bdir.name
    reports[key] = b.report
    (root / "report.json").write_text(json.dumps(reports, indent=1) + "\n")
    done = [st for st in STAGE_NAMES[: _stage_index(opts.stop_after) + 1]]
    manifest["stages"] = [st for st in STAGE_NAMES if st in set(manifest.get("stages") or ()) | set(done)]
    options = dict(manifest.get("options") or {})
    options.update(method=opts.method, time_limit=opts.time_limit, calibration=opts.calibration,
                   sync=b.sync if len(manifest.get("batches") or ()) <= 1 else options.get("sync", b.sync))
    manifest["options"] = options
    if len(manifest.get("batches") or ()) <= 1:
        manifest["sync"] = b.sync
    listed = set(manifest.get("files") or ()) or {f for f in _written(root) if _mkc_name(f)}
    fresh = {f for f in _written(root) if f.startswith(f"{bdir.name}/") and _mkc_name(f)}
    _write_manifest(root, manifest, keep={f for f in listed if (root / f).exists()} | fresh | {"report.json"})


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
