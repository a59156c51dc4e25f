"""Wall time and peak RSS of mkc.capture for registry models (each in a fresh process).

    python scripts/measure_capture.py [--batch 1] [--max-seq-len 4096] [model ...]

Defaults to llama-3.2-1b and qwen3-8b. Targets on the 2-core CPU machine: <= 30 s and <= 90 s,
peak RSS < 4 GB. total = importing torch and transformers + capture.
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure_one(model: str, batch: int, max_seq_len: int) -> dict:
    t0 = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    importlib.import_module("transformers")  # counted as import time, not capture time

    from mkc.capture import capture

    t1 = time.perf_counter()
    graph = capture(model, batch, max_seq_len)
    t2 = time.perf_counter()
    return {
        "model": model, "ops": len(graph.ops), "import_s": round(t1 - t0, 2), "capture_s": round(t2 - t1, 2),
        "total_s": round(t2 - t0, 2), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=["llama-3.2-1b", "qwen3-8b"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--max-seq-len", type=int, default=4096)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child mode: one model, JSON out
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.models[0], args.batch, args.max_seq_len)))
        return
    print(f"{'model':<16} {'ops':>5} {'import s':>9} {'capture s':>10} {'total s':>8} {'peak RSS MB':>12}")
    for model in args.models:
        out = subprocess.run([sys.executable, __file__, "--one", "--batch", str(args.batch),
                              "--max-seq-len", str(args.max_seq_len), model],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['model']:<16} {r['ops']:>5} {r['import_s']:>9} {r['capture_s']:>10} {r['total_s']:>8} "
              f"{r['peak_rss_mb']:>12}")


if __name__ == "__main__":
    main()
