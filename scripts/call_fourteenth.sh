# The fourteenth session's device calls (BENCHMARKS.md, "Fourteenth session"), after scripts/prebuild.py
# on the CPU machine and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer):
#   CALL=1  #14's rows of llama-3.2-1b (b1/b8/b32, atomic), each under the list
#           schedule, round robin and cpsat_place, timed in one call; the same five kernels traced
#           (8 steps), with a calibration and the raw stamps per row ($OUT/cal, for
#           scripts/pipe_predict.py); the peer. Everything packed into pack.tgz.
#   CALL=2  the same for qwen3-8b b1 / b8
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [ "${CALL:-1}" = 1 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=200 MKC_AB_MAXSEQ=512 MKC_PEER_S=100 MKC_PACK=1 MKC_CAL_DIR=$OUT/cal \
  MKC_AB="128@b1-atomic,b1-atomic-rr,b1-atomic-place,b8-atomic,b8-atomic-rr,b8-atomic-place;128@b32-atomic,b32-atomic-rr,b32-atomic-place;16@b1-atomic-trace,b8-atomic-trace,b32-atomic-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
fi
if [ "${CALL:-1}" = 2 ]; then  # the same for qwen3-8b b1 / b8, and the peer again
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=240 MKC_AB_MAXSEQ=512 MKC_PEER_S=100 MKC_PACK=1 MKC_CAL_DIR=$OUT/cal \
  MKC_AB="128@q8-b1-atomic,q8-b1-atomic-rr,q8-b1-atomic-place,q8-b8-atomic,q8-b8-atomic-rr,q8-b8-atomic-place;16@q8-b1-atomic-trace,q8-b8-atomic-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
fi
