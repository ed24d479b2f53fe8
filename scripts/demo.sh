#!/usr/bin/env bash
# The main job: installs what it needs, builds, then runs `syncopate demo`: the whole pipeline
# (plan -> verify -> lower -> schedule -> simulate -> tune -> transform) on a real-sized AG+GEMM
# on the CPU, then, where GPUs are present, the fused AG+GEMM on every visible GPU next to
# sequential NCCL all-gather + torch.mm (checked against fp32, timed, with the simulator's
# prediction). Arguments go to `syncopate demo` (e.g. --no-gpu). Safe to run again: set-up
# steps are skipped when done, and the Python package is reinstalled only when the sources changed;
# Triton's cache starts empty on every run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup.sh"
BUILD_DIR="${SYNCOPATE_BUILD_DIR:-$ROOT/build}"
VENV="$ROOT/.venv"

have_gpus() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
wants_gpu=1
for arg in "$@"; do [[ "$arg" == --no-gpu ]] && wants_gpu=0; done

# The GPU half runs in Python (the fused kernels are Triton): install the package into .venv,
# offline-capable (--no-build-isolation: setup.sh put scikit-build-core, nanobind, cmake there).
if ((wants_gpu)) && have_gpus && [[ -x "$VENV/bin/python" ]]; then
  STAMP="$VENV/.syncopate-package"
  sources="$( { git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo no-git
               git -C "$ROOT" diff HEAD -- python src include CMakeLists.txt pyproject.toml 2>/dev/null; } | sha1sum)"
  if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$sources" ]] ||
     ! "$VENV/bin/python" -c 'import syncopate._core, syncopate.demo' >/dev/null 2>&1; then
    printf '\033[1m[demo]\033[0m %s\n' "installing the syncopate Python package into $VENV (builds the C++ core: a few minutes)"
    "$VENV/bin/pip" install -q --no-build-isolation "$ROOT"
    echo "$sources" >"$STAMP"
  fi
  export SYNCOPATE_PYTHON="$VENV/bin/python"
fi

mkdir -p "$ROOT/demo-out"
# Triton compiles the GPU half's kernels into an empty cache of its own, so the demo never rests
# on what an earlier run left in ~/.triton (fresh_caches.sh).
# shellcheck source=fresh_caches.sh
source "$ROOT/scripts/fresh_caches.sh"
with_fresh_caches demo "$BUILD_DIR/src/cli/syncopate" demo --out "$ROOT/demo-out" "$@"
