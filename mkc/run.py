"""`mkc run DIR`: load a build directory's kernel on the GPU and decode greedily in one launch."""

from __future__ import annotations

import json
import time
from pathlib import Path

from mkc.errors import MkcError


def run_cli(a) -> int:
    from mkc.pipeline import build_target
    from mkc.backend import for_target

    root = Path(a.dir)
    if (root / "manifest.json").exists():
        manifest = json.loads((root / "manifest.json").read_text())
        bdirs = [root / f"b{b}" for b in manifest["batches"]]
        model = manifest["model"]
    elif (root / "schedule.json").exists():
        bdirs, model = [root], json.loads((root / "report.json").read_text())["model"]
    else:
        raise MkcError(f"{root} is not an mkc build directory (no manifest.json or schedule.json)")
    backend = for_target(build_target(bdirs[0]))
    backend.check_runtime()  # before the weights are drawn or loaded

    import torch

    from mkc.capture import load_weights
    from mkc.codegen.render import CodegenOptions
    from mkc.runtime import Megakernel

    where = backend.torch_device() or "cpu"
    try:
        prompt = [int(x) for x in a.prompt_ids.split(",") if x.strip()]
    except ValueError:
        raise MkcError(f"--prompt-ids takes comma-separated token ids, got {a.prompt_ids!r}")
    # seeded random weights are drawn on the GPU where torch has it (a qwen3-8b draw on the CPU takes minutes)
    weights = load_weights(a.weights or model, torch.bfloat16, device=where)
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
