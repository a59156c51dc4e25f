"""Code generator, CPU tier: rendered text, template discipline, table packing, the control-flow model."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from codegen_fixtures import rr_schedule, taskgraph
from kernel_model import KernelModel, ModelError, box_words, region_words
from mkc.codegen import tables as T
from mkc.codegen.render import TEMPLATE_DIR, CodegenOptions, generate, kernel_config, render
from mkc.codegen.source import INCLUDE_DIR, headers
from mkc.errors import IRCheckError
from mkc.target import get_target

TINY = ("tiny-llama", "tiny-qwen2", "tiny-qwen3")


@pytest.fixture(scope="module")
def llama_tg():
    return taskgraph("llama-3.2-1b", 1, 512)


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_rendered_text_has_the_protocol(llama_tg, sync):
    src, cfg, _ = generate(llama_tg, rr_schedule(llama_tg, "h200", sync), "h200")
    assert f"NAN_MODE = {'true' if sync == 'nan' else 'false'}" in src
    # batch 1 on sm_90a: 256 consumer threads and the weight pipeline's producer warpgroup (its
    # registers given to the consumers: CodegenOptions.consumer_regs), whose copies complete on
    # mbarriers; the consumers' barriers leave the producer out
    assert "__launch_bounds__(384, 1)" in src and 'extern "C" __global__' in src
    assert cfg.threads == 384 and cfg.consumer_threads == 256 and "#define MKC_BAR_THREADS 256" in src
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in src
    assert "mbarrier.try_wait.parity.shared::cta.b64" in src and "bar.sync 1, %0" in src
    assert "ld.acquire.gpu.global.u32" in src and "red.release.gpu.global.add.u32" in src
    assert "ld.relaxed.gpu.global.u32" in src and "st.relaxed.gpu.global.u32" in src
    assert "fence.acq_rel.gpu" in src and "__nanosleep" in src
    assert "cp.async.bulk.prefetch.L2.global" in src  # sm_90a pulls weights into L2 in one instruction
    assert "ld.global.nc.L1::no_allocate.v4.u32" in src  # 16-byte weight loads
    assert f"SENTINEL = {T.SENTINEL}u" in src
    for name, value in (("H", 2048), ("I", 8192), ("NH", 32), ("NKV", 8), ("HD", 64), ("V", 128256), ("B", 1)):
        assert f"constexpr int {name} = {value};" in src
    assert cfg.smem_needed <= cfg.smem_bytes <= get_target("h200").smem_per_block


def active_text(src: str) -> str:
    """``src`` without the lines of inactive ``#if`` branches: what the compiler sees of the
    architecture conditions in the dialect headers. Knows the forms the headers use: ``#define NAME
    VALUE``, ``#if EXPR`` over those macros (C's ``&&``/``||``/``!`` and integer comparisons),
    ``#ifdef``/``#ifndef``, ``#else``, ``#endif``."""

    macros, stack, out = {}, [], []

    def value(expr: str) -> bool:
        expr = re.sub(r"\bdefined\s*\(?\s*(\w+)\s*\)?", lambda m: str(int(m.group(1) in macros)), expr)
        expr = expr.replace("&&", " and ").replace("||", " or ")
        expr = re.sub(r"!(?!=)", " not ", expr)
        expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: m.group(0) if m.group(0) in ("and", "or", "not")
                      else str(macros.get(m.group(0), 0)), expr)
        return bool(eval(expr, {}))

    for ln in src.splitlines():
        d = re.match(r"\s*#\s*(if|ifdef|ifndef|else|endif|define)\b\s*(.*?)\s*(//.*)?$", ln)
        live = all(stack)
        if d and d.group(1) in ("if", "ifdef", "ifndef"):
            arg = d.group(2)
            stack.append(value(arg) if d.group(1) == "if" else (arg in macros) == (d.group(1) == "ifdef"))
        elif d and d.group(1) == "else":
            stack[-1] = not stack[-1]
        elif d and d.group(1) == "endif":
            stack.pop()
        elif live:
            if d:
                name, _, val = d.group(2).partition(" ")
                macros[name] = int(val) if val.strip().isdigit() else val.strip()
            out.append(ln)
    assert not stack, "unbalanced #if"
    return "\n".join(out)


def test_sm80_prefetches_by_lines(llama_tg):
    tg = taskgraph("llama-3.2-1b", 1, 512, "a100")
    src, _, _ = generate(tg, rr_schedule(tg, "a100"), "a100")
    assert "#define MKC_SM 80\n" in src
    live = active_text(src)
    assert "prefetch.global.L2" in live and "cp.async.bulk" not in live
    assert "mma.sync.aligned.m16n8k16" in live  # the tensor-core helpers from sm_80
    h200, _, _ = generate(llama_tg, rr_schedule(llama_tg), "h200")
    assert "cp.async.bulk.prefetch.L2.global" in active_text(h200) and "prefetch.global.L2 [" not in active_text(h200)


def _shared_device_code() -> dict[str, str]:
    """The manifest and every device header but the dialects' (mkc/codegen/include/mkc/dialect/)."""
    files = {p.name: p.read_text() for p in Path(TEMPLATE_DIR).glob("*.j2")}
    files.update({name: (INCLUDE_DIR / name).read_text() for name in headers() if not name.startswith("mkc/dialect/")})
    return files


def test_template_holds_no_vendor_spelling():
    """CUDA spellings live in the dialect headers, so every vendor renders the same manifest and headers."""
    files = _shared_device_code()
    assert "kernel.j2" in files and "mkc/common.cuh" in files and "mkc/gemv_mma.cuh" in files
    for name, text in files.items():
        for word in ("asm", "__nanosleep", "__nv_bfloat16", "__launch_bounds__", "__syncthreads", "threadIdx",
                     "blockIdx", "__shfl", "__ldg", "__ldcg", "atomicCAS", "__threadfence", "cuda", "__hip",
                     "__builtin_amdgcn", "__align__", "__attribute__"):
            assert word not in text, (name, word)


def test_manifest_keeps_to_constants_and_includes():
    """Jinja in the manifest prints constants and picks nothing: the device code chooses by if constexpr."""
    text = (Path(TEMPLATE_DIR) / "kernel.j2").read_text()
    tags = re.findall(r"{%-?\s*(\w+)", text)
    assert set(tags) <= {"block", "endblock", "for", "endfor"}, set(tags)
    for name in headers():  # no template syntax left in a header (PTX braces such as "{%0," are not)
        assert not re.search(r"{{\s*\w|{%-?\s+\w", (INCLUDE_DIR / name).read_text()), name


def test_template_is_strict(llama_tg):
    cfg = kernel_config(llama_tg, rr_schedule(llama_tg), get_target("h200"))
    bad = dataclasses.replace(cfg, consts=tuple(kv for kv in cfg.consts if kv[0] != "H"))
    src = render(bad, get_target("h200"))  # a missing constant is a C compile error, not a silent blank
    assert "constexpr int H =" not in src
    import jinja2

    from mkc.codegen.render import _environment

    with pytest.raises(jinja2.UndefinedError):
        _environment().from_string("{{ cfg.nope }}").render(cfg=cfg)


def test_source_depends_on_shapes_not_on_the_schedule(llama_tg):
    a = rr_schedule(llama_tg, "h200", workers=132)
    b = dataclasses.replace(a, queues=tuple(tuple(reversed(q)) for q in a.queues))
    src_a, _, tab_a = generate(llama_tg, a, "h200")
    src_b, _, tab_b = generate(llama_tg, b, "h200")
    assert src_a == src_b
    assert not np.array_equal(tab_a.ints, tab_b.ints)


@pytest.mark.parametrize("sync", ["atomic", "nan"])
@pytest.mark.parametrize("name", TINY)
def test_tables_pack_the_schedule(name, sync):
    tg = taskgraph(name, 3, 64)
    sched = rr_schedule(tg, "h200", sync, workers=7)
    tab = T.build_tables(tg, sched)
    F = {k: i for i, k in enumerate(T.RECORD)}
    assert tab.ints.dtype == np.int32 and tab.header("HDR_N_WORKERS") == 7
    assert tab.header("HDR_N_EVENTS") == len(tg.events) and tab.n_argmax == tg.batch  # one argmax task per row
    seen = []
    for w, q in enumerate(sched.queues):
        for i, tid in enumerate(q):
            rec = tab.record(w, i)
            t = tg.tasks[tid]
            seen.append(tid)
            assert rec[F["T_ID"]] == tid and rec[F["T_LAYER"]] == t.layer
            assert T.TASK_KINDS[rec[F["T_KIND"]]] == t.kind
            assert list(rec[F["T_A0"]: F["T_A0"] + len(t.args)]) == list(t.args)
            waits = tab.wait_entries(w, i)
            assert list(waits[:, 0]) == list(t.waits)
            assert list(waits[:, 1]) == [sched.thresholds[e] for e in t.waits]
            s0 = tab.header("HDR_SIGS") + rec[F["T_SIG_OFF"]]
            assert list(tab.ints[s0: s0 + rec[F["T_N_SIG"]]]) == list(t.signals)
            assert bool(rec[F["T_FLAGS"]] & T.TF_WAIT_LOOP) == (t.kind == "embed")
            assert bool(rec[F["T_FLAGS"]] & T.TF_SIGNAL_LOOP) == (t.kind == "argmax")
            n_rearm = rec[F["T_N_REARM"]]
            if sync == "atomic":
                assert n_rearm == 0
            else:
                assert n_rearm == sum(1 for r in t.writes if r.buffer in tab.double_buffered)
    assert sorted(seen) == list(range(len(tg.tasks)))


@pytest.mark.parametrize("name", TINY)
def test_region_descriptors_address_their_regions(name):
    """Every polled region decodes to exactly the words of its box (caches at pos)."""
    tg = taskgraph(name, 3, 64)
    sched = rr_schedule(tg, "h200", "nan", workers=5)
    tab = T.build_tables(tg, sched)
    bufs = {b.name: b for b in tg.buffers}
    hd = tg.dim("hd")
    at = tab.header("HDR_REGIONS")
    k = 0
    for e in tg.events:
        for r in e.regions:
            desc = tab.ints[at + k * len(T.REGION): at + (k + 1) * len(T.REGION)]
            k += 1
            b = bufs[r.buffer]
            assert T.slot_of(r.buffer) == desc[0]
            for pos in (0, 5, 63) if b.role == "cache" else (None,):
                got = np.sort(region_words(desc, pos or 0, hd))
                want = box_words(r.box, b.shape, b.dtype, pos)
                np.testing.assert_array_equal(got, want)
            assert bool(desc[1] & T.RF_PARITY) == (r.buffer in tab.double_buffered)


def test_split_attention_regions_decode_to_their_boxes():
    """With attention split over the sequence (a 512-position cache), the 3-D partial outputs
    [B, S, nh*hd] and log-sum-exps [B, S, nh] are polled (o-proj's event) and re-armed (each split
    task's writes); every descriptor decodes to exactly its box's words."""
    tg = taskgraph("tiny-qwen3", 3, 512)
    assert tg.dim("attn_split") == 8
    sched = rr_schedule(tg, "h200", "nan", workers=5)
    tab = T.build_tables(tg, sched)
    bufs = {b.name: b for b in tg.buffers}
    at, F = tab.header("HDR_REGIONS"), {f: i for i, f in enumerate(T.RECORD)}
    desc = lambda k: tab.ints[at + k * len(T.REGION): at + (k + 1) * len(T.REGION)]  # noqa: E731
    k, seen3d = 0, 0
    for e in tg.events:
        for r in e.regions:
            b = bufs[r.buffer]
            if b.role != "cache":
                np.testing.assert_array_equal(np.sort(region_words(desc(k), 0, 16)), box_words(r.box, b.shape, b.dtype))
                seen3d += len(b.shape) == 3
            k += 1
    for w, q in enumerate(sched.queues):
        for i, tid in enumerate(q):
            t = tg.tasks[tid]
            if t.kind != "attn":
                continue
            rec = tab.record(w, i)
            writes = [r for r in t.writes if r.buffer in tab.double_buffered]
            assert rec[F["T_N_REARM"]] == len(writes) == 2  # ao and alse, not the cache
            for j, r in enumerate(writes):
                b = bufs[r.buffer]
                got = np.sort(region_words(desc(rec[F["T_REARM_OFF"]] + j), 0, 16))
                np.testing.assert_array_equal(got, box_words(r.box, b.shape, b.dtype))
                seen3d += 1
    assert seen3d > 2 * 3 * 2 * 8


def test_every_buffer_has_a_slot():
    tg = taskgraph("tiny-qwen2", 1, 64)
    slots = {}
    for b in tg.buffers:
        s = T.slot_of(b.name)
        if b.name == "pos":
            assert s is None
            continue
        assert s is not None, b.name
        assert s not in slots, (b.name, slots.get(s))
        slots[s] = b.name
    assert max(slots) < T.n_slots(tg.dim("n_layers"))


@pytest.mark.parametrize("sync", ["atomic", "nan"])
@pytest.mark.parametrize("name,batch,workers", [("tiny-llama", 1, 132), ("tiny-qwen2", 3, 7), ("tiny-qwen3", 2, 31)])
def test_control_flow_model(name, batch, workers, sync):
    """Per-step launches and the one-launch decode loop, workers interleaved at random."""
    tg = taskgraph(name, batch, 64)
    sched = rr_schedule(tg, "h200", sync, workers=workers)
    for seed in range(2):
        m = KernelModel(tg, sched, seed=seed)
        m.launch(1, 0)
        m.launch(1, 1)
        m.launch(9, 2)  # prefill + decode in one launch
        m.launch(2, 11)


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_control_flow_model_with_split_attention(sync):
    """The same with attention split in 4 over the sequence (and its 3-D partial buffers)."""
    tg = taskgraph("tiny-qwen3", 1, 256)
    assert tg.dim("attn_split") == 4
    sched = rr_schedule(tg, "h200", sync, workers=40)
    m = KernelModel(tg, sched, seed=3)
    m.launch(1, 0)
    m.launch(9, 1)
    m.launch(3, 10)
    # a split that reads the positions before pos sees a gap the model left unwritten
    gap = KernelModel(tg, sched, seed=3)
    gap.launch(1, 0)
    with pytest.raises(ModelError, match="at pos 4 before an earlier step wrote it"):
        gap.launch(1, 5)


@pytest.mark.parametrize("sync", ["atomic", "nan"])
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama"])
def test_attention_first_on_its_worker_orders_its_early_loads(name, sync):
    """Attention loads the cache rows before pos before its wait. A split alone on a worker has no
    earlier task of the step to order those loads after the previous step's writers of pos - 1 (with
    q/k norm: the last split; else qkv): its TF_STEP_FIRST wait on the loop counter does, and the
    model catches the race without it."""
    tg = taskgraph(name, 1, 256)
    assert tg.dim("attn_split") > 1
    base = rr_schedule(tg, "h200", sync, workers=40)
    # a non-last split of layer 0 alone on its own worker (the last worker, which rr left short)
    lone = next(t.id for t in tg.tasks if t.kind == "attn" and t.layer == 0 and t.args[2] == 0)
    queues = [tuple(x for x in q if x != lone) for q in base.queues] + [(lone,)]
    sched = dataclasses.replace(base, num_workers=len(queues), queues=tuple(queues)).check(len(tg.tasks))
    F = {k: i for i, k in enumerate(T.RECORD)}
    for seed in range(3):
        m = KernelModel(tg, sched, seed=seed)
        assert m.tab.record(len(queues) - 1, 0)[F["T_FLAGS"]] & T.TF_STEP_FIRST
        m.launch(1, 0)
        m.launch(12, 1)
    caught = 0
    for seed in range(12):
        m = KernelModel(tg, sched, seed=seed)
        m.tab.record(len(queues) - 1, 0)[F["T_FLAGS"]] &= ~T.TF_STEP_FIRST
        try:
            m.launch(12, 0)
        except ModelError as e:
            assert "a load before its wait" in str(e)
            caught += 1
    assert caught > 0


def test_model_catches_a_missing_decode_loop_wait():
    """Without the embed's wait on the previous argmax, the one-launch loop races (the model sees it)."""
    tg = taskgraph("tiny-llama", 1, 64)
    sched = rr_schedule(tg, "h200", "nan", workers=40)
    caught = 0
    for seed in range(6):
        m = KernelModel(tg, sched, seed=seed)
        F = {k: i for i, k in enumerate(T.RECORD)}
        for w, q in enumerate(sched.queues):
            for i, tid in enumerate(q):
                if tg.tasks[tid].kind == "embed":
                    m.tab.record(w, i)[F["T_FLAGS"]] &= ~T.TF_WAIT_LOOP
        try:
            m.launch(6, 0)
        except ModelError:
            caught += 1
    assert caught > 0


def test_model_catches_a_low_threshold():
    tg = taskgraph("tiny-llama", 1, 64)
    sched = rr_schedule(tg, "h200", "atomic", workers=40)
    ev = next(e for e in tg.events if e.triggers > 1)
    low = dataclasses.replace(sched, thresholds=tuple(t - 1 if i == ev.id else t for i, t in enumerate(sched.thresholds)))
    with pytest.raises(ModelError):
        for seed in range(8):
            KernelModel(tg, low, seed=seed).launch(2, 0)


def test_unsupported_shapes_are_refused():
    tg = taskgraph("tiny-llama", 1, 64)
    sched = rr_schedule(tg, "h200", threads=96)
    with pytest.raises(IRCheckError, match="threads per block"):
        kernel_config(tg, sched, get_target("h200"))


def test_options_change_the_source():
    tg = taskgraph("tiny-llama", 1, 64)
    sched = rr_schedule(tg)
    a, _, _ = generate(tg, sched, "h200")
    b, _, _ = generate(tg, sched, "h200", CodegenOptions(spin_hot=17, loads_in_flight=4))
    assert "SPIN_HOT = 64;" in a and "SPIN_HOT = 17;" in b and "constexpr int U = 4;" in b


def test_consumer_regs_makes_the_producer_a_warpgroup():
    """CodegenOptions.consumer_regs: off (0), the kernel has a producer warp; a count, 128 producer
    threads whose registers the consumers take; None (the default), 200 below batch 32 and 216 from
    it where the target can; a clear refusal of counts the block cannot split."""
    from mkc.codegen.render import CONSUMER_REGS_AUTO
    from mkc.errors import IRCheckError

    tg = taskgraph("llama-3.2-1b", 1, 128)
    sched = rr_schedule(tg, "h200", "atomic")
    off, c0, _ = generate(tg, sched, "h200", CodegenOptions(consumer_regs=0))
    on, c1, _ = generate(tg, sched, "h200", CodegenOptions(consumer_regs=232))
    assert c0.threads == c0.consumer_threads + 32 and c1.threads == c1.consumer_threads + 128
    assert "REG_SPLIT = 0;" in off and "REG_SPLIT = 232;" in on and "PRODUCER_REGS = 40;" in on
    assert CONSUMER_REGS_AUTO == ((32, 216), (1, 200))
    dflt, cd, _ = generate(tg, sched, "h200")
    assert "REG_SPLIT = 200;" in dflt and "PRODUCER_REGS = 104;" in dflt and cd.threads == cd.consumer_threads + 128
    tg32 = taskgraph("llama-3.2-1b", 32, 128)
    assert "REG_SPLIT = 216;" in generate(tg32, rr_schedule(tg32, "h200", "atomic"), "h200")[0]
    assert "mk_setmaxnreg_dec<PRODUCER_REGS>();" in on and "mk_setmaxnreg_inc<REG_SPLIT>();" in on
    assert "PRODUCER_REGS = 24;" in generate(tg, sched, "h200", CodegenOptions(consumer_regs=240))[0]  # the least
    for regs, why in ((236, "multiple of 8"), (160, "below the 168")):
        with pytest.raises(IRCheckError, match=why):
            generate(tg, sched, "h200", CodegenOptions(consumer_regs=regs))
    with pytest.raises(IRCheckError, match="producer warpgroup 8 "):
        generate(tg, sched, "h200", CodegenOptions(consumer_regs=248))
    # a target whose arch lacks setmaxnreg (sm_90 without the arch-specific "a") is refused by name
    from dataclasses import replace as dc_replace

    from mkc.backend import for_target
    from mkc.target import get_target

    h200 = get_target("h200")
    assert for_target(h200).capabilities(h200).reg_realloc
    plain = dc_replace(h200, arch="sm_90")
    assert not for_target(plain).capabilities(plain).reg_realloc
    tgp = taskgraph("llama-3.2-1b", 1, 128, plain)
    with pytest.raises(IRCheckError, match="cannot move registers between warpgroups"):
        generate(tgp, rr_schedule(tgp, plain, "atomic"), plain, CodegenOptions(consumer_regs=200))
    src, cfg, _ = generate(tgp, rr_schedule(tgp, plain, "atomic"), plain)  # the default there: a producer warp
    assert "REG_SPLIT = 0;" in src and cfg.threads == cfg.consumer_threads + 32
    # without the weight pipeline (no producer: the A100, or pipe=False) the option does nothing
    tga = taskgraph("llama-3.2-1b", 8, 128, "a100")
    src, cfg, _ = generate(tga, rr_schedule(tga, "a100", "atomic"), "a100", CodegenOptions(consumer_regs=200))
    assert "REG_SPLIT = 0;" in src and cfg.threads == cfg.consumer_threads
    src, cfg, _ = generate(tg, sched, "h200", CodegenOptions(consumer_regs=200, pipe=False))
    assert "REG_SPLIT = 0;" in src and cfg.threads == cfg.consumer_threads



def test_l2_ahead_needs_the_producer_warpgroup():
    """CodegenOptions.l2_ahead: the producer warpgroup's second warp prefetches pages into L2 up to
    that many past the copier (PIPE_L2_AHEAD), off by default; refused by name without the
    warpgroup (a producer warp has no second warp), ignored without the weight pipeline."""
    from mkc.errors import IRCheckError

    tg = taskgraph("llama-3.2-1b", 1, 128)
    sched = rr_schedule(tg, "h200", "atomic")
    dflt = generate(tg, sched, "h200")[0]
    assert "PIPE_L2_AHEAD = 0;" in dflt
    src, cfg, _ = generate(tg, sched, "h200", CodegenOptions(l2_ahead=8))
    assert "PIPE_L2_AHEAD = 8;" in src and cfg.threads == cfg.consumer_threads + 128
    assert "pipe_produce<true>" in src and "cp.async.bulk.prefetch.L2.global" in src
    for bad in (CodegenOptions(l2_ahead=8, consumer_regs=0), CodegenOptions(l2_ahead=-1)):
        with pytest.raises(IRCheckError, match="l2_ahead"):
            generate(tg, sched, "h200", bad)
    src, _, _ = generate(tg, sched, "h200", CodegenOptions(l2_ahead=8, pipe=False))
    assert "PIPE_L2_AHEAD = 0;" in src



def test_epi_tiles_only_on_the_tensor_core_path():
    """CodegenOptions.epi_tiles: EPI_TILES in the kernel only on the tensor-core path with whole
    8-column batch tiles (batch 1 and batch 4 keep their loops); tile_sum_frag the same. And
    mma_hold_floats' constant."""
    tg = taskgraph("llama-3.2-1b", 8, 128)
    src, cfg, _ = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(epi_tiles=True))
    assert cfg.const("EPI_TILES") == 1 and cfg.const("TILE_SUM_FRAG") == 1
    assert generate(tg, rr_schedule(tg, "h200", "atomic"), "h200")[1].const("EPI_TILES") == 0
    for b in (1, 4):
        tgb = taskgraph("llama-3.2-1b", b, 128)
        cb = generate(tgb, rr_schedule(tgb, "h200", "atomic"), "h200", CodegenOptions(epi_tiles=True))[1]
        assert cb.const("EPI_TILES") == 0 and cb.const("TILE_SUM_FRAG") == 0
    # and only with the weight pipeline (not the cp.async ring or registers: measured there, and
    # batch 32's greedy kernel spilled without it)
    assert generate(tg, rr_schedule(tg, "h200", "atomic"), "h200",
                    CodegenOptions(epi_tiles=True, pipe=False))[1].const("EPI_TILES") == 0
    # CodegenOptions.mma_hold_floats: HOLD_FLOATS (16 by default), other counts refused by name
    assert generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(mma_hold_floats=32))[1].const("HOLD_FLOATS") == 32
    with pytest.raises(IRCheckError, match="mma_hold_floats=24"):
        generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(mma_hold_floats=24))


def test_resid_early_on_every_path():
    """CodegenOptions.resid_early: RESID_PF on every path (batch 1's FMA path too), the residual
    values a thread holds: 16-row o-proj / down tasks, 16 x 16 items over 256 threads at batch 16;
    off by default."""
    tg = taskgraph("llama-3.2-1b", 16, 128)
    sched = rr_schedule(tg, "h200", "atomic")
    tg1 = taskgraph("llama-3.2-1b", 1, 128)
    assert generate(tg, sched, "h200", CodegenOptions(resid_early=True))[1].const("RESID_PF") == 1
    assert generate(tg, sched, "h200")[1].const("RESID_PF") == 0
    assert generate(tg1, rr_schedule(tg1, "h200", "atomic"), "h200", CodegenOptions(resid_early=True))[1].const("RESID_PF") == 1


def test_bf16_h_needs_counters_and_the_tensor_cores():
    """lower(h_bf16=True): H_BF16 in the kernel (gate/up stores bf16, down stages it as it is);
    refused by name with NaN sentinels (a 16-bit value is no flag) and on the FMA path."""
    from codegen_fixtures import shape_graph

    from mkc.errors import ScheduleError
    from mkc.taskgraph import lower

    tg = lower(shape_graph("tiny-llama", 8, 64), get_target("h200"), h_bf16=True)
    src, cfg, tables = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200")
    assert cfg.const("H_BF16") == 1 and "if constexpr (XB)" in src
    with pytest.raises(ScheduleError, match=r"keeps h .* in bf16, which needs atomic counters"):
        generate(tg, rr_schedule(tg, "h200", "nan"), "h200")
    with pytest.raises(ScheduleError, match="FMA path"):
        generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(mma=False))
    plain = lower(shape_graph("tiny-llama", 8, 64), get_target("h200"))
    assert generate(plain, rr_schedule(plain, "h200", "atomic"), "h200")[1].const("H_BF16") == 0
    # lower(attn_bf16=True): ATTN_BF16, attention writes bf16 and o-proj stages it as it is
    tga = lower(shape_graph("llama-3.2-1b", 32, 64), get_target("h200"), attn_bf16=True)
    src, cfg, _ = generate(tga, rr_schedule(tga, "h200", "atomic"), "h200")
    assert cfg.const("ATTN_BF16") == 1 and cfg.const("H_BF16") == 0 and cfg.const("ATT_SPLIT") == 1
    with pytest.raises(ScheduleError, match=r"keeps attention's output in bf16"):
        generate(tga, rr_schedule(tga, "h200", "nan"), "h200")
    # lower(xn_bf16=True): XN_BF16, the residual stream's normed bf16 copies; refused as h_bf16 is
    tgx = lower(shape_graph("tiny-llama", 8, 64), get_target("h200"), xn_bf16=True)
    src, cfg, _ = generate(tgx, rr_schedule(tgx, "h200", "atomic"), "h200")
    assert cfg.const("XN_BF16") == 1 and cfg.const("XN_GROUP") == 8 and "xss_total" in src
    assert cfg.const("XSS_WIDE") == 1
    assert generate(tgx, rr_schedule(tgx, "h200", "atomic"), "h200", CodegenOptions(xss_wide=False))[1].const("XSS_WIDE") == 0
    assert generate(plain, rr_schedule(plain, "h200", "atomic"), "h200")[1].const("XSS_WIDE") == 0
    with pytest.raises(ScheduleError, match=r"keeps normed copies of the residual stream in bf16"):
        generate(tgx, rr_schedule(tgx, "h200", "nan"), "h200")
    with pytest.raises(ScheduleError, match="FMA path"):
        generate(tgx, rr_schedule(tgx, "h200", "atomic"), "h200", CodegenOptions(mma=False))
    assert generate(plain, rr_schedule(plain, "h200", "atomic"), "h200")[1].const("XN_BF16") == 0


MMA_PTX = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


@pytest.mark.parametrize("batch,padded", [(32, True), (16, True), (8, False), (4, False), (1, False)])
def test_output_rows_padded_only_where_the_k_chunk_keeps_its_size(batch, padded):
    """plan.OUT_PAD: the output block's rows are B + 2 floats apart by default on the tensor-core path
    where that leaves the K-chunk, pages and ring as they are (llama-3.2-1b batch 16 and 32); at
    batch 8 and 4 the larger block would shrink the K-chunk, so the rows stay B apart; the FMA path
    (batch 1) never pads, and asking it to is an error. The rows per block are the same either way."""
    from mkc.errors import ScheduleError
    from mkc.taskgraph.plan import OUT_PAD, PlanKnobs, device_plan

    tg = taskgraph("llama-3.2-1b", batch, 512, "h200")
    dims = dict(tg.dims)
    plain = device_plan(dims, get_target("h200"), PlanKnobs(out_pad=0))
    assert tg.plan.out_ld == batch + (OUT_PAD if padded else 0)
    assert tg.plan.kcb == plain.kcb and tg.plan.out_cap // tg.plan.out_ld == plain.out_cap // plain.out_ld
    cfg = dict(kernel_config(tg, rr_schedule(tg, "h200"), get_target("h200")).consts)
    assert cfg["OUT_LD"] == tg.plan.out_ld and cfg["RESID_RB"] == plain.out_cap // batch
    if batch == 1:
        with pytest.raises(ScheduleError, match="out_pad"):
            device_plan(dims, get_target("h200"), PlanKnobs(out_pad=2))
    else:
        forced = device_plan(dims, get_target("h200"), PlanKnobs(out_pad=2))
        assert forced.out_ld == batch + 2 and (forced.kcb < plain.kcb) == (not padded)


@pytest.mark.parametrize("target,batch", [("h200", 8), ("h200", 32), ("a100", 8), ("a100", 32), ("h200", 2)])
def test_tensor_core_gemv_from_batch_2(target, batch):
    tg = taskgraph("llama-3.2-1b", batch, 512, target)
    src, cfg, _ = generate(tg, rr_schedule(tg, target), target)
    c = dict(cfg.consts)
    assert cfg.mma_gemv and MMA_PTX in src and "stage_x_bf16<K, NORM && !XB, COMB, false, XB, XLD>" in src
    # bf16 staging rows 64 bytes off 128 (conflict-free 16-byte reads), inside the block's shared memory
    assert c["XST"] == c["KCB"] + 32 and (2 * c["XST"]) % 128 == 64 and c["KCB"] % 64 == 0
    assert c["OFF_OUT"] >= c["OFF_XS"] + 2 * batch * c["XST"]
    assert cfg.smem_needed <= cfg.smem_bytes <= get_target(target).smem_per_block
    assert c["KCB"] >= 1024  # K = hidden (2048) in at most two chunks on both targets


def test_cp_async_weight_ring_up_to_batch_16():
    """Without the weight pipeline (CodegenOptions(pipe=False); past batch 32 by default), B <= 16
    streams MMA weights through a cp.async ring in shared memory; past it, or with ring_stages=0,
    through registers; the ring never costs more than halving K-chunks to 1024."""
    for batch, want in ((2, 3), (8, 3), (16, 3), (32, 0)):
        tg = taskgraph("llama-3.2-1b", batch, 512)
        src, cfg, _ = generate(tg, rr_schedule(tg), "h200", CodegenOptions(pipe=False))
        c = dict(cfg.consts)
        assert cfg.ring == c["RING"] == want
        assert cfg.mma_gemv and "constexpr bool MMA_GEMV = true;" in src and f"constexpr int RING = {want};" in src
        if want:
            ring_bytes = want * 2 * c["U"] * 16 * c["NT"]
            assert c["OFF_RING"] % 16 == 0 and c["OFF_RING"] + ring_bytes <= cfg.smem_needed <= cfg.smem_bytes
            assert c["KCB"] >= 1024
    tg = taskgraph("llama-3.2-1b", 8, 512)
    src, cfg, _ = generate(tg, rr_schedule(tg), "h200", CodegenOptions(ring_stages=0, pipe=False))
    assert cfg.ring == 0 and "constexpr int RING = 0;" in src and "OFF_RING" not in dict(cfg.consts)
    assert "constexpr int OFF_RING = 0;  // not used by this build's GEMV path" in src


def test_quiet_closing_window_by_default_where_it_paid():
    """CodegenOptions.pipe_quiet's default (render.PIPE_QUIET): the producer holds its copies while a
    GEMV task closes only on the tensor-core path with atomic counters at batch 2..PIPE_QUIET_MAX_B
    (where it was measured faster); batch 1, batch 16, nan mode and an explicit 0 keep every copy,
    a negative window is refused."""
    from mkc.errors import ScheduleError
    from mkc.codegen.render import PIPE_QUIET, PIPE_QUIET_MAX_B

    def tail(batch, sync="atomic", **o):
        tg = taskgraph("llama-3.2-1b", batch, 512)
        _, cfg, _ = generate(tg, rr_schedule(tg, "h200", sync), "h200", CodegenOptions(sampler=False, **o))
        return cfg.const("PIPE_TAIL")

    assert PIPE_QUIET == 2 and PIPE_QUIET_MAX_B == 8
    assert tail(8) == tail(4) == tail(2) == PIPE_QUIET
    assert tail(1) == tail(16) == tail(8, "nan") == tail(8, pipe_quiet=0) == 0
    assert tail(1, pipe_quiet=1) == 1 and tail(8, pipe_quiet=99) <= 32  # at most the ring's pages
    with pytest.raises(ScheduleError, match="pipe_quiet=-1"):
        tail(8, pipe_quiet=-1)


def test_batch_1_keeps_the_fma_gemv(llama_tg):
    src, cfg, _ = generate(llama_tg, rr_schedule(llama_tg), "h200")
    assert not cfg.mma_gemv and "constexpr bool MMA_GEMV = false;" in src and "KCB" not in dict(cfg.consts)
    tg = taskgraph("llama-3.2-1b", 8, 512)
    src, cfg, _ = generate(tg, rr_schedule(tg), "h200", CodegenOptions(mma=False))
    assert not cfg.mma_gemv and "constexpr bool MMA_GEMV = false;" in src
    src, cfg, _ = generate(llama_tg, rr_schedule(llama_tg), "h200", CodegenOptions(mma=True))
    assert cfg.mma_gemv and "constexpr bool MMA_GEMV = true;" in src and "stage_x_bf16<K, NORM && !XB, COMB, false, XB, XLD>" in src


def test_amd_keeps_the_fma_gemv():
    from mkc.errors import ScheduleError

    tg = taskgraph("llama-3.2-1b", 8, 512, "mi300x")
    src, cfg, _ = generate(tg, rr_schedule(tg, "mi300x"), "mi300x")
    live = active_text(src)  # gemv_mma.cuh is inside #if MKC_HAS_MMA_BF16, 0 in the HIP dialect
    assert not cfg.mma_gemv and "MMA_GEMV = false;" in src and MMA_PTX not in live and "stage_x_bf16" not in live
    with pytest.raises(ScheduleError, match="no bf16 MMA"):
        generate(tg, rr_schedule(tg, "mi300x"), "mi300x", CodegenOptions(mma=True))


@pytest.mark.parametrize("name,batch", [("llama-3.2-1b", 8), ("llama-3.2-1b", 32), ("qwen3-8b", 8), ("tiny-qwen2", 2)])
def test_tensor_core_weight_pipeline_plan(name, batch):
    """The tensor-core path's weight pipeline (the default from batch 2 to 32): 16-row pages with
    padded rows beside K-chunks of whole pages, every region inside the block's shared memory, the
    producer warp launched on top."""
    from mkc.codegen.render import CodegenOptions, kernel_config
    from mkc.taskgraph.plan import PIPE_MMA_COLS, PIPE_MMA_PAD, PIPE_MMA_ROWS, PIPE_MMA_UNIT

    tg = taskgraph(name, batch, 512)
    h200 = get_target("h200")
    sched = rr_schedule(tg, "h200", "atomic")
    # the default from batch 2 up to 32 (the lowering's plan), and what CodegenOptions(pipe=True) asks for
    for cfg in (kernel_config(tg, sched, h200), kernel_config(tg, sched, h200, CodegenOptions(pipe=True))):
        c = dict(cfg.consts)
        # the producer: a warpgroup whose registers the consumers take (CodegenOptions.consumer_regs)
        assert cfg.mma_gemv and 2 <= c["PIPE_SLOTS"] <= 5 and cfg.threads == cfg.consumer_threads + 128
        assert c["REG_SPLIT"] == (216 if batch >= 32 else 200)
        assert (c["PIPE_ROWS"], c["PIPE_COLS"], c["PIPE_LD"]) == (PIPE_MMA_ROWS, PIPE_MMA_COLS, PIPE_MMA_COLS + PIPE_MMA_PAD)
        assert c["KCB"] % PIPE_MMA_COLS == 0 and c["KCB"] >= PIPE_MMA_COLS and c["RING"] == 0
        assert c["OFF_MBAR"] == c["PIPE_SLOTS"] * PIPE_MMA_ROWS * (PIPE_MMA_COLS + PIPE_MMA_PAD) * 2
        assert cfg.smem_needed <= h200.smem_per_block and c["LEAN_COMB"] == 0
    # pages of 512 columns (PIPE_MMA_UNIT), or the ring without the pipeline
    c = dict(kernel_config(tg, sched, h200, CodegenOptions(pipe=True, pipe_cols=PIPE_MMA_UNIT)).consts)
    assert c["PIPE_COLS"] == PIPE_MMA_UNIT and c["KCB"] % PIPE_MMA_UNIT == 0
    off = kernel_config(tg, sched, h200, CodegenOptions(pipe=False))
    assert dict(off.consts)["PIPE_SLOTS"] == 0 and off.threads == off.consumer_threads


def test_weight_pipeline_refused_where_it_cannot_run():
    from mkc.codegen.render import CodegenOptions, kernel_config
    from mkc.errors import ScheduleError

    tg = taskgraph("tiny-llama", 8, 64, "a100")
    with pytest.raises(ScheduleError, match="bulk asynchronous copies"):
        kernel_config(tg, rr_schedule(tg, "a100", "atomic"), get_target("a100"), CodegenOptions(pipe=True))
    tg = taskgraph("llama-3.2-1b", 8, 64)
    with pytest.raises(ScheduleError, match="multiples of 512 columns"):
        kernel_config(tg, rr_schedule(tg, "h200", "atomic"), get_target("h200"), CodegenOptions(pipe=True, pipe_cols=768))
    # batch 64: past PIPE_MMA_MAX_BATCH the tensor-core path keeps the ring (or registers) by default
    tg = taskgraph("llama-3.2-1b", 64, 64)
    assert dict(kernel_config(tg, rr_schedule(tg, "h200", "atomic"), get_target("h200")).consts)["PIPE_SLOTS"] == 0


def test_lm_rows_at_once_selects_the_tails():
    """CodegenOptions.lm_rows_at_once: the LM-head tiles' candidates with a warp per row from batch 4
    and their histograms several rows per pass; on by default, False gives row after row."""
    tg = taskgraph("tiny-llama", 8, 64)
    off = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(sampler=True, lm_rows_at_once=False))
    on = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(sampler=True, lm_rows_at_once=True))
    assert off[1].const("LM_ROWS_AT_ONCE") == 0 and on[1].const("LM_ROWS_AT_ONCE") == 1
    assert (off[1].const("LM_CAND_WARPS"), on[1].const("LM_CAND_WARPS")) == (0, 1)
    tg2 = taskgraph("tiny-llama", 2, 64)  # below CAND_WARP_ROWS: the block-wide select
    assert generate(tg2, rr_schedule(tg2, "h200", "atomic"), "h200",
                    CodegenOptions(sampler=True, lm_rows_at_once=True))[1].const("LM_CAND_WARPS") == 0
    assert CodegenOptions().lm_rows_at_once is True
    for src in (off[0], on[0]):
        assert "if constexpr (LM_CAND_WARPS) lm_candidates_warps(c, r0, r1, tile);" in src


def test_tile_warp_adds_selects_the_tiles_counting():
    """CodegenOptions.tile_warp_adds: the LM-head tiles' histogram counts one add per distinct bin of
    a warp (the dialect's mk_warp_count: a match on NVIDIA; AMD, without a warp match, adds lane by lane)."""
    tg = taskgraph("tiny-llama", 8, 64)
    on = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(sampler=True))
    off = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(sampler=True, tile_warp_adds=False))
    assert (on[1].const("TILE_WARP_ADDS"), off[1].const("TILE_WARP_ADDS")) == (1, 0)
    assert "__match_any_sync(0xffffffffu, valid ? bin : 0xffffffffu)" in on[0]
    tga = taskgraph("tiny-llama", 8, 64, "mi300x")
    amd = generate(tga, rr_schedule(tga, "mi300x", "atomic"), "mi300x", CodegenOptions(sampler=True))
    assert amd[1].const("TILE_WARP_ADDS") == 0 and "__match_any_sync" not in amd[0]


def test_mma_hold_keeps_the_accumulators_across_chunks():
    """CodegenOptions.mma_hold (None: from batch 16): tensor-core tasks of one block of few tiles keep
    their accumulators across K-chunks (gemv_mma.cuh HOLD_TILES); False sums the partials per chunk."""
    tg = taskgraph("llama-3.2-1b", 32, 64)
    on = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(sampler=False))
    off = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(sampler=False, mma_hold=False))
    assert (on[1].const("MMA_HOLD"), off[1].const("MMA_HOLD")) == (1, 0)
    assert "[[maybe_unused]] constexpr int HOLD_TILES = !MMA_HOLD ? 0 : 4 * NTN >= HOLD_FLOATS ? 1 : HOLD_FLOATS / (4 * NTN);" in on[0]
    assert CodegenOptions().mma_hold is None
    tg8 = taskgraph("llama-3.2-1b", 8, 64)
    assert generate(tg8, rr_schedule(tg8, "h200", "atomic"), "h200", CodegenOptions(sampler=False))[1].const("MMA_HOLD") == 0


def test_stage_poll_makes_the_staging_loads_the_polls():
    """CodegenOptions.stage_poll: in nan mode on the weight-pipeline path a GEMV task's wait skips
    the regions its staging reads (sync.cuh PollSkip) and the staging polls them (batch 1, and the
    tensor-core path but for o-proj); atomic kernels, kernels without the pipeline and
    stage_poll=False keep the wait's polls."""
    tg = taskgraph("llama-3.2-1b", 1, 512)
    on = generate(tg, rr_schedule(tg, "h200", "nan"), "h200", CodegenOptions(sampler=False))
    off = generate(tg, rr_schedule(tg, "h200", "nan"), "h200", CodegenOptions(sampler=False, stage_poll=False))
    atomic = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(sampler=False))
    assert (on[1].const("STAGE_POLL"), off[1].const("STAGE_POLL"), atomic[1].const("STAGE_POLL")) == (1, 0, 0)
    assert on[1].const("LEAN_COMB") == 1  # o-proj's split outputs are staged (and polled) in one pass
    assert "if (skip != nullptr && skip->covers(pr))" in on[0] and "stage_x_polled<K, NORM, PL>" in on[0]
    tg8 = taskgraph("llama-3.2-1b", 8, 64)
    mma = generate(tg8, rr_schedule(tg8, "h200", "nan"), "h200", CodegenOptions(sampler=False))
    assert mma[1].const("STAGE_POLL") == 1 and "constexpr bool POLL = STAGE_POLL && NAN_MODE && !COMB && !XB;" in mma[0]
    ring = generate(tg8, rr_schedule(tg8, "h200", "nan"), "h200", CodegenOptions(sampler=False, pipe=False))
    assert ring[1].const("STAGE_POLL") == 0


def _staged_uncovered(tg) -> dict[tuple[int, str], int]:
    """Per (GEMV task, input it stages whole): the words of it no event the task waits on writes."""
    bufs = {b.name: b for b in tg.buffers}
    out = {}
    for t in tg.tasks:
        if t.kind not in ("qkv", "oproj", "gateup", "down", "lmhead"):
            continue
        for r in t.reads:
            b = bufs[r.buffer]
            if b.role != "act" or tuple(hi - lo for lo, hi in r.box) != tuple(b.shape):
                continue  # not staged whole (a residual tile, read in the epilogue)
            covered = np.zeros(b.shape, dtype=bool)
            for e in t.waits:
                for er in tg.events[e].regions:
                    if er.buffer == r.buffer:
                        covered[tuple(slice(lo, hi) for lo, hi in er.box)] = True
            out[(t.id, r.buffer)] = int((~covered).sum())
    return out


@pytest.mark.parametrize("name,batch", [("llama-3.2-1b", 1), ("llama-3.2-1b", 8), ("qwen3-0.6b", 1), ("tiny-qwen2", 8)])
def test_stage_poll_inputs_are_written_whole_by_the_waited_events(name, batch):
    """What stage_poll relies on (docs/sync.md "The poll is the load"): a GEMV task's staging polls
    every word of the inputs it stages whole (x, or o-proj's split outputs and log-sum-exps), so
    every one of those words must be written in the step by a producer of an event the task waits
    on; a word no waited event writes would hold the sentinel for good."""
    tg = taskgraph(name, batch, 512)
    gaps = _staged_uncovered(tg)
    kinds = {tg.tasks[t].kind for t, _ in gaps}
    assert kinds == {"qkv", "oproj", "gateup", "down", "lmhead"}, kinds
    assert not any(gaps.values()), {k: v for k, v in gaps.items() if v}
    # the check sees a gap: one waited event's region cut by a row of words
    t = next(t for t in tg.tasks if t.kind == "gateup")
    e = tg.events[t.waits[0]]
    (r, *rest) = e.regions
    cut = dataclasses.replace(r, box=(*r.box[:-1], (r.box[-1][0], r.box[-1][1] - 1)))
    events = list(tg.events)
    events[e.id] = dataclasses.replace(e, regions=(cut, *rest))
    assert _staged_uncovered(dataclasses.replace(tg, events=tuple(events)))[(t.id, r.buffer)] == batch


def test_pipe_ksplit_by_kind_and_copies_in_flight():
    """CodegenOptions.pipe_ksplit (batch 1): the chain's kinds (qkv, o-proj, down) split the pages'
    columns by default, each kind picks its consumers and its staged input's layout from its bit
    (kinds.cuh KS_BIT), and the plan has room for their partials; a plan saved without that room
    keeps a row per warp. pipe_inflight: 3 copies at most by default, on both paths, and a cap as
    large as the ring is none."""
    from dataclasses import replace

    from mkc.codegen.render import KSPLIT_BITS, KSPLIT_CHAIN, PIPE_INFLIGHT
    from mkc.errors import ScheduleError
    from mkc.taskgraph.plan import PIPE_KS_FLUSH, PIPE_ROWS

    tg = taskgraph("llama-3.2-1b", 1, 64)
    sched = rr_schedule(tg, "h200", "atomic")
    src, cfg, _ = generate(tg, sched, "h200", CodegenOptions(sampler=False))
    assert KSPLIT_CHAIN == KSPLIT_BITS["qkv"] | KSPLIT_BITS["oproj"] | KSPLIT_BITS["down"] == 11
    assert (cfg.const("PIPE_KSPLIT"), cfg.const("XS_PLANES"), cfg.const("PIPE_INFLIGHT")) == (11, 1, PIPE_INFLIGHT)
    assert PIPE_INFLIGHT == 3
    assert "constexpr bool KS = (PIPE_KSPLIT & Kind::KS_BIT) != 0, PL = XS_PLANES && !KS;" in src
    assert "static constexpr int KS_BIT = LD == I ? 8 : 2;" in src  # down, else o-proj
    part = next(n for name, _, n in tg.plan.regions if name == "OFF_PART")
    need = 4 * 2 * PIPE_KS_FLUSH * PIPE_ROWS * (tg.plan.threads // 32)
    assert part >= need and tg.plan.pipe_slots == 11  # the partials cost no page
    # every kind, none, or a saved plan without the room
    assert generate(tg, sched, "h200", CodegenOptions(sampler=False, pipe_ksplit=31))[1].const("PIPE_KSPLIT") == 31
    assert generate(tg, sched, "h200", CodegenOptions(sampler=False, pipe_ksplit=False))[1].const("PIPE_KSPLIT") == 0
    assert generate(tg, sched, "h200", CodegenOptions(sampler=False, pipe_ksplit=True))[1].const("PIPE_KSPLIT") == 31
    with pytest.raises(ScheduleError, match="pipe_ksplit=64: a mask of the GEMV kinds qkv 1, oproj 2"):
        generate(tg, sched, "h200", CodegenOptions(sampler=False, pipe_ksplit=64))
    small = tuple((n, o, 64 if n == "OFF_PART" else b) for n, o, b in tg.plan.regions)
    old = replace(tg, plan=replace(tg.plan, regions=small))
    assert generate(old, sched, "h200", CodegenOptions(sampler=False))[1].const("PIPE_KSPLIT") == 0
    # copies in flight: batch 8 runs the tensor-core pipeline (5 pages)
    tg8 = taskgraph("llama-3.2-1b", 8, 64)
    s8 = rr_schedule(tg8, "h200", "atomic")
    cfg8 = generate(tg8, s8, "h200", CodegenOptions(sampler=False))[1]
    assert (cfg8.const("PIPE_INFLIGHT"), cfg8.const("PIPE_KSPLIT")) == (PIPE_INFLIGHT, 0)
    assert generate(tg8, s8, "h200", CodegenOptions(sampler=False, pipe_inflight=0))[1].const("PIPE_INFLIGHT") == 0
    ring = tg8.plan.pipe_slots
    assert generate(tg8, s8, "h200", CodegenOptions(sampler=False, pipe_inflight=ring))[1].const("PIPE_INFLIGHT") == 0
    assert generate(tg, sched, "h200", CodegenOptions(sampler=False, pipe_inflight=4))[1].const("PIPE_INFLIGHT") == 4


def test_sampler_region_of_a_saved_plan(llama_tg):
    """The argmax task's scratch is the plan's OFF_SAMPLE region: a task graph saved with a larger
    region (the twenty-first and twenty-second sessions' layout, with room after the scratch for
    the filtered sampler's copies, since removed) renders the same kernel; one too small for this
    mkc's sampler is refused by name, asking for a new compile."""
    import dataclasses

    from mkc.errors import IRCheckError

    sched = rr_schedule(llama_tg, "h200", "atomic")
    src, cfg, _ = generate(llama_tg, sched, "h200")
    _, base, size = next(r for r in llama_tg.plan.regions if r[0] == "OFF_SAMPLE")
    assert dict(cfg.consts)["SAMPLE_SMEM"] == size and base + size <= dict(cfg.consts)["OFF_FLAG"]

    def with_region(n):
        regions = tuple((name, o, n if name == "OFF_SAMPLE" else k) for name, o, k in llama_tg.plan.regions)
        return dataclasses.replace(llama_tg, plan=dataclasses.replace(llama_tg.plan, regions=regions))

    wider = with_region(size + 19 * 1024)
    assert generate(wider, rr_schedule(wider, "h200", "atomic"), "h200")[0] == src
    narrower = with_region(size - 16)
    with pytest.raises(IRCheckError, match="saved by another version; compile the model again"):
        generate(narrower, rr_schedule(narrower, "h200", "atomic"), "h200")
