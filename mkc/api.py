"""The Python API: ``mkc.compile(model, target=..., batch_size=...)`` -> a runnable Megakernel."""

from __future__ import annotations

import hashlib
from pathlib import Path

from mkc.backend import cache_dir, for_target
from mkc.pipeline import Options, StageLog, build_target, compile_model
from mkc.target import get_target


def compile(  # noqa: A001 (the natural name for a compiler's entry point)
    model="llama-3.2-1b",
    target: str = "h200",
    batch_size: int = 1,
    sync: str | None = None,
    *,
    max_seq_len: int = 4096,
    weights: dict | None = None,
    out: str | Path | None = None,
    method: str = "cpsat",
    time_limit: float = 10.0,
    calibration: str | Path | None = None,
    verbose: bool = False,
    device=None,
    random_weights: bool = False,
):
    """Compile ``model`` and load it on the GPU.

    ``model`` is a registry name, a local Hugging Face directory or a transformers model object;
    ``weights`` (HF state-dict names -> tensors) default to the model's own: seeded random for
    registry names, safetensors for a directory, the state dict of a model object. The build
    directory (default: under ``$MKC_CACHE_DIR`` or ``~/.cache/mkc``) keeps every intermediate.
    ``calibration``: a cost-model calibration file (``mkc run DIR --trace T.json`` writes one).
    A directory without a checkpoint is refused unless ``random_weights=True`` (or ``weights``
    are given): a model that runs on random weights must be asked for. Where no GPU of the target's vendor can run the kernel, this fails before capturing anything.
    """
    tgt = get_target(target)
    backend = for_target(tgt)
    backend.check_runtime(device)  # seconds, not the minutes of a capture, before saying no

    import torch

    from mkc.capture import resolve
    from mkc.capture.checkpoint import require_weights
    from mkc.capture.weights import load_weights
    from mkc.runtime import Megakernel

    entry = resolve(model)
    if weights is None and not random_weights:
        require_weights(entry, option="random_weights=True")  # before the capture, not after it
    # the cache directory is mkc's own: replacing a stale build there is always allowed
    opts = Options(target=tgt.name, batches=(int(batch_size),), max_seq_len=max_seq_len, sync=sync,
                   method=method, time_limit=time_limit, calibration=str(calibration) if calibration else None,
                   force=out is None)
    if out is None:
        cal = hashlib.sha1(Path(calibration).read_bytes()).hexdigest()[:10] if calibration and Path(calibration).is_file() else ""
        key = f"{entry.name}|{target}|{batch_size}|{sync}|{max_seq_len}|{method}|{time_limit}|{cal}"
        out = cache_dir() / "builds" / f"{Path(entry.name).name}-{target}-b{batch_size}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    bdir = Path(out)
    if not (bdir / f"b{batch_size}" / "schedule.json").exists() or isinstance(model, torch.nn.Module):
        bdir.parent.mkdir(parents=True, exist_ok=True)
        compile_model(model, bdir, opts, StageLog(quiet=not verbose))
    if weights is None:
        weights = load_weights(entry)  # notices (a dtype conversion, random weights) come as warnings
    return Megakernel.from_build_dir(bdir / f"b{batch_size}", _on_device(weights, backend, device), device=device)


def _on_device(weights: dict, backend, device) -> dict:
    """bf16 weights where the backend's driver can use them in place (else the driver uploads them)."""
    import torch

    where = backend.torch_device(device)
    return {k: v.to(device=where or v.device, dtype=torch.bfloat16) for k, v in weights.items()}


def batch_dir(build_dir: str | Path, batch_size: int) -> Path:
    """The sub-directory of a multi-batch build (``mkc compile --batch 1,8,32``) holding the schedule
    for ``batch_size``; an error lists the batch sizes the build has."""
    from mkc.errors import MkcError

    root = Path(build_dir)
    have = sorted(int(p.name[1:]) for p in root.glob("b*") if p.name[1:].isdigit() and (p / "schedule.json").exists())
    if not have:
        raise MkcError(f"{root} holds no compiled batch sizes (no b*/schedule.json); run `mkc compile` first")
    if batch_size not in have:
        raise MkcError(f"{root} has no schedule for batch size {batch_size}; it was compiled for batch sizes "
                       f"{', '.join(map(str, have))} (recompile with --batch {batch_size})")
    return root / f"b{batch_size}"


def load(build_dir: str | Path, batch_size: int, weights: dict, device=None):
    """Load the kernel of ``build_dir`` compiled for ``batch_size`` on the GPU."""
    from mkc.runtime import Megakernel

    bdir = batch_dir(build_dir, batch_size)
    backend = for_target(build_target(bdir))
    backend.check_runtime(device)
    return Megakernel.from_build_dir(bdir, _on_device(weights, backend, device), device=device)
