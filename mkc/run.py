"""`mkc run DIR`: load a build directory's kernel on the GPU and decode greedily in one launch."""

from __future__ import annotations

import json
import time
from pathlib import Path

from mkc.errors import MkcError
from mkc.pipeline import read_json


def weights_source(manifest: dict, weights: str | None, random_weights: bool, say) -> str:
    """Where the weights come from, checked on headers before any GPU work: a folder without a
    checkpoint needs --random-weights, a checkpoint must match the model (missing, truncated or
    mismatched tensors stop here), and one that differs from what the build was compiled from is
    reported line by line (refused when tensors or shapes differ)."""
    from mkc.capture.checkpoint import check_checkpoint, checkpoint_of, diff_fingerprint_info, fingerprint_info

    model = manifest.get("model_path") or manifest["model"]
    src = weights or model
    if not weights and manifest.get("model_path") and not Path(model).is_dir():
        raise MkcError(f"the build was compiled from {model}, which is not there any more; pass --weights DIR "
                       f"with that model's folder")
    ckpt = checkpoint_of(src)
    if ckpt is None:
        say(f"{src} is a registry model: seeded random weights")
        return src
    if not ckpt.has_weights:
        if not random_weights:
            from mkc.capture.checkpoint import require_weights

            require_weights(src)
        say(f"{ckpt.directory} has no weights: seeded random weights (--random-weights)")
        return src
    for n in check_checkpoint(src):
        say(n)
    old = manifest.get("fingerprint_info")
    if old:
        new = fingerprint_info(src)
        had_weights = old.get("weights") not in (None, "none")
        # a build of a registry config or a weightless folder has no tensors to compare: only its config
        diffs = diff_fingerprint_info(old, new) if had_weights else \
            (["config.json differs"] if old.get("config") != new.get("config") else [])
        for d in diffs:
            say(f"warning: the model differs from the one the build was compiled from: {d}")
        ot, nt = old.get("tensors") or {}, new.get("tensors") or {}
        if had_weights and (set(ot) != set(nt) or any(ot[k][1] != nt[k][1] for k in ot)):
            raise MkcError(f"the tensors in {ckpt.directory} are not those the build was compiled from (names or "
                           f"shapes differ, see above); compile the build again from this folder")
    return src


def check_free_memory(driver, bdirs: list[Path], say) -> None:
    """The device's free memory against the build's need (report.json's memory figures), before
    allocating: a clear refusal instead of an out-of-memory error halfway through the upload."""
    from mkc.verify.memory import gb

    need = 0
    for bdir in bdirs:
        rep = read_json(bdir / "report.json") if (bdir / "report.json").exists() else {}
        need = max(need, int((rep.get("memory") or {}).get("total") or 0))
    if not need:
        return
    try:
        free, total = driver.memory()
    except Exception:  # noqa: BLE001 - a driver that cannot say leaves the check to the allocator
        return
    if need > free:
        raise MkcError(f"this GPU has {gb(free)} free of {gb(total)}, but the build needs {gb(need)} (weights, KV "
                       f"cache, activations and tables); free memory on the GPU (other processes?), or compile "
                       f"with a smaller --batch or --max-seq-len")
    say(f"device memory: {gb(need)} needed, {gb(free)} free of {gb(total)}")


def run_cli(a) -> int:
    from mkc.pipeline import build_target, StageLog
    from mkc.backend import for_target

    say = StageLog().notice
    root = Path(a.dir)
    if (root / "manifest.json").exists():
        manifest = read_json(root / "manifest.json")
        bdirs = [root / f"b{b}" for b in manifest["batches"]]
    elif (root / "schedule.json").exists():
        bdirs = [root]
        parent = root.parent / "manifest.json"
        manifest = read_json(parent) if parent.exists() else {"model": read_json(root / "report.json")["model"]}
    else:
        raise MkcError(f"{root} is not an mkc build directory (no manifest.json or schedule.json)")
    model = manifest.get("model_path") or manifest["model"]
    try:
        prompt = [int(x) for x in a.prompt_ids.split(",") if x.strip()]
    except ValueError:
        raise MkcError(f"--prompt-ids takes comma-separated token ids, got {a.prompt_ids!r}")
    source = weights_source(manifest, a.weights, getattr(a, "random_weights", False), say)
    backend = for_target(build_target(bdirs[0]))
    backend.check_runtime()  # before the weights are drawn or loaded

    import torch

    from mkc.capture.weights import load_weights
    from mkc.codegen.render import CodegenOptions
    from mkc.runtime import Megakernel

    check_free_memory(backend.driver(), bdirs, say)
    where = backend.torch_device() or "cpu"
    # seeded random weights are drawn on the GPU where torch has it (a qwen3-8b draw on the CPU takes minutes)
    weights = load_weights(source, torch.bfloat16, device=where, notify=lambda m: None)
    weights = {k: v.to(where, torch.bfloat16) for k, v in weights.items()}
    for bdir in bdirs:
        trace = getattr(a, "trace", None)
        mk = Megakernel.from_build_dir(bdir, weights, options=CodegenOptions(trace=True) if trace else None)
        B = dict(mk.tg.dims)["B"]
        ids = torch.tensor([prompt] * B)
        t0 = time.perf_counter()
        out = mk.generate(ids, a.max_new_tokens)  # returns after the launch has finished
        dt = time.perf_counter() - t0
        steps = len(prompt) + a.max_new_tokens - 1
        print(f"{bdir.name}: batch {B}, {steps} steps in one launch, {1e3 * dt / steps:.3f} ms/step")
        print(f"  tokens (row 0): {out[0].tolist()}")
        if trace:
            from mkc.trace import calibration, format_summary, write_trace

            path = Path(trace)
            if len(bdirs) > 1:
                path = path.with_name(f"{path.stem}-{bdir.name}{path.suffix}")
            measured = mk.trace()
            summary = write_trace(mk.tg, mk.sched, measured, path)
            print(f"  trace of the first {summary['steps']} step(s): {summary['trace']} (ui.perfetto.dev), "
                  f"{summary['png']}")
            print("  " + format_summary(summary).replace("\n", "\n  "))
            # measured task times back into the cost model: a calibration file for the next compile
            report = json.loads((bdir / "report.json").read_text()) if (bdir / "report.json").exists() else {}
            base = report.get("schedule", {}).get("kind_scale") or {}
            cal_path = path.with_name(f"{path.stem}.calibration.json")
            cal_path.write_text(json.dumps(calibration(mk.tg, mk.sched, measured, base), indent=1) + "\n")
            print(f"  calibration of the cost model: {cal_path} "
                  f"(mkc compile {model} --batch {B} --calibration {cal_path})")
    return 0
