#!/usr/bin/env bash
# The main job: builds everything, then runs `syncopate demo` (plan -> verify -> lower ->
# schedule -> simulate -> transform on a real-sized example; CPU only) and, where GPUs are
# present, the fused AG+GEMM on them next to sequential NCCL+cuBLAS.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup.sh"
BUILD_DIR="${SYNCOPATE_BUILD_DIR:-$ROOT/build}"
mkdir -p "$ROOT/demo-out"
"$BUILD_DIR/src/cli/syncopate" demo --out "$ROOT/demo-out" "$@"
