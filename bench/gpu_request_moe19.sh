#!/usr/bin/env bash
# Issue 19 GPU request (session 6): test_moe_gpu.py at world 1 (the capacity-slot path under
# torch.cuda.set_sync_debug_mode("error"), the fused ops on copy engine, SM copy and NCCL, whose
# plan at world 1 has only local chunks) and at world 2 sharing the GPU (NCCL skipped by name);
# bench/bench_moe.py at world 1, Mixtral-like balanced, twice in one run: "before" with the
# Python MoE modules of $BEFORE (default 8e19220, this session's base) and "after" with the tree's.
# Runs from the repository root with the staged package on PYTHONPATH; < 150 s (every step under
# `timeout`); writes "$OUT/moe19/".
set -uo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
out="${OUT:-/tmp}/moe19"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=32
python=${PYTHON:-python3}
port=29741
start=$(date +%s)
{ nvidia-smi --query-gpu=name --format=csv,noheader; date -u +%Y-%m-%dT%H:%MZ; git log -1 --oneline; } >"$out/device.txt" 2>&1
summary="$out/summary.txt"
run_test() {  # world calls limit_s
  local world=$1 calls=$2 limit=$3
  timeout "$limit" "$python" -m torch.distributed.run --nproc_per_node="$world" --master_port=$((port + world)) \
    tests/gpu/test_moe_gpu.py --calls "$calls" --results-file "$out/test-world$world" \
    >"$out/test-world$world.log" 2>&1
  echo "test_moe_gpu world=$world calls=$calls rc=$? t=$(($(date +%s) - start))s" | tee -a "$summary"
  grep -h "SUMMARY\|FAIL\|SKIP" "$out/test-world$world.log" | cut -c1-400 | head -12 | tee -a "$summary"
  for f in "$out/test-world$world".rank*; do
    [ -f "$f" ] && echo "  $(basename "$f"): $(grep -c '^PASS' "$f") passed, $(grep -c '^FAIL' "$f") failed, last: $(grep '^START' "$f" | tail -1 | cut -c1-120)" | tee -a "$summary"
  done
}
bench() {  # label pythonpath limit_s args...
  local label=$1 path=$2 limit=$3
  shift 3
  PYTHONPATH="$path" timeout "$limit" "$python" bench/bench_moe.py --label "$label" --warmup 2 --iters 5 --sweep 0 \
    --no-sm-copy --out "$out/bench-moe-world1-$label.json" "$@" >"$out/bench-$label.log" 2>&1
  echo "bench_moe $label rc=$? t=$(($(date +%s) - start))s" | tee -a "$summary"
}
run_test 1 40 45
# "before": a copy of the staged package with the MoE Python of $BEFORE (the C++ is the tree's;
# the copy-engine plan and runtime calls the old modules make are unchanged).
before_rev=${BEFORE:-8e19220}
pkg=$("$python" -c 'import os, syncopate; print(os.path.dirname(syncopate.__file__))' 2>>"$out/before-setup.log")
before=$(mktemp -d)
if [ -n "$pkg" ] && cp -r "$pkg" "$before/" 2>>"$out/before-setup.log"; then
  for f in ops/moe.py ops/moe_fused.py launch.py; do
    git show "$before_rev:python/syncopate/$f" >"$before/syncopate/$f" 2>>"$out/before-setup.log"
  done
  bench before "$before:${PYTHONPATH:-}" 35 --only mixtral:balanced --no-combine --no-slots
fi
left=$((140 - ($(date +%s) - start)))
[ "$left" -gt 55 ] && left=55
[ "$left" -gt 15 ] && bench after "${PYTHONPATH:-}" "$left" --only mixtral:balanced --host-profile "$out/host-profile.txt"
left=$((146 - ($(date +%s) - start)))
[ "$left" -gt 25 ] && left=25
if [ "$left" -gt 10 ]; then
  timeout "$left" "$python" examples/moe_layer.py --size tiny-top8 --tokens 128 --routing skewed --capacity 128 \
    --slots --backend nccl --steps 3 >"$out/example-slots-nccl.log" 2>&1
  echo "moe_layer tiny-top8 skewed --slots --backend nccl world=1 rc=$? t=$(($(date +%s) - start))s" | tee -a "$summary"
  grep -h "PASS\|FAIL\|Error" "$out/example-slots-nccl.log" | tail -2 | cut -c1-300 | tee -a "$summary"
fi
left=$((146 - ($(date +%s) - start)))
[ "$left" -gt 20 ] && run_test 2 10 "$left"
echo "done t=$(($(date +%s) - start))s" | tee -a "$summary"
