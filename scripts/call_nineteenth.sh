# The nineteenth session's device calls (BENCHMARKS.md, "Nineteenth session"), after scripts/prebuild.py
# on the CPU machine (--tests, and --variants ... --variant-max-seq 1024) and
# `tar czf out/carry/cache.tgz .cache` (carry out/carry, .whl, .peer).
# CALL=1: the batch-1 consumers split each page's columns (CodegenOptions.pipe_ksplit): the batch-1 GPU
# numerics tests, gpu_bench with and without (-noks), traces, the peer. (Call 1 had the rows of a page
# behind branches: each load waited for the one before; CALL=2 loads them at once.)
[ -f out/carry/cache.tgz ] && tar xzf out/carry/cache.tgz  # .cache, carried packed (64 MiB limit)
source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [ "${CALL:-1}" = 1 ] || [ "${CALL:-1}" = 2 ]; then
  MKC_TESTS="tests/test_gpu_megakernel.py::test_teacher_forced_logits tests/test_gpu_megakernel.py::test_generate_in_one_launch_matches_step_by_step tests/test_gpu_megakernel.py::test_teacher_forced_logits_other_attention_splits tests/test_gpu_megakernel.py::test_teacher_forced_logits_split_k_down" \
  MKC_TEST_S=200 MKC_NO_TOKENS=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic-noks,b1-atomic,b1-nan-noks,b1-nan,b1-atomic-pages8;1024@b1-atomic-noks,b1-atomic;128@q8-b1-atomic-noks,q8-b1-atomic;128@b1-atomic-trace-noks,b1-atomic-trace,q8-b1-atomic-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
# CALL=3: at most N bulk copies in flight (CodegenOptions.pipe_inflight) with and without the K-split
# consumers, batch 1 and 8, qwen3-8b, traces, the peer.
if [ "${CALL:-1}" = 3 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic,b1-atomic-if4,b1-atomic-if6,b1-atomic-if8,b1-atomic-noks,b1-atomic-noks-if6,b1-nan,b1-nan-if6;128@q8-b1-atomic,q8-b1-atomic-if4,q8-b1-atomic-if6,q8-b1-atomic-noks;128@b8-atomic,b8-atomic-if3,b8-atomic-if4;128@b1-atomic-trace-if6,q8-b1-atomic-trace-if6" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
# CALL=4: the K-split consumers for some kinds only (-kschain: qkv, o-proj, down; -ksnolm: all but
# the LM head; -ksnogu: all but gate/up), llama-3.2-1b and qwen3-8b b1; b8 with 3 copies in flight again;
# qwen3-8b traces with and without; the peer.
if [ "${CALL:-1}" = 4 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic-noks,b1-atomic,b1-atomic-kschain,b1-atomic-ksnolm,b1-atomic-ksnogu,b1-nan,b1-nan-kschain;128@q8-b1-atomic-noks,q8-b1-atomic,q8-b1-atomic-kschain,q8-b1-atomic-ksnolm,q8-b1-atomic-ksnogu;128@b8-atomic,b8-atomic-if3;128@q8-b1-atomic-trace-noks,q8-b1-atomic-trace" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
# CALL=5: every GPU test on the final kernels (the K-split chain kinds at batch 1, 3 copies in flight
# on the tensor-core path).
if [ "${CALL:-1}" = 5 ]; then
  MKC_TEST_S=${MKC_TEST_S:-540} MKC_AB=none MKC_NO_TOKENS=1 MKC_NO_PEER=1 OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
# CALL=6 (final numbers): before (-noks: a row per warp everywhere; -if0: no cap on the copies in
# flight) and after on every row, qwen3-8b over 0..1023, traces; `mkc bench`; the sampling cost
# (bench_tokens); the peer.
if [ "${CALL:-1}" = 6 ]; then
  MKC_TESTS=none MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic-noks,b1-atomic,b1-nan-noks,b1-nan,b8-atomic-if0,b8-atomic,b32-atomic;1024@b1-atomic-noks,b1-atomic;128@q8-b1-atomic-noks,q8-b1-atomic,q8-b8-atomic-if0,q8-b8-atomic;1024@q8-b1-atomic-noks,q8-b1-atomic;128@b1-atomic-trace,b8-atomic-trace" \
  MKC_BENCH="llama-3.2-1b:1" MKC_BENCH_S=110 MKC_ITERS=30 MKC_TOKENS_S=60 \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
# CALL=7: the pipeline's mbarrier waits spun on test_wait (CodegenOptions.pipe_spin: measured, removed; the code
# is at b50281f), with and without a
# cap of 6 copies in flight at batch 1; the peer.
if [ "${CALL:-1}" = 7 ]; then
  MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=200 MKC_AB_MAXSEQ=1024 \
  MKC_AB="128@b1-atomic,b1-atomic-spin,b1-atomic-if6-spin,b1-nan,b1-nan-spin,b8-atomic,b8-atomic-spin;128@q8-b1-atomic,q8-b1-atomic-spin" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
# CALL=8: where a sampling step's time goes at batch 1 (#16): `mkc run .builds/llama-b1 --trace` greedy, top-k 50
# and top-p 0.9 (the build made by `mkc compile llama-3.2-1b --batch 1 --max-seq-len 1024 --out
# .builds/llama-b1`, its kernels by `prebuild.py --build-dirs .builds/llama-b1 --trace`; carry .builds too); the peer.
if [ "${CALL:-1}" = 8 ]; then
  MKC_TESTS=none MKC_AB=none MKC_NO_TOKENS=1 MKC_TRACE=1 MKC_TRACE_S=60 \
  MKC_TRACE_RUNS="greedy=;topk=--do-sample --top-k 50;topp=--do-sample --top-p 0.9" \
  OUT=$OUT bash scripts/gpu_final.sh
  exit 0
fi
