# The sixteenth session's device calls (BENCHMARKS.md, "Sixteenth session"), after scripts/prebuild.py
# on the CPU machine (--tests --tokens-bench with MKC_TOKENS_OPTIONS='{"opaque_tid": false}', and the
# variants below) and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer):
# the GPU tests of the megakernel and of the sampler on the opaque thread index (CodegenOptions.opaque_tid,
# the new default); greedy steps with and without it (-tidkept) on the greedy kernels and on the kernel
# with the filtered sampler (-onekernel); the list schedule crowded onto fewer workers (-crowdN, #14);
# the sampling cost at batch 1 with and without it; the peer.
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [ "${CALL:-1}" = 2 ]; then
  # call 2: #14's five rows under the list schedule and crowded onto 120 workers (-crowd12; b1 also
  # 128 with 4 doubled, -crowd4), on the final kernels (opaque_tid off: SASS identical to main's);
  # mkc bench (torch.compile + CUDA graph) and the peer in the same call
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=280 MKC_AB_MAXSEQ=512 MKC_BENCH="llama-3.2-1b:1,8" MKC_ITERS=30 MKC_BENCH_S=240 \
  MKC_AB="128@b1-atomic,b1-atomic-crowd4,b1-atomic-crowd12,b8-atomic,b8-atomic-crowd12,b32-atomic,b32-atomic-crowd12;128@q8-b1-atomic,q8-b1-atomic-crowd12,q8-b8-atomic,q8-b8-atomic-crowd12" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
MKC_TESTS="${MKC_TESTS:-tests/test_gpu_megakernel.py tests/test_gpu_tokens.py}" MKC_TEST_S=${MKC_TEST_S:-300} \
MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=280 MKC_AB_MAXSEQ=512 \
MKC_AB="${MKC_AB:-128@b1-atomic,b1-atomic-tidkept,b1-atomic-onekernel,b1-atomic-onekernel-tidkept,b1-atomic-crowd4,b1-atomic-crowd12,b1-nan,b1-nan-tidkept;128@b8-atomic,b8-atomic-tidkept,b8-atomic-onekernel,b8-atomic-onekernel-tidkept,b8-atomic-crowd12,b32-atomic,b32-atomic-tidkept;128@q8-b1-atomic,q8-b1-atomic-tidkept,q8-b1-atomic-onekernel,q8-b1-atomic-onekernel-tidkept,q8-b1-atomic-crowd12}" \
OUT=$OUT bash scripts/gpu_final.sh
for o in new kept; do
  if [ $o = kept ]; then export MKC_TOKENS_OPTIONS='{"opaque_tid": false}'; else unset MKC_TOKENS_OPTIONS; fi
  timeout 60 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --json "$OUT/tokens-$o.json" \
    > "$OUT/tokens-$o.log" 2>&1
  echo "tokens ($o) rc=$?"; tail -n 12 "$OUT/tokens-$o.log"
done
HAZY_PREBUILT_SO=$PWD/.peer/mk_llama.cpython-312-x86_64-linux-gnu.so OUT=$OUT/peer timeout 75 bash .peer/run.sh > "$OUT/peer.log" 2>&1
echo "peer: $(tail -n 1 "$OUT/peer.log")"
