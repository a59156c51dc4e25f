# The next device calls (one script under a stable name; each section of BENCHMARKS.md names the
# script it ran, which is in the tree at that section's commits). Prepared in the twenty-first and
# twenty-second sessions, both lent no device: nothing here has run yet.
#
# What they measure:
#   CALL=1: four experiments off by default, CodegenOptions.sampler_copies, token_words_shared and
#           pdraw_early_winner (BENCHMARKS.md, "Twenty-first session") and consumer_regs (the producer
#           as a warpgroup whose registers the consumers take: "Twenty-second session"), each against
#           the default build in one process (bench_tokens.py --ab-options: every case in alternation, the decoded
#           tokens compared); the greedy b1 loop with the token words shared; greedy steps on the
#           kernel with the filtered sampler (-onekernel); the token tests with all four on; the peer.
#   CALL=2: every GPU test with the four options on, before any of them becomes a default.
#   CALL=3: where batch 32 and nan mode lose (#13's largest misses, 54 % and 1.28x atomic): per-task
#           traces of llama-3.2-1b b32 and b1 nan with the per-warp page waits (never traced at b32),
#           and every #13 row beside the peer, most beside their consumer_regs=200 kernel (-rs200).
#
# Before them, on the CPU machine (~10 min on 2 cores), from the repository root:
#   export MKC_CACHE_DIR=$PWD/.cache/mkc MKC_SCHED_CACHE=$PWD/.cache/sched
#   AB=... ALL=...      (as below)
#   MKC_TOKENS_AB="$AB" python scripts/prebuild.py --tokens-bench \
#     --variants b1-atomic,b1-atomic-tokshared,b1-atomic-onekernel,b1-nan,b8-atomic,b32-atomic,q8-b1-atomic,q8-b8-atomic,b1-atomic-rs200,b1-nan-rs200,b8-atomic-rs200,b32-atomic-rs200,b32-atomic-rs232,q8-b1-atomic-rs200,b1-atomic-onekernel-rs200 \
#     --variant-max-seq 1024
#   MKC_TEST_OPTIONS="$ALL" python scripts/prebuild.py --tests --folders
#   mkc compile llama-3.2-1b --batch 32 --max-seq-len 1024 --out .builds/llama-b32
#   mkc compile llama-3.2-1b --batch 1 --sync nan --max-seq-len 1024 --out .builds/llama-b1-nan
#   python scripts/prebuild.py --build-dirs .builds/llama-b32 .builds/llama-b1-nan --trace
#   tar czf out/carry/cache.tgz .cache && tar czf out/carry/builds.tgz .builds
# then `CALL=N bash scripts/call_next.sh` with carry `out/carry`, `.whl`, `.peer`.
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
[ -f out/carry/builds.tgz ] && tar xzf out/carry/builds.tgz  # .builds (mkc run --trace), packed too
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
AB='{"sampler_copies": true};{"token_words_shared": true};{"pdraw_early_winner": true};{"sampler_copies": true, "token_words_shared": true, "pdraw_early_winner": true};{"consumer_regs": 200}'
ALL='{"sampler_copies": true, "token_words_shared": true, "pdraw_early_winner": true, "consumer_regs": 200}'
# everything in $OUT as one file (the peer's library left out)
pack_out() {
  (cd "$OUT" && tar czf /tmp/pack.tgz --exclude=peer-so . && find . -mindepth 1 -maxdepth 1 -exec rm -rf {} + && mv /tmp/pack.tgz pack.tgz)
}
if [ "${CALL:-1}" = 1 ]; then
  IFS=';' read -ra specs <<< "$AB"
  timeout 300 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --ab-options "${specs[@]}" \
    --json "$OUT/tokens-ab.json" > "$OUT/tokens-ab.log" 2>&1
  echo "tokens ab rc=$?"; tail -n 20 "$OUT/tokens-ab.log"
  MKC_TEST_OPTIONS="$ALL" \
  MKC_TESTS="tests/test_gpu_tokens.py" MKC_TEST_S=100 MKC_NO_TOKENS=1 MKC_PEER_S=90 \
  MKC_AB_S=90 MKC_AB_MAXSEQ=1024 MKC_AB="128@b1-atomic,b1-atomic-tokshared,b1-atomic,b1-atomic-tokshared;128@b1-atomic-onekernel,b1-atomic-onekernel-rs200,b1-atomic" \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
if [ "${CALL:-1}" = 2 ]; then
  MKC_TEST_OPTIONS="$ALL" MKC_TEST_S=300 MKC_AB=none MKC_NO_TOKENS=1 MKC_NO_PEER=1 \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
if [ "${CALL:-1}" = 3 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_PEER_S=100 \
  MKC_AB_S=250 MKC_AB_MAXSEQ=1024 MKC_AB="128@b1-atomic,b1-atomic-rs200,b1-nan,b1-nan-rs200,b8-atomic,b8-atomic-rs200,b32-atomic,b32-atomic-rs200,b32-atomic-rs232;1024@b1-atomic;128@q8-b1-atomic,q8-b1-atomic-rs200,q8-b8-atomic" \
  MKC_TRACE="llama-b32 llama-b1-nan" MKC_TRACE_S=55 \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
