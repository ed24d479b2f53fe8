#!/usr/bin/env bash
# Issue 18, session 6 round 1 (nvidia-h100-x1 or nvidia-h200, one GPU, < 150 s):
# 1. the wide-tile GEMM (kernels/gemm_wide.py: tiles 64/128 x 96/160/192 as two accumulators
#    sharing A, split-K 1-4 or 6 in two launches) swept against cuBLAS / torch._scaled_mm (per-tensor)
#    on the bf16 and FP8 rows that miss 5% on nvidia-h100-x1 (bench/sweep_wide.py: every variant
#    checked against fp32 with NaN-poisoned outputs, JSON after every row);
# 2. bench/probe_stream_k.py: stream-K vs the data-parallel kernel on two shapes of equal tiles
#    and K-steps, with and without B shared between M-tiles (is stream-K's slow K-step L2 reuse?).
set -u
dest="${OUT:-bench/results}/gemm18"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
start=$(date +%s)
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
timeout 117 python3 bench/sweep_wide.py --budget 110 --compile-share 0.5 --workers 15 --samples 10 \
    --out "$dest" > "$dest/sweep_wide.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/sweep_wide.log"
timeout 24 python3 bench/probe_stream_k.py --out "$dest" > "$dest/probe_stream_k.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/probe_stream_k.log"
tail -n 40 "$dest/sweep_wide.log"
cat "$dest/probe_stream_k.log"
exit 0
