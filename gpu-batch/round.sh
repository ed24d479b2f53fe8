#!/usr/bin/env bash
# Runs each request gpu-batch/req/<name>.sh (REQS="a b c") under a timeout; each request's
# results are packed into $OUT/<name>.tgz as soon as it ends ($OUT brings back 8 files at most).
source gpu-batch/common.sh
for r in ${REQS}; do
  mkdir -p "$OUT/$r"
  s=$(date +%s)
  timeout -k 5 "${REQ_TIMEOUT:-170}" bash "gpu-batch/req/$r.sh" > "$OUT/$r/request.log" 2>&1
  echo "$r rc=$? $(( $(date +%s) - s )) s" | tee -a "$OUT/work/gpu.txt"
  (cd "$OUT" && tar czf "$r.tgz" "$r" && rm -rf "$r")
done
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
