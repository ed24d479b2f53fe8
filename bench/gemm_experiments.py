"""Experimental local-GEMM variants that bench_gemm.py --wide times beside the library's kernels,
to decide whether they belong in python/syncopate/kernels/.

- `gemm_host_descriptors`: gemm_tma_kernel's persistent loop with the TMA descriptors of A, B
  and C made on the host (Triton's TensorDescriptor, passed as kernel parameters) instead of in
  the kernel (`tl.make_tensor_descriptor`: every program writes its descriptors to global
  memory and fences them before its first load). On a 10-20 us decode GEMM a microsecond of
  prologue is 5-10%: this variant measured what it costs, and its kernel now ships as the
  library's `gemm_tma_host_kernel`, which it launches (persistent or one program per tile).
"""

from __future__ import annotations

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from local_import import load_kernels

_kernels, _ = load_kernels()


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
    _kernels.gemm_module.gemm_tma_host_kernel[(grid,)](
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
