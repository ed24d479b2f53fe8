#!/usr/bin/env bash
# bwd20 (issue 20, backward of the sequence-parallel attention ops): tests/gpu/test_seq_attention_grad_gpu.py
# at world 1 (with the fwd+bwd timing row against SDPA), then at worlds 2 and 4 with the ranks
# sharing the GPU (gloo). Runs from the merged tree's root, staged package on PYTHONPATH; < 150 s;
# writes $OUT/bwd20/.
set -u
dest="${OUT:-/tmp}/bwd20"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
kind=nvidia-h200
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H100 && kind=nvidia-h100-x1
{ date -u; echo "kind $kind"; nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1; } > "$dest/gpu.txt" 2>&1
source gpu-batch/step.sh
t=tests/gpu/test_seq_attention_grad_gpu.py
step grad_world1 45 python3 -m torch.distributed.run --standalone --nproc_per_node=1 $t --bench
step grad_world2_shared 45 python3 -m torch.distributed.run --standalone --nproc_per_node=2 $t
step grad_world4_shared 50 python3 -m torch.distributed.run --standalone --nproc_per_node=4 $t --quick
grep -hE "^SUMMARY|^FAIL|bench" "$dest"/*.log >> "$dest/summary.txt" 2>/dev/null
cat "$dest/summary.txt"
