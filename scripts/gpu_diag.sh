#!/usr/bin/env bash
# The first device call of the fourth session: the kernel-run gpu tests with each failure printed as it
# happens (scripts/instafail.py), then the order-dependence checks of the third session's failures.
set -u
source "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
timeout ${MKC_TEST_S:-300} python3 -m pytest tests/test_gpu_megakernel.py tests/test_gpu_tokens.py tests/test_gpu_prefill.py \
  tests/test_gpu_text.py tests/test_gpu_device_functions.py -m gpu -q -p no:cacheprovider -p instafail --timeout=90 -rfE \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$?: $(tail -n 1 "$OUT/tests.log" | cut -c1-200)"
grep -E "^\[(failed|skipped)" "$OUT/tests.log" | cut -c1-160 | head -30
grep -E "Error|error:|assert" "$OUT/tests.log" | sort | uniq -c | sort -rn | head -12 | cut -c1-220
