#!/usr/bin/env bash
# The op benchmark (or the ablation) in one command, on a device machine, from any directory:
#
#   bench/run_bench.sh [--ablation] [bench_ops.py / bench_ablation.py options]
#   bench/run_bench.sh --block [bench_tp_block.py options]        (the LLaMA block's step)
#   bench/run_bench.sh --example [examples/tp_llama_block.py options]   (its check, no timing)
#
# 1. builds the runtime and the Python modules into build-gpu/ through tests/gpu/run.sh with no
#    test steps (a no-op when the GPU tests already built them on this machine; SKIP_BUILD=1
#    skips it); the build log goes to $OUT (or bench/results) as gpu-tests-<date>.log;
# 2. stages the package (python/syncopate + the built _core/_runtime) on PYTHONPATH, as run.sh does;
# 3. runs torchrun over WORLD processes (default: every visible GPU; more than the GPUs: ranks
#    share GPUs, which only --example and --block support, over gloo), bounded by BENCH_TIMEOUT
#    seconds (default 570); the benchmark rewrites its JSON after every row, so a time-out
#    keeps what was measured.
set -uo pipefail

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
# As in tests/gpu/run.sh: more hardware queues, fewer false dependencies between streams.
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-bench/results}
mkdir -p "$out"
python=${PYTHON:-python3}
script=bench/bench_ops.py
case "${1:-}" in
  --ablation) script=bench/bench_ablation.py; shift ;;
  --block) script=bench/bench_tp_block.py; shift ;;
  --example) script=examples/tp_llama_block.py; shift ;;
esac

if [ -z "${SKIP_BUILD:-}" ]; then
  if ! STEPS=" " tests/gpu/run.sh "$out" >/dev/null; then
    echo "run_bench: build failed (log: $(ls -t "$out"/gpu-tests-*.log | head -1))"
    tail -30 "$(ls -t "$out"/gpu-tests-*.log | head -1)"
    exit 2
  fi
fi
# What tests/gpu/run.sh exports for its own children: the carried dependencies and NCCL's path.
deps=${SYNCOPATE_DEPS:-$root/.deps}
if [ -d "$deps" ]; then export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"; fi
nccl_lib=$("$python" -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
if [ -n "$nccl_lib" ] && [ -f "$nccl_lib" ]; then export SYNCOPATE_NCCL_LIBRARY="$nccl_lib"; fi

# The package from the source tree plus the modules tests/gpu/run.sh built (no pip).
if ! pkg=$(tests/gpu/stage_package.sh); then
  echo "run_bench: no built modules in build-gpu/python (run without SKIP_BUILD)"; exit 2
fi
export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}"

world=${WORLD:-$("$python" -c 'import torch; print(torch.cuda.device_count())')}
echo "run_bench: $script on $world GPU(s): $*"
timeout "${BENCH_TIMEOUT:-570}" "$python" -m torch.distributed.run --standalone \
  --nproc_per_node="$world" "$script" "$@"
status=$?
rm -rf "$pkg"
exit $status
