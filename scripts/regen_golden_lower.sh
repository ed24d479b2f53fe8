#!/usr/bin/env bash
# Regenerates the golden signal tables and tile orders under tests/golden/lower/ from the
# current code, then shows what changed. Review the diff before committing it.
#   scripts/regen_golden_lower.sh [build-dir]   (default: build)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
if [[ ! -f "$build/build.ninja" && ! -f "$build/Makefile" ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DSYNCOPATE_CUDA=OFF
fi
cmake --build "$build" --target schedule_tests
SYNCOPATE_REGEN_GOLDEN=1 "$build/tests/unit/schedule/schedule_tests" --gtest_filter='Golden.*'
git -C "$root" status --short -- tests/golden/lower
git -C "$root" --no-pager diff --stat -- tests/golden/lower
