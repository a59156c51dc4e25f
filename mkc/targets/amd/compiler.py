"""clang -> AMD GPU code, cached by a hash of (source, flags, clang version).

Two outputs, chosen by what the ROCm device libraries on this machine support:

- ``code_object``: a loadable HSA code object (``.hsaco``, ELF, code object v4 so ROCm 5 and 6
  both load it) when the device-library directory has ``oclc_isa_version_<arch>.bc``. Debian's
  ``rocm-device-libs`` (ROCm 5.2) does for gfx90a.
- ``isa``: AMDGPU assembly (``.s``) otherwise. Debian's libraries stop at gfx940, so gfx942
  (MI300X) compiles to ISA with ``-nogpulib``; ``ocml``/``ockl`` are still linked by hand, with
  the ISA-version constant of the closest member of the same family (gfx940 for gfx942: one ISA),
  so ``expf``/``sincosf`` are inlined and the ISA has no external calls. That text is for review
  and tests (sync sequences, registers); a ROCm >= 6 install builds the loadable gfx942 object.

The cache lives in ``$MKC_CACHE_DIR`` or ``~/.cache/mkc``; a build directory may be passed
instead. ``$MKC_HIP_CLANG`` picks the compiler, ``$MKC_ROCM_DEVICE_LIBS`` the bitcode directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from mkc.backend import cache_dir, content_key
from mkc.errors import MkcError

CODE_OBJECT, ISA = "code_object", "isa"
SUFFIX = {CODE_OBJECT: "hsaco", ISA: "s"}
CODE_OBJECT_VERSION = 4
DEVICE_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",  # Debian / Ubuntu rocm-device-libs
    "/opt/rocm/amdgcn/bitcode",
    "/opt/rocm/lib/llvm/lib/clang/amdgcn/bitcode",
)
# what clang's HIP driver links for a wave64 target with default math flags
_CONTROL_LIBS = ("oclc_finite_only_off", "oclc_unsafe_math_off", "oclc_daz_opt_off",
                 "oclc_correctly_rounded_sqrt_on", "oclc_wavefrontsize64_on")


class HipBuildError(MkcError):
    """clang failed on generated HIP (a code generator bug): the log says where."""

    exit_code = 1


@dataclass(frozen=True)
class HipBuildResult:
    binary: Path  # code object (.hsaco) or assembly (.s)
    kind: str  # code_object | isa
    arch: str
    log: str  # clang's stderr, including its resource-usage remarks
    cached: bool

    @property
    def warnings(self) -> list[str]:
        return [ln for ln in self.log.splitlines() if "warning:" in ln]

    @property
    def resources(self) -> dict[str, int]:
        """Registers, spills, scratch and occupancy of the kernel, from clang's remarks."""
        return resource_usage(self.log)


def find_clang() -> str:
    for cand in (os.environ.get("MKC_HIP_CLANG"), "clang++-19", "/usr/lib/llvm-19/bin/clang++",
                 "/opt/rocm/llvm/bin/clang++"):
        if cand and (shutil.which(cand) or Path(cand).is_file()):
            return shutil.which(cand) or cand
    raise MkcError("clang++-19 not found: install clang-19 lld-19 libamdhip64-dev rocm-device-libs "
                   "(apt) or point $MKC_HIP_CLANG at a HIP-capable clang++")


def have_clang() -> bool:
    try:
        find_clang()
    except MkcError:
        return False
    return True


@lru_cache(maxsize=None)
def clang_version(clang: str) -> str:
    return subprocess.run([clang, "--version"], capture_output=True, text=True, check=False).stdout.strip()


def device_lib_dir() -> Path | None:
    for cand in (os.environ.get("MKC_ROCM_DEVICE_LIBS"), *DEVICE_LIB_DIRS):
        if cand and (Path(cand) / "ocml.bc").exists():
            return Path(cand)
    return None


def _isa_lib(libdir: Path, arch: str) -> Path:
    return libdir / f"oclc_isa_version_{arch[3:]}.bc"


def family_isa_lib(libdir: Path, arch: str) -> Path | None:
    """The ISA-version library of ``arch`` or, failing that, of the lowest stepping of its family
    (gfx942 -> gfx940: the gfx94x parts share one instruction set)."""
    exact = _isa_lib(libdir, arch)
    if exact.exists():
        return exact
    family = arch[:-1]
    for lib in sorted(libdir.glob(f"oclc_isa_version_{family[3:]}?.bc")):
        return lib
    return None


def output_kind(arch: str, libdir: Path | None = None) -> str:
    libdir = libdir if libdir is not None else device_lib_dir()
    return CODE_OBJECT if libdir is not None and _isa_lib(libdir, arch).exists() else ISA


def clang_flags(arch: str, kind: str, libdir: Path | None, extra: tuple[str, ...] = ()) -> list[str]:
    if not arch.startswith("gfx"):
        raise MkcError(f"not an AMD architecture: {arch!r}")
    flags = ["-x", "hip", "--cuda-device-only", f"--offload-arch={arch}", "-O3", "-std=c++17",
             f"-mcode-object-version={CODE_OBJECT_VERSION}", "-Rpass-analysis=kernel-resource-usage",
             # the megakernel is one function of thousands of blocks, past AMDGPU's inliner cap
             # (1100): wait_task would stay a call, whose ABI spills registers to scratch per task
             "-mllvm", "-amdgpu-inline-max-bb=100000"]
    if kind == CODE_OBJECT:
        if libdir is None:
            raise MkcError(f"a {arch} code object needs the ROCm device libraries (rocm-device-libs)")
        flags += [f"--rocm-device-lib-path={libdir}", "--no-gpu-bundle-output", "-c"]
    else:
        flags += ["-nogpulib", "-S"]
        isa = family_isa_lib(libdir, arch) if libdir is not None else None
        if isa is not None:
            libs = [libdir / "ocml.bc", libdir / "ockl.bc", isa,
                    *(libdir / f"{n}.bc" for n in _CONTROL_LIBS),
                    libdir / f"oclc_abi_version_{CODE_OBJECT_VERSION}00.bc"]
            for lib in libs:
                if lib.exists():
                    flags += ["-Xclang", "-mlink-builtin-bitcode", "-Xclang", str(lib)]
    return flags + list(extra)



def build_hip(source: str, arch: str, *, out_dir: str | Path | None = None, kind: str | None = None,
              extra_flags: tuple[str, ...] = (), name: str = "kernel") -> HipBuildResult:
    """Compile ``source`` for ``arch`` (``kind`` defaults to what this machine can build);
    reuse the cached output when nothing changed."""
    clang = find_clang()
    libdir = device_lib_dir()
    kind = kind or output_kind(arch, libdir)
    if kind not in SUFFIX:
        raise MkcError(f"unknown AMD build output {kind!r}; choose {CODE_OBJECT} or {ISA}")
    flags = clang_flags(arch, kind, libdir, extra_flags)
    key = content_key(source, *flags, clang_version(clang))
    root = Path(out_dir) if out_dir is not None else cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    out = root / f"{name}.{arch}.{key}.{SUFFIX[kind]}"
    logf = root / f"{name}.{arch}.{key}.log"
    if out.exists():
        return HipBuildResult(out, kind, arch, logf.read_text() if logf.exists() else "", True)
    with tempfile.TemporaryDirectory(prefix="mkc-hip-") as tmp:
        src = Path(tmp) / f"{name}.hip"
        src.write_text(source)
        dst = Path(tmp) / f"{name}.{SUFFIX[kind]}"
        proc = subprocess.run([clang, *flags, "-o", str(dst), str(src)], capture_output=True, text=True,
                              check=False, cwd=tmp)
        log = (proc.stdout + proc.stderr).replace(str(src), f"{name}.hip")
        if kind == ISA:
            isa = family_isa_lib(libdir, arch) if libdir is not None else None
            how = ("no device libraries: calls to ocml/ockl stay external" if isa is None else
                   f"device math linked with {isa.name}" + ("" if isa == _isa_lib(libdir, arch) else
                                                             f" (no {_isa_lib(libdir, arch).name} here)"))
            log = f"mkc: {arch} compiled to ISA assembly, not a loadable code object; {how}\n" + log
        if proc.returncode != 0:
            raise HipBuildError(f"clang failed for {arch} (exit {proc.returncode}):\n{log[-8000:]}")
        tmp_dst = out.with_name(out.name + ".tmp")
        shutil.copyfile(dst, tmp_dst)
        logf.write_text(log)
        os.replace(tmp_dst, out)
    return HipBuildResult(out, kind, arch, log, False)


_REMARKS = {"SGPRs": "sgprs", "VGPRs": "vgprs", "AGPRs": "agprs", "ScratchSize [bytes/lane]": "scratch",
            "Occupancy [waves/SIMD]": "occupancy", "SGPRs Spill": "sgpr_spill", "VGPRs Spill": "vgpr_spill",
            "LDS Size [bytes/block]": "lds"}


def resource_usage(log: str) -> dict[str, int]:
    """clang's ``-Rpass-analysis=kernel-resource-usage`` remarks as numbers."""
    out: dict[str, int] = {}
    for key, val in re.findall(r"remark:\s+([A-Za-z][A-Za-z /\[\]]*?):\s+(\d+)\s", log):
        if key in _REMARKS:
            out[_REMARKS[key]] = int(val)
    return out


def build_into(bdir: str | Path, arch: str) -> Path:
    """Compile ``bdir/kernel.hip`` for ``arch`` into ``bdir/kernel.<arch>.hsaco`` (or ``.s`` where
    only ISA can be built here) and ``bdir/build.log``; returns the output's path."""
    bdir = Path(bdir)
    res = build_hip((bdir / "kernel.hip").read_text(), arch)  # hashed copy in the global cache
    out = bdir / f"kernel.{arch}.{SUFFIX[res.kind]}"
    out.write_bytes(res.binary.read_bytes())
    (bdir / "build.log").write_text(res.log)
    return out
