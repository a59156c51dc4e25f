# The seventeenth session's device calls (BENCHMARKS.md, "Seventeenth session"), after scripts/prebuild.py
# on the CPU machine (--tests --tokens-bench with MKC_TOKENS_OPTIONS='{"sampler_lean": false}', and the
# variants below) and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer).
# CALL=1: the GPU tests of the megakernel and the sampler on the lean sampler (CodegenOptions.sampler_lean,
# the new default), the sampling cost at batch 1 with it and without it (the kernels as before), the peer.
# CALL=2: greedy steps on the greedy kernels and on the kernels with the sampler, lean and as before
# (-onekernel, -onekernel-fat), the peer.
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [ "${CALL:-1}" = 2 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=280 MKC_AB_MAXSEQ=512 \
  MKC_AB="128@b1-atomic,b1-atomic-onekernel,b1-atomic-onekernel-fat;128@b8-atomic,b8-atomic-onekernel,b8-atomic-onekernel-fat;128@q8-b1-atomic,q8-b1-atomic-onekernel,q8-b1-atomic-onekernel-fat" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
MKC_TESTS="${MKC_TESTS:-tests/test_gpu_megakernel.py tests/test_gpu_tokens.py}" MKC_TEST_S=${MKC_TEST_S:-300} \
MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB=none OUT=$OUT bash scripts/gpu_final.sh
for o in lean fat; do
  if [ $o = fat ]; then export MKC_TOKENS_OPTIONS='{"sampler_lean": false}'; else unset MKC_TOKENS_OPTIONS; fi
  timeout 70 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --json "$OUT/tokens-$o.json" \
    > "$OUT/tokens-$o.log" 2>&1
  echo "tokens ($o) rc=$?"; tail -n 12 "$OUT/tokens-$o.log"
done
HAZY_PREBUILT_SO=$PWD/.peer/mk_llama.cpython-312-x86_64-linux-gnu.so OUT=$OUT/peer timeout 75 bash .peer/run.sh > "$OUT/peer.log" 2>&1
echo "peer: $(tail -n 1 "$OUT/peer.log")"
