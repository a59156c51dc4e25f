"""`mkc bench`: mkc against PyTorch baselines, in one process, on one GPU.

For each batch size it times (median of CUDA-event timings after warm-up):
  mkc-step   one decode step per kernel launch
  mkc-loop   the one-launch decode loop, per token
  eager      HF transformers eager, static KV cache
  graph      eager captured in a CUDA graph
  compile    torch.compile(model.forward, fullgraph=True) captured in a CUDA graph
  compile-tuned  the same with mode="max-autotune-no-cudagraphs" (``--autotune``: Inductor's
             autotuning takes minutes); "vs torch.compile" is then against the faster of the two
(torch.compile's reduce-overhead mode skips CUDA graphs on HF's StaticCache, so the graph is
captured by hand; this is how ANCHORS.md's numbers were taken.) Before that it measures the
GPU's read bandwidth; "% BW" is the bytes one decode step streams / time / measured bandwidth.

The bytes one step streams (``step_bytes``), the same count for every system:
  weights   every weight buffer once, except an untied embedding table, of which the step reads one
            row per batch row (the gather of the tokens); a tied embedding is read in full anyway, as
            the LM head, and counted once
  KV        keys and values of every layer and batch row at the positions attention reads at the
            timed context: 0 .. context, the new position included
Activations are not counted: a few hidden-size vectors per batch row and layer, far under 1 %.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mkc.errors import MkcError


@dataclass
class Row:
    model: str
    batch: int
    system: str
    ms_per_token: float
    tokens_per_s: float
    pct_bw: float
    speedup_vs_compile: float | None = None


def _cuda_time(fn, iters: int, warmup: int = 10) -> float:
    """Median milliseconds of fn() over iters runs, each bracketed by CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def read_bandwidth(gib: float = 4.0) -> float:
    """Bytes/s of a full read of a tensor far larger than L2 (sum reduction)."""
    import torch

    x = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32, device="cuda")
    ms = _cuda_time(lambda: x.sum(), iters=20, warmup=3)
    del x
    return gib * 2**30 / (ms * 1e-3)


def hf_baselines(model_name: str, batch: int, context: int, max_seq_len: int, iters: int, log,
                 weights: dict, autotune: bool = False) -> dict[str, float]:
    import torch
    from transformers import StaticCache

    from mkc.capture import hf_model

    model = hf_model(model_name, dtype=torch.bfloat16, device="cuda", weights=weights)
    cfg = model.config
    cache = StaticCache(config=cfg, max_cache_len=max_seq_len)
    ids = torch.randint(0, cfg.vocab_size, (batch, 1), device="cuda")
    pos = torch.tensor([context], device="cuda")
    out: dict[str, float] = {}

    def step(fwd):
        return fwd(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True).logits

    with torch.no_grad():
        # fill the cache up to `context` once so attention reads real data
        step(model.forward)
        out["eager"] = _cuda_time(lambda: step(model.forward), iters)
        log(f"  eager           {out['eager']:.3f} ms")
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step(model.forward)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            step(model.forward)
        out["graph"] = _cuda_time(g.replay, iters)
        log(f"  eager+graph     {out['graph']:.3f} ms")
        graphs = []  # keep every captured graph alive until the end
        for key, mode in [("compile", None)] + ([("compile-tuned", "max-autotune-no-cudagraphs")] if autotune else []):
            t0 = time.perf_counter()
            cf = torch.compile(model.forward, fullgraph=True, mode=mode)
            with torch.cuda.stream(s):
                for _ in range(3):
                    step(cf)
            torch.cuda.current_stream().wait_stream(s)
            g2 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g2):
                step(cf)
            graphs.append(g2)
            log(f"  (torch.compile {mode or 'default'} took {time.perf_counter() - t0:.0f} s)")
            out[key] = _cuda_time(g2.replay, iters)
            log(f"  {key + '+graph':<15} {out[key]:.3f} ms")
    del model, cache
    torch.cuda.empty_cache()
    return out


def model_bytes(tg, context: float) -> tuple[int, int]:
    """Weight bytes and KV-cache bytes one decode step streams at ``context`` (the module docstring
    says what counts); a fractional context is the mean over a run of steps."""
    from mkc.capture.graph import DTYPE_BYTES

    size = {b.name: DTYPE_BYTES.get(b.dtype, 4) for b in tg.buffers}
    # the embedding is what the embed tasks read; tied when another task (the LM head) reads it too
    embed = {r.buffer for t in tg.tasks if t.kind == "embed" for r in t.reads}
    others = {r.buffer for t in tg.tasks if t.kind != "embed" for r in t.reads}
    B = dict(tg.dims)["B"]
    weights = 0
    for b in tg.buffers:
        if b.role != "weight":
            continue
        if b.name in embed and b.name not in others:
            weights += B * _numel(b.shape[1:]) * size[b.name]  # one row per batch row
        else:
            weights += _numel(b.shape) * size[b.name]
    kv = 0.0
    for b in tg.buffers:
        if b.role == "cache":  # (batch, kv heads, positions, head_dim) per layer, keys and values
            batch, heads, _, hd = b.shape
            kv += batch * heads * (context + 1) * hd * size[b.name]
    return weights, int(round(kv))


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def mkc_times(model_name: str, batch: int, context: int, max_seq_len: int, target: str, iters: int, log,
              weights: dict, sync: str | None = None) -> dict[str, float]:
    import torch

    import mkc

    mk = mkc.compile(model_name, target=target, batch_size=batch, max_seq_len=max_seq_len, sync=sync,
                     weights=weights)
    V = dict(mk.tg.dims)["V"]
    ids = torch.randint(0, V, (batch,), device="cuda")
    mk.prefill(torch.randint(0, V, (batch, context), device="cuda"))  # fill the cache up to `context`
    out = {"mkc-step": _cuda_time(lambda: mk(ids, context), iters)}
    log(f"  mkc step        {out['mkc-step']:.3f} ms")
    # the one-launch loop: prompt of one token, n steps at positions 0..n-1 (a context near `context` on average)
    n = 2 * context
    prompt = ids.reshape(batch, 1)
    ms = _cuda_time(lambda: mk.generate(prompt, n), max(3, iters // 40), warmup=1)
    out["mkc-loop"] = ms / n
    log(f"  mkc loop        {out['mkc-loop']:.3f} ms/token ({n} tokens in one launch)")
    out["weight_bytes"], out["kv_bytes"] = model_bytes(mk.tg, context)
    del mk
    torch.cuda.empty_cache()
    return out


def bench(model_name: str, batches, target: str, context: int, max_seq_len: int, iters: int, out_dir: Path, log=print,
          autotune: bool = False):
    import torch

    if not torch.cuda.is_available():
        raise MkcError("mkc bench needs a CUDA GPU; none is visible")
    out_dir.mkdir(parents=True, exist_ok=True)
    bw = read_bandwidth()
    log(f"measured read bandwidth: {bw / 1e12:.2f} TB/s on {torch.cuda.get_device_name()}")
    from mkc.capture import load_weights

    weights = load_weights(model_name, torch.bfloat16, device="cuda")  # one draw, shared by every system
    rows: list[Row] = []
    for b in batches:
        log(f"{model_name} batch {b}, context {context}")
        m = mkc_times(model_name, b, context, max_seq_len, target, iters, log, weights)
        h = hf_baselines(model_name, b, context, max_seq_len, iters, log, weights, autotune=autotune)
        moved = m["weight_bytes"] + m["kv_bytes"]
        best = min(h[k] for k in ("compile", "compile-tuned") if k in h)  # the faster torch.compile
        for name, ms in [("mkc-step", m["mkc-step"]), ("mkc-loop", m["mkc-loop"]), *h.items()]:
            rows.append(Row(model_name, b, name, ms, 1e3 * b / ms, 100 * moved / (ms * 1e-3) / bw, best / ms))
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "read_bw_TBps": bw / 1e12,
        "context": context,
        "autotune": autotune,
    }
    (out_dir / "bench.json").write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1))
    md = markdown(rows, meta)
    (out_dir / "bench.md").write_text(md)
    try:
        bar_chart(rows, out_dir / "bench.png")
    except ImportError:
        log("matplotlib missing: no bar chart")
    log(md)
    return rows


def markdown(rows: list[Row], meta: dict) -> str:
    lines = [
        f"{meta['date']}, {meta['gpu']}, torch {meta['torch']}, read BW {meta['read_bw_TBps']:.2f} TB/s, context {meta['context']}",
        "",
        "| model | batch | system | ms/token | tokens/s | % BW | vs the faster torch.compile |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r.model} | {r.batch} | {r.system} | {r.ms_per_token:.3f} | {r.tokens_per_s:.0f} | "
                     f"{r.pct_bw:.1f} | {r.speedup_vs_compile:.2f}x |")
    return "\n".join(lines) + "\n"


def bar_chart(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r.model, r.batch) for r in rows})
    systems = list(dict.fromkeys(r.system for r in rows))
    fig, ax = plt.subplots(figsize=(2 + 2.2 * len(groups), 4))
    w = 0.8 / len(systems)
    for i, s in enumerate(systems):
        ys = [next((r.ms_per_token for r in rows if (r.model, r.batch) == g and r.system == s), 0) for g in groups]
        ax.bar([j + i * w for j in range(len(groups))], ys, w, label=s)
    ax.set_xticks([j + 0.4 - w / 2 for j in range(len(groups))], [f"{m}\nbatch {b}" for m, b in groups])
    ax.set_ylabel("ms / token (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def bench_cli(a) -> int:
    bench(a.model, a.batch, a.target, a.context, a.max_seq_len, a.iters, Path(a.out), autotune=a.autotune)
    return 0
