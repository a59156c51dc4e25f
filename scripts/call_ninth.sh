source scripts/gpu_env.sh
export PYTHONPATH=$PYTHONPATH:$PWD/scripts
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest tests/test_gpu_megakernel.py -k "split_k_down or (teacher_forced_logits and llama-3.2-1b-1)" -m gpu -q -p no:cacheprovider --timeout=120 -rfE > $OUT/tests.log 2>&1; echo "tests rc=$?: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED|Error" $OUT/tests.log | head -5
MKC_TESTS=none MKC_NO_TOKENS=1 MKC_AB_S=220 MKC_PACK=1 MKC_AB="b1-atomic,b1-atomic-noaff,b1-atomic-dsplit2,b1-atomic-dsplit4,b1-atomic-dsplit2-noaff,b1-atomic-rr-dsplit2,b1-atomic-cpsat-dsplit2,b1-atomic-cpsat,b1-atomic-dsplit2-pages10;q8-b1-atomic,q8-b1-atomic-dsplit2,q8-b1-atomic-dsplit4;b1-nan,b1-nan-dsplit2" OUT=$OUT bash scripts/gpu_final.sh
