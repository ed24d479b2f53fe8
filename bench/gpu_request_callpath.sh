#!/usr/bin/env bash
# The callpath helper's GPU batch (issue 14), one GPU, under 120 s wall. Run from the repository
# root of the merged tree with PYTHONPATH pointing at the staged package (the batch built
# build-gpu and exported it); writes $OUT/callpath/ (or bench/results/callpath/).
#   ROUND=1 (default): the fix of the hang and the input path as AG+GEMM's default:
#     1. tests/gpu/stress_wait_timeout.py: every program of a launch times out at once, 300
#        launches, shipped wait vs --old (the pre-fix record write: a CAS behind a CTA barrier
#        that some warps skip); a launch that never finishes = the hang;
#     2. tests/gpu/test_graphs_gpu.py at shared world 2 (the case that hung) and world 1;
#     3. tests/gpu/test_ops_gpu.py --quick at shared world 2.
#   ROUND=2: bench/bench_call_path.py (kernel start on %globaltimer, bench/call_clock.py) at
#     world 1 (AgGemm from its input / AgGemm-copy) and shared world 2 (AgGemm),
#     3 shapes; the missing-chunk section of test_ops_gpu.py --quick at shared world 2 (round 1
#     ran out of time before it); the old wait under stress for 3000 launches.
#   Round 1 (nvidia-h200, 2026-11-25 08:3x): stress shipped 300/300, old 299/300 (launch 0: a
#   program's reduction after the wait came out wrong); graphs world 1 45/45, shared world 2
#   100/100 with the input path (the case that hung passes); ops --quick shared 2: 177 PASS, 0
#   FAIL before the 40 s limit (cut in the missing-chunk section).
set -u
ROUND=${ROUND:-1}
dest="${OUT:-bench/results}/callpath"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_MAX_CONNECTIONS=32
t0=$(date +%s)
deadline=$((t0 + 112))
nvidia-smi --query-gpu=name,compute_cap,clocks.sm --format=csv > "$dest/gpu.txt" 2>&1
git log --oneline -1 > "$dest/commit.txt" 2>&1

# step SECONDS LOG COMMAND...: runs it with at most SECONDS (less if the deadline is nearer)
step() {
  local want=$1 log=$2
  shift 2
  local left=$((deadline - $(date +%s)))
  local limit=$((want < left ? want : left))
  if [ "$limit" -lt 5 ]; then echo "skipped: no time left" > "$dest/$log"; return; fi
  echo "== $* (limit ${limit}s)" > "$dest/$log"
  timeout -k 3 "$limit" "$@" >> "$dest/$log" 2>&1
  echo "rc=$? at ${limit}s limit, t=$(( $(date +%s) - t0 ))s" >> "$dest/$log"
}
# torchrun on this one GPU (the ranks share it above world 1)
TR=(python3 -m torch.distributed.run --standalone)

if [ "$ROUND" = 1 ]; then
  step 10 stress_shipped.log python3 tests/gpu/stress_wait_timeout.py --launches 300
  step 10 stress_old.log python3 tests/gpu/stress_wait_timeout.py --launches 300 --old
  step 35 graphs_w2.log "${TR[@]}" --nproc_per_node=2 tests/gpu/test_graphs_gpu.py --calls 10 --hang-dump-s 28
  step 25 graphs_w1.log "${TR[@]}" --nproc_per_node=1 tests/gpu/test_graphs_gpu.py --calls 10 --hang-dump-s 20
  step 40 ops_w2.log "${TR[@]}" --nproc_per_node=2 tests/gpu/test_ops_gpu.py --quick
else
  step 55 bench_w1.log python3 bench/bench_call_path.py --out-dir "$dest" --variants AgGemm,AgGemm-copy
  step 32 bench_w2.log "${TR[@]}" --nproc_per_node=2 bench/bench_call_path.py --out-dir "$dest" --variants AgGemm
  step 15 ops_w2_missing.log "${TR[@]}" --nproc_per_node=2 tests/gpu/test_ops_gpu.py --quick --only missing-chunk
  step 10 stress_old.log python3 tests/gpu/stress_wait_timeout.py --launches 3000 --old
fi
for f in "$dest"/*.log; do
  echo "== $(basename "$f")"
  grep -E "^SUMMARY|^FAIL|^BAD|hang|Timeout|Traceback|^rc=|Error" "$f" | head -20
done > "$dest/summary.txt" 2>&1
cat "$dest/summary.txt"
exit 0
