"""HIP megakernel for AMD: the dialect, rendered text, clang compiles, and the gfx942 ISA of the sync code.

Compile tests need clang++-19 with Debian's HIP headers and ROCm device libraries
(``apt-get install clang-19 lld-19 libamdhip64-dev rocm-device-libs``). They skip without them,
unless ``MKC_REQUIRE_HIP=1`` (CI), where a missing toolchain is a failure. Each kernel variant is
compiled once per session (clang takes a few seconds per variant).
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from codegen_fixtures import rr_schedule, taskgraph
from mkc.codegen.render import TEMPLATE_DIR, dialect_for, generate
from mkc.codegen.source import INCLUDE_DIR, headers
from mkc.targets.amd.dialect import AmdDialect
from mkc.targets.nvidia.dialect import NvidiaDialect
from mkc.target import get_target

MODELS = ("llama-3.2-1b", "qwen3-0.6b")
ARCH = {"mi300x": "gfx942", "mi250x": "gfx90a"}
SYNCS = ("atomic", "nan")


# ---- the dialect and the rendered text (no toolchain) --------------------------------------------
def _helper_names(text: str) -> set[str]:
    return set(re.findall(r"\b(mk_\w+)\s*\(", text))


def _defined(text: str) -> set[str]:
    return set(re.findall(r"__device__ __forceinline__ [\w\s\*]+?\b(mk_\w+)\s*\(", text))


def _header(name: str) -> str:
    return (INCLUDE_DIR / name).read_text()


def _mma_part(cuda: str) -> str:
    """The CUDA dialect's sm_80+ block: the tensor-core helpers only gemv_mma.cuh calls."""
    return cuda[cuda.index("#if MKC_SM >= 80"):]


def _bulk_part(cuda: str) -> str:
    """The CUDA dialect's sm_90 block of mbarrier and bulk-copy helpers: only the weight pipeline
    (pipe.cuh, compiled where MKC_HAS_BULK_COPY is 1) calls them."""
    start = cuda.index("#define MKC_HAS_BULK_COPY 1")
    return cuda[start:cuda.index("#else", start)]


def test_amd_dialect_defines_what_the_template_and_nvidia_use():
    amd, nv = AmdDialect(), NvidiaDialect()
    hip, cuda = _header(amd.header), _header(nv.header)
    assert amd.helpers == f'#include "{amd.header}"' and nv.helpers == f'#include "{nv.header}"'
    shared = [_header(n) for n in headers() if not n.startswith("mkc/dialect/")]
    shared.append("".join(p.read_text() for p in Path(TEMPLATE_DIR).glob("*.j2")))
    # the tensor-core GEMV helpers: compiled and called only where the dialect has a bf16 MMA
    mma_only = set() if getattr(amd, "has_mma_bf16", False) else _defined(_mma_part(cuda))
    mma_only |= _defined(_bulk_part(cuda))  # and the weight pipeline's, where the dialect has no bulk copies
    used = set().union(*map(_helper_names, shared)) - {"mk_smem"} - mma_only
    assert used <= _defined(hip), used - _defined(hip)
    nv_used = _defined(cuda) - mma_only
    assert nv_used <= _defined(hip), nv_used - _defined(hip)
    for attr in ("arch", "name", "warp_size", "source_ext", "kernel_name", "prelude", "smem_decl", "helpers", "ptr_t",
                 "defines", "header"):
        assert hasattr(amd, attr), attr
    assert amd.warp_size == 64 and amd.source_ext == "hip"
    assert dict(amd.defines) == {"MKC_WARP": 64, "MKC_SYNC_SCOPE": "__HIP_MEMORY_SCOPE_AGENT"}
    # what the properties say the headers hold
    for d, text in ((amd, hip), (nv, cuda)):
        assert d.smem_decl in text and d.prelude in text
    assert "{{" not in hip and "MKC_WARP)" in hip and "MKC_SYNC_SCOPE)" in hip


def test_targets_pick_the_amd_dialect():
    for name, arch in ARCH.items():
        d = dialect_for(get_target(name))
        assert isinstance(d, AmdDialect) and d.arch == arch and d.lds_bytes == 64 * 1024
        assert get_target(name).default_sync == "nan"


@pytest.fixture(scope="module")
def graphs():
    return {(m, t): taskgraph(m, 1, 4096, t) for m in MODELS for t in ARCH}


@pytest.fixture(scope="module")
def sources(graphs):
    out = {}
    for (m, t), tg in graphs.items():
        for sync in SYNCS:
            out[m, t, sync] = generate(tg, rr_schedule(tg, t, sync), t)[:2]
    return out


@pytest.mark.parametrize("sync", SYNCS)
def test_rendered_hip_has_the_protocol(sources, sync):
    src, cfg = sources["llama-3.2-1b", "mi300x", sync]
    assert f"NAN_MODE = {'true' if sync == 'nan' else 'false'}" in src
    assert "#include <hip/hip_runtime.h>" in src
    assert 'extern "C" __global__ void __launch_bounds__(256) mkc_megakernel' in src
    assert "extern __shared__ __attribute__((aligned(16))) unsigned char mk_smem[];" in src
    assert "constexpr int WARP = 64;" in src and "#define MKC_WARP 64\n" in src and "__shfl_xor(v, m, MKC_WARP)" in src
    assert "#define MKC_SYNC_SCOPE __HIP_MEMORY_SCOPE_AGENT\n" in src
    assert "__hip_atomic_load(mk_g(p), __ATOMIC_ACQUIRE, MKC_SYNC_SCOPE)" in src
    assert "__hip_atomic_fetch_add(mk_g(p), v, __ATOMIC_RELAXED, MKC_SYNC_SCOPE)" in src
    assert "__hip_atomic_load(mk_g(p), __ATOMIC_RELAXED, MKC_SYNC_SCOPE)" in src
    assert "__hip_atomic_store(mk_g(p), v, __ATOMIC_RELAXED, MKC_SYNC_SCOPE)" in src
    assert '__builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent")' in src
    assert '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent")' in src
    assert "__builtin_amdgcn_s_waitcnt(0)" in src and "__builtin_amdgcn_s_sleep(" in src
    assert "__builtin_nontemporal_load" in src  # 16-byte weight loads
    for cuda in ("asm", "__nanosleep", "__syncthreads", ".gpu", "__ldcg", "__ldg", "_sync(", "__threadfence",
                 "atomicCAS", "cuda", "__align__"):
        assert cuda not in src, cuda
    assert cfg.smem_needed <= cfg.smem_bytes <= 64 * 1024 and cfg.arch == "gfx942"


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def _match(src: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one at ``src[i]``."""
    depth = 0
    for j in range(i, len(src)):
        depth += src[j] == open_
        depth -= src[j] == close
        if depth == 0:
            return j + 1
    raise AssertionError("unbalanced source")


def _loops(src: str):
    """(keyword, header, body) of every for/while/do loop in C++ source without comments."""
    for m in re.finditer(r"\b(for|while|do)\b", src):
        kw = m.group(1)
        if kw == "do":
            yield kw, "", src[m.end(): src.index(";", m.end())]
            continue
        i = src.index("(", m.end())
        j = _match(src, i, "(", ")")
        k = j + len(src[j:]) - len(src[j:].lstrip())
        body_end = _match(src, k, "{", "}") if src[k] == "{" else src.index(";", k) + 1
        yield kw, src[i + 1: j - 1], src[k:body_end]


POLLS = ("mk_ld_acquire", "mk_ld_relaxed", "mk_ld_relaxed4", "spin_geq", "spin_words")


def _spin_problems(src: str) -> tuple[int, list[str]]:
    """(number of spins, problems): a loop either counts its own induction variable towards a bound,
    or it is a spin (its exit depends on memory other workers write) that gives up after
    ``c.spin_limit`` iterations, reports, and watches the abort flag."""
    src = _strip_comments(src)
    problems = ["goto"] if re.search(r"\bgoto\b", src) else []
    spins = 0
    for kw, header, body in _loops(src):
        if kw == "for":
            init, cond, step = (s.strip() for s in header.split(";"))
            var = re.match(r"(?:const\s+)?(?:int|unsigned|size_t)\s+(\w+)\s*=", init)
            v = var.group(1) if var else None
            if v and re.match(rf"{v}\s*(<|<=|>|>=)\s*", cond) and re.search(rf"\b{v}\b", step):
                continue  # counted
            spins += 1
            if not (v and re.search(rf"if \(\s*{v}\s*>=\s*c\.spin_limit\s*\)\s*\{{\s*report\(", body)
                    and "WS_ABORT" in body):
                problems.append(f"unbounded spin: for ({header})")
        elif kw == "while" and (header.startswith("!mk_mbar_test(") or "*pipe_issued(s_abort)" in header
                                or header == "*pipe_closing()") and (
                ("mk_globaltimer()" in body and "mk_trap()" in body) or re.search(r"if \(\*s_abort\) \{[^}]*return", body)):
            # pipe.cuh: the consumers' wait on their own producer is bounded in time (then the launch
            # fails); the producer's wait for a free page ends when the consumers' bounded waits do,
            # through the block's abort flag; the L2 prefetcher's wait for the copier (PIPE_L2_AHEAD)
            # ends the same way, and so does its hold while a task closes (PIPE_TAIL: the consumers end
            # the window with their signal, needing only pages issued before it)
            continue
        elif kw == "do" or re.search(r"\w\s*\(|\[|->", header) or any(p in body for p in POLLS):
            problems.append(f"{kw} loop that may wait on memory: {header}")  # while: local arithmetic only
    return spins, problems


@pytest.mark.parametrize("sync", SYNCS)
def test_every_spin_is_bounded(sources, sync):
    spins, problems = _spin_problems(sources["qwen3-0.6b", "mi300x", sync][0])
    assert problems == [] and spins >= 2  # spin_geq (counters) and spin_words (sentinels)
    # the check itself: an unbounded poll, a poll in a while loop, a spin without the abort flag
    for bad in ("for (int it = 0; v < want; ++it) { v = mk_ld_acquire(p); }",
                "while (mk_ld_relaxed(p) == SENTINEL) { mk_sleep(32); }",
                "for (int it = 0; v < want; ++it) { if (it >= c.spin_limit) { report(c, t, 0, v, want); return false; } }",
                "while (!mk_mbar_test(bar, 0u)) { }",
                "while (*pipe_closing()) { mk_sleep(32); }"):
        assert _spin_problems(bad)[1], bad


# ---- compile tier ---------------------------------------------------------------------------------
def _toolchain():
    from mkc.targets.amd.compiler import device_lib_dir, have_clang

    missing = [what for what, ok in (("clang++-19", have_clang()), ("ROCm device libraries", device_lib_dir()),
                                     ("HIP headers", Path("/usr/include/hip/hip_runtime.h").exists()
                                      or Path("/opt/rocm/include/hip/hip_runtime.h").exists())) if not ok]
    if missing:
        msg = f"HIP toolchain missing: {', '.join(missing)} (apt-get install clang-19 lld-19 libamdhip64-dev rocm-device-libs)"
        if os.environ.get("MKC_REQUIRE_HIP") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def builds(sources, tmp_path_factory):
    """(model, target, sync) -> HipBuildResult, each compiled once on first use."""
    _toolchain()
    from mkc.targets.amd.compiler import build_hip

    root = tmp_path_factory.mktemp("hip")
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(sources), os.cpu_count() or 1)))
    futures = {}

    def get(model, target, sync):
        if not futures:  # first use: every variant at once, one clang per core
            for key, (src, cfg) in sources.items():
                futures[key] = pool.submit(build_hip, src, cfg.arch, out_dir=root)
        return futures[model, target, sync].result()

    yield get
    pool.shutdown(wait=True)


@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("target", list(ARCH))
@pytest.mark.parametrize("model", MODELS)
def test_kernel_compiles_cleanly(builds, model, target, sync):
    res = builds(model, target, sync)
    assert res.warnings == [], res.log
    r = res.resources
    assert r["vgpr_spill"] == 0 and r["scratch"] == 0, r  # no spill to memory
    assert r["vgprs"] + r["agprs"] <= 512, r  # one wave of the block per SIMD fits
    data = res.binary.read_bytes()
    if target == "mi250x":  # a loadable code object: AMDGPU ELF holding the kernel
        assert res.kind == "code_object" and data[:4] == b"\x7fELF"
        assert int.from_bytes(data[18:20], "little") == 224  # EM_AMDGPU
        assert b"mkc_megakernel" in data
    else:  # gfx942 here: ISA, self-contained (device math inlined, no calls out)
        assert res.kind == "isa" and ".amdgcn_target \"amdgcn-amd-amdhsa--gfx942" in res.binary.read_text()
        assert "s_swappc_b64" not in res.binary.read_text()


def _isa(builds, model, sync) -> list[str]:
    text = builds(model, "mi300x", sync).binary.read_text()
    body = text[: text.index("amdhsa.kernels:")]  # every function's code, not the metadata
    return [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith(".")
            or re.match(r"\s*\.LBB\d+_\d+:", ln)]


def _block_start(lines: list[str], i: int) -> int:
    """First line of the straight-line code ending at line i (after the last branch target). A
    kernel past the short branches' reach has long-branch trampolines: ``s_cbranch_* .LBB_X``, then
    an ``s_getpc_b64 .. s_setpc_b64`` jump elsewhere, then ``.LBB_X:``; the code before the
    conditional branch flows straight into .LBB_X, so the block goes on above it."""
    while True:
        while i > 0 and not re.match(r"\.LBB\d+_\d+:", lines[i - 1]):
            i -= 1
        label = lines[i - 1].split(":")[0] if i > 0 else None
        j = i - 2  # the trampoline's last line, if there is one
        if label is None or j < 4 or not lines[j].startswith("s_setpc_b64"):
            return i
        while j > 0 and not lines[j].startswith("s_getpc_b64"):
            j -= 1
        if not re.match(rf"s_cbranch_\w+ {re.escape(label)}$", lines[j - 2]) or not lines[j - 1].startswith("; %bb."):
            return i
        i = j - 2


def _straight_line(lines: list[str], i: int) -> list[str]:
    """The lines executed on the way to line i: its block, and through a label that only one branch
    reaches and nothing falls into (clang's long jump past a block whose lanes are all off, branch
    relaxation in a big kernel), the block of that branch too."""
    out: list[str] = []
    while True:
        j = _block_start(lines, i)
        out = lines[j:i] + out
        if j == 0:
            return out
        label = lines[j - 1].split(":")[0]
        srcs = [k for k, ln in enumerate(lines) if re.fullmatch(rf"s_(cbranch_\w+|branch) {re.escape(label)}", ln)]
        falls_in = not re.match(r"s_(setpc_b64|branch) ", lines[j - 2]) if j >= 2 else False
        if len(srcs) != 1 or srcs[0] >= j - 1 or falls_in:
            return out
        i = srcs[0] + 1


@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("model", MODELS)
def test_gfx942_sync_is_agent_scope(builds, model, sync):
    isa = _isa(builds, model, sync)
    text = "\n".join(isa)
    # clang 19 can drop the wait after an L2 writeback (llvm-project #178316): ours never does. All
    # are agent scope but the token stream's system-scope fence (mk_fence_system: sc0 sc1)
    wbl2 = [i for i, ln in enumerate(isa) if ln.startswith("buffer_wbl2")]
    assert wbl2
    for i in wbl2:
        assert isa[i] in ("buffer_wbl2 sc1", "buffer_wbl2 sc0 sc1") and isa[i + 1].startswith("s_waitcnt vmcnt(0)"), \
            isa[i - 2: i + 3]
    assert sum(isa[i] == "buffer_wbl2 sc0 sc1" for i in wbl2) <= 2, "system scope beyond the token stream's fence"
    # every counter increment is a release: the writeback and its wait precede it in straight-line
    # code with no store in between
    adds = [i for i, ln in enumerate(isa) if ln.startswith("global_atomic_add")]
    assert adds
    for i in adds:
        before = _straight_line(isa, i)
        k = max((j for j, ln in enumerate(before) if ln.startswith("buffer_wbl2 sc1")), default=None)
        assert k is not None and before[k + 1].startswith("s_waitcnt vmcnt(0)"), isa[i - 12: i + 1]
        assert not any(re.match(r"(global|flat)_(store|atomic)", ln) for ln in before[k:]), before[k:]
    # the full fence: writeback, wait, invalidate
    assert re.search(r"buffer_wbl2 sc1\ns_waitcnt vmcnt\(0\)[^\n]*\nbuffer_inv sc1", text)
    if sync == "atomic":
        # acquire polls of the counters: an sc1 load, its wait, then the L1/L2 invalidate
        acq = re.findall(r"global_load_dword v\d+, [^\n]* sc1\ns_waitcnt vmcnt\(0\)\nbuffer_inv sc1", text)
        assert len(acq) >= 2, "no agent-scope acquire load in the ISA"
    else:
        # relaxed agent-scope polls and stores of the data itself
        assert re.search(r"global_load_dword v\d+, [^\n]* sc1$", text, re.M)
        assert re.search(r"global_store_dword [^\n]* sc1$", text, re.M)
    # backoff inside the spin loops
    sleeps = [i for i, ln in enumerate(isa) if ln.startswith("s_sleep")]
    assert sleeps
    for i in sleeps:
        head = next(ln for ln in reversed(isa[:i]) if re.match(r"(\.LBB\d+_\d+:|; %bb\.)", ln))
        assert "Loop" in head, head
    # weights stream with 16-byte loads
    assert re.search(r"global_load_dwordx4 [^\n]* nt$", text, re.M)


def test_kernel_arguments_match_the_code_object_metadata(builds):
    """The runtime's argument buffer puts each argument where clang's kernel metadata says."""
    from mkc.codegen.tables import KERNEL_ARGS
    from mkc.targets.amd.driver import arg_layout

    text = builds("llama-3.2-1b", "mi300x", "nan").binary.read_text()
    meta = text[text.index("amdhsa.kernels:"):]
    args = re.findall(r"\.offset:\s+(\d+)\s+\.size:\s+(\d+)\s+\.value_kind:\s+(\w+)", meta)
    explicit = [(int(o), int(s), k) for o, s, k in args if not k.startswith("hidden")]
    assert [(o, s) for o, s, _ in explicit] == [(off, size) for _, off, size in arg_layout(KERNEL_ARGS)]
    assert [k for _, _, k in explicit] == ["global_buffer" if t == "ptr" else "by_value" for _, t in KERNEL_ARGS]


def test_build_cache_hits(builds, sources):
    from mkc.targets.amd.compiler import build_hip

    a = builds("qwen3-0.6b", "mi250x", "nan")
    src, cfg = sources["qwen3-0.6b", "mi250x", "nan"]
    b = build_hip(src, cfg.arch, out_dir=a.binary.parent)
    assert not a.cached and b.cached and b.binary == a.binary and b.log == a.log


@pytest.mark.parametrize("target", list(ARCH))
def test_compile_pipeline_writes_kernel_hip(tmp_path, target):
    """`mkc compile --target mi300x|mi250x --build`: scheduled with AMD's figures, verified, emitted, built."""
    _toolchain()
    import json

    from mkc.pipeline import Options, StageLog, compile_model

    bdir = compile_model("tiny-qwen3", tmp_path / "b", Options(target=target, method="list", max_seq_len=64,
                                                                 compile_binary=True), StageLog(quiet=True))
    rep = json.loads((bdir / "b1" / "report.json").read_text())
    assert rep["sync"] == "nan" and rep["verify"]["ok"] and rep["schedule"]["workers"] <= get_target(target).sms
    assert (bdir / "b1" / "kernel.hip").exists() and not (bdir / "b1" / "kernel.cu").exists()
    suffix = "hsaco" if target == "mi250x" else "s"
    assert rep["kernel"]["binary"] == f"kernel.{ARCH[target]}.{suffix}"
    assert (bdir / "b1" / rep["kernel"]["binary"]).stat().st_size > 0
