#!/usr/bin/env bash
# moe19b (issue 19, after the 2026-12-03 fixes: a bad slots routing refused by check() alone,
# garbage collection paused between the GEMM's launch and the chunks' issue, refusals before
# begin): tests/gpu/test_moe_gpu.py at world 1 (40 calls: copy engine, SM copy, NCCL whose
# world-1 plan is local) and at shared world 2 (10 calls; NCCL skipped by name), then (MOE19B_W4_CALLS=n) at shared world 4 with n calls, then the MoE
# example fused with skewed routing. Staged package on PYTHONPATH; < 110 s; writes $OUT/moe19b/.
set -u
dest="${OUT:-/tmp}/moe19b"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_MAX_CONNECTIONS=32
{ date -u; nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1; } > "$dest/gpu.txt" 2>&1
source gpu-batch/step.sh
TR=(python3 -m torch.distributed.run --standalone)
step test_w1 45 "${TR[@]}" --nproc_per_node=1 tests/gpu/test_moe_gpu.py --calls 40 --results-file "$dest/test-w1"
step test_w2 40 "${TR[@]}" --nproc_per_node=2 tests/gpu/test_moe_gpu.py --calls 10 --results-file "$dest/test-w2"
if [ "${MOE19B_W4_CALLS:-0}" -gt 0 ]; then
  step test_w4 "${MOE19B_W4_LIMIT:-70}" "${TR[@]}" --nproc_per_node=4 tests/gpu/test_moe_gpu.py --calls "$MOE19B_W4_CALLS" \
    --results-file "$dest/test-w4"
fi
step example 20 python3 examples/moe_layer.py --size tiny-top8 --tokens 128 --routing skewed --capacity 128 --slots --steps 3
grep -hE "^SUMMARY|^FAIL|^SKIP" "$dest"/test_w*.log | cut -c1-300 >> "$dest/summary.txt" 2>/dev/null
grep -hE "PASS|FAIL|Error" "$dest/example.log" | tail -2 | cut -c1-300 >> "$dest/summary.txt"
cat "$dest/summary.txt"
