#!/usr/bin/env bash
# One device call of this round (2026-12-01): the gpu tests, a per-task trace of llama-3.2-1b batch 1,
# the token end (sampling cost, step-call overhead) and time to first token. Short summary last.
#   bash scripts/gpu_round.sh            (needs .whl, .cache and .builds/llama-b1 carried; output in $OUT)
set -u
source "$(dirname "$0")/gpu_env.sh"
timeout ${MKC_TEST_S:-330} python3 -m pytest $(ls tests/test_gpu_*.py) -m gpu -q -p no:cacheprovider --timeout=150 -rfE \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$?: $(tail -n 1 "$OUT/tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
timeout 60 python3 -m mkc run .builds/llama-b1 --max-new-tokens 24 --trace "$OUT/trace.json" > "$OUT/trace.log" 2>&1
echo "trace rc=$?"; tail -n 12 "$OUT/trace.log"
timeout 90 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1,8 --steps 120 --json "$OUT/tokens.json" \
  > "$OUT/tokens.log" 2>&1
echo "tokens rc=$?"; tail -n 15 "$OUT/tokens.log"
timeout 120 python3 scripts/gpu_user_bench.py --prompts 128,2000 --out "$OUT/ttft.json" > "$OUT/ttft.log" 2>&1
echo "ttft rc=$?"; tail -n 12 "$OUT/ttft.log"
