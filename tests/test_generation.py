"""The host side of generation without a GPU: transformers' argument semantics, left padding, the
return convention, batch buckets, the greedy decode stand-in (on the HIP fake), and the torch
prefill's KV cache against the fp32 reference executor.

``FakeMk`` plays ``Megakernel.decode``'s contract (rows, max_new_tokens, start_pos, eos, sampling,
on_step): each row's k-th new token is (its last fed token + k + 1) % V.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from mkc.errors import MkcError
from mkc.generation import (Sampling, fallback_decode, generate, generate_rows, pick_batch, resolve_args,
                            strip_left_padding)


class FakeMk:
    def __init__(self, B=4, V=1000, L=64, generation_config=None):
        self.B, self.V, self.L = B, V, L
        self.generation_config = generation_config
        self.weights = {}
        self.calls = []

    def decode(self, rows, max_new_tokens, *, start_pos=0, eos_token_id=None, sampling=None, on_step=None):
        self.calls.append(dict(rows=[list(r) for r in rows], max_new_tokens=max_new_tokens, start_pos=start_pos,
                               eos=eos_token_id, sampling=sampling))
        eos = [] if eos_token_id is None else ([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id))
        caps = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(rows)
        out = []
        for r, cap in zip(rows, caps):
            new = []
            for k in range(cap):
                new.append((r[-1] + k + 1) % self.V)
                if new[-1] in eos:
                    break
            out.append(new)
        if on_step:
            on_step(out)
        return out

    def generate(self, input_ids, *args, **kw):  # as Megakernel.generate delegates
        return generate(self, input_ids, *args, **kw)


# ---- transformers' semantics ---------------------------------------------------------------------
def test_defaults_are_transformers_greedy_with_max_length_20():
    a = resolve_args(5)
    assert a.max_new_tokens == 15 and a.sampling.temperature == 0 and a.eos == () and a.pad is None


def test_top_k_50_and_temperature_1_only_apply_with_do_sample():
    greedy = resolve_args(3, max_new_tokens=4, top_k=7, temperature=0.5)
    assert greedy.sampling == Sampling()
    s = resolve_args(3, max_new_tokens=4, do_sample=True, seed=11)
    assert (s.sampling.temperature, s.sampling.top_k, s.sampling.top_p, s.sampling.min_p, s.sampling.seed) == \
        (1.0, 50, 1.0, 0.0, 11)
    s = resolve_args(3, max_new_tokens=4, do_sample=True, temperature=0.7, top_k=0, top_p=0.9, min_p=0.05)
    assert (s.sampling.temperature, s.sampling.top_k, s.sampling.top_p, s.sampling.min_p) == (0.7, 0, 0.9, 0.05)


def test_precedence_arguments_then_generation_config_then_the_model_then_defaults():
    from transformers import GenerationConfig

    model = GenerationConfig(eos_token_id=[7, 8], do_sample=True, temperature=0.6, max_new_tokens=9)
    a = resolve_args(3, model_config=model)
    assert a.eos == (7, 8) and a.pad == 7 and a.sampling.temperature == 0.6 and a.max_new_tokens == 9
    a = resolve_args(3, model_config=model, generation_config=GenerationConfig(do_sample=False, max_new_tokens=2))
    assert a.sampling == Sampling() and a.max_new_tokens == 2 and a.eos == (7, 8)
    a = resolve_args(3, model_config=model, generation_config=GenerationConfig(max_new_tokens=2),
                     max_new_tokens=5, eos_token_id=3, pad_token_id=1)
    assert a.max_new_tokens == 5 and a.eos == (3,) and a.pad == 1
    assert resolve_args(3, model_config=model, eos_token_id=[]).eos == ()  # `--eos-token-id none`
    assert resolve_args(4, max_length=10).max_new_tokens == 6
    assert resolve_args(4, max_length=10, max_new_tokens=3).max_new_tokens == 3  # max_new_tokens wins


@pytest.mark.parametrize("kw, needle", [
    (dict(do_sample=True, temperature=0.0), "temperature > 0"),
    (dict(eos_token_id=[1, 2, 3, 4, 5]), "at most 4"),
    (dict(max_length=3), "max_new_tokens"),
    (dict(do_sample=True, top_p=1.5), "top_p"),
])
def test_bad_generation_arguments_say_what_is_wrong(kw, needle):
    with pytest.raises(MkcError, match=needle):
        resolve_args(3, **kw)


def test_left_padding_is_stripped_and_right_padding_refused():
    ids = [[0, 0, 5, 6], [1, 2, 3, 4]]
    assert strip_left_padding(ids, [[0, 0, 1, 1], [1, 1, 1, 1]]) == [[5, 6], [1, 2, 3, 4]]
    assert strip_left_padding([5, 6]) == [[5, 6]]
    with pytest.raises(MkcError, match="left padding"):
        strip_left_padding(ids, [[1, 1, 0, 0], [1, 1, 1, 1]])
    with pytest.raises(MkcError, match="all zeros"):
        strip_left_padding(ids, [[0, 0, 0, 0], [1, 1, 1, 1]])
    with pytest.raises(MkcError, match="shape"):
        strip_left_padding(ids, [[1, 1]])


def test_generate_returns_prompt_then_new_ids_padded_like_transformers():
    import torch

    mk = FakeMk(B=4)
    ids = torch.tensor([[9, 9, 5, 6], [1, 2, 3, 4]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    out = mk.generate(ids, attention_mask=mask, max_new_tokens=4, eos_token_id=8, pad_token_id=0)
    # row 0 (last token 6) makes 7, 8 = EOS and stops; row 1 (last 4) makes 5, 6, 7, 8
    assert out.dtype == torch.int64 and out.device.type == "cpu"
    assert out.tolist() == [[9, 9, 5, 6, 7, 8, 0, 0], [1, 2, 3, 4, 5, 6, 7, 8]]
    call = mk.calls[-1]
    assert call["rows"] == [[5, 6], [1, 2, 3, 4]] and call["start_pos"] == 0 and call["eos"] == [8]
    assert call["sampling"] == Sampling()


def test_generate_old_form_is_greedy_with_n_new_tokens_and_a_missing_pad_becomes_eos():
    mk = FakeMk(B=2)
    assert mk.generate([[1, 2]], 3).tolist() == [[1, 2, 3, 4, 5]]
    out = mk.generate([[1, 2], [5, 6]], max_new_tokens=3, eos_token_id=4)
    assert out.tolist() == [[1, 2, 3, 4, 4], [5, 6, 7, 8, 9]]  # row 0 stopped at 4 and is padded with 4


def test_generate_uses_the_models_stop_token_and_refuses_unknown_arguments():
    from transformers import GenerationConfig

    mk = FakeMk(B=1, generation_config=GenerationConfig(eos_token_id=4))
    assert mk.generate([[1, 2]], max_new_tokens=5).tolist() == [[1, 2, 3, 4]]
    with pytest.raises(MkcError, match="LEFT-padded"):
        mk.generate([[1, 2], [3]], max_new_tokens=2)
    with pytest.raises(MkcError, match="num_beams"):
        mk.generate([[1, 2]], max_new_tokens=5, num_beams=4)


def test_rows_are_checked_against_the_kernel():
    mk = FakeMk(B=2, V=100, L=16)
    with pytest.raises(MkcError, match="batch 2"):
        mk.generate([[1], [2], [3]], max_new_tokens=2)
    with pytest.raises(MkcError, match=r"outside the vocabulary \[0, 100\)"):
        mk.generate([[1, 100]], max_new_tokens=2)
    with pytest.raises(MkcError, match="max_seq_len 16"):
        mk.generate([[1] * 10], max_new_tokens=8)
    assert mk.generate([[1] * 10], max_new_tokens=7).shape == (1, 17)  # the last token is never fed back


# ---- buckets ------------------------------------------------------------------------------------------
def test_the_smallest_batch_that_holds_the_rows_is_picked():
    assert [pick_batch([1, 2, 4, 8], n) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    with pytest.raises(MkcError, match="largest compiled batch is 8") as e:
        pick_batch([1, 2, 4, 8], 9)
    assert "--batch 1,2,4,8,9" in str(e.value)


def test_buckets_load_each_batch_once_and_pad(tmp_path, monkeypatch):
    import mkc.api as api

    for b in (1, 2, 4):
        (tmp_path / f"b{b}").mkdir()
        (tmp_path / f"b{b}" / "schedule.json").write_text("{}")
    loaded = []

    def fake_load(root, b, weights, device=None):
        loaded.append(b)
        return FakeMk(B=b)

    monkeypatch.setattr(api, "load", fake_load)
    monkeypatch.setattr(api, "build_target", lambda bdir: "h200")  # no GPU here: a backend that runs anywhere
    monkeypatch.setattr(api, "for_target", lambda t: types.SimpleNamespace(check_runtime=lambda device=None: None,
                                                                         torch_device=lambda device=None: None))
    model = api.Buckets(tmp_path, weights={})
    assert model.batches == [1, 2, 4]
    out = model.generate([[1, 2], [3, 4], [5, 6]], max_new_tokens=2)
    assert out.tolist() == [[1, 2, 3, 4], [3, 4, 5, 6], [5, 6, 7, 8]]
    model.generate([[1], [2], [3]], max_new_tokens=1)
    assert loaded == [4] and model.for_rows(1).B == 1 and loaded == [4, 1]
    assert model.decode([[1]], 2) == [[2, 3]]
    with pytest.raises(MkcError, match="largest compiled batch is 4"):
        model.generate([[1]] * 5, max_new_tokens=1)


# ---- the greedy stand-in for Megakernel.decode, on the real runtime over the HIP fake ------------------
@pytest.fixture(scope="module")
def hip_mk_parts():
    from codegen_fixtures import rr_schedule, taskgraph
    from test_hip_runtime import _weights

    tg = taskgraph("tiny-llama", 2, 64, "mi250x")
    return tg, rr_schedule(tg, "mi250x", "atomic", workers=12), _weights(tg)


def _hip_mk(parts, kernel):
    from mkc.runtime import Megakernel
    from mkc.targets.amd.driver import HipDriver
    from test_hip_runtime import FakeHip

    tg, sched, w = parts
    fake = FakeHip(on_launch=lambda f, a: kernel(mk, f, a))
    mk = Megakernel(tg, sched, w, driver=HipDriver(hip=fake), binary=b"\x7fELF-not-really", spin_limit=1234)
    return mk, fake


def test_rows_of_one_length_decode_in_one_launch_and_stop_at_eos(hip_mk_parts):
    def kernel(mk, fake, a):  # step k's argmax: 100 + k in row 0, 200 + k in row 1
        for k in range(a["nsteps"]):
            fake.htod(mk.buffers["tokens"].ptr + 4 * 2 * k, np.array([100 + k, 200 + k], dtype=np.int32))
            # Megakernel.decode's launch (the control block: nforced 0): a row still going clears the
            # step's all-stopped flag, which the host set to 1 (decode.DecodePlan.ctl_head)
            if a["nforced"] == 0 and k < a["nsteps"] - 1:
                fake.htod(mk.ctl.ptr + 4 * (mk.ctl_at["CTL_DONE"] + k), np.zeros(1, dtype=np.int32))

    mk, fake = _hip_mk(hip_mk_parts, kernel)
    # the stand-in on its own (runtimes without Megakernel.decode use it)
    seen = []
    out = fallback_decode(mk, [[1, 2, 3], [4, 5, 6]], 4, eos_token_id=[103], on_step=seen.append)
    a = fake.launches[-1]
    assert (a["step0"], a["nsteps"], a["pos0"], a["nforced"]) == (0, 6, 0, 3)
    assert out == [[102, 103], [202, 203, 204, 205]] and seen == [out]
    # a padding row (one row on batch 2) is fed token 0 and dropped from the result
    assert fallback_decode(mk, [[7, 8]], [2]) == [[101, 102]]
    assert mk.generate([[1, 2, 3], [4, 5, 6]], 4).tolist() == [[1, 2, 3, 102, 103, 104, 105],
                                                               [4, 5, 6, 202, 203, 204, 205]]
    with pytest.raises(MkcError, match="sampling"):
        fallback_decode(mk, [[1]], 2, sampling=Sampling(temperature=0.8))


def test_rows_of_different_lengths_decode_step_by_step(hip_mk_parts):
    fed = []

    def kernel(mk, fake, a):  # the logits' argmax is 10 * (row + 1) + position
        fed.append(fake.read(mk.buffers["ids"].ptr, np.int32, 2).tolist())
        logits = np.zeros((2, mk.V), dtype=np.float32)
        for b in range(2):
            logits[b, 10 * (b + 1) + a["pos0"]] = 1.0
        fake.htod(mk.buffers["logits"].ptr, logits)

    mk, fake = _hip_mk(hip_mk_parts, kernel)
    steps = []
    out = fallback_decode(mk, [[1, 2, 3], [4]], 3, on_step=lambda t: steps.append([list(r) for r in t]))
    # row 0: positions 0..2 are its prompt, new tokens come from positions 2, 3, 4; row 1 from 0, 1, 2
    assert out == [[12, 13, 14], [20, 21, 22]]
    assert [a["nsteps"] for a in fake.launches[-5:]] == [1] * 5 and steps[0] == [[], [20]]
    # each row is fed its prompt, then its own previous token
    assert fed == [[1, 4], [2, 20], [3, 21], [12, 22], [13, 23]]


# ---- prefill -----------------------------------------------------------------------------------------
def test_prefill_is_chosen_by_length_and_device(monkeypatch):
    from mkc import prefill as pf

    mk = FakeMk(B=2)
    rows = [[1] * 40, [2] * 20]
    assert pf.prefill_length(mk, rows, "auto") == 0  # no GPU tensors here
    monkeypatch.setattr(pf, "torch_ready", lambda mk: True)
    assert pf.prefill_length(mk, rows, "auto") == 19
    assert pf.prefill_length(mk, [[1] * 16], "auto") == 0  # 15 positions: cheaper as decode steps
    assert pf.prefill_length(mk, [[1] * 17], "auto") == pf.MIN_TOKENS
    assert pf.prefill_length(mk, [[1] * 5], "torch") == 4
    assert pf.prefill_length(mk, rows, "kernel") == 0
    with pytest.raises(MkcError, match="auto, torch, kernel"):
        pf.prefill_length(mk, rows, "fast")
    monkeypatch.setattr(pf, "torch_ready", lambda mk: False)
    with pytest.raises(MkcError, match="prefill='kernel'"):
        pf.prefill_length(mk, rows, "torch")


def test_after_a_torch_prefill_the_kernel_decodes_the_rest_from_position_m(monkeypatch):
    from mkc import prefill as pf

    mk = FakeMk(B=4)
    done = []
    monkeypatch.setattr(pf, "torch_ready", lambda mk: True)
    monkeypatch.setattr(pf, "torch_prefill", lambda mk, rows, m: done.append((rows, m)))
    rows = [list(range(1, 31)), list(range(1, 21))]
    new = generate_rows(mk, rows, 3)
    assert done == [(rows, 19)]
    assert mk.calls[-1]["start_pos"] == 19 and mk.calls[-1]["rows"] == [rows[0][19:], rows[1][19:]]
    assert new == [[31, 32, 33], [21, 22, 23]]


class _CpuDriver:
    def tensor(self, array, offset, shape):
        return array.reshape(-1)[offset: offset + int(np.prod(shape))].view(tuple(shape))


def _prefill_case(name, B, m):
    import torch

    from codegen_fixtures import shape_graph
    from mkc.taskgraph import lower
    from mkc.target import get_target

    graph = shape_graph(name, B, 32)
    tg = lower(graph, get_target("h200"))
    g = torch.Generator().manual_seed(0)
    weights = {}
    for b in tg.buffers:
        if b.role == "weight":
            scale = 0.1 if len(b.shape) == 1 else 0.05
            base = 1.0 if "norm" in b.name else 0.0
            weights[b.name] = (base + scale * torch.randn(b.shape, generator=g)).bfloat16()
    mk = types.SimpleNamespace(tg=tg, weights=weights, driver=_CpuDriver(),
                               plan={b.name: types.SimpleNamespace(shape=tuple(b.shape)) for b in tg.buffers})
    ids = torch.randint(0, tg.dim("V"), (B, m + 1), generator=g)
    return graph, tg, weights, mk, ids


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3"])  # plain, q/k/v bias, q/k norm
def test_torch_prefill_cache_matches_the_reference_executor(name, one_torch_thread):
    """The batched forward's keys and values (bf16 matmuls, SDPA) against the fp32 reference run
    position by position: within bf16 rounding of the reference."""
    import torch

    from mkc.capture.reference import new_cache, run_step
    from mkc.prefill import forward_kv

    B, m = 2, 12
    graph, tg, weights, mk, ids = _prefill_case(name, B, m)
    ids = ids[:, :m]
    kv = forward_kv(mk, ids)
    cache = new_cache(graph)
    for t in range(m):
        run_step(graph, weights, cache, ids[:, t], t)
    for layer, (k, v) in enumerate(kv):
        for got, ref in ((k, cache[f"k_cache.{layer}"][:, :, :m]), (v, cache[f"v_cache.{layer}"][:, :, :m])):
            assert got.dtype == torch.bfloat16 and got.shape == ref.shape
            rel = float((got.float() - ref).norm() / ref.norm())
            assert rel < 2e-2, f"{name} layer {layer}: relative error {rel:.3e}"


def test_the_return_convention_is_transformers_own(one_torch_thread):
    """A perfect kernel (HF's own greedy, one row at a time) behind mkc's generate gives what HF's
    batched, left-padded generate returns: shape, prompt, stop tokens, pad after a stopped row."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                   bos_token_id=None, eos_token_id=None, pad_token_id=None)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 1.0))

    def greedy(row, n, eos=None):
        ids = torch.tensor([row])
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                              eos_token_id=eos, pad_token_id=63)
        return out[0, len(row):].tolist()

    class HfKernel(FakeMk):
        def decode(self, rows, max_new_tokens, *, start_pos=0, eos_token_id=None, sampling=None, on_step=None):
            return [greedy(r, max_new_tokens, eos_token_id) for r in rows]

    rows = [[5, 9, 11, 3], [7, 2], [13, 1, 4]]
    free = greedy(rows[1], 8)
    eos = next(t for k, t in enumerate(free) if k >= 1 and t not in free[:k])  # row 1 stops early on it
    P = max(map(len, rows))
    ids = torch.tensor([[63] * (P - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (P - len(r)) + [1] * len(r) for r in rows])
    with torch.no_grad():
        ref = hf.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, eos_token_id=eos,
                          pad_token_id=63)
    got = HfKernel(B=4).generate(ids, attention_mask=mask, max_new_tokens=8, eos_token_id=eos, pad_token_id=63)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    assert got.tolist() == ref.tolist()
    assert eos in got[1, P:].tolist() and got[1, -1] == 63  # the case is real: row 1 stopped and is padded


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_the_kernels_next_step_reads_the_torch_prefilled_cache(name, one_torch_thread):
    """The task graph's simulator (each task as the kernel runs it, reading the cache through its
    declared regions) at position m on the torch-prefilled cache gives the reference's logits."""
    import torch

    from mkc.capture.reference import new_cache, run_step
    from mkc.prefill import forward_kv
    from mkc.taskgraph import simulate

    B, m = 2, 10
    graph, tg, weights, mk, ids = _prefill_case(name, B, m)
    caches = {b.name: torch.zeros(b.shape) for b in tg.buffers if b.role == "cache"}
    for layer, (k, v) in enumerate(forward_kv(mk, ids[:, :m])):
        caches[f"k_cache.{layer}"][:, :, :m] = k.float()
        caches[f"v_cache.{layer}"][:, :, :m] = v.float()
    got = simulate.run_step(tg, weights, caches, ids[:, m], m)["logits"]
    ref_cache = new_cache(graph)
    for t in range(m + 1):
        ref = run_step(graph, weights, ref_cache, ids[:, t], t)["logits"]
    rel = float((got - ref).norm() / ref.norm())
    assert rel < 2e-2, f"{name}: logits after the torch prefill, relative error {rel:.3e}"
