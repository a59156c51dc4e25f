# The eighteenth session's device calls (BENCHMARKS.md, "Eighteenth session"), after scripts/prebuild.py
# on the CPU machine (--tests, and --variants ... --variant-max-seq 1024) and
# `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer).
# CALL=1: attention splits that grow with the context (lower(attn_split_pos)): the GPU tests of the
# split paths and the one-launch loop, gpu_bench over positions 0..127 and 0..1023 with P = 0 (every
# split at every position, as before), 16, 32, 64, per-kind traces at batch 1, 8 and 32, the peer.
# CALL=2: traced launches with each GEMV task's time waiting for pages (the new last mark) at batch 1,
# 8 and 32 and on qwen3-8b b1, with 12 / 10 pages and 16 attention splits too; 12 and 16 attention
# splits and 10 / 12 pages timed; the peer.
# CALL=3: the batch-1 staged input in two planes (CodegenOptions.xs_planes): the GPU numerics tests
# of the megakernel, gpu_bench with and without (-noplanes), the pipeline's depth again, traces, the peer.
# CALL=4: batch-1 pages in pairs of row groups (CodegenOptions.pipe_pairs, measured slower and removed:
# the code is at cbc895a) with the planes: the batch-1 GPU numerics tests, gpu_bench with and without
# (-nopairs) at 8, 10 and 12 pages, traces, the peer.
# CALL=5 (final): the GPU tests of the megakernel and the token paths on the final kernels (planes, 12
# pages); before (8 pages, the plain layout) and after on every row; `mkc bench` (torch.compile); the peer.
# CALL=6: the sampling cost at batch 1 on the final kernels (scripts/bench_tokens.py), the prefill GPU tests, the peer.
# CALL=7: the batch-1 staged input rounded to bf16 (CodegenOptions.xs_bf16, measured slower and removed:
# the code is at 8337d20): the batch-1 teacher-forced
# numerics tests on those kernels (their worst distances beside the fp32 input's), gpu_bench with and
# without, the peer.
# CALL=8: every GPU test of the megakernel and the token paths on the final kernels, the bench rows and `mkc bench`, the peer.
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [ "${CALL:-1}" = 1 ]; then
  MKC_TESTS="tests/test_gpu_megakernel.py::test_teacher_forced_logits_other_attention_splits tests/test_gpu_megakernel.py::test_generate_in_one_launch_matches_step_by_step" \
  MKC_TEST_S=150 MKC_NO_TOKENS=1 MKC_AB_S=150 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic-sp0,b1-atomic-sp16,b1-atomic-sp32,b1-atomic-sp64,b1-atomic-spin32,b1-atomic-nosleep;1024@b1-atomic-sp0,b1-atomic-sp32,b1-atomic-sp64;128@q8-b1-atomic-sp0,q8-b1-atomic-sp32;1024@q8-b1-atomic-sp0,q8-b1-atomic-sp32;128@b1-nan-sp0,b1-nan-sp32;128@b1-atomic-trace,b8-atomic-trace,b32-atomic-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
if [ "${CALL:-1}" = 2 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic,b1-atomic-split12,b1-atomic-split16,b1-atomic-pages10,b1-atomic-pages12;1024@b1-atomic,b1-atomic-split12,b1-atomic-split16;128@q8-b1-atomic,q8-b1-atomic-split16;128@b1-atomic-trace,b1-atomic-pages12-trace,b1-atomic-split16-trace,b8-atomic-trace,b32-atomic-trace,q8-b1-atomic-trace,q8-b1-atomic-pages10-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
if [ "${CALL:-1}" = 2b ]; then  # the page waits again, counted from a non-blocking first test
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic-trace,b1-atomic-pages12-trace,b8-atomic-trace,b32-atomic-trace,q8-b1-atomic-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
if [ "${CALL:-1}" = 3 ]; then
  MKC_TESTS="tests/test_gpu_megakernel.py::test_teacher_forced_logits tests/test_gpu_megakernel.py::test_generate_in_one_launch_matches_step_by_step tests/test_gpu_megakernel.py::test_teacher_forced_logits_other_attention_splits" \
  MKC_TEST_S=200 MKC_NO_TOKENS=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic-noplanes,b1-atomic,b1-nan-noplanes,b1-nan,b1-atomic-pages6,b1-atomic-pages10,b1-atomic-pages12;1024@b1-atomic-noplanes,b1-atomic;128@q8-b1-atomic-noplanes,q8-b1-atomic;128@b1-atomic-trace-noplanes,b1-atomic-trace,q8-b1-atomic-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
if [ "${CALL:-1}" = 4 ]; then
  MKC_TESTS="tests/test_gpu_megakernel.py::test_teacher_forced_logits tests/test_gpu_megakernel.py::test_generate_in_one_launch_matches_step_by_step tests/test_gpu_megakernel.py::test_teacher_forced_logits_other_attention_splits tests/test_gpu_megakernel.py::test_teacher_forced_logits_split_k_down" \
  MKC_TEST_S=200 MKC_NO_TOKENS=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic-nopairs,b1-atomic,b1-atomic-pages10,b1-atomic-pages12-nopairs,b1-atomic-pages12,b1-nan-nopairs,b1-nan,b1-nan-pages10,b1-nan-pages12;1024@b1-atomic-nopairs,b1-atomic,b1-atomic-pages12;128@q8-b1-atomic-nopairs,q8-b1-atomic,q8-b1-atomic-pages10;128@b1-atomic-trace,b1-atomic-pages12-trace,q8-b1-atomic-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
if [ "${CALL:-1}" = 5 ]; then
  MKC_TESTS="tests/test_gpu_megakernel.py tests/test_gpu_tokens.py" MKC_TEST_S=230 MKC_NO_TOKENS=1 \
  MKC_AB_S=150 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic-noplanes-pages8,b1-atomic-pages8,b1-atomic,b1-nan-noplanes-pages8,b1-nan-pages8,b1-nan,b8-atomic,b32-atomic;1024@b1-atomic-noplanes-pages8,b1-atomic;128@q8-b1-atomic-noplanes-pages8,q8-b1-atomic-pages8,q8-b1-atomic,q8-b8-atomic" \
  MKC_BENCH="llama-3.2-1b:1" MKC_BENCH_S=110 MKC_ITERS=30 \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
if [ "${CALL:-1}" = 6 ]; then
  MKC_TESTS="tests/test_gpu_prefill.py" MKC_TEST_S=90 MKC_AB=none MKC_TOKENS_S=60 \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
if [ "${CALL:-1}" = 7 ]; then
  export MKC_GPU_REPORT=$OUT/gpu_report.jsonl
  MKC_TEST_OPTIONS='{"xs_bf16": true}' MKC_TESTS="tests/test_gpu_megakernel.py::test_teacher_forced_logits[tiny-llama-1-atomic] tests/test_gpu_megakernel.py::test_teacher_forced_logits[tiny-llama-1-nan] tests/test_gpu_megakernel.py::test_teacher_forced_logits[tiny-qwen3-1-atomic] tests/test_gpu_megakernel.py::test_teacher_forced_logits[tiny-qwen3-1-nan] tests/test_gpu_megakernel.py::test_teacher_forced_logits[llama-3.2-1b-1-atomic] tests/test_gpu_megakernel.py::test_teacher_forced_logits[llama-3.2-1b-1-nan] tests/test_gpu_megakernel.py::test_teacher_forced_logits[qwen3-0.6b-1-atomic] tests/test_gpu_megakernel.py::test_teacher_forced_logits[qwen3-0.6b-1-nan]" \
  MKC_TEST_S=120 MKC_NO_TOKENS=1 MKC_NO_PEER=1 MKC_AB=none OUT=$OUT bash scripts/gpu_final.sh
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=150 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic,b1-atomic-xsbf16,b1-nan,b1-nan-xsbf16,q8-b1-atomic,q8-b1-atomic-xsbf16" \
  OUT=$OUT bash scripts/gpu_final.sh
  python3 -c "import json,sys; [print(r['model'], r['sync'], round(r['worst_ratio'],3), round(r['worst_rel'],5)) for r in map(json.loads, open(sys.argv[1]))]" $OUT/gpu_report.jsonl
  exit 0
fi
