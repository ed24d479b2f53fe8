#!/usr/bin/env bash
# gemm18b (issue 18): bench/gpu_request_wide_verify.sh, the config rule with the wide tiles
# verified against the pick before in one run; writes $OUT/gemm18b/gemm18/.
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
OUT="${OUT:-/tmp}/gemm18b" exec bash bench/gpu_request_wide_verify.sh
