#!/usr/bin/env bash
# Sourced by gpu-batch scripts on the device: build once, export the env.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=32
root=$(pwd)
mkdir -p "$OUT/work"
export LD_LIBRARY_PATH="$root/.deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
if [ -n "$nccl_lib" ] && [ -f "$nccl_lib" ]; then export SYNCOPATE_NCCL_LIBRARY="$nccl_lib"; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/work/gpu.txt" 2>&1
date -u >> "$OUT/work/gpu.txt"
t0=$(date +%s)
{ cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYNCOPATE_CUDA=ON \
    -DSYNCOPATE_BUILD_PYTHON=ON -DSYNCOPATE_BUILD_CLI=OFF -DPython_EXECUTABLE="$(command -v python3)" \
    -DCMAKE_PREFIX_PATH="$root/.deps" && ninja -C build-gpu syncopate_runtime_gpu_test _core _runtime; } > "$OUT/work/build.log" 2>&1 \
  || { echo BUILD FAILED; tail -40 "$OUT/work/build.log"; }
echo "build $(( $(date +%s) - t0 )) s" >> "$OUT/work/gpu.txt"
export PYTHONPATH="$(tests/gpu/stage_package.sh)${PYTHONPATH:+:$PYTHONPATH}"
pack() { :; }
