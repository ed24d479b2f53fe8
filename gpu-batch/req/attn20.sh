#!/usr/bin/env bash
# attn20 (issue 20, the in-loop wait's overhead with nothing to wait for): the attention wait
# variants at S = 8192, head dim 64 and 128, causal and not, 128 x 64 blocks, 8 warps, 3 stages,
# timed interleaved against the untransformed kernel, with each launch's registers per thread
# (the occupancy question: > 128 registers halves the CTAs per SM at head dim 64), "always wait"
# being the form shipped before the constexpr sy_block_waits; head dim 64 also under maxnreg 128.
# Then tests/gpu/test_attention_gpu.py (the kernel changed shape) and the zig-zag ring rows of
# tests/gpu/test_fused_attention_gpu.py at world 1 and shared world 2. Runs from the merged tree's root, staged package on PYTHONPATH; < 150 s;
# writes $OUT/attn20/.
set -u
dest="${OUT:-/tmp}/attn20"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
kind=nvidia-h200
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H100 && kind=nvidia-h100-x1
{ date -u; echo "kind $kind"; nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1; } > "$dest/gpu.txt" 2>&1
step() {  # NAME LIMIT CMD...: one step, its log, its status and time in summary.txt
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  OUT="$dest" timeout "$limit" "$@" > "$dest/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0))s (limit ${limit}s)" >> "$dest/summary.txt"
}
b=bench/bench_attention_wait_variants.py
v64="transformed,always wait"
v128="transformed,always wait,ascending,no block wait"
step variants_d64 42 python3 $b --seqs 8192 --head-dims 64 --configs 128x64w8s3 --variants "$v64" --samples 11 --maxnreg 128 --device-kind $kind
step variants_d128 33 python3 $b --seqs 8192 --head-dims 128 --configs 128x64w8s3 --variants "$v128" --samples 11 --device-kind $kind
step attention_gpu 28 python3 -m pytest -q -rfE tests/gpu/test_attention_gpu.py
grep -hE "passed|failed" "$dest/attention_gpu.log" | tail -1 >> "$dest/summary.txt"
f=tests/gpu/test_fused_attention_gpu.py
step zigzag_world1 20 python3 -m torch.distributed.run --standalone --nproc_per_node=1 $f --zigzag-only
step zigzag_world2_shared 23 python3 -m torch.distributed.run --standalone --nproc_per_node=2 $f --zigzag-only
grep -hE "^SUMMARY|FAIL" "$dest"/zigzag_*.log >> "$dest/summary.txt" 2>/dev/null
cat "$dest/summary.txt"
