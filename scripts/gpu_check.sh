#!/usr/bin/env bash
# On the GPU machine: install carried wheels, run the gpu tests, time the kernel, print a short table last.
#   bash scripts/gpu_check.sh            (logs and the JSON report go to $OUT, default /tmp/mkc-gpu)
#   MKC_GPU_TESTS="-k tiny" bash scripts/gpu_check.sh   (a subset)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mkc-gpu}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
export MKC_CACHE_DIR=${MKC_CACHE_DIR:-$PWD/.cache/mkc}   # cubins built ahead on a CPU machine are reused
export MKC_GPU_REPORT=$OUT/gpu_report.jsonl
export PYTHONUNBUFFERED=1
rm -f "$MKC_GPU_REPORT"
nvidia-smi -L
python3 -m pytest $(ls tests/test_gpu_*.py) -m gpu -q -p no:cacheprovider --timeout=240 -rfE ${MKC_GPU_TESTS:-} 2>&1 \
  | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
if [ "${MKC_GPU_BENCH:-1}" = 1 ]; then
  python3 scripts/gpu_bench.py ${MKC_GPU_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
else
  python3 scripts/gpu_bench.py --no-bench | tee "$OUT/bench.log"
fi
echo "pytest: $(tail -n 1 "$OUT/pytest.log")"
exit "$status"
