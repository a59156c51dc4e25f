"""nvcc -> cubin, cached by a hash of (source, flags, nvcc version).

The cache lives in ``$MKC_CACHE_DIR`` or ``~/.cache/mkc``; a build directory may be passed instead.
Only the device code is compiled (``-cubin``): no host compiler, no C++ extension.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from mkc.backend import cache_dir, content_key
from mkc.errors import MkcError


class BuildError(MkcError):
    """nvcc failed on generated source (a code generator bug): the log says where."""

    exit_code = 1


@dataclass(frozen=True)
class BuildResult:
    cubin: Path
    log: str  # nvcc's stderr (ptxas -v report when verbose)
    cached: bool

    @property
    def warnings(self) -> list[str]:
        return [ln for ln in self.log.splitlines() if "warning" in ln.lower()]


def gencode(arch: str) -> str:
    """``sm_90a`` -> ``-gencode=arch=compute_90a,code=sm_90a`` (the form that keeps the ``a`` features)."""
    if not arch.startswith("sm_"):
        raise MkcError(f"not an NVIDIA architecture: {arch!r}")
    return f"-gencode=arch=compute_{arch[3:]},code={arch}"


def nvcc_flags(arch: str, verbose: bool = False, extra: tuple[str, ...] = ()) -> list[str]:
    flags = [gencode(arch), "-cubin", "-O3", "-std=c++17", "--extended-lambda"]
    if verbose:
        flags.append("-Xptxas=-v")
    return flags + list(extra)


def find_nvcc() -> str:
    nvcc = shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)
    if nvcc is None:
        raise MkcError("nvcc not found: install the CUDA toolkit or put nvcc on PATH")
    return nvcc


@lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout.strip()



def build_cubin(source: str, arch: str, *, out_dir: str | Path | None = None, verbose: bool = False,
                extra_flags: tuple[str, ...] = (), name: str = "kernel") -> BuildResult:
    """Compile ``source`` for ``arch``; reuse the cached cubin when nothing changed."""
    nvcc = find_nvcc()
    flags = nvcc_flags(arch, verbose, extra_flags)
    key = content_key(source, *flags, nvcc_version(nvcc))
    root = Path(out_dir) if out_dir is not None else cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    cubin = root / f"{name}.{arch}.{key}.cubin"
    logf = cubin.with_suffix(".log")
    if cubin.exists():
        return BuildResult(cubin, logf.read_text() if logf.exists() else "", True)
    with tempfile.TemporaryDirectory(prefix="mkc-build-") as tmp:
        src = Path(tmp) / f"{name}.cu"
        src.write_text(source)
        out = Path(tmp) / f"{name}.cubin"
        proc = subprocess.run([nvcc, *flags, "-o", str(out), str(src)], capture_output=True, text=True, check=False)
        log = (proc.stdout + proc.stderr).replace(str(src), f"{name}.cu")
        if proc.returncode != 0:
            raise BuildError(f"nvcc failed for {arch} (exit {proc.returncode}):\n{log[-8000:]}")
        tmp_dst = cubin.with_suffix(".tmp")
        shutil.copyfile(out, tmp_dst)
        logf.write_text(log)
        os.replace(tmp_dst, cubin)
    return BuildResult(cubin, log, False)
