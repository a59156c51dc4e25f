# The thirteenth session's device calls (BENCHMARKS.md, "Thirteenth session"), after scripts/prebuild.py
# on the CPU machine and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer):
#   CALL=1  tests/test_gpu_megakernel.py (both sync modes, the nan kernels with stage_poll); nan mode at
#           batch 1 with the staging loads as the polls (default) and without (-nosp), llama-3.2-1b and
#           qwen3-8b; pipeline pages 10 / 12 at llama-3.2-1b b1 atomic; traces of b1 nan (both) and
#           atomic; the peer
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
