#!/usr/bin/env bash
# Regenerates the golden plans under tests/golden/plans/ with the `syncopate plan` CLI.
# json_test.cpp rebuilds each plan from the options recorded inside it and diffs the text, so
# rerun this (and review the diff) whenever a template or the JSON layout changes on purpose.
#
# Usage: scripts/regen_golden_plans.sh [path/to/syncopate]
#   default binary: ${SYNCOPATE_BUILD_DIR:-build}/src/cli/syncopate
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-${SYNCOPATE_BUILD_DIR:-$ROOT/build}/src/cli/syncopate}"
OUT="$ROOT/tests/golden/plans"

if [[ ! -x "$BIN" ]]; then
  echo "regen_golden_plans: no syncopate binary at $BIN (build it, or pass its path)" >&2
  exit 2
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.json

golden() {
  local name="$1"
  shift
  "$BIN" plan "$@" -o "$OUT/$name.json"
  echo "wrote tests/golden/plans/$name.json"
}

golden all-gather_ring_w4_s2 --collective all-gather --algo ring --world 4 --split 2 --shape 16x8
golden reduce-scatter_direct_w3_uneven --collective reduce-scatter --algo direct --world 3 --shape 7x4
golden all-reduce_bidir_w4_f32 --collective all-reduce --algo bidir --world 4 --shape 8x2 --dtype f32
golden all-to-all_ring_w4_s2_dim1_nccl --collective all-to-all --algo ring --world 4 --split 2 --shape 2x16 \
  --dim 1 --backend nccl
golden all-gather_bidir_w5_dim2_sm-copy --collective all-gather --algo bidir --world 5 --shape 2x3x10 --dim 2 \
  --dtype f16 --backend sm-copy
