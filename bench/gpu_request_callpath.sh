#!/usr/bin/env bash
# The call-path GPU batch (issue 14), one GPU, under 145 s wall. Run from the repository root of
# the merged tree with PYTHONPATH pointing at the staged package (the batch built build-gpu and
# exported it); writes $OUT/$NAME/ (NAME defaults to call14; without OUT, bench/results/).
#   ROUND=1 (default): the fast path of a repeated call (OpContext._fast_call, one guarded replay
#     through the runtime's replay_graph_unless):
#     1. the C++ GPU test of the guarded replay (GuardedReplay.*, with HostFlagCopy.*);
#     2. tests/gpu/test_graphs_gpu.py at world 1, 20 calls (own graph = the fast path; user
#        graph; interleaved own / user / eager);
#     3. bench/bench_call_path.py at world 1, every op (AgGemm, GemmRs chunks + epilogue, GemmAr
#        chunks) x 3 shapes, with the op's graph (BENCH_EAGER=--eager: eager contexts too),
#        torch.mm beside; kernel starts of the op, the bare replay of its graph and torch.mm side
#        by side.
#   ROUND=2: the bench at world 1 again with the same host's before (a context with the fast path
#     off: every call through the full checks) beside (BENCH_EAGER=--eager: eager too), and the guarded
#     replay's own host time; then test_graphs_gpu.py with 200 calls / replays at shared world 2
#     (both ranks on the one GPU, gloo; the missing chunk inside both graphs: the fast path must
#     hand the timeout to the full path) and at world 1.
#   Round 1 (nvidia-h200, 2026-11-25 12:0x): GuardedReplay + HostFlagCopy 2/2; graphs world 1
#     45/45 (20 calls); bench 12 rows in 45 s: host 8.4-17.3 us with the graph (replay alone
#     4.7-9.7 us), start - replay start +4.6..+15.9 us, start - torch.mm start -17.9..+1.8 us.
#   ROUND=3: the profiler-free instrument (bench/call_clock.py: %globaltimer stamps in the op's
#     graph, the floor graph, the profiler's own share) and the leaner fast path (operands that
#     passed last time not read again): tests/gpu/test_graphs_gpu.py at world 1 (20 calls: the
#     fast path replays correctly; before it the C++ OneKernelStart and GuardedReplay GPU tests),
#     then the bench, every op x 3 shapes, at world 1 and at world
#     2 with both ranks sharing the GPU (timings there are marked shared_gpu, not performance).
#   ROUND=4: the GEMM's start measured with its own stamp alone (round 3 had the first-node stamp
#     in the same graph, a kernel ahead of it: +1-2 us), at world 1 every op x 3 shapes; graphs at
#     shared world 2 (the one-kernel start with a peer, a missing chunk in both graphs); shared
#     world 2 bench for the rows round 3 had no time for (2048 and 8192 rows).
#   Round 3 (nvidia-h100-x1, 2026-11-25 15:00): OneKernelStart not in that build (GuardedReplay
#     1/1); graphs world 1 45/45; bench world 1 12/12 rows; shared world 2 5 of 12 rows in 52 s.
#   Round 4 (nvidia-h100-x1, 2026-11-25 15:40): the filter 'OneKernelStart*' ran 0 tests (the
#     suite is parameterised: CopyBackends/OneKernelStart.*); bench world 1 12/12 rows, GEMM
#     start 16.1-32 us; graphs shared world 2 100/100; shared world 2 bench 4 rows in 55 s.
#   ROUND=5 (2026-11-25 sixth session): split graphs (ops/call_graphs.py: the call's start and
#     the GEMM in a head graph launched first, the chunks and the end in a tail graph on a side
#     stream): the C++ GPU tests *SplitGraph* (done event by the host and by the tail),
#     *OneKernelStart* (its first run) and GuardedReplay.*; test_graphs_gpu.py at shared world 2,
#     10 calls (the split graphs with a peer: own graph, user graph, interleaving, a missing
#     chunk in both graphs); the bench at
#     world 1, every op x 3 shapes, side by side: the split context, the one-graph context
#     (--no-one-graph drops it) and the split with the start event on a branch and the done
#     event recorded by the tail (--no-branch); the bench at shared world 2 in
#     --correctness-only mode (the default split context's results, every row; no timing).
# Earlier rounds (session of 2026-11-25 morning, the path before the fast path): see git log.
set -u
ROUND=${ROUND:-1}
NAME=${NAME:-call14}
BENCH_EAGER=${BENCH_EAGER:-}
dest="${OUT:-bench/results}/$NAME"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_MAX_CONNECTIONS=32
t0=$(date +%s)
deadline=$((t0 + 140))
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
CPP_TEST=build-gpu/tests/gpu/syncopate_runtime_gpu_test

VARIANTS=AgGemm,GemmRs-chunks,GemmRs-epilogue,GemmAr-chunks
if [ "$ROUND" = 3 ]; then
  if [ -x "$CPP_TEST" ]; then
    step 12 one_kernel_start.log "$CPP_TEST" --gtest_filter='OneKernelStart*:GuardedReplay.*'
  else
    echo "skipped: $CPP_TEST not built" > "$dest/one_kernel_start.log"
  fi
  step 26 graphs_w1.log "${TR[@]}" --nproc_per_node=1 tests/gpu/test_graphs_gpu.py --calls 20 --hang-dump-s 24
  step 50 bench_w1.log python3 bench/bench_call_path.py --out-dir "$dest" --no-full-path --eager --variants "$VARIANTS"
  step 52 bench_w2_shared.log "${TR[@]}" --nproc_per_node=2 bench/bench_call_path.py --out-dir "$dest" \
    --no-full-path --start-calls 10 --variants "$VARIANTS"
elif [ "$ROUND" = 4 ]; then
  if [ -x "$CPP_TEST" ]; then
    step 8 one_kernel_start.log "$CPP_TEST" --gtest_filter='OneKernelStart*'
  else
    echo "skipped: $CPP_TEST not built" > "$dest/one_kernel_start.log"
  fi
  step 45 bench_w1.log python3 bench/bench_call_path.py --out-dir "$dest" --no-full-path --variants "$VARIANTS"
  step 30 graphs_w2.log "${TR[@]}" --nproc_per_node=2 tests/gpu/test_graphs_gpu.py --calls 20 --hang-dump-s 28
  step 55 bench_w2_shared.log "${TR[@]}" --nproc_per_node=2 bench/bench_call_path.py --out-dir "$dest" \
    --no-full-path --start-calls 8 --shapes 2048,8192 --variants "$VARIANTS"
elif [ "$ROUND" = 5 ]; then
  if [ -x "$CPP_TEST" ]; then
    step 10 cpp_split_graph.log "$CPP_TEST" --gtest_filter='*SplitGraph*:*OneKernelStart*:GuardedReplay.*'
  else
    echo "skipped: $CPP_TEST not built" > "$dest/cpp_split_graph.log"
  fi
  step 30 graphs_w2.log "${TR[@]}" --nproc_per_node=2 tests/gpu/test_graphs_gpu.py --calls 10 --hang-dump-s 28
  step 58 bench_w1.log python3 bench/bench_call_path.py --out-dir "$dest" --no-full-path --variants "$VARIANTS"
  step 38 bench_w2_shared.log "${TR[@]}" --nproc_per_node=2 bench/bench_call_path.py --out-dir "$dest" \
    --correctness-only --no-one-graph --no-plain-split --variants "$VARIANTS"
elif [ "$ROUND" = 1 ]; then
  if [ -x "$CPP_TEST" ]; then
    step 10 guarded_replay.log "$CPP_TEST" --gtest_filter='GuardedReplay.*:HostFlagCopy.*'
  else
    echo "skipped: $CPP_TEST not built" > "$dest/guarded_replay.log"
  fi
  step 30 graphs_w1.log "${TR[@]}" --nproc_per_node=1 tests/gpu/test_graphs_gpu.py --calls 20 --hang-dump-s 28
  step 95 bench_w1.log python3 bench/bench_call_path.py --out-dir "$dest" $BENCH_EAGER \
    --variants AgGemm,GemmRs-chunks,GemmRs-epilogue,GemmAr-chunks
else
  step 70 bench_w1.log python3 bench/bench_call_path.py --out-dir "$dest" $BENCH_EAGER \
    --variants AgGemm,GemmRs-chunks,GemmRs-epilogue,GemmAr-chunks
  step 45 graphs_w2_200.log "${TR[@]}" --nproc_per_node=2 tests/gpu/test_graphs_gpu.py --calls 200 --hang-dump-s 42
  step 25 graphs_w1_200.log "${TR[@]}" --nproc_per_node=1 tests/gpu/test_graphs_gpu.py --calls 200 --hang-dump-s 23
fi
for f in "$dest"/*.log; do
  echo "== $(basename "$f")"
  grep -E "^SUMMARY|^FAIL|^BAD|^\[  FAILED|^\[  PASSED|hang|Timeout|Traceback|^rc=|Error|targets|met on|one graph|tail.s fork|correctness only|no profiler" "$f" | head -60
done > "$dest/summary.txt" 2>&1
cat "$dest/summary.txt"
exit 0
