#!/usr/bin/env python3
"""Compare the machine code of the kernels two source trees of mkc emit for the same configurations.

    python3 scripts/compare_sass.py BASE_TREE NEW_TREE [--only NAME ...] [--work DIR] [--no-amd]

Each tree's code generator runs in its own subprocess with that tree (and its tests/, for the
fixtures) on PYTHONPATH, so two checkouts of different commits can be compared side by side. The
NVIDIA kernels are compiled to cubins with the flags of ``mkc.targets.nvidia.compiler`` and disassembled
with ``cuobjdump -sass`` (``$CUOBJDUMP``, PATH, or the pip package nvidia-cuda-cuobjdump); the AMD
ones to gfx942 assembly with clang. Addresses, encodings and comments are stripped before the
instruction streams are compared; a difference is summarised (how many instructions, and whether
all of them touch the kernel-parameter bank ``c[0x0][..]``, i.e. are argument plumbing), and the
full diff is written next to the binaries. Compiled outputs are cached by a hash of the source.
Exit status 0 when every configuration is identical or differs only in parameter plumbing.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# name: (model, batch, target, sync, CodegenOptions fields[, lower() keyword arguments])
CONFIGS: dict[str, tuple] = {
    "llama-b1-atomic": ("llama-3.2-1b", 1, "h200", "atomic", {}),
    "llama-b1-nan": ("llama-3.2-1b", 1, "h200", "nan", {}),
    "llama-b8-atomic": ("llama-3.2-1b", 8, "h200", "atomic", {}),
    "llama-b8-nan": ("llama-3.2-1b", 8, "h200", "nan", {}),
    "llama-b32-atomic": ("llama-3.2-1b", 32, "h200", "atomic", {}),
    "llama-b32-nan": ("llama-3.2-1b", 32, "h200", "nan", {}),
    "llama-b1-greedy": ("llama-3.2-1b", 1, "h200", "atomic", {"sampler": False}),
    "llama-b8-greedy": ("llama-3.2-1b", 8, "h200", "atomic", {"sampler": False}),
    "llama-b1-nan-greedy": ("llama-3.2-1b", 1, "h200", "nan", {"sampler": False}),
    "llama-b8-nan-greedy": ("llama-3.2-1b", 8, "h200", "nan", {"sampler": False}),
    "llama-b32-greedy": ("llama-3.2-1b", 32, "h200", "atomic", {"sampler": False}),
    "qwen3-b1-greedy": ("qwen3-0.6b", 1, "h200", "atomic", {"sampler": False}),
    "llama-b8-ring": ("llama-3.2-1b", 8, "h200", "atomic", {"pipe": False}),
    "llama-b8-rows-at-once": ("llama-3.2-1b", 8, "h200", "atomic", {"lm_rows_at_once": True}),
    "qwen3-b1": ("qwen3-0.6b", 1, "h200", "atomic", {}),
    "qwen3-b8": ("qwen3-0.6b", 8, "h200", "atomic", {}),
    "tiny-qwen2-b1": ("tiny-qwen2", 1, "h200", "atomic", {}),
    "llama-b1-trace": ("llama-3.2-1b", 1, "h200", "atomic", {"trace": True}),
    "llama-b8-trace": ("llama-3.2-1b", 8, "h200", "nan", {"trace": True}),
    "a100-llama-b8": ("llama-3.2-1b", 8, "a100", "atomic", {}),
    "a100-llama-b1": ("llama-3.2-1b", 1, "a100", "atomic", {}),
    "mi300x-llama-b1-nan": ("llama-3.2-1b", 1, "mi300x", "nan", {}),
    "mi300x-llama-b1-atomic": ("llama-3.2-1b", 1, "mi300x", "atomic", {}),
    "mi300x-qwen3-b8-nan": ("qwen3-0.6b", 8, "mi300x", "nan", {}),
    # the producer warp (the kernels before consumer_regs became a default, twenty-third session)
    "llama-b1-rs0": ("llama-3.2-1b", 1, "h200", "atomic", {"consumer_regs": 0}),
    "llama-b1-nan-rs0": ("llama-3.2-1b", 1, "h200", "nan", {"consumer_regs": 0}),
    "llama-b8-rs0": ("llama-3.2-1b", 8, "h200", "atomic", {"consumer_regs": 0}),
    "llama-b32-greedy-rs0": ("llama-3.2-1b", 32, "h200", "atomic", {"sampler": False, "consumer_regs": 0}),
    # bf16 activations, as mkc compile lowers batch >= 2 atomic builds (lower.h_bf16_pays / attn_bf16_pays)
    "llama-b8-bf16acts": ("llama-3.2-1b", 8, "h200", "atomic", {}, {"h_bf16": True, "attn_bf16": True}),
    "llama-b32-bf16acts": ("llama-3.2-1b", 32, "h200", "atomic", {}, {"h_bf16": True, "attn_bf16": True}),
    "llama-b32-greedy-bf16acts": ("llama-3.2-1b", 32, "h200", "atomic", {"sampler": False},
                                  {"h_bf16": True, "attn_bf16": True}),
    # and with the residual stream's normed bf16 copies (lower.xn_bf16_pays, forty-third session)
    "llama-b8-xn": ("llama-3.2-1b", 8, "h200", "atomic", {}, {"h_bf16": True, "attn_bf16": True, "xn_bf16": True}),
    "llama-b32-xn": ("llama-3.2-1b", 32, "h200", "atomic", {}, {"h_bf16": True, "attn_bf16": True, "xn_bf16": True}),
}

# runs inside each tree: only APIs both the baseline and today's tree have
_GENERATOR = r"""
import json, sys
from pathlib import Path
from codegen_fixtures import rr_schedule, shape_graph
from mkc.codegen.render import CodegenOptions, generate
from pathlib import Path as _P

import mkc

if (_P(mkc.__file__).parent / "targets" / "spec.py").exists():  # trees before mkc/target.py
    from mkc.targets.spec import get_target
else:
    from mkc.target import get_target
from mkc.taskgraph import lower

out = Path(sys.argv[1])
for name, (model, batch, target, sync, opts, *lower_kw) in json.loads(sys.argv[2]).items():
    t = get_target(target)
    tg = lower(shape_graph(model, batch, 512), t, **(lower_kw[0] if lower_kw else {}))
    src, cfg, _ = generate(tg, rr_schedule(tg, t, sync), t, CodegenOptions(**opts))
    ext = getattr(t, "source_ext", None) or ("cu" if t.arch.startswith("sm_") else "hip")
    (out / f"{name}.{ext}").write_text(src)
    (out / f"{name}.json").write_text(json.dumps({"arch": cfg.arch, "ext": ext}))
"""

NVCC_FLAGS = ["-cubin", "-O3", "-std=c++17", "--extended-lambda"]


def emit(tree: Path, configs: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(tree / "tests")]))
    subprocess.run([sys.executable, "-c", _GENERATOR, str(out), json.dumps(configs)], cwd=tree, env=env,
                   check=True)


def _cuda_tool(name: str, env: str) -> str | None:
    for cand in (os.environ.get(env), shutil.which(name), f"/usr/local/cuda/bin/{name}"):
        if cand and Path(cand).is_file():
            return cand
    try:  # pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
        import nvidia.cu13  # type: ignore

        for root in nvidia.cu13.__path__:
            if (Path(root) / "bin" / name).is_file():
                return str(Path(root) / "bin" / name)
    except ImportError:
        pass
    return None


def find_cuobjdump() -> str:
    tool = _cuda_tool("cuobjdump", "CUOBJDUMP")
    if tool is None:
        sys.exit("cuobjdump not found: set $CUOBJDUMP or pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    return tool


def _disasm_env() -> dict:
    """cuobjdump -sass runs nvdisasm, which it looks for on PATH or in $NVDISASM_PATH (a directory)."""
    nvdisasm = _cuda_tool("nvdisasm", "NVDISASM")
    env = dict(os.environ)
    if nvdisasm and "NVDISASM_PATH" not in env:
        env["NVDISASM_PATH"] = str(Path(nvdisasm).parent)
    return env


def _cached(cache: Path, key_parts: list[str], suffix: str, build) -> Path:
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:24]
    dst = cache / f"{key}.{suffix}"
    if not dst.exists():
        with tempfile.TemporaryDirectory(prefix="mkc-sass-") as tmp:
            produced = build(Path(tmp))
            shutil.copyfile(produced, dst.with_suffix(".tmp"))
            os.replace(dst.with_suffix(".tmp"), dst)
    return dst


def nvidia_sass(src: Path, arch: str, cache: Path) -> list[str]:
    flags = [f"-gencode=arch=compute_{arch[3:]},code={arch}", *NVCC_FLAGS]

    def build(tmp: Path) -> Path:
        s = tmp / "kernel.cu"
        shutil.copyfile(src, s)
        proc = subprocess.run(["nvcc", *flags, "-o", str(tmp / "k.cubin"), str(s)], capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"nvcc failed on {src}:\n{proc.stderr[-4000:]}")
        return tmp / "k.cubin"

    cubin = _cached(cache, [src.read_text(), *flags], "cubin", build)
    text = subprocess.run([find_cuobjdump(), "-sass", str(cubin)], capture_output=True, text=True,
                          check=True, env=_disasm_env()).stdout
    out = []
    for ln in text.splitlines():
        ln = re.sub(r"/\*[0-9a-f]{4,}\*/", "", ln)  # instruction address
        ln = re.sub(r"/\* 0x[0-9a-f]+ \*/", "", ln)  # encoding
        ln = ln.strip()
        if not ln or ln.startswith(("code for", "Fatbin", "arch =", "code version", "host =", "compile_size",
                                    "identifier", "ptxasOptions", "Function :", "......")):
            continue
        out.append(re.sub(r"\s+", " ", ln))
    return out


def amd_isa(src: Path, arch: str, cache: Path, new_tree: Path) -> list[str]:
    sys.path.insert(0, str(new_tree))
    from mkc.targets.amd.compiler import ISA, clang_flags, device_lib_dir, find_clang

    libdir = device_lib_dir()
    flags = clang_flags(arch, ISA, libdir)
    clang = find_clang()

    def build(tmp: Path) -> Path:
        s = tmp / "kernel.hip"
        shutil.copyfile(src, s)
        proc = subprocess.run([clang, *flags, "-o", str(tmp / "k.s"), str(s)], capture_output=True, text=True, cwd=tmp)
        if proc.returncode:
            raise RuntimeError(f"clang failed on {src}:\n{proc.stderr[-4000:]}")
        return tmp / "k.s"

    text = _cached(cache, [src.read_text(), *flags, clang], "s", build).read_text()
    body = text[: text.index("amdhsa.kernels:")] if "amdhsa.kernels:" in text else text
    # the argument block the kernel takes (metadata, not code): kept as one pseudo-instruction
    out = [f"; kernarg {m}" for m in re.findall(r"\.kernarg_segment_size:\s+(\d+)", text)]
    for ln in body.splitlines():
        ln = re.sub(r";.*", "", ln).strip()
        if not ln or (ln.startswith(".") and not re.match(r"\.LBB\d+_\d+:", ln)):
            continue
        if ln.startswith("__hip_cuid_"):  # the translation unit's id, a hash of the source text
            continue
        out.append(re.sub(r"\s+", " ", ln))
    return out


def classify(a: list[str], b: list[str]) -> tuple[str, list[str]]:
    if a == b:
        return "identical", []
    diff = list(difflib.unified_diff(a, b, "base", "new", lineterm="", n=2))
    changed = [ln[1:] for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    params = [ln for ln in changed if re.search(r"c\[0x0\]\[0x[0-9a-f]+\]|kernarg", ln)]
    n_del = sum(1 for ln in diff if ln.startswith("-") and not ln.startswith("---"))
    n_add = sum(1 for ln in diff if ln.startswith("+") and not ln.startswith("+++"))
    kind = "params only" if len(params) == len(changed) else "DIFFERS"
    notes = [ln for ln in changed if ln.startswith("; kernarg")]
    extra = f" ({' -> '.join(ln.split()[-1] for ln in notes)} argument bytes)" if notes else ""
    return f"{kind}: -{n_del} +{n_add} of {len(a)} instructions{extra}", diff


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--only", nargs="*", help="configuration names (default: all)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "mkc-compare-sass")
    ap.add_argument("--no-amd", action="store_true", help="skip the gfx942 configurations")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    configs = {k: v for k, v in CONFIGS.items() if not args.only or k in args.only}
    if args.no_amd:
        configs = {k: v for k, v in configs.items() if not v[2].startswith("mi")}
    work, cache = args.work, args.work / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for side, tree in (("base", args.base), ("new", args.new)):
        emit(tree.resolve(), configs, work / side)

    def one(name: str) -> tuple[str, str]:
        meta = json.loads((work / "base" / f"{name}.json").read_text())
        ext, arch = meta["ext"], meta["arch"]
        if ext == "cu":
            a, b = (nvidia_sass(work / side / f"{name}.cu", arch, cache) for side in ("base", "new"))
        else:
            a, b = (amd_isa(work / side / f"{name}.hip", arch, cache, args.new.resolve()) for side in ("base", "new"))
        verdict, diff = classify(a, b)
        (work / f"{name}.diff").write_text("\n".join(diff) + "\n")
        return name, f"{arch:8s} {verdict}"

    with ThreadPoolExecutor(max_workers=max(1, args.j)) as pool:
        results = list(pool.map(one, configs))
    width = max(len(n) for n, _ in results)
    bad = 0
    for name, verdict in results:
        print(f"{name:{width}s}  {verdict}")
        bad += "DIFFERS" in verdict
    print(f"diffs in {work}/<name>.diff")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
