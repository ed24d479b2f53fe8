"""The local GEMM with output tiles whose width is not a power of two (issue 18, decode rows).

Why: a Triton block is a power of two on every side, so the only tile widths the other kernels
have are 64, 128 and 256. On 132 multiprocessors the tile counts of many decode and small-M
GEMMs then fall just past a whole wave, or well short of one: 512 x N=3072 in 128x128 tiles is
96 tiles (0.73 of a wave), in 64x192 tiles 128 (0.97). cuBLAS has tiles of widths such as 96,
160 and 192; here a tile of width BLOCK_N + BLOCK_N2 (both powers of two: 96 = 64 + 32,
160 = 128 + 32, 192 = 128 + 64) is two accumulators that share every A block: one more TMA
load and one more wgmma per K-step, on the same A in shared memory.

`gemm_wide_host_kernel`: persistent, TMA descriptors made on the host (see gemm.py's
gemm_tma_host_kernel), B stored [K, N] or [N, K]; SPLIT_K > 1 writes fp32 partials [SPLIT_K, M, N]
for `wide_reduce_kernel` (a second launch, FP8 scales applied after the sum), SPLIT_K == 1 stores C (times FP8 scales with
HAS_SCALES) through two C descriptors. Not annotated for the transformer: only the plain local
GEMMs (`gemm`, `gemm_fp8`) run it. Runs under TRITON_INTERPRET=1 (tests/python/test_gemm_wide.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .configs import GemmConfig
from .gemm import grouped_tile
from .gemm_fp8 import _scale_tile


@triton.jit
def wide_k_loop(a_desc, b1_desc, b2_desc, off_m, off_n, k_begin, k_end, B_IS_NK: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_K: tl.constexpr):
    """The fp32 products of one wide tile over the K steps [k_begin, k_end): columns off_n.. of
    width BLOCK_N and off_n + BLOCK_N.. of width BLOCK_N2, both from the same A block."""
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N2), dtype=tl.float32)
    for ki in range(k_begin, k_end):
        off_k = ki * BLOCK_K
        a = a_desc.load([off_m, off_k])
        if B_IS_NK:
            b1 = b1_desc.load([off_n, off_k])
            b2 = b2_desc.load([off_n + BLOCK_N, off_k])
            acc1 = tl.dot(a, b1.T, acc1)
            acc2 = tl.dot(a, b2.T, acc2)
        else:
            b1 = b1_desc.load([off_k, off_n])
            b2 = b2_desc.load([off_k, off_n + BLOCK_N])
            acc1 = tl.dot(a, b1, acc1)
            acc2 = tl.dot(a, b2, acc2)
    return acc1, acc2


@triton.jit
def _store_partial(partial_ptr, acc, split, M, N, off_m, off_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    base = partial_ptr + split.to(tl.int64) * M * N
    tl.store(base + rows[:, None].to(tl.int64) * N + cols[None, :], acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def gemm_wide_host_kernel(a_desc, b1_desc, b2_desc, c1_desc, c2_desc, partial_ptr, scale_a_ptr, scale_b_ptr,
                          M, N, K, stride_sa, stride_sb, num_programs, SPLIT_K: tl.constexpr,
                          HAS_SCALES: tl.constexpr, B_IS_NK: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr):
    """C[M,N] = A[M,K] @ B in tiles BLOCK_M x (BLOCK_N + BLOCK_N2), grouped order; work item w is
    slice w % SPLIT_K of tile w // SPLIT_K. SPLIT_K == 1: C stored through c1_desc (boxes
    BLOCK_M x BLOCK_N) and c2_desc (BLOCK_M x BLOCK_N2), scaled by the FP8 scales with HAS_SCALES;
    else fp32 partials to partial_ptr [SPLIT_K, M, N].

    The tile loop is not flattened into the K loop (unlike gemm_tma_host_kernel): flattened, the
    loop resets both accumulators while their wgmmas are in flight, and ptxas then serialises
    every wgmma (its advisory C7515, checked with the sm_90 compile); unflattened, the K loop
    keeps two wgmma groups in flight (wait_group 2) with no spills."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N + BLOCK_N2)
    k_tiles = tl.cdiv(K, BLOCK_K)
    k_per_split = tl.cdiv(k_tiles, SPLIT_K)
    for work in tl.range(tl.program_id(0), num_pid_m * num_pid_n * SPLIT_K, num_programs):
        tile_id = work // SPLIT_K
        split = work % SPLIT_K
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * (BLOCK_N + BLOCK_N2)
        k_begin = split * k_per_split
        acc1, acc2 = wide_k_loop(a_desc, b1_desc, b2_desc, off_m, off_n, k_begin,
                                 tl.minimum(k_begin + k_per_split, k_tiles), B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_N2,
                                 BLOCK_K)
        if SPLIT_K == 1:
            if HAS_SCALES:
                acc1 = _scale_tile(acc1, scale_a_ptr, stride_sa, scale_b_ptr, stride_sb, off_m, off_n, M, N,
                                   BLOCK_M, BLOCK_N)
                acc2 = _scale_tile(acc2, scale_a_ptr, stride_sa, scale_b_ptr, stride_sb, off_m, off_n + BLOCK_N, M,
                                   N, BLOCK_M, BLOCK_N2)
            c1_desc.store([off_m, off_n], acc1.to(c1_desc.dtype))
            c2_desc.store([off_m, off_n + BLOCK_N], acc2.to(c2_desc.dtype))
        else:
            _store_partial(partial_ptr, acc1, split, M, N, off_m, off_n, BLOCK_M, BLOCK_N)
            _store_partial(partial_ptr, acc2, split, M, N, off_m, off_n + BLOCK_N, BLOCK_M, BLOCK_N2)


@triton.jit
def wide_reduce_kernel(partial_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, stride_cm, stride_sa, stride_sb,
                       SPLIT_K: tl.constexpr, HAS_SCALES: tl.constexpr, BLOCK: tl.constexpr):
    """C = (sum over s of partial[s]) (times scale_a[row] * scale_b[col] with HAS_SCALES), cast
    to C's dtype: gemm.split_k_reduce_kernel with the FP8 scales applied after the sum."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(partial_ptr + s * M * N + offs, mask=mask, other=0.0)
    rows = offs // N
    cols = offs % N
    if HAS_SCALES:
        acc = acc * tl.load(scale_a_ptr + rows * stride_sa, mask=mask, other=0.0)
        acc = acc * tl.load(scale_b_ptr + cols * stride_sb, mask=mask, other=0.0)
    tl.store(c_ptr + rows * stride_cm + cols, acc.to(c_ptr.dtype.element_ty), mask=mask)


def wide_tiles(m: int, n: int, cfg: GemmConfig) -> int:
    """Output tiles of cfg (block_m x (block_n + block_n2)) over an m x n C."""
    return triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n + cfg.block_n2)


def wide_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, b_is_nk: bool, cfg: GemmConfig,
              num_programs: int, scales: tuple | None = None) -> None:
    """out = A @ B (times the FP8 scales (scale_a, scale_b, stride_sa, stride_sb)) with
    cfg.block_n2 > 0; split_k > 1: fp32 partials summed (and scaled) by wide_reduce_kernel.
    a: [M, K]; b: [N, K] when b_is_nk, else [K, N]; all TMA-describable."""
    if cfg.block_n2 <= 0 or cfg.stream_k or cfg.split_tail or cfg.split_fixup:
        raise ValueError(f"wide_gemm: config {cfg.name} is not a wide-tile config (block_n2 > 0, split_k "
                         "in two launches at most)")
    m, k = a.shape
    n = out.shape[1]
    work = wide_tiles(m, n, cfg) * cfg.split_k
    grid = max(1, min(num_programs, work))
    a_desc = TensorDescriptor.from_tensor(a, [cfg.block_m, cfg.block_k])
    if b_is_nk:
        b1_desc = TensorDescriptor.from_tensor(b, [cfg.block_n, cfg.block_k])
        b2_desc = TensorDescriptor.from_tensor(b, [cfg.block_n2, cfg.block_k])
    else:
        b1_desc = TensorDescriptor.from_tensor(b, [cfg.block_k, cfg.block_n])
        b2_desc = TensorDescriptor.from_tensor(b, [cfg.block_k, cfg.block_n2])
    c1_desc = TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n])
    c2_desc = TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n2])
    partial = (torch.empty((cfg.split_k, m, n), dtype=torch.float32, device=a.device) if cfg.split_k > 1
               else out)
    scale_a, scale_b, stride_sa, stride_sb = scales if scales is not None else (out, out, 0, 0)
    gemm_wide_host_kernel[(grid,)](
        a_desc, b1_desc, b2_desc, c1_desc, c2_desc, partial, scale_a, scale_b, m, n, k, stride_sa, stride_sb, grid,
        SPLIT_K=cfg.split_k, HAS_SCALES=scales is not None, B_IS_NK=b_is_nk, BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n, BLOCK_N2=cfg.block_n2, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        num_stages=cfg.num_stages, num_warps=cfg.num_warps)
    if cfg.split_k > 1:
        block = 1024
        wide_reduce_kernel[(triton.cdiv(m * n, block),)](
            partial, out, scale_a, scale_b, m, n, out.stride(0), stride_sa, stride_sb, SPLIT_K=cfg.split_k,
            HAS_SCALES=scales is not None, BLOCK=block, num_warps=4)
