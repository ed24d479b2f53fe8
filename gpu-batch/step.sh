# Sourced by gpu-batch/req scripts: step NAME LIMIT CMD... runs one step under `timeout`, its
# output in $dest/NAME.log, its status and time appended to $dest/summary.txt.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout -k 3 "$limit" "$@" > "$dest/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0))s (limit ${limit}s)" >> "$dest/summary.txt"
}
