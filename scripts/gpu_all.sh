#!/usr/bin/env bash
# The one GPU script: build + gpu tests + benchmark in one call on the device machine, short table last.
#   bash scripts/gpu_all.sh                                 # gpu tests, then the default benchmark
#   MKC_BENCH="llama-3.2-1b:1,8,32 qwen3-8b:1,8" bash scripts/gpu_all.sh
#   MKC_SKIP_TESTS=1 MKC_BENCH="qwen3-8b:1,8" bash scripts/gpu_all.sh
# Logs, JSON, markdown and charts go to $OUT (default /tmp/mkc-gpu).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mkc-gpu}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then   # ortools and its pins, carried as wheels (no internet there)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export MKC_CACHE_DIR=${MKC_CACHE_DIR:-$PWD/.cache/mkc}   # cubins prebuilt here by scripts/prebuild.py are reused
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=0
if [ "${MKC_SKIP_TESTS:-0}" != 1 ]; then
  MKC_GPU_BENCH=0 bash scripts/gpu_check.sh > "$OUT/tests.log" 2>&1 || status=$?
  tail -n 3 "$OUT/tests.log"
fi
for spec in ${MKC_BENCH:-llama-3.2-1b:1,8}; do
  model=${spec%%:*}; batches=${spec#*:}
  python3 -m mkc bench "$model" --batch "$batches" --context ${MKC_CONTEXT:-512} --max-seq-len 1024 \
    --iters ${MKC_ITERS:-100} --out "$OUT/bench-$model" 2>&1 | tee "$OUT/bench-$model.log" | grep -v "^|" || status=1
done
echo "== summary =="
[ "${MKC_SKIP_TESTS:-0}" != 1 ] && echo "gpu tests: $(grep -E 'passed|failed' "$OUT/tests.log" | tail -n 1)"
cat "$OUT"/bench-*/bench.md 2>/dev/null
exit $status
