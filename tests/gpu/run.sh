#!/usr/bin/env bash
# GPU tests of the runtime and the fused ops; run on a device machine from the repository root.
#
#   tests/gpu/run.sh [LOG_DIR]        (default bench/results)
#
# 1. builds the runtime, the C++ GPU tests and the Python modules (build-gpu/, Release);
# 2. runs the single-process multi-GPU C++ tests at world sizes 1 .. max(4, GPUs) (ranks beyond
#    the GPU count share GPUs; nccl cases need one GPU per rank and skip there);
# 3. runs tests/gpu/test_ops_gpu.py and tests/gpu/test_graphs_gpu.py under torchrun at worlds 1-4
#    (one GPU per rank where there are enough, else every rank on the GPUs there are: gloo
#    bootstrap, NCCL rows skipped by name; correctness only) and beyond 4 up to the GPU count;
# 4. runs tests/gpu/test_imported_plan_gpu.py (plans imported from MSCCL XML / send-recv lists in
#    AgGemm and GemmRs) at worlds 2 and 4, ranks sharing GPUs where there are fewer;
# 5. runs tests/gpu/test_multinode_gpu.py (hierarchical plans on two emulated nodes, NCCL on its
#    network transport) at worlds 2 and 4;
# 6. runs tests/gpu/test_moe_gpu.py (MoE: sequential layer, fused dispatch, grouped GEMM) at
#    worlds 1 and 2 (ranks share GPUs where there are fewer).
# 7. runs tests/gpu/test_seq_attention_grad_gpu.py (backward of ulysses_attention / ring_attention
#    against float32 SDPA) at worlds 1 and 2 (ranks share GPUs where there are fewer).
# Logs: LOG_DIR/gpu-tests-<date>.log (everything) and the per-rank result lines beside it.
# STEPS (e.g. "cpp:2 py:2 cpp:4") picks and orders the runs; OPS_ARGS is passed to
# test_ops_gpu.py (e.g. "--quick", "--only matrix"); CPP_TIMEOUT / PY_TIMEOUT bound each run (s).
# Exit status: non-zero if any step failed. Dependencies missing on the device (fmt,
# nlohmann-json, GoogleTest, CLI11, pugixml) may be carried in .deps/ (made by scripts/gpu_deps.sh; SYNCOPATE_DEPS
# names another).
set -uo pipefail

# NVLink multicast stays off: using it can put the host's shared GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# No module load may happen while a waiter spins (docs/RUNTIME.md, "Warm-up"): the C++
# tests load every module at start (CUDA_MODULE_LOADING=EAGER below); the Python ops warm their
# kernels up explicitly (EAGER would load all of PyTorch's kernels in every process).
export PYTHONUNBUFFERED=1
# CUDA maps streams onto a few hardware queues (8 by default); two streams sharing one queue
# are serialised, and a bounded wait at the head of one can then hold up an unrelated stream
# that the wait itself depends on (seen once: world 4 on 2 GPUs, a 10 s timeout). 32 queues
# make such false dependencies much rarer.
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
log_dir=${1:-bench/results}
mkdir -p "$log_dir"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
log="$log_dir/gpu-tests-$stamp.log"
python=${PYTHON:-python3}
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())')
status=0
say() { echo "== $*" | tee -a "$log"; }

say "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs), GPUs: $gpus, $(date -u)"
say "software: $("$python" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1)"

say "tools: $(cmake --version | head -1), $(c++ --version | head -1), $(nvcc --version | tail -1)"

deps=${SYNCOPATE_DEPS:-$root/.deps}
prefix_args=()
if [ -d "$deps" ]; then
  prefix_args=(-DCMAKE_PREFIX_PATH="$deps")
  export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
nccl_lib=$("$python" -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
if [ -n "$nccl_lib" ] && [ -f "$nccl_lib" ]; then export SYNCOPATE_NCCL_LIBRARY="$nccl_lib"; fi

say "build"
if ! { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYNCOPATE_CUDA=ON \
         -DSYNCOPATE_BUILD_PYTHON=ON -DSYNCOPATE_BUILD_CLI=OFF -DPython_EXECUTABLE="$(command -v "$python")" \
         "${prefix_args[@]}" && ninja -C build-gpu syncopate_runtime_gpu_test _core _runtime; } >>"$log" 2>&1; then
  say "BUILD FAILED (see $log)"; tail -30 "$log"; exit 2
fi

# The package from the source tree plus the modules just built (no pip: nothing to download).
pkg=$(tests/gpu/stage_package.sh)
export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}"

run_cpp() {  # $1: world size
  local world=$1 filter
  # nccl cases apart: a hang inside NCCL (beyond the runtime's bounds) must not hide the rest.
  for filter in "-*nccl*" "*nccl*"; do
    say "C++ runtime tests, single process, world $world on $gpus GPU(s), filter $filter"
    if ! CUDA_MODULE_LOADING=EAGER SYNCOPATE_TEST_WORLD=$world timeout "${CPP_TIMEOUT:-240}" \
         build-gpu/tests/gpu/syncopate_runtime_gpu_test --gtest_brief=1 --gtest_filter="$filter" >>"$log" 2>&1; then
      status=1; say "C++ world $world ($filter) FAILED"
    fi
    grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|tests? ran|missing-chunk error" "$log" | tail -3
  done
}

run_torchrun() {  # WORLD WHAT SCRIPT [ARGS...]: one GPU test script under torchrun
  local world=$1 what=$2 script=$3
  shift 3
  say "$what, torchrun world $world on $gpus GPU(s)"
  if ! timeout "${PY_TIMEOUT:-420}" "$python" -m torch.distributed.run --standalone --nproc_per_node="$world" \
       "$script" "$@" >>"$log" 2>&1; then
    status=1; say "$what world $world FAILED"
  fi
  grep -E "^SUMMARY|^FAIL" "$log" | tail -12
}

# shellcheck disable=SC2086  (OPS_ARGS / GRAPHS_ARGS are word lists)
run_py() { run_torchrun "$1" "Python ops" tests/gpu/test_ops_gpu.py --results-file "$log_dir/gpu-ops-$stamp-w$1" ${OPS_ARGS:-}; }
# shellcheck disable=SC2086
run_graphs() { run_torchrun "$1" "call path under CUDA graphs" tests/gpu/test_graphs_gpu.py --results-file "$log_dir/gpu-graphs-$stamp-w$1" ${GRAPHS_ARGS:-}; }
# Ranks share GPUs where there are fewer (gpu_group.py).
run_imported() { run_torchrun "$1" "Imported plans in AgGemm / GemmRs" tests/gpu/test_imported_plan_gpu.py; }
# The MoE pieces (issue 19): sequential layer, fused dispatch, grouped GEMM with late chunks.
run_moe() { run_torchrun "$1" "MoE dispatch / combine and grouped GEMM" tests/gpu/test_moe_gpu.py --results-file "$log_dir/gpu-moe-$stamp-w$1"; }
# The sequence-parallel attention ops' backward (issue 20).
run_seq_grad() { run_torchrun "$1" "Sequence-parallel attention backward" tests/gpu/test_seq_attention_grad_gpu.py; }
# Hierarchical plans on emulated nodes (SYNCOPATE_NODES=2: the first half of the ranks node 0),
# NCCL forced onto its network transport (sockets / IB) so inter-node chunks leave NVLink. With
# fewer GPUs than ranks only the heap's topology is checked (NCCL refuses shared GPUs).
run_multinode() {
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 SYNCOPATE_NODES=${SYNCOPATE_NODES:-2} \
    run_torchrun "$1" "Hierarchical plans on emulated nodes" tests/gpu/test_multinode_gpu.py
}

# STEPS: what to run, in order, e.g. "cpp:2 py:2 graphs:2 imp:2". Default: the C++ tests at
# worlds 1 .. max(4, GPUs), then the Python ops and the graph tests at worlds 1 .. max(4, GPUs),
# then the imported plans at worlds 2 and 4 (ranks share GPUs where there are fewer), then the
# emulated multi-node plans at worlds 2 and 4, then the MoE tests at worlds 1 and 2, then the
# attention backward at worlds 1 and 2.
if [ -z "${STEPS:-}" ]; then
  STEPS=""
  for w in $(seq 1 $(( gpus > 4 ? gpus : 4 ))); do STEPS="$STEPS cpp:$w"; done
  for w in $(seq 1 $(( gpus > 4 ? gpus : 4 ))); do STEPS="$STEPS py:$w graphs:$w"; done
  STEPS="$STEPS imp:2 imp:4 mn:2 mn:4 moe:1 moe:2 sag:1 sag:2"
fi
for step in $STEPS; do
  case "$step" in
    cpp:*) run_cpp "${step#cpp:}" ;;
    py:*) run_py "${step#py:}" ;;
    graphs:*) run_graphs "${step#graphs:}" ;;
    imp:*) run_imported "${step#imp:}" ;;
    mn:*) run_multinode "${step#mn:}" ;;
    moe:*) run_moe "${step#moe:}" ;;
    sag:*) run_seq_grad "${step#sag:}" ;;
    *) say "unknown step $step"; status=1 ;;
  esac
done
say "done: status $status, log $log"
exit $status
