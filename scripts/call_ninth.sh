# The ninth session's device calls (BENCHMARKS.md, "Ninth session"): CALL=2 the GPU tests, the token
# bench, the peer and a per-task trace of llama-3.2-1b b1; CALL=3 mkc bench (torch.compile
# baselines), gpu_bench rows and the peer.
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache and .builds, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [ "${CALL:-2}" = 2 ]; then
  MKC_TEST_S=320 MKC_AB=none MKC_TOKENS_S=70 MKC_TRACE=1 MKC_PACK=1 OUT=$OUT bash scripts/gpu_final.sh
elif [ "${CALL:-2}" = 3 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_BENCH="llama-3.2-1b:1,8" MKC_BENCH_S=260 MKC_PACK=1 MKC_AB_S=150 \
    MKC_AB_MAXSEQ=1024 MKC_AB="128@b1-atomic,b8-atomic,b32-atomic;1024@b1-atomic,q8-b1-atomic" OUT=$OUT bash scripts/gpu_final.sh
fi
# CALL=4 ran CodegenOptions.prefetch_window (gate/up's weights beyond the pipeline's pages into L2 across
# attention; commit c8c4100): slower at every size, and the option and its -winNk variants are gone
if [ "${CALL:-2}" = 4 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_PACK=1 MKC_AB_S=200 \
    MKC_AB="b1-atomic,b1-atomic-win64k,b1-atomic-win128k,b1-atomic-win256k,b1-atomic-win512k,b1-atomic;q8-b1-atomic,q8-b1-atomic-win128k,q8-b1-atomic-win256k,q8-b1-atomic-win512k" OUT=$OUT bash scripts/gpu_final.sh
fi
if [ "${CALL:-2}" = 5 ]; then  # the filtered sampler's functions inline (CodegenOptions.sampler_inline) against out of line
  timeout 80 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --json "$OUT/tokens-a.json" > "$OUT/tokens-a.log" 2>&1
  echo "tokens (out of line) rc=$?"; tail -n 11 "$OUT/tokens-a.log" | head -9
  MKC_TOKENS_OPTIONS='{"sampler_inline": true}' timeout 80 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 \
    --json "$OUT/tokens-b.json" > "$OUT/tokens-b.log" 2>&1
  echo "tokens (inline) rc=$?"; tail -n 11 "$OUT/tokens-b.log" | head -9
  MKC_TESTS=none MKC_AB=none MKC_NO_TOKENS=1 MKC_PACK=1 OUT=$OUT bash scripts/gpu_final.sh
fi
# CALL=6 (not run: no device time was left), after MKC_TEST_OPTIONS={"sampler_inline": true} scripts/prebuild.py --tests
# --only "llama-3.2-1b b1 atomic": the batch-1 kernel with the filtered sampler inline, draw for draw
if [ "${CALL:-2}" = 6 ]; then
  MKC_TEST_OPTIONS='{"sampler_inline": true}' timeout 150 python3 -m pytest tests/test_gpu_tokens.py -k candidate_path_on_a_full_vocabulary -m gpu -q -p no:cacheprovider \
    --timeout=140 -rfE 2>&1 | tail -n 3
fi
