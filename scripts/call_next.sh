# The next device calls (one script under a stable name; each section of BENCHMARKS.md names the
# script it ran, which is in the tree at that section's commits).
#
# Twenty-third session (CodegenOptions.consumer_regs on by default: 200, 216 from batch 32; the
# three sampler experiments removed after CALL=1..3 of b43489f's script measured them). CALL=1..3
# ran (BENCHMARKS.md); CALL=4 is for the next session:
#   CALL=1: every GPU test on the new defaults; the sampling cost over greedy (bench_tokens
#           --paired) and the new default against consumer_regs=0 (the kernels before), paired.
#   CALL=2: every #13 row beside its consumer_regs=0 kernel (-rs0) and the peer; `mkc bench`.
#   CALL=3: batch 32 at 216 registers (the default after CALL=2 measured it fastest): its GPU test,
#           and its row beside 0, 208, 224 and 232 twice over.
#   CALL=4: (#16) the filtered sampler's kernel alone at 176 consumer registers (no spill there; 200
#           spills a word) and at 0, each against the default on the filters (bench_tokens
#           MKC_FILTER_OPTIONS); (#13) traces of batch 32 on the new default (gate/up's MMA loop at
#           216 registers, down's staging) and of a top-k 50 step at batch 1; the #13 rows (b32 beside
#           208 registers, 0.5 % faster than 216 in one run); the peer; the tensor-core page loop
#           alone (scripts/bench_mma_page.py: is gate/up's ~1.7 us a page the loop or around it?).
#           Prebuilt as above plus:
#   MKC_FILTER_OPTIONS="$FILT" python scripts/prebuild.py --tokens-bench
#   python -m mkc compile llama-3.2-1b --batch 32 --max-seq-len 1024 --out .builds/llama-b32
#   python -m mkc compile llama-3.2-1b --batch 1 --max-seq-len 1024 --out .builds/llama-b1
#   python scripts/prebuild.py --build-dirs .builds/llama-b32 .builds/llama-b1 --trace
#   tar czf out/carry/builds.tgz .builds
#
# Before them, on the CPU machine (~10 min on 2 cores), from the repository root:
#   export MKC_CACHE_DIR=$PWD/.cache/mkc MKC_SCHED_CACHE=$PWD/.cache/sched
#   python scripts/prebuild.py --variants $(echo $ROWS | tr ';' ',' | sed 's/[0-9]*@//g') --variant-max-seq 1024
#   MKC_TOKENS_AB="$AB" python scripts/prebuild.py --tokens-bench
#   python scripts/prebuild.py --tests --folders
#   python scripts/prebuild.py --bench llama-3.2-1b:1 --max-seq-len 1024
#   tar czf out/carry/cache.tgz .cache
# then `CALL=N bash scripts/call_next.sh` with carry `out/carry`, `.whl`, `.peer`.
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
[ -f out/carry/builds.tgz ] && tar xzf out/carry/builds.tgz  # .builds (mkc run --trace), packed too
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
AB='{"consumer_regs": 0}'
FILT='{"consumer_regs": 176};{"consumer_regs": 0}'
ROWS="128@b1-atomic,b1-atomic-rs0,b1-nan,b1-nan-rs0,b8-atomic,b8-atomic-rs0,b8-atomic-rs232,b8-nan,b8-nan-rs0,b32-atomic,b32-atomic-rs0,b32-atomic-rs200,b32-atomic-rs216;1024@b1-atomic,b1-atomic-rs0;128@q8-b1-atomic,q8-b1-atomic-rs0,q8-b8-atomic,q8-b8-atomic-rs0;1024@q8-b1-atomic"
# everything in $OUT as one file (the peer's library left out)
pack_out() {
  (cd "$OUT" && tar czf /tmp/pack.tgz --exclude=peer-so . && find . -mindepth 1 -maxdepth 1 -exec rm -rf {} + && mv /tmp/pack.tgz pack.tgz)
}
if [ "${CALL:-1}" = 1 ]; then
  MKC_TEST_S=330 MKC_AB=none MKC_NO_TOKENS=1 MKC_NO_PEER=1 OUT=$OUT bash scripts/gpu_final.sh
  timeout 100 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --ab-options "$AB" \
    --json "$OUT/tokens-ab.json" > "$OUT/tokens-ab.log" 2>&1
  echo "tokens ab rc=$?"; grep "^|" "$OUT/tokens-ab.log" | tail -n 8
  timeout 100 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --paired \
    --json "$OUT/tokens.json" > "$OUT/tokens.log" 2>&1
  echo "tokens rc=$?"; grep "^|" "$OUT/tokens.log" | tail -n 12
  pack_out
  exit 0
fi
if [ "${CALL:-1}" = 2 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_PEER_S=100 MKC_AB_S=250 MKC_AB_MAXSEQ=1024 MKC_AB="$ROWS" \
  MKC_BENCH="llama-3.2-1b:1" MKC_ITERS=30 MKC_BENCH_S=200 OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
if [ "${CALL:-1}" = 3 ]; then
  MKC_TESTS="tests/test_gpu_megakernel.py::test_teacher_forced_logits_tensor_core_paths" MKC_TEST_S=120 \
  MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b32-atomic,b32-atomic-rs0,b32-atomic-rs208,b32-atomic-rs224,b32-atomic-rs232,b32-atomic,b32-atomic-rs0,b32-atomic-rs232" \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
if [ "${CALL:-1}" = 7 ]; then
  # (#13) h in bf16 (lower(h_bf16=True): gate/up stores bf16, down stages it as it is) against f32
  # h, alternated; the same-bits test
  MKC_TESTS="tests/test_gpu_megakernel.py::test_bf16_h_gives_the_same_logits_bit_for_bit" \
  MKC_TEST_S=150 MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b32-atomic-hf32,b32-atomic-hbf16,b32-atomic-hf32,b32-atomic-hbf16;128@b8-atomic-hf32,b8-atomic-hbf16,b16-atomic-hf32,b16-atomic-hbf16;128@q8-b8-atomic-hf32,q8-b8-atomic-hbf16" \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
if [ "${CALL:-1}" = 6 ]; then
  # (#13) the tile sums in fragment order (CodegenOptions.tile_sum_frag, the default) against the
  # row-major ones (-tsrow), alternated; the tensor-core tests and the same-bits test; the peer
  MKC_TESTS="tests/test_gpu_megakernel.py::test_tile_sums_in_fragment_order_give_the_same_bits tests/test_gpu_megakernel.py::test_teacher_forced_logits_tensor_core_paths" \
  MKC_TEST_S=200 MKC_NO_TOKENS=1 MKC_PEER_S=100 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b32-atomic,b32-atomic-tsrow,b32-atomic,b32-atomic-tsrow,b16-atomic,b16-atomic-tsrow;128@b8-atomic,b8-atomic-tsrow,b8-nan,b8-nan-tsrow,b1-atomic;128@q8-b8-atomic,q8-b8-atomic-tsrow" \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
if [ "${CALL:-1}" = 5 ]; then
  # (#13) the L2 prefetcher (CodegenOptions.l2_ahead) against the default, alternated; the page loop
  # alone, alone with a spare warp, and beside a warp streaming HBM (SM clock under that load)
  timeout 90 python3 scripts/bench_mma_page.py --batches 32,8 > "$OUT/mma-page.log" 2>&1
  echo "mma page rc=$?"; tail -n 6 "$OUT/mma-page.log"
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic,b1-atomic-l2a4,b1-atomic-l2a8,b1-atomic-l2a16,b1-atomic-l2a32,b1-atomic,b1-atomic-l2a8,b1-atomic-l2a16;128@b8-atomic,b8-atomic-l2a8,b32-atomic,b32-atomic-l2a8,b1-nan,b1-nan-l2a8;128@q8-b1-atomic,q8-b1-atomic-l2a8,q8-b1-atomic-l2a16,q8-b8-atomic,q8-b8-atomic-l2a8" \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
if [ "${CALL:-1}" = 4 ]; then
  MKC_FILTER_OPTIONS="$FILT" timeout 200 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 --paired \
    --json "$OUT/tokens.json" > "$OUT/tokens.log" 2>&1
  echo "tokens rc=$?"; grep "^|" "$OUT/tokens.log" | tail -n 16
  timeout 90 python3 scripts/bench_mma_page.py --batches 8,32 > "$OUT/mma-page.log" 2>&1
  echo "mma page rc=$?"; tail -n 3 "$OUT/mma-page.log"
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_PEER_S=100 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic,b1-nan,b8-atomic,b32-atomic,b32-atomic-rs208,b32-atomic,b32-atomic-rs208;1024@b1-atomic;128@q8-b1-atomic,q8-b8-atomic;1024@q8-b1-atomic" \
  MKC_TRACE="llama-b32 llama-b1" MKC_TRACE_RUNS="=;topk=--do-sample --top-k 50" MKC_TRACE_S=55 \
  OUT=$OUT bash scripts/gpu_final.sh
  pack_out
  exit 0
fi
