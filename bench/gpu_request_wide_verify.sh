#!/usr/bin/env bash
# Issue 18, wide tiles round 2 (nvidia-h200 or nvidia-h100-x1: 132 SMs, one GPU, < 90 s): the
# config rule with the wide tiles on (configs.WIDE_IN_MODEL / WIDE_FP8_IN_MODEL, fitted to the
# 2026-12-03 sweep, bench/results/gemm18-wide-nvidia-h200-2026-12-03/) verified in one run on
# every op-row GEMM whose pick it changes on 132 SMs (no other pick changes there; tested on the CPU),
# in both B layouts, each row timing the rule's pick and the pick before (--compare: the rule
# as of the 15:41 / 14:07 runs of 2026-11-25, which the rule kept until the wide tiles):
# 1. bf16 vs cuBLAS: 4 GEMMs x 2 layouts;
# 2. FP8 vs torch._scaled_mm (per-tensor and row scales): 5 GEMMs x 2 layouts.
# Every variant checked against fp32 with NaN-poisoned outputs. Run from the repository root;
# writes $OUT/gemm18/ (or bench/results/gemm18/).
set -u
dest="${OUT:-bench/results}/gemm18"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
start=$(date +%s)
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
timeout 38 python3 bench/bench_gemm.py --model-only --both-layouts --samples 10 --precompile 15 \
    --shapes 128x8192x5120nk,128x4096x3072nk,512x4096x3072nk,1024x4096x3072nk \
    --compare bench/results/gemm18-decode-nvidia-h100-x1-2026-11-25/bench_gemm_nvidia-h100-x1_2026-11-25_1541_smallm.json \
    --out "$dest" > "$dest/wide_bf16.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/wide_bf16.log"
left=$(( 86 - ($(date +%s) - start) ))
timeout "$left" python3 bench/bench_gemm.py --fp8 --model-only --both-layouts --samples 10 --precompile 15 \
    --shapes 128x7168x4096nk,128x4096x3072nk,512x4096x3072nk,512x8192x5120nk,128x8192x5120nk \
    --compare bench/results/gemm18-nvidia-h100-x1-2026-11-25/bench_gemm_nvidia-h100-x1_2026-11-25_1407_fp8.json \
    --out "$dest" > "$dest/wide_fp8.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/wide_fp8.log"
for f in wide_bf16 wide_fp8; do echo "== $f"; tail -n 16 "$dest/$f.log" 2>/dev/null; done
exit 0
