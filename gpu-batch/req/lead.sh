#!/usr/bin/env bash
# Merged main: the ops at shared worlds 2 and 4, graphs at 2, MoE at 2, the C++ OneKernelStart test.
mkdir -p "$OUT/lead"
git log --oneline -1 > "$OUT/lead/commit.txt" 2>/dev/null || true
CUDA_MODULE_LOADING=EAGER SYNCOPATE_TEST_WORLD=1 timeout 60 build-gpu/tests/gpu/syncopate_runtime_gpu_test --gtest_brief=1 --gtest_filter='*OneKernelStart*' > "$OUT/lead/one-kernel-start.log" 2>&1; echo "OneKernelStart rc=$?" >> "$OUT/lead/one-kernel-start.log"
STEPS="${LEAD_STEPS:-py:2 graphs:2 py:4 moe:2}" OPS_ARGS=--quick PY_TIMEOUT=200 timeout 420 tests/gpu/run.sh "$OUT/lead" > "$OUT/lead/run.log" 2>&1
echo "run.sh rc=$?" >> "$OUT/lead/run.log"
