"""The vendor-neutral runtime on the AMD driver, without an AMD GPU: argument packing, buffer plan,
pointer table, uploads, launch arguments and the error slot, through a stand-in for the HIP API
(``FakeHip``) under the real ``HipDriver``.

Nothing here proves the runtime works on AMD hardware (none was available); it proves the host
side hands the kernel what the kernel reads.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from codegen_fixtures import rr_schedule, taskgraph
from mkc.codegen import tables as T
from mkc.errors import KernelError, MkcError
from mkc.codegen.tables import KERNEL_ARGS
from mkc.runtime import Megakernel, decode_fault, plan_buffers, pointer_table
from mkc.targets.amd.driver import Hip, HipDriver, HipError, arg_layout, bf16_bits, pack_args
from mkc.taskgraph import names


class FakeHip:
    """Device memory as host bytes; records launches. ``on_launch(fake, args)`` plays the kernel."""

    def __init__(self, cus: int = 110, blocks_per_cu: int = 1, on_launch=None):
        self.mem: dict[int, bytearray] = {}
        self.next = 0x7F00_0000_0000
        self.cus, self.blocks_per_cu, self.on_launch = cus, blocks_per_cu, on_launch
        self.launches: list[dict] = []
        self.image = None

    def _find(self, addr: int, n: int) -> tuple[bytearray, int]:
        for base, buf in self.mem.items():
            if base <= addr and addr + n <= base + len(buf):
                return buf, addr - base
        raise AssertionError(f"access [{addr:#x}, +{n}) outside every allocation")

    def malloc(self, nbytes):
        a = self.next
        self.mem[a] = bytearray(max(int(nbytes), 4))
        self.next += -(-max(int(nbytes), 4) // 256) * 256 + 256  # a gap: overruns are caught
        return a

    def free(self, a):
        del self.mem[a]

    def htod(self, dst, data):
        b = np.ascontiguousarray(data).tobytes()
        buf, off = self._find(dst, len(b))
        buf[off: off + len(b)] = b

    def dtoh(self, dst, src):
        buf, off = self._find(src, dst.nbytes)
        dst.reshape(-1).view(np.uint8)[:] = np.frombuffer(bytes(buf[off: off + dst.nbytes]), dtype=np.uint8)
        return dst

    def read(self, addr, dtype, count):
        buf, off = self._find(addr, np.dtype(dtype).itemsize * count)
        return np.frombuffer(bytes(buf[off: off + np.dtype(dtype).itemsize * count]), dtype=dtype)

    def memset32(self, dst, value, count):
        self.htod(dst, np.full(count, value, dtype=np.uint32))

    def load_module(self, image):
        self.image = image
        return 1

    def get_function(self, module, name):
        self.kernel_name = name
        return 2

    def multiprocessor_count(self):
        return self.cus

    def max_blocks_per_cu(self, function, threads, smem):
        self.occupancy_query = (threads, smem)
        return self.blocks_per_cu

    def launch(self, function, grid, block, smem, args):
        vals = [struct.unpack_from("<" + ("Q" if k == "ptr" else "i"), args, off)[0]
                for (_, k), (_, off, _) in zip(KERNEL_ARGS, arg_layout(KERNEL_ARGS))]
        rec = dict(zip([n for n, _ in KERNEL_ARGS], vals), grid=grid, block=block, smem=smem, nbytes=len(args))
        self.launches.append(rec)
        if self.on_launch:
            self.on_launch(self, rec)

    def synchronize(self):
        pass


def test_argument_layout_and_packing():
    assert arg_layout(KERNEL_ARGS) == [
        ("tab", 0, 8), ("ptrs", 8, 8), ("fparams", 16, 8), ("ws", 24, 8), ("step0", 32, 4), ("nsteps", 36, 4),
        ("pos0", 40, 4), ("nforced", 44, 4), ("spin_limit", 48, 4), ("trace", 56, 8), ("trace_steps", 64, 4),
        ("trace_tasks", 68, 4)]
    vals = (0x1000, 0x2000, 0x3000, 0x7FFF_FFFF_FFF0, 5, 7, -1, 3, 1 << 24, 0x4000, 8, 99)
    buf = pack_args(vals, KERNEL_ARGS)
    assert len(buf) == 72
    assert struct.unpack("<4Q5i", buf[:52]) == vals[:9]
    assert struct.unpack("<Q2i", buf[56:72]) == vals[9:]
    with pytest.raises(MkcError, match="int32"):
        pack_args((0, 0, 0, 0, 2**31, 0, 0, 0, 0, 0, 0, 0), KERNEL_ARGS)
    with pytest.raises(MkcError, match="12 arguments"):
        pack_args((0, 0), KERNEL_ARGS)


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_buffer_plan_and_pointer_table(sync):
    tg = taskgraph("tiny-qwen2", 2, 64, "mi250x")
    tab = T.build_tables(tg, rr_schedule(tg, "mi250x", sync, workers=9))
    plan = plan_buffers(tg, tab)
    by = {b.name: b for b in plan}
    addrs, at = {}, 0x10000
    for b in plan:
        addrs[b.name] = at
        at += b.copies * b.nbytes + 256
    ptrs = pointer_table(tg, plan, addrs)
    assert ptrs.shape == (T.n_slots(tg.dim("n_layers")), 2) and ptrs.dtype == np.uint64
    for b in tg.buffers:
        slot = T.slot_of(b.name)
        if slot is None or b.name == "ids":
            continue
        d = by[b.name]
        assert d.slot == slot and ptrs[slot, 0] == addrs[b.name], b.name
        if b.name in tab.double_buffered:
            assert d.copies == 2 and ptrs[slot, 1] == addrs[b.name] + d.nbytes
        else:
            assert ptrs[slot, 1] == ptrs[slot, 0]
    assert bool(tab.double_buffered) == (sync == "nan")
    assert by[names.EMBED].dtype == "bf16" and by["k_cache.0"].dtype == "bf16" and by["x0"].dtype == "f32"
    assert ptrs[T.GLOBAL_SLOTS.index("ids"), 0] == addrs["ids"] and by["ids"].shape == (64, 2)
    assert ptrs[T.GLOBAL_SLOTS.index("tokens"), 0] == addrs["tokens"]
    if names.LM_HEAD not in addrs:
        assert ptrs[T.GLOBAL_SLOTS.index("lm_head"), 0] == addrs[names.EMBED]
    used = {s for s in (T.slot_of(b.name) for b in tg.buffers) if s is not None}
    assert all(ptrs[s, 0] != 0 for s in used)


def test_bf16_bits_round_like_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 3
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0 + 2**-8]
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got = bf16_bits(x)
    assert np.array_equal(got[1:], want[1:]) and (got[0] & 0x7F80) == 0x7F80 and (got[0] & 0x7F)
    assert np.array_equal(bf16_bits(torch.from_numpy(x)), want)


def _weights(tg, seed=0):
    rng = np.random.default_rng(seed)
    return {b.name: rng.standard_normal(b.shape).astype(np.float32) * 0.02 for b in tg.buffers if b.role == "weight"}


@pytest.fixture(scope="module")
def tiny():
    tg = taskgraph("tiny-llama", 2, 64, "mi250x")
    return tg, _weights(tg)


@pytest.mark.parametrize("sync", ["atomic", "nan"])
def test_megakernel_uploads_and_launches(tiny, sync):
    tg, w = tiny
    sched = rr_schedule(tg, "mi250x", sync, workers=12)

    def kernel(fake, a):  # argmax writes next token k+1 for every step
        for k in range(a["nsteps"]):
            fake.htod(addr("tokens") + 4 * 2 * k, np.array([100 + k, 200 + k], dtype=np.int32))
            # no row stops before the launch's last step: the argmax tasks clear each step's
            # all-stopped flag, which the host set to 1 (decode.DecodePlan.ctl_head)
            if a["step0"] == 0 and a["nforced"] == 0 and k < a["nsteps"] - 1:
                fake.htod(mk.ctl.ptr + 4 * (mk.ctl_at["CTL_DONE"] + k), np.zeros(1, dtype=np.int32))

    fake = FakeHip(on_launch=kernel)
    mk = Megakernel(tg, sched, w, driver=HipDriver(hip=fake), binary=b"\x7fELF-not-really", spin_limit=1234)

    def addr(name):
        return mk.buffers[name].ptr

    assert fake.image.startswith(b"\x7fELF") and fake.kernel_name == "mkc_megakernel"
    assert fake.occupancy_query == (mk.cfg.threads, mk.cfg.smem_bytes)
    # the schedule table and the pointer table are on the device, byte for byte
    assert np.array_equal(fake.read(mk.table.ptr, np.int32, mk.tables.ints.size), mk.tables.ints)
    assert np.array_equal(fake.read(mk.ptrs.ptr, np.uint64, mk.ptr_table.size), mk.ptr_table.reshape(-1))
    emb = names.EMBED
    assert np.array_equal(fake.read(addr(emb), np.uint16, w[emb].size), bf16_bits(w[emb]).reshape(-1))
    fp = fake.read(mk.fparams.ptr, np.float32, 3)
    assert np.allclose(fp, [tg.const("rms_eps"), tg.const("rope_scaling"), tg.const("attn_scale")])
    # reset: counters zero; nan mode arms every cache word and both copies of polled activations
    assert not fake.read(mk.ws.ptr, np.uint32, mk.tables.ws_words).any()
    kc = mk.plan["k_cache.0"]
    cache = fake.read(addr("k_cache.0"), np.uint32, kc.nbytes // 4)
    x0 = fake.read(addr("x0"), np.uint32, mk.plan["x0"].nbytes * mk.plan["x0"].copies // 4)
    if sync == "nan":
        assert (cache == T.SENTINEL).all() and (x0 == T.SENTINEL).all() and mk.plan["x0"].copies == 2
    else:
        assert not cache.any() and not x0.any()

    logits = mk(np.array([3, 4]), 5)
    a = fake.launches[-1]
    assert (a["tab"], a["ptrs"], a["fparams"], a["ws"]) == (mk.table.ptr, mk.ptrs.ptr, mk.fparams.ptr, mk.ws.ptr)
    assert (a["step0"], a["nsteps"], a["pos0"], a["nforced"], a["spin_limit"]) == (0, 1, 5, 1, 1234)
    assert (a["trace"], a["trace_steps"], a["trace_tasks"]) == (0, 0, 0)  # untraced: a null trace buffer
    assert (a["grid"], a["block"], a["smem"], a["nbytes"]) == (12, mk.cfg.threads, mk.cfg.smem_bytes, 72)
    assert tuple(logits.shape) == (2, tg.dim("V")) and str(logits.dtype) == "torch.float32"
    assert list(fake.read(addr("ids"), np.int32, 2)) == [3, 4] and mk.step == 1

    out = mk.generate(np.array([[1, 2, 3], [4, 5, 6]]), 4)  # one launch: 3 prompt + 3 more steps
    a = fake.launches[-1]
    # through Megakernel.decode: the rows' prompt lengths are in the decode control block, not nforced
    assert (a["step0"], a["nsteps"], a["pos0"], a["nforced"]) == (0, 6, 0, 0)
    assert list(fake.read(addr("ids"), np.int32, 6)) == [1, 4, 2, 5, 3, 6]  # [L, B]: step-major
    assert out.tolist() == [[1, 2, 3, 102, 103, 104, 105], [4, 5, 6, 202, 203, 204, 205]]
    mk.driver.close()
    assert not fake.mem


def test_nan_mode_rearms_the_cache_when_positions_repeat(tiny):
    tg, w = tiny
    fake = FakeHip()
    mk = Megakernel(tg, rr_schedule(tg, "mi250x", "nan", workers=8), w, driver=HipDriver(hip=fake), binary=b"x")
    mk(np.array([1, 1]), 0)
    mk(np.array([1, 1]), 1)
    kc, at = mk.plan["k_cache.1"], mk.buffers["k_cache.1"].ptr
    fake.htod(at, np.zeros(kc.nbytes // 4, dtype=np.uint32))  # "written" by the kernel
    mk(np.array([1, 1]), 1)  # position 1 again: positions >= 1 must hold the sentinel once more
    words = fake.read(at, np.uint32, kc.nbytes // 4).reshape(kc.shape[0], kc.shape[1], kc.shape[2], -1)
    assert not words[:, :, :1].any() and (words[:, :, 1:] == T.SENTINEL).all()


def test_error_slot_raises_a_named_fault(tiny):
    tg, w = tiny
    sched = rr_schedule(tg, "mi250x", "atomic", workers=8)
    task = next(t for t in tg.tasks if t.kind == "attn")
    ev = task.waits[0]

    def timeout(fake, a):
        slot = np.zeros(T.WS_COUNTERS, dtype=np.uint32)
        for k, v in (("WS_ABORT", 1), ("WS_CLAIM", 1), ("WS_WORKER", 5), ("WS_TASK", task.id), ("WS_EVENT", ev),
                     ("WS_SEEN", 2), ("WS_STEP", 0), ("WS_WANT", 3), ("WS_KIND", T.TASK_KINDS.index("attn"))):
            slot[T.WORKSPACE.index(k)] = v
        fake.htod(a["ws"], slot)

    mk = Megakernel(tg, sched, w, driver=HipDriver(hip=FakeHip(on_launch=timeout)), binary=b"x")
    with pytest.raises(KernelError, match=rf"worker 5, task {task.id} \(attn layer {task.layer}\).*counter 2 < 3"):
        mk(np.array([0, 0]), 0)
    with pytest.raises(MkcError, match="faulted earlier"):
        mk(np.array([0, 0]), 1)
    mk.reset()
    assert decode_fault(np.zeros(T.WS_COUNTERS, dtype=np.uint32), tg) is None


def test_refuses_what_cannot_be_resident(tiny):
    tg, w = tiny
    sched = rr_schedule(tg, "mi250x", "nan", workers=20)
    with pytest.raises(MkcError, match="cannot all be resident"):
        Megakernel(tg, sched, w, driver=HipDriver(hip=FakeHip(cus=16)), binary=b"x")
    with pytest.raises(MkcError, match="cannot all be resident"):
        Megakernel(tg, sched, w, driver=HipDriver(hip=FakeHip(blocks_per_cu=0)), binary=b"x")
    with pytest.raises(MkcError, match="missing"):
        Megakernel(tg, sched, {}, driver=HipDriver(hip=FakeHip()), binary=b"x")


def test_without_an_amd_gpu_the_runtime_says_so():
    try:
        Hip()
    except HipError as e:
        assert "no AMD GPU" in str(e) or "libamdhip64" in str(e)
    else:
        pytest.skip("an AMD GPU is visible here")


def test_greedy_steps_run_a_kernel_without_the_sampler_and_sampling_builds_the_other_once(tiny, monkeypatch):
    """Megakernel compiles the greedy kernel (SAMPLER 0) up front, the sampling one on the first
    launch that samples with a filter and the temperature-only one on the first that samples
    without; then each launch takes the kernel its token flags need."""
    from mkc.codegen.render import CodegenOptions
    from mkc.sampling import Sampling

    tg, w = tiny
    sched = rr_schedule(tg, "mi250x", "atomic", workers=12)
    built = []
    monkeypatch.setattr(Megakernel, "_compile", lambda self, src, out_dir="build_dir": built.append(src) or src.encode())
    fake = FakeHip()
    mk = Megakernel(tg, sched, w, driver=HipDriver(hip=fake))
    assert len(built) == 1 and "constexpr int SAMPLER = 0;" in built[0] and mk.sampling_source is None
    greedy_image = fake.image
    mk(np.array([3, 4]), 0)
    assert len(built) == 1 and fake.image == greedy_image  # greedy: nothing else built
    mk(np.array([3, 4]), 1, sampling=Sampling(temperature=0.8, top_p=0.9, seed=1))
    assert len(built) == 2 and "constexpr int SAMPLER = 1;" in built[1] and mk.sampling_source == built[1]
    assert fake.image == built[1].encode()  # loaded, and the same plan: one table for both
    # temperature alone: a third kernel, with the LM-head tiles' Gumbel-max and no filtered sampler
    mk(np.array([3, 4]), 2, sampling=Sampling(temperature=0.5, seed=2))
    assert len(built) == 3 and "constexpr int SAMPLE_FILTER = 0;" in built[2] and "constexpr int SAMPLER = 1;" in built[2]
    assert "constexpr int SAMPLE_FILTER = 1;" in built[1] and fake.image == built[2].encode()
    mk(np.array([3, 4]), 3)
    mk(np.array([3, 4]), 4, sampling=Sampling(temperature=0.7, top_k=5, seed=3))
    mk(np.array([3, 4]), 5, sampling=Sampling(temperature=0.7, seed=3))
    assert len(built) == 3 and len(fake.launches) == 6
    built.clear()
    Megakernel(tg, sched, w, driver=HipDriver(hip=FakeHip())).prepare_sampling()  # mkc run, before it samples
    assert len(built) == 2 and "constexpr int SAMPLER = 1;" in built[1] and "constexpr int SAMPLE_FILTER = 1;" in built[1]
    built.clear()
    Megakernel(tg, sched, w, driver=HipDriver(hip=FakeHip())).prepare_sampling(filtered=False)  # --temperature alone
    assert len(built) == 2 and "constexpr int SAMPLE_FILTER = 0;" in built[1]
    # one kernel for both where asked; a greedy-only build refuses to sample
    built.clear()
    Megakernel(tg, sched, w, driver=HipDriver(hip=FakeHip()), split_sampler=False)
    assert len(built) == 1 and "constexpr int SAMPLER = 1;" in built[0]
    only = Megakernel(tg, sched, w, driver=HipDriver(hip=FakeHip()), options=CodegenOptions(sampler=False))
    with pytest.raises(MkcError, match="without the sampler"):
        only(np.array([3, 4]), 0, sampling=Sampling(temperature=0.8, seed=1))
