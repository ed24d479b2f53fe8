"""Kernel-level overlap: a chunked collective on a communication stream beside a chunked GEMM,
for kernels Syncopate cannot transform (cuBLAS, third-party). docs/KERNEL_LEVEL.md.

    from syncopate.kernel_level import KernelLevelAgGemm
    ag = KernelLevelAgGemm(group, m=8192, k=8192, n=2048, dtype=torch.bfloat16, chunks=4)
    out = ag(a_shard, b)

Modules: overlap.py (the API: the two ops, the communication group, the cuBLAS carveout, the
residency choice), shaped_gemm.py (the Triton GEMM at a target residency), shaped_launch.py
(launching a compiled Triton kernel with extra dynamic shared memory).
"""

from syncopate.kernel_level.overlap import (
    GEMMS,
    KernelLevelAgGemm,
    KernelLevelGemmRs,
    choose_residency,
    comm_group,
    cublas_sm_carveout,
    even_bounds,
    sweep_residency,
)

__all__ = [
    "GEMMS",
    "KernelLevelAgGemm",
    "KernelLevelGemmRs",
    "choose_residency",
    "comm_group",
    "cublas_sm_carveout",
    "even_bounds",
    "sweep_residency",
]
