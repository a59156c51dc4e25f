"""CodegenOptions.acquire_once: atomic waits poll relaxed and fence once (docs/sync.md "Acquire once").

The verifier (mkc.verify) and the oracle need no change, and none is made: they reason about the
task graph and schedule, where an event is a release by its producers and an acquire by each
consumer before the block barrier. acquire_once changes how that acquire is spelled in one thread
(an acquire pattern of the PTX memory model, ISA 9.1 section 8.8: strong reads of the counter, then
an acquire fence; on AMD agent-scope relaxed loads, then an agent-scope acquire fence), not which
events are awaited, at which thresholds, by whom or before what. So the happens-before edges they
check are the same edges.

Off, the option must leave the kernel as it was. The inlined headers carry the switched code, so
the off source is today's source plus that code: ``_without_option`` takes it out mechanically, and
the result is byte-identical to the source before the option existed (checked against a git
revision when MKC_SOURCE_BASE names one, e.g. ``MKC_SOURCE_BASE=83d2fe1``; a later change to the
generated code elsewhere makes that comparison moot, so it is not run by default). What always
runs: the option's only mark on the text is one constant, nothing of it is left after the strip,
and nvcc emits byte-identical PTX for the off source and the stripped one.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from codegen_fixtures import rr_schedule, taskgraph
from mkc.codegen.render import CodegenOptions, generate

ROOT = Path(__file__).resolve().parents[1]
ON = CodegenOptions(acquire_once=True)
# (model, batch, target, sync) built with the option off and compared against the branch point
CASES = (("llama-3.2-1b", 1, "h200", "atomic"), ("llama-3.2-1b", 8, "h200", "atomic"),
         ("qwen3-0.6b", 1, "h200", "nan"), ("tiny-qwen3", 2, "h200", "atomic"))
HAVE_NVCC = shutil.which("nvcc") is not None


def _source(model, batch, target, sync, options=None):
    tg = taskgraph(model, batch, 512, target)
    return generate(tg, rr_schedule(tg, target, sync), target, options)


def _function(src: str, signature: str) -> str:
    """The body of the first function whose definition starts with ``signature``."""
    i = src.index(signature)
    i = src.index("{", i)
    depth = 0
    for j in range(i, len(src)):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            return src[i:j + 1]
    raise AssertionError(f"unbalanced {signature}")


@pytest.mark.parametrize("target", ["h200", "mi300x"])
@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_acquire_once_is_one_constant(target, sync):
    plain, cfg0, _ = _source("llama-3.2-1b", 1, target, sync)
    off, cfg1, _ = _source("llama-3.2-1b", 1, target, sync, CodegenOptions(acquire_once=False))
    on, cfg2, _ = _source("llama-3.2-1b", 1, target, sync, ON)
    assert CodegenOptions().acquire_once is False
    assert off == plain
    assert cfg0.const("ACQUIRE_ONCE") == 0 and cfg2.const("ACQUIRE_ONCE") == 1
    assert plain.count("constexpr int ACQUIRE_ONCE = 0;") == 1
    assert plain.replace("ACQUIRE_ONCE = 0;", "ACQUIRE_ONCE = 1;") == on


def test_acquire_once_wait_polls_relaxed_and_fences_once():
    src, _, _ = _source("llama-3.2-1b", 1, "h200", "atomic", ON)
    poll = _function(src, "__device__ __forceinline__ unsigned poll_counter(")
    assert re.search(r"if constexpr \(ACQUIRE_ONCE != 0\) return mk_ld_relaxed\(p\);\s*else return mk_ld_acquire\(p\);", poll)
    spin = _function(src, "__device__ bool spin_geq(")
    assert "mk_ld_acquire" not in spin and spin.count("poll_counter(p)") == 2
    # the bounded spin is untouched: limit, report, abort watch, backoff
    for part in ("if (it >= c.spin_limit) { report(c, t, event, v, want); return false; }",
                 "if ((it & 31) == 31 && mk_ld_relaxed(c.ws + WS_ABORT)) return false;",
                 "if (it >= SPIN_HOT) { mk_sleep(ns); if (ns < SPIN_MAX_NS) ns <<= 1; }"):
        assert part in spin
    wait = _function(src, "__device__ bool wait_task(")
    assert "mk_ld_acquire" not in wait
    # one acquire fence, by the threads that polled, after every poll and before the block barrier
    assert wait.count("mk_acquire_fence()") == 1
    spins = [m.start() for m in re.finditer(r"spin_geq\(", wait)]
    fence = wait.index("mk_acquire_fence()")
    barrier = wait.index("mk_barrier();", fence)
    assert spins and max(spins) < fence < barrier
    assert "if (tid < t.n_wait || (loop_wait && tid == NT - 1)) mk_acquire_fence();" in wait
    # the trace stamps stay where they were: before the first poll, after the barrier
    assert wait.index("trace_rec[0] = mk_globaltimer()") < min(spins)
    assert wait.index("trace_rec[1] = mk_globaltimer()") > barrier


# ---- compiled: nvcc PTX (and SASS-level reasoning in docs/sync.md) --------------------------------
def _ptx(src: str, out: Path) -> str:
    cu = out.with_suffix(".cu")
    cu.write_text(src)
    subprocess.run(["nvcc", "-arch=sm_90a", "-O3", "-std=c++17", "--extended-lambda", "-ptx", "-o", str(out), str(cu)],
                   check=True, capture_output=True, text=True)
    return out.read_text()


@pytest.mark.skipif(not HAVE_NVCC, reason="nvcc not installed")
def test_acquire_once_ptx_has_no_acquire_load(tmp_path):
    off, _, _ = _source("llama-3.2-1b", 1, "h200", "atomic")
    on, _, _ = _source("llama-3.2-1b", 1, "h200", "atomic", ON)
    with ThreadPoolExecutor(2) as ex:
        p_off, p_on = ex.map(lambda a: _ptx(a[0], tmp_path / a[1]), [(off, "off.ptx"), (on, "on.ptx")])
    assert p_off.count("ld.acquire.gpu") > 0 and "fence.acquire.gpu" not in p_off
    assert "ld.acquire.gpu" not in p_on
    # one fence per inlined wait_task; the off kernel has two acquire polls (first, loop) per spin call
    assert 0 < p_on.count("fence.acquire.gpu") <= p_off.count("ld.acquire.gpu") // 2
    assert p_on.count("ld.relaxed.gpu") == p_off.count("ld.relaxed.gpu") + p_off.count("ld.acquire.gpu")
    # the release side is untouched
    assert p_on.count("red.release.gpu") == p_off.count("red.release.gpu")
    assert p_on.count("fence.acq_rel.gpu") == p_off.count("fence.acq_rel.gpu")


def _without_option(src: str) -> str:
    """``src`` (rendered with acquire_once off) with the option's code taken out: what the
    generator emitted before the option existed."""
    s = re.sub(r"// Acquire only \(CodegenOptions\.acquire_once\).*?\n}\n", "", src, flags=re.S)
    s = re.sub(r"// acquire only, after relaxed polls \(CodegenOptions\.acquire_once\)[^\n]*\n//[^\n]*\n"
               r"__device__ __forceinline__ void mk_acquire_fence\(\) \{[^\n]*\}\n", "", s)
    s = s.replace("[[maybe_unused]] constexpr int ACQUIRE_ONCE = 0;\n", "")
    s = re.sub(r"// One poll of a counter\..*?\n}\n\n// Bounded spin until \*p >= want \(acquire, or relaxed "
               r"under ACQUIRE_ONCE: the caller fences\)\. False\n// on timeout \(reported\) or when another "
               r"worker aborted\.\n",
               "// Bounded spin until *p >= want (acquire). False on timeout (reported) or when another worker "
               "aborted.\n", s, flags=re.S)
    s = s.replace("poll_counter(p)", "mk_ld_acquire(p)")
    # attention's wait on the loop counter before its early loads (attention.cuh attn_step_order)
    s = re.sub(r"    if constexpr \(ACQUIRE_ONCE != 0\) mk_acquire_fence\(\);  // relaxed polls[^\n]*\n", "", s)
    return re.sub(r"    else if constexpr \(ACQUIRE_ONCE != 0\) \{\n.*?\n    \}\n", "", s, flags=re.S)


@pytest.mark.parametrize("case", CASES + (("llama-3.2-1b", 1, "mi300x", "atomic"), ("qwen3-0.6b", 8, "mi300x", "nan")))
def test_off_source_is_the_old_source_plus_the_switched_code(case):
    off = _source(*case)[0]
    old = _without_option(off)
    assert old != off
    for mark in ("ACQUIRE_ONCE", "acquire_once", "poll_counter", "mk_acquire_fence"):
        assert mark not in old, mark
    assert old.count("mk_ld_acquire(p)") == 2  # the two polls of spin_geq, as before


@pytest.mark.skipif(not HAVE_NVCC, reason="nvcc not installed")
def test_off_compiles_to_the_old_sources_ptx(tmp_path):
    def one(case):
        off = _source(*case)[0]
        tag = f"{case[0]}-b{case[1]}-{case[3]}"
        return tag, _ptx(off, tmp_path / f"{tag}.off.ptx"), _ptx(_without_option(off), tmp_path / f"{tag}.old.ptx")

    with ThreadPoolExecutor(len(CASES)) as ex:
        for tag, off, old in ex.map(one, CASES):
            assert off == old, f"{tag}: acquire_once off changes the PTX"


_GEN = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
import mkc
assert mkc.__file__.startswith(sys.argv[1]), mkc.__file__
from codegen_fixtures import rr_schedule, taskgraph
from mkc.codegen.render import generate
m, b, t, s = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
tg = taskgraph(m, b, 512, t)
sys.stdout.write(generate(tg, rr_schedule(tg, t, s), t)[0])
"""


@pytest.mark.skipif(not os.environ.get("MKC_SOURCE_BASE"), reason="MKC_SOURCE_BASE (a git revision) not set")
def test_stripped_off_source_is_the_base_revisions_source(tmp_path):
    base = os.environ["MKC_SOURCE_BASE"]
    tree = tmp_path / "base"
    tree.mkdir()
    data = subprocess.run(["git", "-C", str(ROOT), "archive", base], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(tree, filter="data")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def one(case):
        m, b, t, s = case
        old = subprocess.run([sys.executable, "-c", _GEN, str(tree), m, str(b), t, s], capture_output=True,
                             text=True, check=True, env=env, cwd=tmp_path).stdout
        new = _source(m, b, t, s)[0]
        return f"{m}-b{b}-{t}-{s}", old, _without_option(new)

    cases = CASES + (("llama-3.2-1b", 1, "mi300x", "atomic"), ("qwen3-0.6b", 8, "mi300x", "nan"))
    with ThreadPoolExecutor(2) as ex:
        for tag, old, new in ex.map(one, cases):
            assert old == new, f"{tag}: the source differs from {base}'s"


# ---- AMD: gfx942 ISA --------------------------------------------------------------------------
def _gfx942(src: str, out_dir: Path) -> list[str]:
    from test_hip import _toolchain

    _toolchain()
    from mkc.targets.amd.compiler import build_hip

    res = build_hip(src, "gfx942", out_dir=out_dir)
    assert res.warnings == [], res.log
    r = res.resources
    assert r["vgpr_spill"] == 0 and r["scratch"] == 0, r
    text = res.binary.read_text()
    return [ln.strip() for ln in text[: text.index("amdhsa.kernels:")].splitlines() if ln.strip()]


def test_gfx942_acquire_once_polls_relaxed_then_one_acquire_fence(tmp_path):
    off, _, _ = _source("llama-3.2-1b", 1, "mi300x", "atomic")
    on, _, _ = _source("llama-3.2-1b", 1, "mi300x", "atomic", ON)
    with ThreadPoolExecutor(2) as ex:
        isa_off, isa_on = ex.map(lambda s: _gfx942(s[0], tmp_path / s[1]), [(off, "off"), (on, "on")])
    acq_load = r"global_load_dword v\d+, [^\n]* sc1\ns_waitcnt vmcnt\(0\)\nbuffer_inv sc1"
    assert len(re.findall(acq_load, "\n".join(isa_off))) >= 2
    assert not re.findall(acq_load, "\n".join(isa_on)), "an acquire load is left in the polls"
    # the relaxed agent-scope polls, in loops
    polls = [i for i, ln in enumerate(isa_on) if re.match(r"global_load_dword v\d+, .* sc1$", ln)]
    assert polls
    # the acquire fence alone: the invalidate after a wait, with no L2 writeback before it
    fences = [i for i, ln in enumerate(isa_on) if ln == "buffer_inv sc1" and not isa_on[i - 2].startswith("buffer_wbl2")]
    assert fences and all(isa_on[i - 1].startswith("s_waitcnt vmcnt(0)") for i in fences)
    # every release (writeback + wait before an add) is as it was
    n_rel = lambda isa: sum(1 for ln in isa if ln.startswith("buffer_wbl2 sc1"))  # noqa: E731
    assert n_rel(isa_on) == n_rel(isa_off)


def test_gfx90a_acquire_once_compiles(tmp_path):
    from test_hip import _toolchain

    _toolchain()
    from mkc.targets.amd.compiler import build_hip

    src, cfg, _ = _source("qwen3-0.6b", 1, "mi250x", "atomic", ON)
    res = build_hip(src, cfg.arch, out_dir=tmp_path)
    assert res.warnings == [], res.log
    assert res.resources["vgpr_spill"] == 0 and res.resources["scratch"] == 0


# ---- nan mode: how the sentinel polls are issued (docs/sync.md "nan") ------------------------------
@pytest.mark.parametrize("target", ["h200", "mi300x"])
def test_nan_polls_are_16_bytes_four_in_flight_and_reissued_at_batch_1(target):
    """The measured defaults: 16-byte polls, 4 per thread in flight, re-polled together at batch 1
    only; the wait polls through them, and every spin of the new code is bounded."""
    for batch, reissue in ((1, 1), (8, 0)):
        src, cfg, _ = _source("llama-3.2-1b", batch, target, "nan")
        assert cfg.const("POLL_VEC") == 1 and cfg.const("POLL_BATCH") == 4 and cfg.const("POLL_REISSUE") == reissue
        wait = _function(src, "__device__ bool wait_task(")
        assert "pr.vec() ? poll_words<4>(c, t, ev, pr) : poll_words<1>(c, t, ev, pr)" in wait
        polls = _function(src, "__device__ __forceinline__ bool poll_words(")
        assert "if constexpr (POLL_REISSUE != 0)" in polls and "mk_ffs(armed)" in polls
        spin4 = _function(src, "__device__ bool spin_words(")
        assert "if (it >= c.spin_limit) { report(" in spin4 and "WS_ABORT" in spin4
        assert ("ld.relaxed.gpu.global.v4.u32" in src) == (target == "h200")
    off, cfg, _ = _source("llama-3.2-1b", 1, "h200", "nan", CodegenOptions(poll_vec=False, poll_reissue=False, poll_batch=8))
    assert (cfg.const("POLL_VEC"), cfg.const("POLL_REISSUE"), cfg.const("POLL_BATCH")) == (0, 0, 8)
