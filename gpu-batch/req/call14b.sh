#!/usr/bin/env bash
# call14b (issue 14, the split graphs' branch form as the default): tests/gpu/test_graphs_gpu.py
# at world 1 and shared world 2 with 200 calls / replays (own graph, user graph, interleaved,
# a missing chunk in both graphs), then bench/bench_call_path.py at world 1 (the default split,
# the one graph and the plain split side by side: a second run of 2026-12-03's comparison).
# CALL14B_BENCH=0 skips the bench. Runs from the repository root with the staged package on PYTHONPATH; < 150 s; writes $OUT/call14b/.
set -u
dest="${OUT:-/tmp}/call14b"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_MAX_CONNECTIONS=32
{ date -u; nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1; } > "$dest/gpu.txt" 2>&1
source gpu-batch/step.sh
TR=(python3 -m torch.distributed.run --standalone)
step graphs_w2_200 45 "${TR[@]}" --nproc_per_node=2 tests/gpu/test_graphs_gpu.py --calls 200 --hang-dump-s 40
step graphs_w1_200 25 "${TR[@]}" --nproc_per_node=1 tests/gpu/test_graphs_gpu.py --calls 200 --hang-dump-s 22
[ "${CALL14B_BENCH:-1}" = 1 ] && step bench_w1 62 python3 bench/bench_call_path.py --out-dir "$dest" --no-full-path \
  --variants AgGemm,GemmRs-chunks,GemmRs-epilogue,GemmAr-chunks
grep -hE "^SUMMARY|^FAIL" "$dest"/graphs_*.log >> "$dest/summary.txt" 2>/dev/null
grep -hE "^  [a-z_0-9.]+: met on" "$dest/bench_w1.log" >> "$dest/summary.txt" 2>/dev/null
cat "$dest/summary.txt"
