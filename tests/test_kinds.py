"""The task-kind registry: every registered kind has what each layer needs, and the facts derived
from it (numbering, GEMV and calibrated kinds, loop roles, colours) are the ones the device code and
earlier builds rely on. Lowering stays byte-identical to the positional make_tasks it replaced."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import re
from pathlib import Path

import pytest

from codegen_fixtures import rr_schedule, shape_graph, taskgraph
from mkc.codegen.render import TEMPLATE_DIR, generate
from mkc.schedule.inspect import kind_colors
from mkc.taskgraph import kinds, lower, names
from mkc.taskgraph.kinds import KIND, KINDS, STEP_END, STEP_START, args_of
from mkc.taskgraph.simulate import _Sim
from mkc.target import get_target

LOWERING = importlib.import_module("mkc.taskgraph.lower")  # the module (mkc.taskgraph.lower is the function)


def test_the_device_numbering_is_unchanged():
    # the kernel switches on these numbers: a new kind is appended, never inserted
    assert kinds.TASK_KINDS == ("embed", "qkv", "attn", "oproj", "gateup", "down", "lmhead", "argmax", "downk",
                                "downp", "dsum", "qkvp")
    assert kinds.GEMV_KINDS == ("qkv", "oproj", "gateup", "down", "lmhead", "downk", "downp", "qkvp")
    assert kinds.CALIBRATED_KINDS == ("embed", "qkv", "oproj", "gateup", "down", "lmhead", "argmax", "downk",
                                      "downp", "dsum", "qkvp")
    assert kinds.STEP_START_KINDS == ("embed",) and kinds.STEP_END_KINDS == ("argmax",)
    assert list(kind_colors().values()) == ["#7f7f7f", "#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd",
                                            "#8c564b", "#e377c2", "#c5b0d5", "#8064a2", "#b5a3d0", "#6baed6"]


def test_every_kind_is_complete():
    for k in KINDS:
        assert k.loop_role in (None, STEP_START, STEP_END), k
        assert k.Args._fields is not None and hasattr(k.Args, "_make"), f"{k.name}: Args is not a NamedTuple"
        assert re.fullmatch(r"#[0-9a-f]{6}", k.color), k
        assert callable(getattr(_Sim, f"_{k.name}", None)), f"the CPU simulator has no _{k.name}"
        assert callable(getattr(LOWERING, f"lower_{k.name}", None)), f"lowering has no lower_{k.name}"
        assert k.smem in LOWERING.SMEM_RULES, f"{k.name}: no shared-memory rule {k.smem!r}"
        assert k.gemv == (k.smem == kinds.SMEM_GEMV), f"{k.name}: GEMV kinds and the staged-GEMV smem rule differ"
    assert len({c.color for c in KINDS}) == len(KINDS)


def _device_source(tg, sched) -> str:
    """The rendered kernel, and whatever device files sit beside the template (it may include them)."""
    text, _, _ = generate(tg, sched, "h200")
    for p in sorted(Path(TEMPLATE_DIR).parent.rglob("*")):
        if p.suffix in (".h", ".cuh", ".hpp", ".inc") and p.is_file():
            text += "\n" + p.read_text()
    return text


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-qwen3"])
def test_every_kind_has_a_device_case_and_enum(model):
    tg = taskgraph(model, 1, 64)
    src = _device_source(tg, rr_schedule(tg))
    at = src.index("bool run_task(")
    body = src[at: src.index("\n}\n", at)]
    cases = set(re.findall(r"case K_(\w+)\s*:", body))
    for i, k in enumerate(KINDS):
        assert k.name.upper() in cases, f"run_task has no case K_{k.name.upper()}"
        assert re.search(rf"\bK_{k.name.upper()} = {i}\b", src), f"K_{k.name.upper()} is not {i} in the kernel"


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral"])
def test_lowering_makes_every_kind_with_its_named_args(model):
    from codegen_fixtures import shape_graph
    from mkc.taskgraph import lower

    tg = taskgraph(model, 2, 64)
    split = lower(shape_graph(model, 1, 64), "h200", down_split=2)  # split-K down (batch 1): downk
    # partial products: downp, dsum; qkvp
    psum = lower(shape_graph(model, 2, 64), "h200", h_bf16=True, down_sum=2, xn_bf16=True, attn_split=1, qkv_sum=2)
    assert {t.kind for t in tg.tasks} | {t.kind for t in split.tasks} | {t.kind for t in psum.tasks} == set(kinds.TASK_KINDS)
    for t in tg.tasks + split.tasks + psum.tasks:
        a = args_of(t)
        assert isinstance(a, KIND[t.kind].Args) and tuple(a) == t.args
        assert type(t.args) is tuple and all(type(x) is int for x in t.args)  # plain ints on disk


# sha256 of tasks.json as the positional make_tasks of b53ac3e wrote it for shape_graph(MODEL, B, 4096)
# (for tiny-qwen2/qwen3/mistral on h200 also what `mkc compile MODEL --batch 1,8 --max-seq-len 4096`
# writes; tiny-llama's captured graph has llama3 RoPE scaling, which shape_graph leaves out)
BASELINE_TASKS_SHA256 = {
    "tiny-llama/b1@h200": "3595ab79aea01d102c6c15442504cd86cd03787ac38198f10f1d4e2435ed8bc2",
    "tiny-llama/b8@h200": "abc89694434380de47531b0ac882c33945e4c50cc34ab7684f7230d79eb76f7c",
    "tiny-qwen2/b1@h200": "791a7bab606a5caa0bfa69c1cd056020ef7ed84b2fae5b9153e51cda8f4663c5",
    "tiny-qwen2/b8@h200": "5398d86004ef836f3e953a46254aca4bd15a07c5eecbe99539af25497a5461df",
    "tiny-qwen3/b1@h200": "45b05cefdf08443dc795d81839e4fee58b778f193e3f9cede147e7be9af3d138",
    "tiny-qwen3/b8@h200": "fe7188c6efc0694b119fb7261acac2fc03bc499e43943eb5eed78ec0e1d1c959",
    "tiny-mistral/b1@h200": "9c0b81c928d9d3a838daf8e6fa742a334aeacff4e0b3b8e00c505e85b409b7ff",
    "tiny-mistral/b8@h200": "e6d1ed05ca93c0804c6232a6ac56bd3b5fbd58e31f9716b98abaa8ec95bc8214",
    # attention split 8 ways, 64 KiB of LDS
    "tiny-llama/b3@mi300x": "72348becece171ac55a4a03d3426410d35f7109799184aef8f0ed4c1dd1a2ee4",
    "tiny-qwen3/b3@mi300x": "79b59a1b118e8e211dd77c37eb8741090a4259a4494878dafd1d380de3ed07f0",
}


@pytest.mark.parametrize("key", sorted(BASELINE_TASKS_SHA256))
def test_tasks_json_is_byte_identical_to_the_positional_lowering(key, tmp_path):
    case, target = key.split("@")
    model, batch = case.rsplit("/b", 1)
    tg = lower(shape_graph(model, int(batch), 4096), get_target(target), argmax_tasks=1, attn_split_pos=0)
    assert tg.plan is not None
    # the device plan is the one field b53ac3e's tasks.json did not have; the filtered sampler's
    # candidates (the lm_cand buffer, written by the LM head, read by argmax with the logits) and
    # argmax's rows (b0, b1) came later, and so did the splits that grow with the context (the
    # attn_split_pos dim; 0 leaves it out): without them, and with one argmax task, the graph is
    # b53ac3e's, byte for byte
    sampler = {names.LM_CAND}

    def strip(t):
        reads = tuple(r for r in t.reads if r.buffer not in sampler and not (t.kind == "argmax" and r.buffer == "logits"))
        args = () if t.kind == "argmax" else t.args
        assert t.kind != "argmax" or t.args == (0, tg.batch)
        return dataclasses.replace(t, args=args, reads=reads, writes=tuple(r for r in t.writes if r.buffer not in sampler))

    tg = dataclasses.replace(tg, buffers=tuple(b for b in tg.buffers if b.name not in sampler),
                             tasks=tuple(strip(t) for t in tg.tasks))
    dataclasses.replace(tg, plan=None).save(tmp_path / "tasks.json")
    text = (tmp_path / "tasks.json").read_text().replace(',\n "plan": null\n}', "\n}")
    assert hashlib.sha256(text.encode()).hexdigest() == BASELINE_TASKS_SHA256[key]
