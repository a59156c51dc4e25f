"""Time to first token on the GPU: mkc's torch prefill + the kernel's first step against one
Hugging Face bf16 forward of the same prompt (the target: within 1.5x), and against the prompt
run token by token in the kernel.

    python3 scripts/gpu_user_bench.py [--prompts 128,2000] [--iters 5] [--out ttft.json]

llama-3.2-1b shape, random bf16 weights, batch 1, max_seq_len 2048 (--max-seq-len). Wall time with
torch.cuda.synchronize, median of --iters after one warm-up:

- hf: ``model(ids, use_cache=True, logits_to_keep=1)`` (what ``generate`` runs for its prefill),
  SDPA attention, the same weights;
- mkc-ttft: ``generate_rows(mk, [prompt], 1, prefill="torch")``: reset, the batched torch forward
  writing the KV cache, then one kernel step, its token back on the host;
- mkc-prefill: the torch forward and cache copy alone;
- mkc-kernel-prefill: ``prefill="kernel"``, the prompt as decode steps in one launch (once).

Runs whether or not the runtime has the kernel's ``Megakernel.decode`` (without it, the greedy
stand-in in mkc/generation.py launches the kernel).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

TARGET_RATIO = 1.5


def _time(fn, iters: int) -> float:
    import torch

    fn()  # warm-up (cuBLAS handles, SDPA kernels, the module's first launch)
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--prompts", default="128,2000", help="prompt lengths, comma separated")
    ap.add_argument("--max-seq-len", type=int, default=2048)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--sync", default="atomic", choices=("atomic", "nan"))
    ap.add_argument("--method", default="list", help="scheduler (list: seconds; cpsat: the default of mkc compile)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args(argv)

    import torch

    from codegen_fixtures import model_info, shape_graph
    from mkc.capture.canonical import build_graph
    from gpu_bench import random_weights
    from mkc.capture.weights import hf_model
    from mkc.generation import generate_rows
    from mkc.prefill import torch_prefill
    from mkc.runtime import Megakernel
    from mkc.schedule import schedule
    from mkc.target import get_target
    from mkc.taskgraph import lower

    lengths = [int(x) for x in a.prompts.split(",") if x.strip()]
    t0 = time.perf_counter()
    w = random_weights(lower(shape_graph(a.model, 1, 64), get_target("h200")))
    hf = hf_model(a.model, torch.bfloat16, device="cuda", weights=w)
    hf.config._attn_implementation = "sdpa"
    # the graph with HF's own RoPE frequencies (llama-3 scaling included), so both compute one model
    rot = hf.model.rotary_emb
    inv = tuple(float(x) for x in rot.inv_freq.float().cpu())
    graph = build_graph(model_info(a.model)[0], 1, a.max_seq_len, inv, float(getattr(rot, "attention_scaling", 1.0)))
    tg = lower(graph, get_target("h200"))
    sched = schedule(tg, "h200", sync=a.sync, method=a.method, time_limit=10.0)
    mk = Megakernel(tg, sched, w)
    print(f"[bench] {a.model} batch 1 max_seq_len {a.max_seq_len} {a.sync}: built in {time.perf_counter() - t0:.1f} s; "
          f"kernel decode: {'yes' if hasattr(mk, 'decode') else 'no (greedy stand-in)'}", flush=True)
    V = tg.dim("V")
    g = torch.Generator(device="cpu").manual_seed(0)
    rows = []
    for P in lengths:
        if P + 1 > a.max_seq_len:
            print(f"[bench] skip P={P}: does not fit max_seq_len {a.max_seq_len}")
            continue
        prompt = torch.randint(0, V, (P,), generator=g).tolist()
        ids = torch.tensor([prompt], device="cuda")

        def hf_prefill():
            with torch.no_grad():
                return hf(ids, use_cache=True, logits_to_keep=1).logits

        t_hf = _time(hf_prefill, a.iters)
        t_ttft = _time(lambda: generate_rows(mk, [prompt], 1, prefill="torch"), a.iters)
        t_pf = _time(lambda: torch_prefill(mk, [prompt], P - 1), a.iters)
        t0 = time.perf_counter()
        first_kernel = generate_rows(mk, [prompt], 1, prefill="kernel")
        t_kernel = 1e3 * (time.perf_counter() - t0)
        first_torch = generate_rows(mk, [prompt], 1, prefill="torch")
        with torch.no_grad():
            hf_first = int(hf_prefill()[0, -1].argmax())
        row = dict(model=a.model, prompt=P, hf_ms=t_hf, mkc_ttft_ms=t_ttft, mkc_prefill_ms=t_pf,
                   mkc_kernel_prefill_ms=t_kernel, ratio=t_ttft / t_hf, target=TARGET_RATIO,
                   ok=t_ttft <= TARGET_RATIO * t_hf, first_token=dict(torch=first_torch[0][0],
                                                                      kernel=first_kernel[0][0], hf=hf_first),
                   kernel_decode=hasattr(mk, "decode"))
        rows.append(row)
        print(f"[bench] P={P:5d}: HF forward {t_hf:8.2f} ms | mkc TTFT {t_ttft:8.2f} ms (torch prefill {t_pf:.2f} ms) "
              f"= {row['ratio']:.2f}x HF (target <= {TARGET_RATIO}x: {'ok' if row['ok'] else 'MISSED'}) | "
              f"kernel prefill {t_kernel:.1f} ms | first token torch/kernel/HF {first_torch[0][0]}/"
              f"{first_kernel[0][0]}/{hf_first}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
