# The twentieth session's device calls (BENCHMARKS.md, "Twentieth session"), after scripts/prebuild.py
# (calls 1-3 measured CodegenOptions.tile_hist, removed after call 3: it did not pay; its code is at 48eb921)
# on the CPU machine and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer, and
# .base: a copy of the base commit's tree whose kernels the same cache holds, for before/after in one call).
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
[ -f out/carry/builds.tgz ] && tar xzf out/carry/builds.tgz  # .builds (mkc run --trace), packed too
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
# everything in $OUT as one file (the device returns a handful of files per call; the peer's library
# is left out)
pack_out() {
  (cd "$OUT" && tar czf /tmp/pack.tgz --exclude=peer-so . && find . -mindepth 1 -maxdepth 1 -exec rm -rf {} + && mv /tmp/pack.tgz pack.tgz)
}
# the base tree's token bench (its python, the shared cubin cache), before the current tree's
base_tokens() {  # [suffix]
  [ -d .base ] || return 0
  (cd .base && PYTHONPATH=/tmp/site:$PWD:$PWD/tests:$PWD/scripts timeout ${MKC_BASE_S:-60} python3 scripts/bench_tokens.py \
     --models llama-3.2-1b --batches 1 --steps 120 --json "$OUT/tokens-base${1:-}.json" > "$OUT/tokens-base${1:-}.log" 2>&1
   echo "base tokens rc=$?"; grep -E "^\| llama" "$OUT/tokens-base${1:-}.log" | head -8)
}
# CALL=1 (#16): the argmax task's partials in one round trip, the candidates' loads in flight, the
# tiles' ranks four threads a slot; the filtered kernel with the K-split off or the sampler out of line;
# base vs now; traces of greedy and top-k with the new marks; the token tests; the peer.
# base_ab VARIANTS STEPS: the base tree's gpu_bench (its python, the shared cubin cache)
base_ab() {
  [ -d .base ] || return 0
  (cd .base && PYTHONPATH=/tmp/site:$PWD:$PWD/tests:$PWD/scripts timeout ${MKC_BASE_AB_S:-60} python3 scripts/gpu_bench.py \
     --variants "$1" --steps $2 --max-seq 1024 --report "$OUT/ab-base.jsonl" > "$OUT/ab-base.log" 2>&1
   echo "base ab rc=$?"; python3 -c "
import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l); print(f\"  base {r['variant']:<21} steps {r.get('steps', '?'):>5} {r['ms_per_token']:8.4f} ms/token regs {r['regs']}\")" "$OUT/ab-base.jsonl")
}
if [ "${CALL:-1}" = 1 ]; then
  base_tokens
  base_ab b1-atomic 128
  MKC_TESTS="tests/test_gpu_tokens.py" MKC_TEST_S=130 MKC_TOKENS_S=110 MKC_NO_PEER=1 \
  MKC_AB_S=130 MKC_AB_MAXSEQ=1024 MKC_AB="128@b1-atomic,b1-atomic-mmapipe,b1-atomic-mmapipe-if0" \
  MKC_FILTER_OPTIONS='{"tile_hist": false};{"pipe_ksplit": 0};{"sampler_inline": false}' \
  MKC_TRACE=1 MKC_TRACE_S=45 MKC_TRACE_RUNS="greedy=;topk=--do-sample --top-k 50" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
# CALL=2 (#16): the first select's candidates held in registers (one L2 round trip for its passes),
# the argmax task's trace marks inside that select; base, now, base again (the drift between runs);
# the token tests; base vs now on the greedy b1 loop. Results packed (one file back).
if [ "${CALL:-1}" = 2 ]; then
  base_tokens 1
  base_ab b1-atomic 128
  MKC_TESTS="tests/test_gpu_tokens.py" MKC_TEST_S=130 MKC_TOKENS_S=90 MKC_NO_PEER=1 \
  MKC_AB_S=60 MKC_AB_MAXSEQ=1024 MKC_AB="128@b1-atomic" \
  MKC_FILTER_OPTIONS='{"tile_hist": false}' \
  MKC_TRACE=1 MKC_TRACE_S=40 MKC_TRACE_RUNS="greedy=;topk=--do-sample --top-k 50" \
  OUT=$OUT bash scripts/gpu_final.sh
  base_tokens 2
  pack_out
  exit 0
fi
# CALL=3 (final numbers; the peer): base and now on the sampling cost (base, now, base again) and
# the greedy b1 loop, every #13 row, a top-k trace. Results packed.
if [ "${CALL:-1}" = 3 ]; then
  base_tokens 1
  base_ab b1-atomic 128
  MKC_TESTS=none MKC_TOKENS_S=90 MKC_PEER_S=100 \
  MKC_AB_S=200 MKC_AB_MAXSEQ=1024 MKC_AB="128@b1-atomic,b1-nan,b8-atomic,b32-atomic;1024@b1-atomic;128@q8-b1-atomic,q8-b8-atomic;1024@q8-b1-atomic" \
  MKC_FILTER_OPTIONS='{"tile_hist": false}' \
  MKC_TRACE=1 MKC_TRACE_S=40 MKC_TRACE_RUNS="topk=--do-sample --top-k 50" \
  OUT=$OUT bash scripts/gpu_final.sh
  base_tokens 2
  pack_out
  exit 0
fi
# CALL=4: every GPU test on the final kernels; the sampling cost on them; `mkc bench`; the peer.
if [ "${CALL:-1}" = 4 ]; then
  MKC_TEST_S=${MKC_TEST_S:-290} MKC_AB=none MKC_TOKENS_S=80 MKC_PEER_S=100 \
  MKC_BENCH="llama-3.2-1b:1" MKC_BENCH_S=120 MKC_ITERS=30 \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
# CALL=5 (the final tree, after the held candidates were taken out for a spill): the token tests, the
# sampling cost, `mkc bench`, the peer.
if [ "${CALL:-1}" = 5 ]; then
  MKC_TESTS="tests/test_gpu_tokens.py" MKC_TEST_S=90 MKC_AB=none MKC_TOKENS_S=80 MKC_PEER_S=100 \
  MKC_BENCH="llama-3.2-1b:1" MKC_BENCH_S=120 MKC_ITERS=30 \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
# CALL=6 (the final tree): the sampling cost with each case timed in alternation with greedy
# (bench_tokens.py --paired), `mkc bench`, the peer.
if [ "${CALL:-1}" = 6 ]; then
  MKC_TESTS=none MKC_AB=none MKC_TOKENS_S=100 MKC_TOKENS_ARGS=--paired MKC_PEER_S=100 \
  MKC_BENCH="llama-3.2-1b:1" MKC_BENCH_S=120 MKC_ITERS=30 \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
