#!/usr/bin/env bash
# Every CPU test: C++ unit tests (ctest), the plan fuzzer under ASan+UBSan, the Python package
# installed from source and its pytest suite (transformed kernels run in Triton's interpreter).
# GPU tests live in tests/gpu/ and run on a GPU machine (tests/gpu/run.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '\033[1m[test]\033[0m %s\n' "$*"; }

"$ROOT/scripts/setup.sh"
BUILD_DIR="${SYNCOPATE_BUILD_DIR:-$ROOT/build}"

log "layering (scripts/check_layers.py: includes and links look only down)"
python3 "$ROOT/scripts/check_layers.py"

log "C++ unit tests"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j 2

log "plan loader + verifier under ASan+UBSan (fuzzer: ${SYNCOPATE_FUZZ_SECONDS:=20} s)"
ASAN_DIR="$ROOT/build-asan"
if [[ ! -f "$ASAN_DIR/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$ASAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSYNCOPATE_SANITIZE=ON \
        -DSYNCOPATE_CUDA=OFF -DSYNCOPATE_BUILD_CLI=OFF >/dev/null
fi
cmake --build "$ASAN_DIR" -j 2 --target plan_tests plan_fuzz_tests
export SYNCOPATE_FUZZ_SECONDS
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$ASAN_DIR" --output-on-failure -L '^plan$' -j 2

if [[ -f "$ROOT/pyproject.toml" ]]; then
  log "Python package (pip install .) and pytest"
  "$ROOT/.venv/bin/pip" install -q "$ROOT"
  SYNCOPATE_CLI="$BUILD_DIR/src/cli/syncopate" TRITON_INTERPRET=1 \
    "$ROOT/.venv/bin/python" -m pytest -q "$ROOT/tests/python"
fi
log "all CPU tests passed"
