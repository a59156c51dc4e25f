"""Code generation: Schedule -> kernel source + tables (jinja2 templates that only print).

    emit(tg, sched, target, bdir)   kernel.<ext>, tables.npz, kernel.json into a build directory
    build_binary(bdir, target)      the target's backend compiles the emitted source next to it
"""

from __future__ import annotations

from pathlib import Path

from mkc.codegen.render import CodegenOptions, KernelConfig, emit, generate, kernel_config, render, source_name


def build_binary(bdir: str | Path, target, verbose: bool = False) -> Path:
    """Compile ``bdir/kernel.<ext>`` for ``target`` into ``bdir/kernel.<arch>.<suffix>`` (and
    ``bdir/build.log``); returns the binary's path. The hashed original stays in the global cache."""
    from mkc.backend import for_target
    from mkc.target import get_target

    target = get_target(target) if isinstance(target, str) else target
    bdir = Path(bdir)
    src = bdir / source_name(target)
    res = for_target(target).compile(src.read_text(), target, verbose=verbose)
    out = bdir / f"kernel.{target.arch}{res.path.suffix}"
    out.write_bytes(res.path.read_bytes())
    (bdir / "build.log").write_text(res.log)
    return out


__all__ = ["CodegenOptions", "KernelConfig", "build_binary", "emit", "generate", "kernel_config", "render",
           "source_name"]
