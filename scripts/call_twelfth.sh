# The twelfth session's device calls (BENCHMARKS.md, "Twelfth session"), after scripts/prebuild.py on
# the CPU machine and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer):
#   CALL=1  every GPU test on the new defaults (lm_rows_at_once: the LM-head tiles' candidates with a
#           warp per row from batch 4; tile_warp_adds: one shared add per distinct bin of a warp;
#           mma_hold: tensor-core accumulators held across K-chunks), greedy rows with and without
#           mma_hold (-nohold), the sampling cost at batch 1 with and without tile_warp_adds, the peer
#   CALL=2  the sampling, text-free token and prefill tests (the new defaults; mma_hold now from batch
#           16), the sampling cost at batch 8 with and without tile_warp_adds; the three schedulers
#           (list, round robin, CP-SAT) on llama-3.2-1b b1/b8/b32, each row's traced list-schedule
#           launch fitted as a calibration (MKC_CAL_DIR); the peer
#   CALL=3  tests/test_gpu_megakernel.py on the final kernels; the three schedulers on qwen3-8b b1/b8
#           with their calibrations; the peer
#   CALL=4  the other GPU test files on the final kernels (checkpoint, device functions, text); per-kind
#           traces of batch-1 greedy, top-k 50 and top-p 0.9 steps (where the filtered cost goes)
#   CALL=5  #13's two long-context rows: llama-3.2-1b and qwen3-8b b1 over positions 0..1023, the peer
#   CALL=6  mkc bench llama-3.2-1b b1/b8 (torch.compile + CUDA graph beside the one-launch loop), the peer
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tokens() {  # $1: batch, $2: label, $3: MKC_TOKENS_OPTIONS
  MKC_TOKENS_OPTIONS="$3" timeout 70 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches $1 --steps 120 \
    --json "$OUT/tokens-b$1-$2.json" > "$OUT/tokens-b$1-$2.log" 2>&1
  echo "tokens b$1 $2 rc=$?"; grep -E "decode, |mk\(ids" "$OUT/tokens-b$1-$2.log" | cut -c1-160
}
peer() {
  HAZY_PREBUILT_SO=$PWD/.peer/mk_llama.cpython-312-x86_64-linux-gnu.so OUT=$OUT/peer timeout 75 bash .peer/run.sh > "$OUT/peer.log" 2>&1
  echo "peer: $(tail -n 1 "$OUT/peer.log")"
}
if [ "${CALL:-1}" = 1 ]; then
  MKC_TEST_S=250 MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=150 \
  MKC_AB="128@b8-atomic,b8-atomic-nohold,b32-atomic,b32-atomic-nohold,q8-b8-atomic,q8-b8-atomic-nohold,b16-atomic,b16-atomic-nohold" \
  OUT=$OUT bash scripts/gpu_final.sh
  tokens 1 warp-adds '{}'
  tokens 1 lane-adds '{"tile_warp_adds": false}'
  peer
fi
if [ "${CALL:-1}" = 2 ]; then
  MKC_TESTS="tests/test_gpu_tokens.py tests/test_gpu_prefill.py" MKC_TEST_S=200 MKC_AB=none MKC_NO_TOKENS=1 MKC_NO_PEER=1 \
    OUT=$OUT bash scripts/gpu_final.sh
  tokens 8 lane-adds '{"tile_warp_adds": false}'
  tokens 8 warp-adds '{}'
  MKC_CAL_DIR=$OUT MKC_TESTS=none MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=100 MKC_AB_MAXSEQ=512 \
  MKC_AB="128@b1-atomic-trace,b1-atomic,b1-atomic-rr,b1-atomic-cpsat;128@b8-atomic-trace,b8-atomic,b8-atomic-rr,b8-atomic-cpsat;128@b32-atomic-trace,b32-atomic,b32-atomic-rr,b32-atomic-cpsat" \
  OUT=$OUT bash scripts/gpu_final.sh
  grep "^trace" "$OUT/ab.log" | cut -c1-700
  peer
fi
if [ "${CALL:-1}" = 3 ]; then
  MKC_TESTS="tests/test_gpu_megakernel.py" MKC_TEST_S=230 MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_CAL_DIR=$OUT MKC_AB_S=150 \
  MKC_AB="128@q8-b1-atomic-trace,q8-b1-atomic,q8-b1-atomic-rr,q8-b1-atomic-cpsat;128@q8-b8-atomic-trace,q8-b8-atomic,q8-b8-atomic-rr,q8-b8-atomic-cpsat" \
  OUT=$OUT bash scripts/gpu_final.sh
  grep "^trace" "$OUT/ab.log" | cut -c1-700
  peer
fi
if [ "${CALL:-1}" = 4 ]; then
  MKC_TESTS="tests/test_gpu_checkpoint.py tests/test_gpu_device_functions.py tests/test_gpu_text.py" MKC_TEST_S=200 \
  MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=120 MKC_AB="16@b1-atomic-trace,b1-atomic-trace-topk50,b1-atomic-trace-topp09" \
  OUT=$OUT bash scripts/gpu_final.sh
  grep "^trace" "$OUT/ab.log" | cut -c1-900
fi
if [ "${CALL:-1}" = 5 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=150 MKC_AB_MAXSEQ=1024 MKC_AB="1024@b1-atomic,q8-b1-atomic" \
  MKC_PEER_S=80 OUT=$OUT bash scripts/gpu_final.sh
fi
if [ "${CALL:-1}" = 6 ]; then
  MKC_TESTS=none MKC_AB=none MKC_NO_TOKENS=1 MKC_PEER_S=75 MKC_BENCH="llama-3.2-1b:1,8" MKC_BENCH_S=300 MKC_ITERS=30 \
  OUT=$OUT bash scripts/gpu_final.sh
fi
