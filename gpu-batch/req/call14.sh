#!/usr/bin/env bash
# call14 (issue 14, split graphs), round 1: see bench/gpu_request_callpath.sh, ROUND=5.
# Runs from the repository root of the merged tree; writes $OUT/call14/; under 145 s wall.
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
ROUND=5 NAME=call14 exec bash bench/gpu_request_callpath.sh
