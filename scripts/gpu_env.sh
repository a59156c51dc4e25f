# Sourced by the device-call scripts (gpu_round.sh, gpu_final.sh): the repository root as the working
# directory, $OUT, the carried wheels (ortools and its pins; no internet there) and the environment.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/mkc-gpu}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD:$PWD/tests PYTHONUNBUFFERED=1 MKC_CACHE_DIR=$PWD/.cache/mkc MKC_SCHED_CACHE=$PWD/.cache/sched
