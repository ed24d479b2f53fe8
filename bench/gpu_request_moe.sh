#!/usr/bin/env bash
# MoE helper (issue 19) GPU request: the MoE bench rows at world 1 (the grouped GEMM's config
# sweep, the fused dispatch's parts, the combine, the simulator's predictions, torch.profiler
# tables), the MoE GPU tests at world 1 and at world 2 with both ranks sharing the GPU (gloo), and
# examples/moe_layer.py with mode="fused" at world 1 against float64. Runs from the repository
# root with the staged package on PYTHONPATH (tests/gpu/stage_package.sh); < 120 s in all; writes
# "$OUT/moe/". Each test rank's log (test-worldW.rankR) holds every case's start time and, for a
# case past 20 s, every thread's stack.
set -uo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
out="${OUT:-/tmp}/moe"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=32
python=${PYTHON:-python3}
port=29611
nvidia-smi --query-gpu=name --format=csv,noheader >"$out/device.txt" 2>&1
timeout "${BENCH_S:-52}" "$python" bench/bench_moe.py --only "${BENCH_ROWS:-mixtral:balanced,deepseek:balanced,mixtral:skewed}" \
  --warmup 2 --iters 5 --sweep "${SWEEP:-2}" --profile-dir "$out/profile" --out "$out/bench-moe-world1.json" \
  >"$out/bench.log" 2>&1
echo "bench_moe rc=$?" | tee -a "$out/summary.txt"
for world in 1 2; do
  # 200 calls with new routing each call at world 1 (issue 19), 20 with two ranks on one GPU.
  timeout $((world == 1 ? 25 : 22)) "$python" -m torch.distributed.run --nproc_per_node="$world" --master_port=$((port + world)) \
    tests/gpu/test_moe_gpu.py --calls $((world == 1 ? 200 : 20)) --results-file "$out/test-world$world" \
    >"$out/test-world$world.log" 2>&1
  echo "test_moe_gpu world=$world rc=$?" | tee -a "$out/summary.txt"
  grep -h "SUMMARY\|FAIL" "$out/test-world$world.log" | head -5 | tee -a "$out/summary.txt"
done
timeout 15 "$python" examples/moe_layer.py --size tiny-top2 --tokens 64 --routing skewed --capacity 128 --mode fused \
  --steps 3 >"$out/example-tiny-top2.log" 2>&1
echo "moe_layer tiny-top2 skewed mode=fused rc=$?" | tee -a "$out/summary.txt"
tail -2 "$out/example-tiny-top2.log" | tee -a "$out/summary.txt"
