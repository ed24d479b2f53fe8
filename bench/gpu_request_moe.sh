#!/usr/bin/env bash
# MoE (issue 19) GPU request: test_moe_gpu.py at world 1 (200 calls, new
# routing each call) and at worlds 2 and 4 with every rank sharing the GPU (gloo), incl. the
# counted-rows SM copy case and the withheld plan chunk; examples/moe_layer.py fused, skewed;
# bench/bench_moe.py at world 1 (sequential vs fused copy-engine vs fused SM-copy vs simulator).
# Runs from the repository root of the merged tree with the staged package on PYTHONPATH;
# < 150 s in all (every step under `timeout`); writes "$OUT/moe/".
set -uo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
out="${OUT:-/tmp}/moe"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=32
python=${PYTHON:-python3}
port=29641
start=$(date +%s)
{ nvidia-smi --query-gpu=name --format=csv,noheader; date -u +%Y-%m-%dT%H:%MZ; git log -1 --oneline; } >"$out/device.txt" 2>&1
summary="$out/summary.txt"
run_test() {  # world calls limit_s
  local world=$1 calls=$2 limit=$3
  timeout "$limit" "$python" -m torch.distributed.run --nproc_per_node="$world" --master_port=$((port + world)) \
    tests/gpu/test_moe_gpu.py --calls "$calls" --results-file "$out/test-world$world" \
    >"$out/test-world$world.log" 2>&1
  echo "test_moe_gpu world=$world calls=$calls rc=$? t=$(($(date +%s) - start))s" | tee -a "$summary"
  grep -h "SUMMARY\|FAIL" "$out/test-world$world.log" | cut -c1-400 | head -8 | tee -a "$summary"
  for f in "$out/test-world$world".rank*; do  # each rank's cases, also when cut off
    [ -f "$f" ] && echo "  $(basename "$f"): $(grep -c '^PASS' "$f") passed, $(grep -c '^FAIL' "$f") failed, last: $(grep '^START' "$f" | tail -1 | cut -c1-120)" | tee -a "$summary"
  done
}
# Round 2: world 1 passed 16/16 with 200 calls in round 1 (nvidia-h100-x1); now 200 calls at the
# shared worlds 2 and 4 (the fused cases first, so a cut-off run still reports them).
run_test 2 200 46
run_test 4 200 76
example() {  # name world limit_s args...
  local name=$1 world=$2 limit=$3
  shift 3
  if [ "$world" = 1 ]; then
    timeout "$limit" "$python" examples/moe_layer.py "$@" >"$out/example-$name.log" 2>&1
  else
    timeout "$limit" "$python" -m torch.distributed.run --nproc_per_node="$world" --master_port=$((port + 10 + world)) \
      examples/moe_layer.py "$@" >"$out/example-$name.log" 2>&1
  fi
  echo "moe_layer $name world=$world rc=$? t=$(($(date +%s) - start))s" | tee -a "$summary"
  grep -h "PASS\|FAIL\|Error" "$out/example-$name.log" | tail -2 | cut -c1-300 | tee -a "$summary"
}
example deepseek-width-skewed-sm 1 22 --size deepseek --tokens 128 --routing skewed --capacity 128 --mode fused \
  --backend sm-copy --steps 2
left=$((146 - ($(date +%s) - start)))
[ "$left" -gt 50 ] && left=50
if [ "$left" -gt 10 ]; then
  timeout "$left" "$python" bench/bench_moe.py --only "${BENCH_ROWS:-mixtral:skewed,deepseek-v3:balanced}" \
    --warmup 2 --iters 5 --sweep 0 --out "$out/bench-moe-world1.json" >"$out/bench.log" 2>&1
  echo "bench_moe rc=$? t=$(($(date +%s) - start))s" | tee -a "$summary"
fi
