#!/usr/bin/env bash
# Issue 16's one-GPU batch (< 120 s): the candidate forms of the transformed GEMM's wait and
# notify (bench/wait_variants.py) against the untransformed gemm_tma_kernel, with a late-arrival
# bit-for-bit check of each first. Run from the repository root with PYTHONPATH pointing at the
# staged package (syncopate._core makes the transformed source); writes $OUT/h-transform/.
set -u
dest="${OUT:-bench/results}/h-transform"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
timeout 105 python3 bench/bench_wait_variants.py --out "$dest" --samples 15 > "$dest/bench_wait_variants.log" 2>&1
echo "rc=$?" >> "$dest/bench_wait_variants.log"
tail -n 100 "$dest/bench_wait_variants.log"
exit 0
