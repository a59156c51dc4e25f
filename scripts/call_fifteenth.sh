# The fifteenth session's device call (BENCHMARKS.md, "Fifteenth session"), after scripts/prebuild.py
# on the CPU machine and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer):
# #14's five rows (llama-3.2-1b b1/b8/b32, qwen3-8b b1/b8, atomic), each under the list schedule,
# round robin and cpsat_place, timed over 128 steps from position 0 (mean position 63.5); the
# same five kernels traced over 8 steps from position 60 (mean 63.5: the timed launches' context),
# the raw stamps per row in $OUT/cal (refitted on the CPU machine: scripts/pipe_predict.py); the
# peer. Everything packed into pack.tgz.
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=240 MKC_AB_MAXSEQ=512 MKC_PEER_S=100 MKC_PACK=1 MKC_CAL_DIR=$OUT/cal \
MKC_CAL_FIT=0 MKC_TRACE_POS0=60 \
MKC_AB="128@b1-atomic,b1-atomic-rr,b1-atomic-place,b8-atomic,b8-atomic-rr,b8-atomic-place;128@b32-atomic,b32-atomic-rr,b32-atomic-place;8@b1-atomic-trace,b8-atomic-trace,b32-atomic-trace;128@q8-b1-atomic,q8-b1-atomic-rr,q8-b1-atomic-place,q8-b8-atomic,q8-b8-atomic-rr,q8-b8-atomic-place;8@q8-b1-atomic-trace,q8-b8-atomic-trace" \
OUT=$OUT bash scripts/gpu_final.sh
