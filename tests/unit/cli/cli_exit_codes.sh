#!/usr/bin/env bash
# End-to-end checks of the `syncopate` CLI's contract: valid plans exit 0, every malformed or
# unsafe plan exits 1 with a message naming the rule, and no input (junk bytes, a directory, a
# missing file, a truncated plan) crashes it (exit >= 128) or hangs it. Then `syncopate demo`
# runs the whole CPU pipeline, and its GPU half is dispatched (or skipped) as documented.
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
check 0 "staged plan to file" "$CLI" plan --collective reduce-scatter --algo direct --world 4 --split 2 --shape 1x256x64 --dim 1 --staging p -o "$TMP/staged.json"
check 0 "verify staged" "$CLI" verify "$TMP/staged.json"
grep -q '"output": *"p"' "$TMP/staged.json" || { echo "FAIL: staged plan names no staging output"; fails=$((fails + 1)); }
check 1 "staged plan with a ring" "$CLI" plan --collective reduce-scatter --algo ring --world 2 --shape 1x64x64 --dim 1 --staging p
grep -q "staging" "$TMP/err" || { echo "FAIL: staged ring refusal does not name the staging option"; fails=$((fails + 1)); }
# Multi-node: --nodes / --gpus-per-node make a hierarchical plan (NCCL between nodes) that
# verifies; a flat copy-engine plan across nodes, or nodes that do not divide the world, exit 1
# naming the rule; tune says the network numbers are estimated.
check 0 "hierarchical plan" "$CLI" plan --collective all-reduce --algo ring --world 8 --nodes 2 --split 2 --shape 64x16 -o "$TMP/hier.json"
check 0 "verify hierarchical" "$CLI" verify "$TMP/hier.json"
grep -q '"nodes": *\[0,0,0,0,1,1,1,1\]' "$TMP/hier.json" || { echo "FAIL: hierarchical plan names no nodes"; fails=$((fails + 1)); }
check 0 "hierarchical plan by gpus per node" "$CLI" plan --collective all-to-all --algo direct --world 8 --gpus-per-node 2 --shape 64x16
check 1 "flat copy-engine plan across nodes" "$CLI" plan --collective all-gather --world 4 --nodes 2 --flat --shape 64x16
grep -q "needs backend nccl" "$TMP/err" || { echo "FAIL: flat refusal does not name the backend"; fails=$((fails + 1)); }
check 0 "flat nccl plan across nodes" "$CLI" plan --collective all-gather --world 4 --nodes 2 --flat --backend nccl --shape 64x16
check 1 "nodes that do not divide the world" "$CLI" plan --collective all-gather --world 6 --nodes 4 --shape 64x16
check 1 "disagreeing topology options" "$CLI" plan --collective all-gather --world 8 --nodes 2 --gpus-per-node 2 --shape 64x16
check 0 "tune on two nodes" "$CLI" tune --collective all-gather --gemm 4096x1024x1024 --world 4 --nodes 2 --calib "$SRC/calib/h200.json"
grep -q "estimated, not measured" "$TMP/out" || { echo "FAIL: tune does not say the network is estimated"; fails=$((fails + 1)); }
grep -q "hier " "$TMP/out" || { echo "FAIL: tune lists no hierarchical candidate"; fails=$((fails + 1)); }
# Imported plans: each hand-written input maps to a verified plan; bad input exits 1 naming the
# element; options a format does not take, or that it lacks, exit 2; a template exported to MSCCL
# XML imports back.
IMP="$SRC/tests/unit/plan/import_good"
check 0 "import msccl ring" "$CLI" import --from msccl-xml "$IMP/msccl-xml/ring_allgather.xml" --shape 8x4 -o "$TMP/imp.json"
check 0 "verify imported" "$CLI" verify "$TMP/imp.json"
check 0 "import msccl hierarchical" "$CLI" import --from msccl-xml "$IMP/msccl-xml/hierarchical_allgather.xml" --shape 4x4 --tensor a
grep -q "note: algo/gpu\[0\]/tb\[0\]/step\[0\]" "$TMP/err" || { echo "FAIL: import did not print the notes"; fails=$((fails + 1)); }
grep -q '"tensor":"a"' "$TMP/out" || { echo "FAIL: import --tensor a did not name the tensor"; fails=$((fails + 1)); }
check 0 "import mscclpp" "$CLI" import --from mscclpp-json "$IMP/mscclpp-json/two_step_allreduce.json" --shape 2x4 --backend sm-copy
check 0 "import sendrecv" "$CLI" import --from sendrecv "$IMP/sendrecv/alltoall.json" -o "$TMP/a2a.json"
sed 's/"recv": 0, "box": \[\[2, 3\]/"recv": 0, "box": [[2, 4]/' "$IMP/sendrecv/ring_allgather.json" >"$TMP/bad_sr.json"
check 1 "import a send/recv list with mismatched boxes" "$CLI" import --from sendrecv "$TMP/bad_sr.json"
grep -q "ranks\[0\]\.streams\[0\]\[4\]: moves a box" "$TMP/err" || { echo "FAIL: sendrecv refusal does not name the item"; fails=$((fails + 1)); }
sed 's/type="rcs"/type="xyz"/' "$IMP/msccl-xml/ring_allgather.xml" >"$TMP/bad.xml"
check 1 "import an unknown MSCCL step" "$CLI" import --from msccl-xml "$TMP/bad.xml" --shape 8x4
grep -q 'algo/gpu\[0\]/tb\[0\]/step\[1\] (line 7): type="xyz"' "$TMP/err" || { echo "FAIL: msccl refusal does not name the step"; fails=$((fails + 1)); }
check 1 "import junk bytes" "$CLI" import --from msccl-xml "$TMP/junk.json" --shape 8x4
check 1 "import junk bytes as JSON" "$CLI" import --from mscclpp-json "$TMP/junk.json" --shape 8x4
check 1 "import a directory" "$CLI" import --from sendrecv "$TMP"
check 1 "import a missing file" "$CLI" import --from sendrecv "$TMP/none.json"
check 1 "import a shape the chunks do not divide" "$CLI" import --from msccl-xml "$IMP/msccl-xml/ring_allgather.xml" --shape 6x4
check 2 "import without --shape" "$CLI" import --from msccl-xml "$IMP/msccl-xml/ring_allgather.xml"
check 2 "import sendrecv with --shape" "$CLI" import --from sendrecv "$IMP/sendrecv/ring_allgather.json" --shape 4x2
check 2 "import an unknown format" "$CLI" import --from nccl-xml "$IMP/msccl-xml/ring_allgather.xml" --shape 8x4
check 2 "import with the nccl backend" "$CLI" import --from msccl-xml "$IMP/msccl-xml/ring_allgather.xml" --shape 8x4 --backend nccl
check 0 "plan to export" "$CLI" plan --collective all-reduce --algo bidir --world 3 --split 2 --shape 12x4 -o "$TMP/ar.json"
check 0 "export msccl xml" "$CLI" export "$TMP/ar.json" -o "$TMP/ar.xml"
check 0 "import it back" "$CLI" import --from msccl-xml "$TMP/ar.xml" --shape 12x4 -o "$TMP/ar2.json"
check 1 "export a staged plan" "$CLI" export "$TMP/staged.json"

check 0 "demo" "$CLI" demo --no-gpu --out "$TMP/demo" --world 2 --m 2048 --n 2048 --k 2048
for f in plan.json fused.svg fused.trace.json gemm_overlapped.py; do
  [[ -s "$TMP/demo/$f" ]] || { echo "FAIL: demo did not write $f"; fails=$((fails + 1)); }
done

# The GPU half: no driver -> one line, exit 0; --no-gpu -> nothing. With a fake driver that
# reports 2 GPUs (built here when a C compiler exists), the demo must run the python it picks
# with the shape and calibration, pass its exit status on, and say how to install the package
# when the python cannot import it.
demo_small=(demo --out "$TMP/demo" --world 2 --m 2048 --n 2048 --k 2048)
check 0 "demo without a CUDA driver" env SYNCOPATE_DEMO_LIBCUDA="$TMP/none.so" "$CLI" "${demo_small[@]}"
grep -q "^GPU: none found (no CUDA driver" "$TMP/out" || { echo "FAIL: demo without a driver: no 'GPU: none found' line"; fails=$((fails + 1)); }
check 0 "demo --no-gpu" "$CLI" "${demo_small[@]}" --no-gpu
grep -Eq "^GPU:|\] GPU:" "$TMP/out" && { echo "FAIL: demo --no-gpu printed a GPU line"; fails=$((fails + 1)); }
if command -v cc >/dev/null 2>&1; then
  printf 'int cuInit(unsigned f){(void)f;return 0;}\nint cuDeviceGetCount(int*n){*n=2;return 0;}\n' >"$TMP/fake.c"
  cc -shared -fPIC -o "$TMP/libfakecuda.so" "$TMP/fake.c"
  printf '#!/bin/sh\n[ "$1" = -c ] && exit 0\necho "fake python: $*"\nexit 7\n' >"$TMP/py-ok"
  printf '#!/bin/sh\nexit 1\n' >"$TMP/py-bare"
  chmod +x "$TMP/py-ok" "$TMP/py-bare"
  check 7 "demo with 2 (fake) GPUs passes the python demo's status on" \
    env SYNCOPATE_DEMO_LIBCUDA="$TMP/libfakecuda.so" SYNCOPATE_PYTHON="$TMP/py-ok" "$CLI" "${demo_small[@]}"
  grep -q "fake python: -m syncopate.demo --m 2048 --k 2048 --n 2048 --calib /.*h200.json" "$TMP/out" ||
    { echo "FAIL: demo did not run 'python -m syncopate.demo' with the shape and calibration"; fails=$((fails + 1)); }
  check 1 "demo with GPUs but no syncopate package" \
    env SYNCOPATE_DEMO_LIBCUDA="$TMP/libfakecuda.so" SYNCOPATE_PYTHON="$TMP/py-bare" "$CLI" "${demo_small[@]}"
  grep -q "py-bare -m pip install" "$TMP/err" || { echo "FAIL: demo did not say how to install the package"; fails=$((fails + 1)); }
  check 1 "demo with GPUs and a python that does not exist" \
    env SYNCOPATE_DEMO_LIBCUDA="$TMP/libfakecuda.so" SYNCOPATE_PYTHON="$TMP/no-python" "$CLI" "${demo_small[@]}"
fi

if ((fails)); then echo "$fails CLI check(s) failed"; exit 1; fi
echo "all CLI checks passed"
