# The device calls prepared in the twenty-first session for three experiments that are off by
# default, CodegenOptions.sampler_copies, token_words_shared and pdraw_early_winner (BENCHMARKS.md,
# "Twenty-first session"). That session was lent no device: nothing here has run yet. Before it, on
# the CPU machine:
#   export MKC_CACHE_DIR=$PWD/.cache/mkc MKC_SCHED_CACHE=$PWD/.cache/sched
#   MKC_TOKENS_AB="$AB" python scripts/prebuild.py --tokens-bench \
#     --variants b1-atomic,b1-atomic-tokshared,b1-atomic-onekernel --variant-max-seq 1024
#   MKC_TEST_OPTIONS="$ALL" python scripts/prebuild.py --tests --folders
#   tar czf out/carry/cache.tgz .cache      (carry out/carry, .whl, .peer)
# with AB and ALL as below; then `CALL=1 bash scripts/call_twentyfirst.sh`, and CALL=2 (every GPU
# test with the three options on) before any of them becomes a default.
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
AB='{"sampler_copies": true};{"token_words_shared": true};{"pdraw_early_winner": true};{"sampler_copies": true, "token_words_shared": true, "pdraw_early_winner": true}'
ALL='{"sampler_copies": true, "token_words_shared": true, "pdraw_early_winner": true}'
# everything in $OUT as one file (the peer's library left out)
pack_out() {
  (cd "$OUT" && tar czf /tmp/pack.tgz --exclude=peer-so . && find . -mindepth 1 -maxdepth 1 -exec rm -rf {} + && mv /tmp/pack.tgz pack.tgz)
}
# CALL=1: each experiment against the default build, every case in alternation in one process
# (bench_tokens.py --ab-options; the decoded tokens compared too); the greedy b1 loop with and
# without the token words shared, and greedy steps on the kernel with the filtered sampler
# (-onekernel: what its code costs the layers' tasks, the twentieth session's open question); the
# token tests with all three on; the peer.
if [ "${CALL:-1}" = 1 ]; then
  IFS=';' read -ra specs <<< "$AB"
  timeout 260 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --ab-options "${specs[@]}" \
    --json "$OUT/tokens-ab.json" > "$OUT/tokens-ab.log" 2>&1
  echo "tokens ab rc=$?"; tail -n 20 "$OUT/tokens-ab.log"
  MKC_TEST_OPTIONS="$ALL" \
  MKC_TESTS="tests/test_gpu_tokens.py" MKC_TEST_S=120 MKC_NO_TOKENS=1 MKC_PEER_S=90 \
  MKC_AB_S=100 MKC_AB_MAXSEQ=1024 MKC_AB="128@b1-atomic,b1-atomic-tokshared,b1-atomic,b1-atomic-tokshared;128@b1-atomic-onekernel,b1-atomic" \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
# CALL=2: every GPU test with the three options on (the numerics, both sync modes, the loop against
# step-by-step decoding, the named faults), before any of them becomes a default
if [ "${CALL:-1}" = 2 ]; then
  MKC_TEST_OPTIONS="$ALL" MKC_TEST_S=300 MKC_AB=none MKC_NO_TOKENS=1 MKC_NO_PEER=1 \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
