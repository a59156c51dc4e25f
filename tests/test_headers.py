"""Device headers (mkc/codegen/include/mkc/), CPU tier: each compiles alone, the inliner, the manifest.

Each header is compiled as a translation unit of its own, ``#include "mkc/<header>"`` and nothing
else, against a rendered ``mkc/config.cuh`` (the manifest's prologue for a real configuration:
constants, enums, the dialect) written into a temporary include directory: whatever a header
uses, it includes itself. NVIDIA: nvcc to PTX for sm_90a and sm_80 (skipped without nvcc). AMD:
clang-19 ``-fsyntax-only`` for gfx942 and gfx90a (skipped without clang and the HIP headers unless
``MKC_REQUIRE_HIP=1``, as tests/test_hip.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import pytest

from codegen_fixtures import rr_schedule, taskgraph
from mkc.codegen import source as S
from mkc.codegen.render import CodegenOptions, config_header, generate, kernel_config
from mkc.target import get_target

DEVICE = [h for h in S.headers() if not h.startswith("mkc/dialect/")]
DIALECTS = [h for h in S.headers() if h.startswith("mkc/dialect/")]

# (model, batch, target, options): configurations whose constants the headers are compiled against
CONFIGS = {
    "sm_90a-b1": ("llama-3.2-1b", 1, "h200", {}),  # FMA GEMV, bulk prefetch
    "sm_90a-b8": ("qwen3-0.6b", 8, "h200", {"trace": True}),  # MMA with the ring, q/k norm, trace
    "sm_90a-b32": ("llama-3.2-1b", 32, "h200", {}),  # MMA through registers
    "sm_80-b8": ("llama-3.2-1b", 8, "a100", {}),  # MMA, prefetch by lines
    "gfx942-b1": ("llama-3.2-1b", 1, "mi300x", {}),
    "gfx90a-b8": ("tiny-qwen2", 8, "mi250x", {}),  # qkv bias
}
NV = [k for k in CONFIGS if k.startswith("sm_")]
AMD = [k for k in CONFIGS if k.startswith("gfx")]


@lru_cache(maxsize=None)
def config_of(key: str):
    model, batch, target, opts = CONFIGS[key]
    t = get_target(target)
    tg = taskgraph(model, batch, 512, t)
    sched = rr_schedule(tg, t, t.default_sync)
    return kernel_config(tg, sched, t, CodegenOptions(**opts)), t


def include_dir_for(key: str, root: Path) -> Path:
    """A directory holding mkc/config.cuh of configuration ``key`` (next to the real headers via -I)."""
    d = root / key
    if not (d / "mkc" / "config.cuh").exists():
        cfg, t = config_of(key)
        (d / "mkc").mkdir(parents=True, exist_ok=True)
        tmp = d / "mkc" / "config.cuh.tmp"
        tmp.write_text(config_header(cfg, t))
        tmp.replace(d / "mkc" / "config.cuh")  # whole, for compilers running in parallel
    return d


# ---- the headers as files -----------------------------------------------------------------------
def test_every_header_is_guarded_and_includes_by_package_path():
    assert "mkc/common.cuh" in DEVICE and set(DIALECTS) == {"mkc/dialect/cuda.cuh", "mkc/dialect/hip.cuh"}
    for name in S.headers():
        text = (S.INCLUDE_DIR / name).read_text()
        assert re.search(r"^#pragma once$", text, re.M), name
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            assert inc.startswith("mkc/"), (name, inc)  # found through -I include/, as the inliner does
            assert inc == S.CONFIG_HEADER or (S.INCLUDE_DIR / inc).is_file(), (name, inc)
    for name in DEVICE:  # the configuration (and through it the dialect) reaches every device header
        assert _includes_config(name), name


def _includes_config(name: str, seen=()) -> bool:
    text = (S.INCLUDE_DIR / name).read_text()
    incs = re.findall(r'^\s*#\s*include\s+"(mkc/[^"]+)"', text, re.M)
    return S.CONFIG_HEADER in incs or any(_includes_config(i, (*seen, name)) for i in incs if i not in seen)


# ---- the inliner --------------------------------------------------------------------------------
def test_inline_resolves_each_guarded_file_once(tmp_path):
    inc = tmp_path / "mkc"
    inc.mkdir()
    (inc / "a.cuh").write_text('#pragma once\n#include "mkc/config.cuh"\nint a;\n')
    (inc / "b.cuh").write_text('#pragma once\n#include "mkc/a.cuh"\n#include <stdint.h>\nint b;\n')
    (inc / "twice.cuh").write_text("X\n")  # no pragma: pasted at every include, as cpp would
    out = S.inline('#include "mkc/b.cuh"\n#include "mkc/a.cuh"\n#include "mkc/twice.cuh"\n'
                   '#include "mkc/twice.cuh"\n#include "other.h"\nint main;\n', tmp_path)
    assert out == ("// ---- mkc/b.cuh ----\n// ---- mkc/a.cuh ----\nint a;\n// ---- mkc/b.cuh (continued) ----\n"
                   "#include <stdint.h>\nint b;\n"
                   "// ---- mkc/twice.cuh ----\nX\n// ---- mkc/twice.cuh ----\nX\n#include \"other.h\"\nint main;\n")
    assert "mkc/" not in S.inline('#include "mkc/b.cuh"\n', tmp_path, marks=False)
    (inc / "loop.cuh").write_text('#include "mkc/loop.cuh"\n')
    with pytest.raises(S.SourceError, match="includes itself"):
        S.inline('#include "mkc/loop.cuh"\n', tmp_path)
    with pytest.raises(S.SourceError, match="mkc/nope.cuh not found"):
        S.inline('#include "mkc/nope.cuh"\n', tmp_path)


@pytest.mark.parametrize("key", ["sm_90a-b8", "gfx942-b1"])
def test_rendered_kernel_is_one_file(key):
    cfg, t = config_of(key)
    model, batch, target, opts = CONFIGS[key]
    tg = taskgraph(model, batch, 512, t)
    src, _, _ = generate(tg, rr_schedule(tg, t, t.default_sync), t, CodegenOptions(**opts))
    assert not re.search(r'#\s*include\s+"', src)  # only <system> includes are left
    marks = re.findall(r"^// ---- (mkc/\S+) ----$", src, re.M)  # where each header starts
    dialect = "mkc/dialect/cuda.cuh" if t.vendor == "nvidia" else "mkc/dialect/hip.cuh"
    assert marks[0] == dialect and set(marks) == {dialect, *DEVICE} and len(marks) == len(set(marks))
    assert "#pragma once" not in src
    # the manifest's prologue is exactly mkc/config.cuh
    assert config_header(cfg, t).removeprefix("#pragma once\n").split(f'#include "{dialect}"')[1] in src


# ---- each header alone --------------------------------------------------------------------------
def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    return nvcc


def _hip_toolchain() -> str:
    from mkc.targets.amd.compiler import find_clang, have_clang

    hip_h = any(Path(p).exists() for p in ("/usr/include/hip/hip_runtime.h", "/opt/rocm/include/hip/hip_runtime.h"))
    if not (have_clang() and hip_h):
        msg = "HIP toolchain missing: clang++-19 and the HIP headers (apt-get install clang-19 libamdhip64-dev)"
        if os.environ.get("MKC_REQUIRE_HIP") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return find_clang()


def compile_alone(key: str, header: str, root: Path) -> tuple[int, str]:
    """(exit status, log) of compiling ``#include "<header>"`` alone for configuration ``key``."""
    cfg, t = config_of(key)
    inc = include_dir_for(key, root)
    tu = root / key / (header.replace("/", "_") + (".cu" if t.vendor == "nvidia" else ".hip"))
    tu.write_text(f'#include "{header}"\n')
    if t.vendor == "nvidia":
        cmd = [_nvcc(), f"-gencode=arch=compute_{cfg.arch[3:]},code={cfg.arch}", "-ptx", "-std=c++17",
               f"-I{inc}", f"-I{S.INCLUDE_DIR}", "-o", str(tu.with_suffix(".ptx")), str(tu)]
    else:
        cmd = [_hip_toolchain(), "-x", "hip", "--cuda-device-only", f"--offload-arch={cfg.arch}", "-nogpulib",
               "-fsyntax-only", "-std=c++17", f"-I{inc}", f"-I{S.INCLUDE_DIR}", str(tu)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tu.parent)
    return proc.returncode, proc.stdout + proc.stderr


def _compile_all(keys, root: Path) -> None:
    jobs = [(k, h) for k in keys for h in (*DEVICE, S.CONFIG_HEADER)]
    for k in keys:
        include_dir_for(k, root)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda kh: (kh, compile_alone(*kh, root)), jobs))
    bad = [f"{k} {h}:\n{log[-3000:]}" for (k, h), (rc, log) in results if rc != 0]
    warned = [f"{k} {h}:\n{log[-3000:]}" for (k, h), (rc, log) in results if rc == 0 and "warning" in log.lower()]
    assert not bad, "\n".join(bad)
    assert not warned, "\n".join(warned)


def test_each_header_compiles_alone_with_nvcc(tmp_path):
    _nvcc()
    _compile_all(NV, tmp_path)


def test_each_header_compiles_alone_with_clang_for_amd(tmp_path):
    _hip_toolchain()
    _compile_all(AMD, tmp_path)


def test_a_header_that_misses_an_include_does_not_compile(tmp_path):
    """The check above has teeth: a header using sync.cuh's wait_task without including it fails."""
    _nvcc()
    fake = tmp_path / "inc" / "mkc"
    fake.mkdir(parents=True)
    (fake / "bad.cuh").write_text('#pragma once\n#include "mkc/common.cuh"\nnamespace mk {\n'
                                  "__device__ bool f(const Ctx& c, const Task& t, int* a) { return wait_task(c, t, a); }\n}\n")
    cfg, t = config_of("sm_90a-b1")
    inc = include_dir_for("sm_90a-b1", tmp_path)
    tu = tmp_path / "bad.cu"
    tu.write_text('#include "mkc/bad.cuh"\n')
    proc = subprocess.run([_nvcc(), "-gencode=arch=compute_90a,code=sm_90a", "-ptx", "-std=c++17", f"-I{inc}",
                           f"-I{tmp_path / 'inc'}", f"-I{S.INCLUDE_DIR}", "-o", str(tmp_path / "bad.ptx"), str(tu)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "wait_task" in proc.stderr
