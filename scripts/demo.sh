#!/usr/bin/env bash
# The main job: builds everything, then runs `syncopate demo` (plan -> verify -> lower ->
# schedule -> simulate -> tune -> transform on a real-sized example, on the CPU). A GPU part of
# the demo (the fused AG+GEMM next to sequential NCCL+cuBLAS) is not built yet; where GPUs are
# present this says how to run the fused ops' GPU tests instead.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup.sh"
BUILD_DIR="${SYNCOPATE_BUILD_DIR:-$ROOT/build}"
mkdir -p "$ROOT/demo-out"
"$BUILD_DIR/src/cli/syncopate" demo --out "$ROOT/demo-out" "$@"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo
  echo "GPUs found ($(nvidia-smi -L | wc -l)). The fused ops run on them with: tests/gpu/run.sh"
  echo "(the GPU half of this demo is not built yet)."
fi
