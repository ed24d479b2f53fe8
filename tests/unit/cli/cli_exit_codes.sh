#!/usr/bin/env bash
# End-to-end checks of the `syncopate` CLI's contract: valid plans exit 0, every malformed or
# unsafe plan exits 1 with a message naming the rule, and no input (junk bytes, a directory, a
# missing file, a truncated plan) crashes it (exit >= 128) or hangs it. Then `syncopate demo`
# runs the whole CPU pipeline.
#   $1: the syncopate executable   $2: the source tree
set -uo pipefail
CLI="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
fails=0
check() {  # check <expected exit> <description> <command...>
  local want="$1" what="$2"; shift 2
  timeout 120 "$@" >"$TMP/out" 2>"$TMP/err"; local got=$?
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: $what: exit $got, expected $want"; sed 's/^/    /' "$TMP/err" | head -5; fails=$((fails + 1))
  fi
}

for f in "$SRC"/tests/unit/plan/good/*.json "$SRC"/tests/golden/plans/*.json; do
  check 0 "verify $(basename "$f")" "$CLI" verify "$f"
  check 0 "show $(basename "$f")" "$CLI" show "$f"
done
for f in "$SRC"/tests/unit/plan/bad/*.json; do
  check 1 "verify bad/$(basename "$f")" "$CLI" verify "$f"
  grep -q "error" "$TMP/err" || { echo "FAIL: bad/$(basename "$f"): no error message"; fails=$((fails + 1)); }
done

head -c 4096 /dev/urandom >"$TMP/junk.json"
check 1 "verify junk bytes" "$CLI" verify "$TMP/junk.json"
check 1 "verify a directory" "$CLI" verify "$TMP"
check 1 "verify a missing file" "$CLI" verify "$TMP/none.json"
good="$(ls "$SRC"/tests/golden/plans/*.json | head -1)"
head -c 300 "$good" >"$TMP/truncated.json"
check 1 "verify a truncated plan" "$CLI" verify "$TMP/truncated.json"
check 1 "plan with a bad --world" "$CLI" plan --collective all-gather --algo ring --world 0 --shape 64x64
check 1 "plan that cannot be split" "$CLI" plan --collective all-gather --algo ring --world 4 --split 2 --shape 6x4
check 2 "plan with an unknown --algo" "$CLI" plan --collective all-gather --algo tree --world 2 --shape 64x64
check 0 "plan to file" "$CLI" plan --collective reduce-scatter --algo bidir --world 3 --split 2 --shape 96x32 -o "$TMP/p.json"
check 0 "verify generated" "$CLI" verify "$TMP/p.json"
check 0 "demo" "$CLI" demo --out "$TMP/demo" --world 2 --m 2048 --n 2048 --k 2048
for f in plan.json fused.svg fused.trace.json gemm_overlapped.py; do
  [[ -s "$TMP/demo/$f" ]] || { echo "FAIL: demo did not write $f"; fails=$((fails + 1)); }
done

if ((fails)); then echo "$fails CLI check(s) failed"; exit 1; fi
echo "all CLI checks passed"
