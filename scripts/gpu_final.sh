#!/usr/bin/env bash
# One device call: the gpu tests (bounded), the gpu_bench A/B, `mkc bench`, the token bench, the
# hand-written peer and per-task traces, each switched by the environment, short results last.
#   MKC_TESTS=none | "tests/... node ids"   MKC_TEST_S=seconds
#   MKC_AB=none | "STEPS@variant,variant;STEPS@..."   MKC_AB_MAXSEQ (kernels' cache, default 512)   MKC_AB_S
#   MKC_BENCH="model:1,8 ..."   MKC_BENCH_ARGS=--autotune   MKC_BENCH_S   MKC_ITERS
#   MKC_NO_TOKENS=1   MKC_TOKENS_ARGS=--exact-too   MKC_TOKENS_S
#   MKC_NO_PEER=1   MKC_PEER_ARGS="--long-ctx 512,1024 --long-steps 50"   MKC_PEER_S
#   MKC_TRACE="dir ..." (under .builds; 1: llama-b1)   MKC_TRACE_RUNS="label=run flags;..."   MKC_TRACE_S
#     (default 80: a sampling run builds its kernel, then fits the cost model to the trace, 20-40 s)
#   MKC_PACK=1: everything in $OUT packed into pack.tgz
# Output and logs in $OUT.
set -u
source "$(dirname "$0")/gpu_env.sh"
export PYTHONPATH=$PYTHONPATH:$PWD/scripts  # instafail: each failure printed when it happens
if [ "${MKC_TESTS:-}" != none ]; then
timeout ${MKC_TEST_S:-160} python3 -m pytest ${MKC_TESTS:-$(ls tests/test_gpu_*.py)} \
  -m gpu -q -p no:cacheprovider -p instafail --timeout=120 -rfE > "$OUT/tests.log" 2>&1
echo "tests rc=$?: $(tail -n 1 "$OUT/tests.log" | cut -c1-200)"
grep -E "^\[failed" "$OUT/tests.log" | cut -c1-200 | head -20
fi
if [ "${MKC_AB:-}" != none ]; then
# groups separated by ";", each [STEPS@]variants: the timed launch's steps from position 0 (default 256);
# kernels of MKC_AB_MAXSEQ positions (default 512; prebuild.py --variant-max-seq the same)
IFS=';' read -ra groups <<< "${MKC_AB:-b1-atomic,b1-atomic-nopipe,q8-b1-atomic}"
for g in "${groups[@]}"; do
  steps=256; vs=$g; [[ $g == *@* ]] && { steps=${g%%@*}; vs=${g#*@}; }
  timeout ${MKC_AB_S:-110} python3 scripts/gpu_bench.py --variants "$vs" --steps $steps --max-seq ${MKC_AB_MAXSEQ:-512} \
    --report "$OUT/ab.jsonl" >> "$OUT/ab.log" 2>&1
  echo "ab ($steps steps) rc=$?"; grep -A 12 "^benchmark" "$OUT/ab.log" | tail -n +1 > "$OUT/ab-last.txt"
done
grep -v "^{" "$OUT/ab.log" | grep -v "^  " | grep -v "^benchmark" | head -5
python3 - "$OUT/ab.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    split = f"/{r['consumer_regs']}" if r.get('consumer_regs') else ""  # the consumers' registers after setmaxnreg
    print(f"  {r['variant']:<26} steps {r.get('steps', '?'):>5} {r['ms_per_token']:8.4f} ms/token {r['pct_of_bw']:5.1f} % of 4.2 TB/s, {r.get('pct_of_card', 0):5.1f} % of the card's {r.get('read_bw_TBps', 0):.2f} regs {r['regs']}{split}")
PY
fi
if [ -n "${MKC_BENCH:-}" ]; then
for spec in $MKC_BENCH; do
  model=${spec%%:*}; batches=${spec#*:}
  timeout ${MKC_BENCH_S:-200} python3 -m mkc bench "$model" --batch "$batches" --context 512 --max-seq-len 1024 \
    --iters ${MKC_ITERS:-50} ${MKC_BENCH_ARGS:-} --out "$OUT/bench-$model" > "$OUT/bench-$model.log" 2>&1
  echo "bench $model rc=$?"; grep -E "^\| |bandwidth" "$OUT/bench-$model.log" | head -20
done
fi
if [ -z "${MKC_NO_TOKENS:-}" ]; then
timeout ${MKC_TOKENS_S:-45} python3 scripts/bench_tokens.py --models llama-3.2-1b --batches 1 --steps 120 ${MKC_TOKENS_ARGS:-} \
  --json "$OUT/tokens.json" > "$OUT/tokens.log" 2>&1
echo "tokens rc=$?"; tail -n 16 "$OUT/tokens.log"
fi
if [ -z "${MKC_NO_PEER:-}" ]; then
HAZY_PREBUILT_SO=$PWD/.peer/mk_llama.cpython-312-x86_64-linux-gnu.so OUT=$OUT/peer timeout ${MKC_PEER_S:-90} bash .peer/run.sh \
  ${MKC_PEER_ARGS:-} > "$OUT/peer.log" 2>&1 || {
  # a library built elsewhere that does not load here: build it on this machine
  rm -f .peer/mk_llama.cpython-312-x86_64-linux-gnu.so; mv "$OUT/peer.log" "$OUT/peer-prebuilt.log"
  OUT=$OUT/peer timeout ${MKC_PEER_S:-90} bash .peer/run.sh ${MKC_PEER_ARGS:-} > "$OUT/peer.log" 2>&1; }
mkdir -p "$OUT/peer-so" && cp .peer/src/*/demos/low-latency-llama/mk_llama*.so "$OUT/peer-so/" 2>/dev/null
echo "peer: $(tail -n 1 "$OUT/peer.log")"
fi
if [ -n "${MKC_TRACE:-}" ]; then  # build directories under .builds (MKC_TRACE=1: llama-b1)
# MKC_TRACE_RUNS="label=mkc run flags;..." traces each directory once per entry (default: one run, greedy)
IFS=';' read -ra runs <<< "${MKC_TRACE_RUNS:-=}"
for d in $( [ "$MKC_TRACE" = 1 ] && echo llama-b1 || echo $MKC_TRACE ); do
  for run in "${runs[@]}"; do
    label=${run%%=*}; args=${run#*=}; t=trace-$d${label:+-$label}
    timeout ${MKC_TRACE_S:-80} python3 -m mkc run .builds/$d --max-new-tokens 24 $args --trace "$OUT/$t.json" > "$OUT/$t.log" 2>&1
    echo "$t rc=$?"; tail -n 6 "$OUT/$t.log"
    gzip -9f "$OUT/$t.json" 2>/dev/null; rm -f "$OUT/$t.png"  # the raw trace comes back (too big unzipped)
  done
done
fi
if [ -n "${MKC_PACK:-}" ]; then  # one file back (the device returns a handful of files per call)
  (cd "$OUT" && tar czf /tmp/pack.tgz --exclude=peer-so . && find . -mindepth 1 -maxdepth 1 ! -name peer-so -exec rm -rf {} + \
     && mv /tmp/pack.tgz pack.tgz)  # the peer's library stays beside it (reused by the next call)
fi
