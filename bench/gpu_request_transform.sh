#!/usr/bin/env bash
# Issue 16's one-GPU batch (< 120 s). 1. correctness on the GPU of what the transformer emits
# (the tile's wait at its lookup, loop-free, with the prefetched order entry and the slot cache;
# the loop-free notify): tests/gpu/test_transform_gpu.py, chunks landing late and shuffled, bit
# for bit, producer notifies checked by a second stream; 2. bench/bench_wait_overhead.py on the
# emitted gemm_tma_kernel (the issue's benchmark); 3. bench/bench_wait_variants.py: this
# morning's form, the emitted one and the fused@tile+all candidate, each first checked bit for
# bit with late arrivals. Run from the repository root with PYTHONPATH pointing at the staged
# package (syncopate._core makes the transformed source); writes $OUT/h-transform/.
set -u
dest="${OUT:-bench/results}/h-transform"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv > "$dest/gpu.txt" 2>&1
timeout 22 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_transform_gpu.py > "$dest/test_transform_gpu.log" 2>&1
echo "rc=$?" >> "$dest/test_transform_gpu.log"
python3 - "$dest/gemm_tma_transformed.py" <<'PY' > "$dest/transform.log" 2>&1
import sys
from syncopate import _core
path = "python/syncopate/kernels/gemm.py"
open(sys.argv[1], "w").write(_core.transform(open(path).read(), path, "gemm_tma_kernel").source)
PY
timeout 38 python3 bench/bench_wait_overhead.py --kernel-file "$dest/gemm_tma_transformed.py" --out "$dest" > "$dest/bench_wait_overhead.log" 2>&1
echo "rc=$?" >> "$dest/bench_wait_overhead.log"
timeout 50 python3 bench/bench_wait_variants.py --out "$dest" --samples 10 --variants "before;emitted;fused@tile+all" > "$dest/bench_wait_variants.log" 2>&1
echo "rc=$?" >> "$dest/bench_wait_variants.log"
tail -n 12 "$dest/test_transform_gpu.log"
cat "$dest/transform.log"
tail -n 12 "$dest/bench_wait_overhead.log"
tail -n 80 "$dest/bench_wait_variants.log"
exit 0
