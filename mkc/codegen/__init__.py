"""Code generation: Schedule -> kernel source + tables (jinja2 templates that only print).

    emit(tg, sched, target, bdir)   kernel.cu, tables.npz, kernel.json into a build directory
    build_binary(bdir, target)      nvcc the emitted source into a cubin next to it
"""

from __future__ import annotations

from pathlib import Path

from mkc.codegen.render import CodegenOptions, KernelConfig, emit, generate, kernel_config, render


def build_binary(bdir: str | Path, target, verbose: bool = False) -> Path:
    """Compile ``bdir/kernel.<ext>`` for ``target``; returns the binary's path."""
    from mkc.targets.spec import get_target

    target = get_target(target) if isinstance(target, str) else target
    if target.vendor == "amd":
        from mkc.targets.amd.build import build_into

        return build_into(bdir, target.arch)  # clang: a code object, or gfx942 ISA (see there)
    if target.vendor != "nvidia":
        from mkc.errors import MkcError

        raise MkcError(f"building for {target.vendor} targets is not supported yet")
    from mkc.targets.nvidia.build import build_cubin

    bdir = Path(bdir)
    src = bdir / f"kernel.{target.source_ext}"
    res = build_cubin(src.read_text(), target.arch, verbose=verbose)  # hashed copy in the global cache
    out = bdir / f"kernel.{target.arch}.cubin"
    out.write_bytes(res.cubin.read_bytes())
    (bdir / "build.log").write_text(res.log)
    return out


__all__ = ["CodegenOptions", "KernelConfig", "build_binary", "emit", "generate", "kernel_config", "render"]
