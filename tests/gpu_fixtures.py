"""GPU test support: Hugging Face models with random weights, their mkc graph, and a Megakernel.

The fp32 oracle is the HF model in fp32 holding bf16-representable weights; "HF's own bf16 eager
model" is the same model cast to bf16. Norm weights and biases are randomised too (HF initialises
them to ones / zeros, which would hide bugs in those paths). The graph is written from the config
with HF's own RoPE inverse frequencies and attention scaling, so mkc computes the HF model exactly.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from functools import lru_cache

from codegen_fixtures import MODELS_DIR, model_info, rr_schedule

MAX_SEQ = 128


def cuda_ok() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - any import problem means no GPU tier
        return False


@dataclass
class HF:
    name: str
    m32: object
    m16: object
    info: object
    inv_freq: tuple
    scaling: float
    weights: dict

    @property
    def vocab(self) -> int:
        return self.info.vocab


@lru_cache(maxsize=2)
def hf_models(name: str, seed: int = 0) -> HF:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(MODELS_DIR / name), local_files_only=True)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    with torch.device("cuda"):
        m32 = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float()
    with torch.no_grad():
        for pname, p in m32.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif pname.endswith(".bias"):
                p.copy_(0.05 * torch.randn_like(p))
            p.copy_(p.bfloat16().float())  # the oracle holds exactly the bf16 weights
    m32.eval()
    m16 = copy.deepcopy(m32).to(torch.bfloat16).eval()
    rot = m32.model.rotary_emb
    inv = tuple(float(x) for x in rot.inv_freq.float().cpu())
    info, _ = model_info(name)
    weights = {k: v for k, v in m16.state_dict().items()}
    return HF(name, m32, m16, info, inv, float(getattr(rot, "attention_scaling", 1.0)), weights)


def graph_of(hf: HF, batch: int, max_seq_len: int = MAX_SEQ):
    from mkc.capture.canonical import build_graph

    return build_graph(hf.info, batch, max_seq_len, hf.inv_freq, hf.scaling)


def schedule_for(tg, sync: str, method: str | None = None):
    """The team's scheduler when asked for (``MKC_TEST_SCHEDULER``), else round robin."""
    method = method or os.environ.get("MKC_TEST_SCHEDULER", "round_robin")
    if method == "round_robin":
        return rr_schedule(tg, "h200", sync)
    from mkc.schedule import schedule

    return schedule(tg, "h200", sync=sync, method=method, time_limit=10.0)


def default_lower_kw(batch: int, sync: str, lower_kw: dict | None = None) -> dict:
    """``lower_kw`` over the activations' dtypes ``mkc compile`` picks for the H200 at ``batch`` and
    ``sync`` (bf16 h and attention output, and the normed bf16 copies of the residual stream, where
    they pay; neither h nor the copies with a split down-proj)."""
    from mkc.target import get_target
    from mkc.taskgraph.lower import attn_bf16_pays, h_bf16_pays, xn_bf16_pays

    kw, target = dict(lower_kw or {}), get_target("h200")
    return {"h_bf16": h_bf16_pays(batch, sync, target) and kw.get("down_split", 1) == 1,
            "attn_bf16": attn_bf16_pays(batch, sync, target),
            "xn_bf16": xn_bf16_pays(batch, sync, target) and kw.get("down_split", 1) == 1, **kw}


def megakernel(hf: HF, batch: int, sync: str, lower_kw: dict | None = None, **kw):
    """The megakernel of ``hf`` at ``batch``; ``lower_kw`` goes to the lowering (qkv_cross, attn_split),
    over the activations' dtypes ``mkc compile`` picks (bf16 h and attention output where they pay)."""
    from mkc.runtime import Megakernel
    from mkc.target import get_target
    from mkc.taskgraph import lower

    tg = lower(graph_of(hf, batch), get_target("h200"), **default_lower_kw(batch, sync, lower_kw))
    if "options" not in kw and os.environ.get("MKC_TEST_OPTIONS"):  # CodegenOptions fields as JSON: an experiment's kernels
        from mkc.codegen.render import CodegenOptions

        kw["options"] = CodegenOptions(**json.loads(os.environ["MKC_TEST_OPTIONS"]))
    return Megakernel(tg, schedule_for(tg, sync), hf.weights, **kw)


def rel(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def record(row: dict) -> None:
    """Append a result row for scripts/gpu_check.sh's table."""
    path = os.environ.get("MKC_GPU_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
