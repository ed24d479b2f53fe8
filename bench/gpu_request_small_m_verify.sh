#!/usr/bin/env bash
# Issue 18, round 2 (nvidia-h200, one GPU, < 150 s): the config rule fitted to round 1's sweep,
# verified with bench_gemm.py rows:
# 1. the 33 small-M op-row GEMMs (M <= 2048) in both B layouts, the model's config vs cuBLAS, and
#    on each row the config the round-1 model chose (--compare: before/after in one run);
# 2. the rows with M >= 4096 (baselines, model layers), the model's config and the 2026-11-22
#    model's (--compare): no regression;
# 3. with the time left: FP8 (host-descriptor kernel) on the six FP8 rows of docs/PERFORMANCE.md.
# Run from the repository root with PYTHONPATH pointing at the staged package; writes
# $OUT/gemm18/ (or bench/results/gemm18/).
set -u
dest="${OUT:-bench/results}/gemm18"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
start=$(date +%s)
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
timeout 62 python3 bench/bench_gemm.py --small-m --both-layouts --model-only --samples 10 --precompile 15 \
    --compare bench/results/gemm18-nvidia-h200-2026-11-25/sweep_small_m_nvidia-h200_2026-11-25_1200.json \
    --out "$dest" > "$dest/small_m.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/small_m.log"
left=$(( 112 - ($(date +%s) - start) ))
timeout $(( left > 50 ? 50 : left )) python3 bench/bench_gemm.py --min-m 4096 --model-only --samples 10 \
    --compare bench/results/bench_gemm_nvidia-h200_2026-11-22_1948.json --precompile 8 --out "$dest" \
    > "$dest/large.log" 2>&1
echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/large.log"
left=$(( 146 - ($(date +%s) - start) ))
if (( left > 15 )); then
    timeout "$left" python3 bench/bench_gemm.py --fp8 --model-only --samples 5 --out "$dest" \
        --shapes 128x8192x5120nk,512x4096x3072nk,256x2048x8192kn,8192x8192x8192nk,4096x8192x5120nk,8192x8192x8192kn > "$dest/fp8.log" 2>&1
    echo "rc=$? wall=$(( $(date +%s) - start )) s" >> "$dest/fp8.log"
fi
for f in small_m large fp8; do echo "== $f"; tail -n 12 "$dest/$f.log" 2>/dev/null; done
exit 0
