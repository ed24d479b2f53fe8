"""Experimental local-GEMM variants that bench_gemm.py --wide times beside the library's kernels,
to decide whether they belong in python/syncopate/kernels/ (the library does not use them).

- `gemm_host_descriptors`: gemm_tma_kernel's persistent loop with the TMA descriptors of A, B
  and C made on the host (Triton's TensorDescriptor, passed as kernel parameters) instead of in
  the kernel (`tl.make_tensor_descriptor`: every program writes its descriptors to global
  memory and fences them before its first load). On a 10-20 us decode GEMM a microsecond of
  prologue is 5-10%: this variant measures what it costs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from local_import import load_kernels

_kernels, _ = load_kernels()
# The library's jit helpers as globals of this module (Triton resolves a kernel's callees there).
grouped_tile = _kernels.gemm_module.grouped_tile
tma_k_loop = _kernels.gemm_module.tma_k_loop


@triton.jit
def gemm_host_desc_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    num_programs,
    B_IS_NK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EPILOGUE_SPLIT: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=True):
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tma_k_loop(a_desc, b_desc, off_m, off_n, 0, k_tiles, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K)
        c = acc.to(c_desc.dtype)
        if EPILOGUE_SPLIT == 2:
            halves = tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            c_left, c_right = tl.split(halves)
            c_desc.store([off_m, off_n], c_left)
            c_desc.store([off_m, off_n + BLOCK_N // 2], c_right)
        else:
            c_desc.store([off_m, off_n], c)


def gemm_host_descriptors(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, cfg) -> torch.Tensor:
    """out = a @ b with cfg's blocks (persistent or not), descriptors made here."""
    m, k = a.shape
    n = b.shape[1]
    b_is_nk = b.stride(1) != 1 and b.stride(0) == 1
    a_desc = TensorDescriptor.from_tensor(a, [cfg.block_m, cfg.block_k])
    if b_is_nk:
        b_desc = TensorDescriptor.from_tensor(b.t(), [cfg.block_n, cfg.block_k])
    else:
        b_desc = TensorDescriptor.from_tensor(b, [cfg.block_k, cfg.block_n])
    c_desc = TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n // cfg.epilogue_split])
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = max(1, min(sms if cfg.persistent else tiles, tiles))
    gemm_host_desc_kernel[(grid,)](
        a_desc,
        b_desc,
        c_desc,
        m,
        n,
        k,
        grid,
        B_IS_NK=b_is_nk,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        GROUP_M=cfg.group_m,
        EPILOGUE_SPLIT=cfg.epilogue_split,
        num_stages=cfg.num_stages,
        num_warps=cfg.num_warps,
    )
    return out
