# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/demo.sh: every cache their runs write goes into a
# directory made empty here and removed when the script exits, so no run depends on what an
# earlier one left in ~/.triton, ~/.cache or /tmp (issue 13: a warm ~/.triton/cache hid a
# compile that fails on a fresh machine). Sets an EXIT trap.

CACHE_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/syncopate-caches.XXXXXX")"
trap 'rm -rf "$CACHE_ROOT"' EXIT

# with_fresh_caches NAME CMD [ARGS...]: runs CMD with Triton's home and cache, TorchInductor's
# cache (also AOTAutograd's), the XDG cache and TMPDIR in $CACHE_ROOT/NAME, made empty for it.
with_fresh_caches() {
  local dir="$CACHE_ROOT/$1"
  shift
  rm -rf "$dir"
  mkdir -p "$dir/tmp"
  TRITON_HOME="$dir" TRITON_CACHE_DIR="$dir/.triton/cache" TORCHINDUCTOR_CACHE_DIR="$dir/torchinductor" \
    XDG_CACHE_HOME="$dir/.cache" TMPDIR="$dir/tmp" "$@"
}
