# The thirteenth session's device calls (BENCHMARKS.md, "Thirteenth session"), after scripts/prebuild.py
# on the CPU machine and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer):
#   CALL=1  tests/test_gpu_megakernel.py (both sync modes, the nan kernels with stage_poll); nan mode at
#           batch 1 with the staging loads as the polls (default) and without (-nosp), llama-3.2-1b and
#           qwen3-8b; pipeline pages 10 / 12 at llama-3.2-1b b1 atomic; traces of b1 nan (both) and
#           atomic; the peer
#   CALL=2  tests/test_gpu_megakernel.py and the nan cases of tests/test_gpu_tokens.py on the final
#           kernels (stage_poll also on the tensor-core path); nan at batch 8 with and without it
#           (llama-3.2-1b, qwen3-8b), b1 nan with qkv tiles across heads (-cross), b32 nan; greedy
#           steps on the kernel with the filtered sampler inline and out of line (-onekernel,
#           -onekernel-outline)
#   CALL=3  traced top-k 50 steps on the filtered sampler inline and out of line; the sampling cost
#           at batch 1 (bench_tokens); the peer
#   CALL=4  tests/test_gpu_tokens.py and tests/test_gpu_prefill.py; the list schedule against
#           cpsat_place (placement, hops, pages) on #14's rows and split-K down; nan at batch 8 with
#           and without stage_poll again, beside the peer
#   CALL=5  the other GPU test files (checkpoint, device functions, text); mkc bench llama-3.2-1b
#           b1/b8 (torch.compile + CUDA graph beside the one-launch loop); the peer
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
peer() {
  HAZY_PREBUILT_SO=$PWD/.peer/mk_llama.cpython-312-x86_64-linux-gnu.so OUT=$OUT/peer timeout 75 bash .peer/run.sh > "$OUT/peer.log" 2>&1
  echo "peer: $(tail -n 1 "$OUT/peer.log")"
}
if [ "${CALL:-1}" = 1 ]; then
  MKC_TESTS="tests/test_gpu_megakernel.py" MKC_TEST_S=200 MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=200 MKC_AB_MAXSEQ=512 \
  MKC_AB="128@b1-nan,b1-nan-nosp,b1-atomic,b1-atomic-pages10,b1-atomic-pages12;128@q8-b1-nan,q8-b1-nan-nosp;16@b1-nan-trace,b1-nan-nosp-trace,b1-atomic-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  grep "^trace" "$OUT/ab.log" | cut -c1-900
  peer
fi
if [ "${CALL:-1}" = 2 ]; then
  timeout 100 python3 -m pytest tests/test_gpu_tokens.py -k nan -m gpu -q -p no:cacheprovider --timeout=90 -rfE \
    > "$OUT/tests-tokens-nan.log" 2>&1
  echo "tokens nan tests rc=$?: $(tail -n 1 "$OUT/tests-tokens-nan.log" | cut -c1-200)"
  MKC_TESTS="tests/test_gpu_megakernel.py" MKC_TEST_S=150 MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=170 \
  MKC_AB="128@b8-nan,b8-nan-nosp,b8-atomic,b32-nan;128@q8-b8-nan,q8-b8-nan-nosp;128@b1-nan,b1-nan-cross,b1-atomic,b1-atomic-onekernel,b1-atomic-onekernel-outline" \
  OUT=$OUT bash scripts/gpu_final.sh
fi
if [ "${CALL:-1}" = 3 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=150 MKC_AB="16@b1-atomic-trace,b1-atomic-trace-topk50,b1-atomic-trace-topk50-outline" \
  OUT=$OUT bash scripts/gpu_final.sh
  grep "^trace" "$OUT/ab.log" | cut -c1-900
  timeout 70 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --json "$OUT/tokens-b1.json" \
    > "$OUT/tokens-b1.log" 2>&1
  echo "tokens b1 rc=$?"; grep -E "decode, |mk\(ids" "$OUT/tokens-b1.log" | cut -c1-160
  peer
fi
if [ "${CALL:-1}" = 4 ]; then
  MKC_TESTS="tests/test_gpu_tokens.py tests/test_gpu_prefill.py" MKC_TEST_S=120 MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=120 \
  MKC_AB="128@b1-atomic,b1-atomic-place,b1-atomic-dsplit4,b1-atomic-dsplit4-place;128@b8-atomic,b8-atomic-place,b32-atomic,b32-atomic-place;128@q8-b1-atomic,q8-b1-atomic-place,q8-b8-atomic,q8-b8-atomic-place;128@b8-nan,b8-nan-nosp,q8-b8-nan,q8-b8-nan-nosp" \
  OUT=$OUT bash scripts/gpu_final.sh
  peer
fi
if [ "${CALL:-1}" = 5 ]; then
  MKC_TESTS="tests/test_gpu_checkpoint.py tests/test_gpu_device_functions.py tests/test_gpu_text.py" MKC_TEST_S=200 \
  MKC_AB=none MKC_NO_TOKENS=1 MKC_PEER_S=75 MKC_BENCH="llama-3.2-1b:1,8" MKC_BENCH_S=240 MKC_ITERS=30 \
  OUT=$OUT bash scripts/gpu_final.sh
fi
