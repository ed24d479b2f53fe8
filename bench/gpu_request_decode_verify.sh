#!/usr/bin/env bash
# Issue 18, decode round 2 (nvidia-h200 or nvidia-h100-x1, one GPU, < 150 s): the config rule
# refitted to the one-launch sweep (bench/sweep_decode.py), verified in one run:
# 1. all 64 M <= 2048 op-row GEMMs (both B layouts): the model's pick vs cuBLAS, and on each row
#    the pick of the rule before (the 12:37 verification's model_choice, --compare), same run;
# 2. the 33 M <= 2048 FP8 GEMMs (own layouts) vs torch._scaled_mm (tensor and row scales), the
#    FP8 pick of the rule before (--compare) timed in the same run;
# 3. correctness of the one-launch kernels (tests/gpu: split tail in one launch, stream-K in a
#    CUDA graph, FP8 stream-K / split-K / split tail), with the time left.
# Run from the repository root with PYTHONPATH pointing at the staged package; writes
# $OUT/gemm18/ (or bench/results/gemm18/).
set -u
dest="${OUT:-bench/results}/gemm18"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
before=bench/results/gemm18-nvidia-h200-2026-11-25
start=$(date +%s)
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
timeout 72 python3 bench/bench_gemm.py --small-m --both-layouts --model-only --samples 10 --precompile 15 \
    --compare "$before/bench_gemm_nvidia-h200_2026-11-25_1237_smallm.json" --out "$dest" > "$dest/small_m.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/small_m.log"
left=$(( 122 - ($(date +%s) - start) ))
# FP8: every M <= 2048 op-row GEMM in its own layout; before = the FP8 picks of the nvidia-h100-x1
# run of 14:07 today (main's results; the picks depend only on the SM count, 132 on both).
fp8_before=bench/results/gemm18-nvidia-h100-x1-2026-11-25/bench_gemm_nvidia-h100-x1_2026-11-25_1407_fp8.json
compare=()
[[ -f "$fp8_before" ]] && compare=(--compare "$fp8_before")
timeout $(( left > 45 ? 45 : left )) python3 bench/bench_gemm.py --fp8 --small-m --model-only --samples 5 \
    --precompile 15 "${compare[@]}" --out "$dest" > "$dest/fp8.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/fp8.log"
left=$(( 146 - ($(date +%s) - start) ))
if (( left > 10 )); then
    timeout "$left" python3 -m pytest -q tests/gpu/test_gemm_gpu.py tests/gpu/test_fp8_gpu.py \
        -k "one_launch or cuda_graph or fixup or stream_k" > "$dest/tests.log" 2>&1
    echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/tests.log"
fi
for f in small_m fp8 tests; do echo "== $f"; tail -n 14 "$dest/$f.log" 2>/dev/null; done
exit 0
