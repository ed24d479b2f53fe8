#!/usr/bin/env bash
# Issue 16's one-GPU batch (< 120 s). 1. correctness on the GPU of what the transformer emits now
# (the tile's wait at its lookup, loop-free; the loop-free notify): tests/gpu/test_transform_gpu.py,
# chunks landing late and shuffled, bit for bit, producer notifies checked by a second stream;
# 2. the candidate forms of the transformed GEMM's wait and notify (bench/wait_variants.py)
# against the untransformed gemm_tma_kernel, each first checked bit for bit with late arrivals.
# Run from the repository root with PYTHONPATH pointing at the staged package (syncopate._core
# makes the transformed source); writes $OUT/h-transform/.
set -u
dest="${OUT:-bench/results}/h-transform"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
timeout 35 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_transform_gpu.py > "$dest/test_transform_gpu.log" 2>&1
echo "rc=$?" >> "$dest/test_transform_gpu.log"
timeout 78 python3 bench/bench_wait_variants.py --out "$dest" --samples 15 > "$dest/bench_wait_variants.log" 2>&1
echo "rc=$?" >> "$dest/bench_wait_variants.log"
tail -n 15 "$dest/test_transform_gpu.log"
tail -n 100 "$dest/bench_wait_variants.log"
exit 0
