# The eleventh session's device calls (BENCHMARKS.md, "Eleventh session"), after scripts/prebuild.py on
# the CPU machine and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer):
#   CALL=1  one argmax task per row: every GPU test, the sampling cost at batch 1 and 8 before
#           (lower(argmax_tasks=1)) and after, the peer
#   CALL=2  the bf16-h test; greedy rows before/after: one argmax task (-amax1), h in bf16 (-hbf16),
#           staging 2 rows per warp (-srb2); per-kind traces at batch 32 and of filtered sampling, the peer
#           (ran at e777675; the -hbf16 and -srb variants were removed with their options after it)
#   CALL=3  mkc bench with both torch.compile baselines (default and max-autotune-no-cudagraphs), the peer
#   CALL=4  the LM-head tiles' candidates with a warp per row: the sampling and text tests, the
#           sampling cost at batch 1 and 8, the peer
#   CALL=5  the same at batch 8 with the tails row after row (CodegenOptions(lm_rows_at_once=False)) and
#           at once, same call; the peer
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tokens_b8() {  # $1: label, then MKC_TOKENS_LOWER for bench_tokens
  MKC_TOKENS_LOWER="$2" timeout 62 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 8 --steps 120 \
    --json "$OUT/tokens-b8-$1.json" > "$OUT/tokens-b8-$1.log" 2>&1
  echo "tokens b8 $1 rc=$?"; grep "decode, " "$OUT/tokens-b8-$1.log"
}
if [ "${CALL:-1}" = 1 ]; then
  MKC_TEST_S=290 MKC_AB=none MKC_TOKENS_S=55 MKC_PEER_S=75 MKC_PACK=1 OUT=$OUT bash scripts/gpu_final.sh
  tokens_b8 per-row '{}'
  tokens_b8 one-task '{"argmax_tasks": 1}'
fi
if [ "${CALL:-1}" = 2 ]; then
  timeout 60 python3 -m pytest tests/test_gpu_megakernel.py -k bf16_h -m gpu -q -p no:cacheprovider --timeout=50 -rfE 2>&1 | tail -n 3
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_PACK=1 MKC_AB_S=150 MKC_PEER_S=75 \
  MKC_AB="128@b8-atomic,b8-atomic-amax1,b8-atomic-hbf16,b8-nan,b8-nan-amax1;128@b32-atomic,b32-atomic-amax1,b32-atomic-hbf16,b32-atomic-srb2,b32-atomic-hbf16-srb2,b16-atomic,b16-atomic-hbf16;128@q8-b8-atomic,q8-b8-atomic-hbf16;16@b32-atomic-trace,b8-atomic-trace-topk50,b8-atomic-amax1-trace-topk50,b1-atomic-trace-topk50" \
  OUT=$OUT bash scripts/gpu_final.sh
  tar xzf "$OUT/pack.tgz" -O ./ab.log 2>/dev/null | grep "^trace" | cut -c1-1500
fi
if [ "${CALL:-1}" = 3 ]; then
  MKC_TESTS=none MKC_AB=none MKC_NO_TOKENS=1 MKC_PEER_S=75 MKC_BENCH="llama-3.2-1b:1,8" MKC_BENCH_ARGS=--autotune \
  MKC_BENCH_S=470 MKC_ITERS=30 OUT=$OUT bash scripts/gpu_final.sh
fi
if [ "${CALL:-1}" = 4 ]; then
  MKC_TESTS="tests/test_gpu_tokens.py tests/test_gpu_text.py" MKC_TEST_S=150 MKC_AB=none MKC_TOKENS_S=55 MKC_PEER_S=75 \
  MKC_PACK=1 OUT=$OUT bash scripts/gpu_final.sh
  tokens_b8 warp-cand '{}'
fi
if [ "${CALL:-1}" = 5 ]; then
  tokens_opts() {  # $1 label, $2 MKC_TOKENS_OPTIONS
    MKC_TOKENS_OPTIONS="$2" timeout 62 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 8 --steps 120 \
      --json "$OUT/tokens-b8-$1.json" > "$OUT/tokens-b8-$1.log" 2>&1
    echo "tokens b8 $1 rc=$?"; grep "decode, " "$OUT/tokens-b8-$1.log"
  }
  tokens_opts row-after-row '{"lm_rows_at_once": false}'
  tokens_opts at-once '{"lm_rows_at_once": true}'  # ran as '{}', the default at 323edbf
  HAZY_PREBUILT_SO=$PWD/.peer/mk_llama.cpython-312-x86_64-linux-gnu.so OUT=$OUT/peer timeout 75 bash .peer/run.sh > "$OUT/peer.log" 2>&1
  echo "peer: $(tail -n 1 "$OUT/peer.log")"
fi
