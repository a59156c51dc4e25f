#!/usr/bin/env bash
# A device call for the token end alone: the kernel-run tests of decoding and sampling (failures
# printed as they happen), the sampling costs, and the hand-written peer in the same call.
set -u
source "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
timeout ${MKC_TEST_S:-240} python3 -m pytest ${MKC_TESTS:-tests/test_gpu_tokens.py tests/test_gpu_megakernel.py} -m gpu -q -p no:cacheprovider \
  -p instafail --timeout=120 -rfE > "$OUT/tests.log" 2>&1
echo "tests rc=$?: $(grep -E '[0-9]+ (passed|failed)' "$OUT/tests.log" | tail -n 1 | cut -c1-200)"
grep -E "^\[failed" "$OUT/tests.log" | cut -c1-200 | head -20
timeout 60 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --json "$OUT/tokens.json" > "$OUT/tokens.log" 2>&1
echo "tokens rc=$?"; tail -n 8 "$OUT/tokens.log"
HAZY_PREBUILT_SO=$PWD/.peer/mk_llama.cpython-312-x86_64-linux-gnu.so OUT=$OUT/peer timeout 90 bash .peer/run.sh > "$OUT/peer.log" 2>&1
echo "peer: $(tail -n 1 "$OUT/peer.log")"
