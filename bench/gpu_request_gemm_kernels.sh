#!/usr/bin/env bash
# The GEMM kernels as rebuilt from shared helpers (issue 15) (kernels/gemm.py: the TMA
# prologue tma_gemm_prologue, the C-tile stores store_c_tile / tma_store_tile, the split-K
# work-item decode split_k_work_item; the FP8 kernel now imports gemm.py's prologue, K loop and
# store, and the transformer follows the imported store helper). One GPU, world 1, correctness
# only, < 150 s: the GEMM checks run side by side with the ops (Triton compiles dominate; the
# machine has 16 cores), each under its own time limit; the two op tests one after the other. Run from the repository root with PYTHONPATH at the
# staged package; writes "$OUT/gemm-kernels/". First run: nvidia-h200, 2026-11-25, everything
# passed (plain GEMM 20/20, test_fp8_gpu 26, test_gemm_gpu 16, test_ops_fp8_gpu --quick 24/24,
# test_ops_gpu --quick --only matrix 90/90 at world 1; 32 s of wall time in all).
set -u
dest="${OUT:-bench/results}/gemm-kernels"
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
nvidia-smi --query-gpu=name,compute_cap --format=csv > "$dest/gpu.txt" 2>&1
limit=130
run() {  # name, time limit (s), command...: log in $dest/<name>.log
    local name=$1 lim=$2 t0=$SECONDS
    shift 2
    timeout "$lim" "$@" > "$dest/$name.log" 2>&1
    echo "rc=$? seconds=$((SECONDS - t0))" >> "$dest/$name.log"
}
cat > "$dest/plain_gemm.py" <<'PY'
# The plain GEMM: the GPU's default path (host descriptors, gemm_tma_host_kernel, whose store is
# now tma_store_tile) at both epilogue splits, the device-descriptor kernel gemm_tma_kernel
# (tma_gemm_prologue, store_c_tile: TMA and pointer stores), the two-launch split-K kernel with
# device descriptors (split_k_work_item); both B layouts; vs an fp32 torch reference.
import dataclasses
import torch
from syncopate.kernels import gemm_module as g
from syncopate.kernels.configs import CANDIDATES
torch.manual_seed(0)
fails = 0
cases = [("host e2", CANDIDATES[0], {}), ("host e1", CANDIDATES[1], {}),
         ("device e2", CANDIDATES[0], dict(host_descriptors=False)),
         ("device pointer stores", CANDIDATES[1], dict(host_descriptors=False, c_store_pointers=True)),
         ("split-k 2 device", dataclasses.replace(CANDIDATES[2], split_k=2), dict(host_descriptors=False))]
for m, n, k in ((512, 768, 640), (300, 520, 264)):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    for name, cfg, kw in cases:
        for bt in (b, b.t().contiguous().t()):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            g.gemm(a, bt, out=out, config=cfg, **kw)
            err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
            fails += not err < 1e-2
            print(f"{'OK' if err < 1e-2 else 'FAIL'} {name} {m}x{n}x{k} b_stride={bt.stride()} rel={err:.2e}", flush=True)
print(f"SUMMARY failed={fails}")
raise SystemExit(1 if fails else 0)
PY
ranks=(env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1)
# 1. the plain GEMM's kernels (above)
run plain_gemm "$limit" python3 "$dest/plain_gemm.py" &
# 2. the FP8 kernel (imported helpers) vs fp32 and torch._scaled_mm; the one-launch split-K fixup
run test_fp8_gpu "$limit" python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_fp8_gpu.py &
# 3. stream-K (its prologue is tma_gemm_prologue) and the non-persistent grids (split-K with host descriptors)
run test_gemm_gpu "$limit" python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_gpu.py &
# 4, 5. one after the other (their waits spin): the transformed FP8 kernel in the fused FP8 ops
# (the notify after the imported store_c_tile), then the transformed bf16 gemm_tma_kernel
# (prologue helper, offsets inline) in the fused ops.
(
    run test_ops_fp8_gpu 75 "${ranks[@]}" MASTER_PORT=29541 python3 tests/gpu/test_ops_fp8_gpu.py --quick
    run test_ops_gpu 50 "${ranks[@]}" MASTER_PORT=29542 python3 tests/gpu/test_ops_gpu.py --quick --only matrix
) &
wait
for f in plain_gemm test_fp8_gpu test_gemm_gpu test_ops_fp8_gpu test_ops_gpu; do
    echo "== $f"
    grep -E "FAIL|Error|error" "$dest/$f.log" | head -n 8
    tail -n 4 "$dest/$f.log"
done | tee "$dest/log.txt"
exit 0
