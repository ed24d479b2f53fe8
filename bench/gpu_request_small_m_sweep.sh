#!/usr/bin/env bash
# Issue 18, round 1 (nvidia-h200, one GPU, < 150 s): the config sweep of the local GEMM over the
# small-M op rows (M = 128..2048), both B layouts (bench/sweep_small_m.py: candidates, budget,
# incremental JSON). Run from the repository root with PYTHONPATH pointing at the staged
# package; writes $OUT/gemm18/ (or bench/results/gemm18/).
set -u
dest="${OUT:-bench/results}/gemm18"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
start=$(date +%s)
timeout 146 python3 bench/sweep_small_m.py --budget 138 --compile-share 0.5 --workers 15 --samples 10 \
    --out "$dest" > "$dest/sweep.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/sweep.log"
tail -n 5 "$dest/sweep.log"
exit 0
