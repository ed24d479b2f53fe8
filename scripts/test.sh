#!/usr/bin/env bash
# Every CPU test: C++ unit tests (ctest), the plan fuzzer under ASan+UBSan, the Python package
# installed from source and its pytest suite (transformed kernels run in Triton's interpreter),
# run twice side by side, in file order and reversed, each with empty caches, failing if any test's outcome
# differs between the two (so no test may depend on test order or on an earlier run's caches).
# GPU tests live in tests/gpu/ and run on a GPU machine (tests/gpu/run.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '\033[1m[test %s]\033[0m %s\n' "$(date +%T)" "$*"; }

"$ROOT/scripts/setup.sh"
BUILD_DIR="${SYNCOPATE_BUILD_DIR:-$ROOT/build}"

log "layering (scripts/check_layers.py: includes and links look only down)"
python3 "$ROOT/scripts/check_layers.py"

log "formatting (scripts/check_format.sh: clang-format, ruff)"
"$ROOT/scripts/check_format.sh"

log "C++ unit tests"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j 2

log "plan loader, importers + verifier under ASan+UBSan (fuzzer: ${SYNCOPATE_FUZZ_SECONDS:=20} s)"
ASAN_DIR="$ROOT/build-asan"
if [[ ! -f "$ASAN_DIR/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$ASAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSYNCOPATE_SANITIZE=ON \
        -DSYNCOPATE_CUDA=OFF -DSYNCOPATE_BUILD_CLI=OFF >/dev/null
fi
cmake --build "$ASAN_DIR" -j 2 --target plan_tests plan_fuzz_tests plan_import_tests
export SYNCOPATE_FUZZ_SECONDS SYNCOPATE_SOURCE_DIR="$ROOT"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
# One process per gtest shard, not ctest's one process per test: under ASan each of the ~3000
# processes paid its start-up, which made this stage 8.5 of CI's minutes instead of about 1.5.
asan_shards() {  # BINARY: its tests in two shards side by side (two cores); the log of a failure
  local bin="$1" logs=() pids=() rc=0 i
  for i in 0 1; do
    logs[i]="$ASAN_DIR/$(basename "$bin").shard$i.log"
    GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i "$bin" --gtest_brief=1 >"${logs[i]}" 2>&1 &
    pids[i]=$!
  done
  for i in 0 1; do
    if ! wait "${pids[i]}"; then
      rc=1
      cat "${logs[i]}"
    fi
  done
  grep -h "tests from .* ran\|PASSED\|FAILED" "${logs[@]}" || true
  return $rc
}
asan_shards "$ASAN_DIR/tests/unit/plan/plan_tests"
asan_shards "$ASAN_DIR/tests/unit/plan/plan_import_tests"
asan_shards "$ASAN_DIR/tests/unit/plan/plan_fuzz_tests"

if [[ -f "$ROOT/pyproject.toml" ]]; then
  log "Python package (pip install .)"
  "$ROOT/.venv/bin/pip" install -q "$ROOT"
  # shellcheck source=fresh_caches.sh
  source "$ROOT/scripts/fresh_caches.sh"
  pytest_run() {  # NAME PYTEST-ARGS...: the suite with caches of its own (fresh_caches.sh)
    local name="$1"
    shift
    SYNCOPATE_CLI="$BUILD_DIR/src/cli/syncopate" TRITON_INTERPRET=1 \
      with_fresh_caches "$name" "$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/python" "$@"
  }
  # The order guard (tests/python/order_plugin.py): the suite in file order and reversed, side by
  # side (one core each, one thread each: the suite is mostly single-threaded interpreter runs),
  # so every pair of modules has run in both orders; any test whose outcome differs between the
  # two depends on what another left behind. Their logs are printed when both have finished.
  log "pytest in file order and in reverse order, side by side (transformed kernels in Triton's interpreter; empty caches)"
  pids=()
  for order in file reverse; do
    OMP_NUM_THREADS=1 pytest_run "$order-order" --test-order "$order" --durations=5 \
      --outcomes-out "$CACHE_ROOT/outcomes-$order.json" >"$BUILD_DIR/pytest-$order-order.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for i in 0 1; do wait "${pids[i]}" || rc=1; done
  for order in file reverse; do
    log "pytest, $order order ($BUILD_DIR/pytest-$order-order.log)"
    cat "$BUILD_DIR/pytest-$order-order.log"
  done
  log "pytest: the two orders' outcomes compared"
  "$ROOT/.venv/bin/python" "$ROOT/tests/python/order_plugin.py" \
    "$CACHE_ROOT/outcomes-file.json" "$CACHE_ROOT/outcomes-reverse.json" || rc=1
  [[ $rc == 0 ]] || exit 1
fi
log "all CPU tests passed"
