#!/usr/bin/env bash
# MoE helper (issue 19) GPU request: the MoE GPU tests at world 1 and at world 2 with both ranks
# sharing the GPU (gloo), then the MoE bench rows at world 1. Runs from the repository root with
# the staged package on PYTHONPATH (tests/gpu/stage_package.sh); < 150 s in all; writes "$OUT/moe/".
set -uo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
out="${OUT:-/tmp}/moe"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=32
python=${PYTHON:-python3}
port=29611
for world in 1 2; do
  timeout $((world == 1 ? 45 : 55)) "$python" -m torch.distributed.run --nproc_per_node="$world" --master_port=$((port + world)) \
    tests/gpu/test_moe_gpu.py --calls 10 --results-file "$out/test-world$world" >"$out/test-world$world.log" 2>&1
  echo "test_moe_gpu world=$world rc=$?" | tee -a "$out/summary.txt"
  tail -3 "$out/test-world$world.log" | tee -a "$out/summary.txt"
done
timeout 45 "$python" bench/bench_moe.py --shapes mixtral,deepseek --iters 5 --out "$out/bench-moe-world1.json" \
  >"$out/bench.log" 2>&1
echo "bench_moe rc=$?" | tee -a "$out/summary.txt"
