#!/usr/bin/env bash
# Issue 18, decode round 1 (nvidia-h200 or nvidia-h100-x1, one GPU, < 150 s): the one-launch
# kernels (kernels/gemm_one_launch.py: stream-K in one flattened pipelined loop, split-K and the
# split tail with the fixup in the same launch, host descriptors) swept on the decode rows that
# still miss cuBLAS and on the small-M FP8 rows (bench/sweep_decode.py: every variant checked
# against fp32 with NaN-poisoned outputs, JSON after every row).
# Run from the repository root with PYTHONPATH pointing at the staged package; writes
# $OUT/gemm18/ (or bench/results/gemm18/).
set -u
dest="${OUT:-bench/results}/gemm18"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
start=$(date +%s)
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
timeout 143 python3 bench/sweep_decode.py --budget 136 --compile-share 0.55 --workers 15 --samples 10 \
    --out "$dest" > "$dest/sweep_decode.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/sweep_decode.log"
tail -n 30 "$dest/sweep_decode.log"
exit 0
