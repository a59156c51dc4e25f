# The tenth session's device calls (BENCHMARKS.md, "Tenth session"), after scripts/prebuild.py on the
# CPU machine and `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer):
#   CALL=1  the tensor-core GEMV fed by the weight pipeline (pages of 512 columns): its GPU tests,
#           gpu_bench before/after rows, the peer
#   CALL=2  page counts, per-kind traces of the ring and pipeline kernels
#   CALL=3  pages of 1024 / 2048 columns, traces; the inline sampler's candidate-path test
#   CALL=4  the new defaults: every GPU test, the before/after rows (-ring), the peer
#   CALL=5  the device-function tests, mkc bench (torch.compile baselines), batch-1 page widths, b4/b16
#   CALL=6  the sampling tests on today's defaults, bench_tokens at batch 1 and 8, the peer
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache and .builds, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [ "${CALL:-1}" = 1 ]; then
  # (call 1 ran test_teacher_forced_logits_mma_pipe and test_generate_in_one_launch_mma_pipe, since folded
  # into the defaults' cases and test_teacher_forced_logits_tensor_core_paths)
  MKC_TESTS="tests/test_gpu_megakernel.py::test_teacher_forced_logits_tensor_core_paths tests/test_gpu_megakernel.py::test_teacher_forced_logits[llama-3.2-1b-1-atomic] tests/test_gpu_megakernel.py::test_teacher_forced_logits[llama-3.2-1b-8-atomic]" \
  MKC_TEST_S=200 MKC_NO_TOKENS=1 MKC_PACK=1 MKC_AB_S=150 \
  MKC_AB="128@b8-atomic,b8-atomic-mpipe,b8-atomic-mpipe-pages4,b8-atomic-mpipe-pages8,b1-atomic;128@b32-atomic,b32-atomic-mpipe,b32-atomic-mpipe-pages4,b8-nan,b8-nan-mpipe;128@q8-b8-atomic,q8-b8-atomic-mpipe" \
  OUT=$OUT bash scripts/gpu_final.sh
fi
if [ "${CALL:-1}" = 2 ]; then  # page counts, and per-kind traces of the default and piped tensor-core kernels
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_PACK=1 MKC_AB_S=170 \
  MKC_AB="128@b8-atomic,b8-atomic-mpipe-pages8,b8-atomic-mpipe-pages10,b8-atomic-mpipe-pages11;128@b32-atomic,b32-atomic-mpipe,b32-atomic-mpipe-pages8,b8-nan-mpipe-pages8,b8-nan-mpipe-pages10;128@q8-b8-atomic,q8-b8-atomic-mpipe-pages8,q8-b8-atomic-mpipe-pages10;16@b8-atomic-trace,b8-atomic-mpipe-pages8-trace,q8-b8-atomic-trace,q8-b8-atomic-mpipe-pages8-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  tar xzf "$OUT/pack.tgz" -O ./ab.log 2>/dev/null | grep "^trace" | cut -c1-1500
fi
if [ "${CALL:-1}" = 3 ]; then  # pages of 1024 / 2048 columns (fewer, longer bulk copies), traces; the inline sampler's test
  MKC_TEST_OPTIONS='{"sampler_inline": true}' timeout 150 python3 -m pytest tests/test_gpu_tokens.py -k candidate_path_on_a_full_vocabulary -m gpu -q -p no:cacheprovider \
    --timeout=140 -rfE 2>&1 | tail -n 3
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_PACK=1 MKC_AB_S=170 \
  MKC_AB="128@b8-atomic,b8-atomic-mpipe-pages8,b8-atomic-mpipe-cols1024-pages4,b8-atomic-mpipe-cols1024-pages5,b8-atomic-mpipe-cols2048-pages2;128@q8-b8-atomic,q8-b8-atomic-mpipe-cols1024-pages4,q8-b8-atomic-mpipe-cols1024-pages5,b32-atomic-mpipe-cols1024-pages3,b8-nan-mpipe-cols1024-pages4;16@b8-atomic-mpipe-cols1024-pages4-trace,q8-b8-atomic-mpipe-cols1024-pages4-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  tar xzf "$OUT/pack.tgz" -O ./ab.log 2>/dev/null | grep "^trace" | cut -c1-1500
fi
if [ "${CALL:-1}" = 4 ]; then  # the new defaults: every GPU test, the before/after rows, the peer
  MKC_TEST_S=300 MKC_NO_TOKENS=1 MKC_PACK=1 MKC_AB_S=170 MKC_PEER_S=80 \
  MKC_AB="128@b8-atomic,b8-atomic-ring,b32-atomic,b32-atomic-ring,b8-nan,b8-nan-ring;128@q8-b8-atomic,q8-b8-atomic-ring" \
  OUT=$OUT bash scripts/gpu_final.sh
fi
if [ "${CALL:-1}" = 5 ]; then  # mkc bench (torch.compile baselines), batch-1 page widths, batch 4 / 16, the peer
  MKC_TESTS=tests/test_gpu_device_functions.py MKC_TEST_S=100 MKC_NO_TOKENS=1 MKC_PACK=1 MKC_AB_S=170 MKC_BENCH="llama-3.2-1b:1,8" MKC_BENCH_S=250 \
  MKC_AB="128@b1-atomic,b1-atomic-cols2048-pages4,b1-atomic-cols2048-pages5,b1-atomic-cols4096-pages2,b4-atomic,b4-atomic-ring,b16-atomic,b16-atomic-ring;128@q8-b1-atomic,q8-b1-atomic-cols2048-pages4,q8-b1-atomic-cols4096-pages2" \
  OUT=$OUT bash scripts/gpu_final.sh
fi
if [ "${CALL:-1}" = 6 ]; then  # the sampling tests on today's defaults (inline sampler at batch 1, the pipeline from batch 2), sampling cost b1 / b8, the peer
  MKC_TESTS="tests/test_gpu_tokens.py tests/test_gpu_text.py" MKC_TEST_S=130 MKC_AB=none MKC_TOKENS_S=60 MKC_PEER_S=75 MKC_PACK=1 OUT=$OUT bash scripts/gpu_final.sh
  timeout 60 python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 8 --steps 120 --json "$OUT/tokens-b8.json" > "$OUT/tokens-b8.log" 2>&1
  echo "tokens b8 rc=$?"; tail -n 14 "$OUT/tokens-b8.log"
fi
