#!/usr/bin/env bash
# The one GPU script: build + gpu tests + benchmark in one call on the device machine, short table last.
#   bash scripts/gpu_all.sh                                 # gpu tests, then the default benchmark
#   MKC_BENCH="llama-3.2-1b:1,8,32 qwen3-8b:1,8" bash scripts/gpu_all.sh
#   MKC_SKIP_TESTS=1 MKC_BENCH="qwen3-8b:1,8" bash scripts/gpu_all.sh
#   MKC_AB="b1-atomic,b8-atomic" MKC_BASELINE=.baseline bash scripts/gpu_all.sh   # + scripts/gpu_bench.py variants
#       run by an earlier tree (a copy of its mkc/ tests/ scripts/ models/) and by this one, in this call;
#       MKC_AB_EXTRA="b1-atomic-acq1,..." adds variants only this tree has
#   MKC_PEER=.peer bash scripts/gpu_all.sh       # + the hand-written peer megakernel (shared/peers/hazy) in this call
# Logs, JSON, markdown and charts go to $OUT (default /tmp/mkc-gpu).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mkc-gpu}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then   # ortools and its pins, carried as wheels (no internet there)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export MKC_CACHE_DIR=${MKC_CACHE_DIR:-$PWD/.cache/mkc}   # cubins prebuilt here by scripts/prebuild.py are reused
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=0
if [ "${MKC_SKIP_TESTS:-0}" != 1 ]; then
  MKC_GPU_BENCH=0 bash scripts/gpu_check.sh > "$OUT/tests.log" 2>&1 || status=$?
  tail -n 3 "$OUT/tests.log"
fi
if [ -n "${MKC_AB:-}" ]; then   # the same gpu_bench variants, before (MKC_BASELINE) and after (this tree)
  for tree in ${MKC_BASELINE:-} .; do
    name=$( [ "$tree" = . ] && echo after || echo before )
    variants=$( [ "$tree" = . ] && echo "$MKC_AB${MKC_AB_EXTRA:+,$MKC_AB_EXTRA}" || echo "$MKC_AB" )
    (cd "$tree" && PYTHONPATH=$PWD:$PWD/tests:${PYTHONPATH#$PWD:} python3 scripts/gpu_bench.py --variants "$variants" \
        --report "$OUT/ab-$name.jsonl") > "$OUT/ab-$name.log" 2>&1 || status=1
    echo "== gpu_bench $name ==" && grep -A 40 "^benchmark" "$OUT/ab-$name.log"
  done
fi
if [ -n "${MKC_PEER:-}" ]; then   # the hand-written megakernel, same GPU, same call
  OUT=$OUT/peer bash "$MKC_PEER/run.sh" --long-ctx 512,1024 --long-steps 50 > "$OUT/peer.log" 2>&1 || status=1
  echo "== peer ==" && tail -n 1 "$OUT/peer.log"
fi
for spec in ${MKC_BENCH-llama-3.2-1b:1,8}; do
  model=${spec%%:*}; batches=${spec#*:}
  python3 -m mkc bench "$model" --batch "$batches" --context ${MKC_CONTEXT:-512} --max-seq-len 1024 \
    --iters ${MKC_ITERS:-100} --out "$OUT/bench-$model" 2>&1 | tee "$OUT/bench-$model.log" | grep -v "^|" || status=1
done
echo "== summary =="
[ "${MKC_SKIP_TESTS:-0}" != 1 ] && echo "gpu tests: $(grep -E 'passed|failed' "$OUT/tests.log" | tail -n 1)"
cat "$OUT"/bench-*/bench.md 2>/dev/null
[ -n "${MKC_PEER:-}" ] && echo "peer: $(tail -n 1 "$OUT/peer.log")"
exit $status
