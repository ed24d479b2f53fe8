#!/usr/bin/env bash
# Stages the Python package from the source tree plus the modules built in build-gpu/ (no pip:
# nothing to download on the device) into a fresh directory and prints it, for PYTHONPATH.
#   PYTHONPATH=$(tests/gpu/stage_package.sh) python3 bench/bench_call_path.py
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pkg=$(mktemp -d)
cp -r "$root/python/syncopate" "$pkg/"
cp "$root"/build-gpu/python/_core*.so "$root"/build-gpu/python/_runtime*.so "$pkg/syncopate/"
# The wheel ships calib/*.json inside the package; the ops' simulator choice loads it from there.
mkdir -p "$pkg/syncopate/calib" && cp "$root"/calib/*.json "$pkg/syncopate/calib/"
echo "$pkg"
