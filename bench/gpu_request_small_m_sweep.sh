#!/usr/bin/env bash
# Issue 18, round 1 (nvidia-h200, one GPU, < 150 s):
# 1. the config sweep of the local GEMM over the small-M op rows (M = 128..2048), both B layouts
#    (bench/sweep_small_m.py: candidates, budget, JSON after every shape);
# 2. with the time left: the FP8 host-descriptor kernel (gemm_fp8_tma_host_kernel) checked and
#    timed against torch._scaled_mm on three small-M rows (bench_gemm.py --fp8 --model-only).
# Run from the repository root with PYTHONPATH pointing at the staged package; writes
# $OUT/gemm18/ (or bench/results/gemm18/).
set -u
dest="${OUT:-bench/results}/gemm18"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
start=$(date +%s)
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
timeout 122 python3 bench/sweep_small_m.py --budget 116 --compile-share 0.5 --workers 15 --samples 10 \
    --out "$dest" > "$dest/sweep.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/sweep.log"
left=$(( 146 - ($(date +%s) - start) ))
if (( left > 15 )); then
    timeout "$left" python3 bench/bench_gemm.py --fp8 --model-only --samples 5 --out "$dest" \
        --shapes 128x8192x5120nk,512x4096x3072nk,256x2048x8192kn > "$dest/fp8.log" 2>&1
    echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/fp8.log"
fi
tail -n 4 "$dest/sweep.log" "$dest/fp8.log" 2>/dev/null
exit 0
