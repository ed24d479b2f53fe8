"""The local GEMM with a reduction epilogue: the kernel of the staged ("epilogue") GEMM+RS.

    out[r0:r1] = (A @ B)[r0:r1] + sum over s != skip_slot of p[s]      r0 = shard_begin, r1 = r0 + shard_rows
    c[rows outside r0:r1] = (A @ B)[those rows]

A persistent GEMM with TMA-descriptor loads (the prologue and K loop of kernels/gemm.py,
`operand_descriptors` and `tma_k_loop`, as in gemm_tma_kernel, which is within 5% of cuBLAS). Its epilogue differs: the tile rows that lie in this rank's shard add the
partial products other ranks staged for them in `p` ([W, shard_rows, N], loaded in their dtype,
summed in fp32 in registers) and are stored once, straight into the caller's `out`
([shard_rows, N]); every other row is stored into `c` with plain stores, so that a notify after
the store announces a tile that is in memory (a TMA store completes asynchronously).

The `# @sy.` annotations (docs/ANNOTATIONS.md) make it the fused GEMM+RS of ops/gemm_rs.py
(reduce="epilogue"): a shard tile waits, after its K loop, for the chunks that stage its rows in
every slot of p; any other tile notifies the ready slot of the chunk that carries it to its
owner. Untransformed, the annotations are comments and this is an ordinary single-GPU GEMM with a
residual-style epilogue (tests/python/test_gemm_reduce_interpret.py runs it on the CPU).

A tile may straddle the shard's edges here (each row is routed on its own); the fused op
requires shard_rows to be a multiple of BLOCK_M, so that a tile either waits or notifies.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .configs import GemmConfig
from .gemm import (check_operands, device_limits, ensure_descriptor_allocator, grouped_tile, interpreter_active,
                   operand_descriptors, select_config, tile_grid, tma_compatible, tma_k_loop)


@triton.jit
def _add_staged_partials(acc, p_ptr, off_m, off_n, N, stride_ps, stride_pm, shard_begin, shard_rows,
                         skip_slot, NUM_SLOTS: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr):
    """acc + the staged partials of this tile's shard rows (fp32). One call, so that the consume
    annotation's wait covers every read of p."""
    if (off_m < shard_begin + shard_rows) & (off_m + BLOCK_M > shard_begin):
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        local = rows - shard_begin
        in_shard = (local >= 0) & (local < shard_rows)
        offsets = tl.where(in_shard, local, 0).to(tl.int64)[:, None] * stride_pm + cols[None, :]
        # Advancing a pointer slot by slot keeps s * stride_ps out of 32-bit arithmetic.
        p_slot = p_ptr
        for s in tl.static_range(NUM_SLOTS):
            # Slot skip_slot is this rank's own partial, which is acc itself: never read.
            mask = in_shard[:, None] & (cols[None, :] < N) & (s != skip_slot)
            partial = tl.load(p_slot + offsets, mask=mask, other=0.0)
            acc += partial.to(tl.float32)
            p_slot += stride_ps
    return acc


@triton.jit
def _store_reduced_tile(acc, c_ptr, out_ptr, off_m, off_n, M, N, stride_cm, stride_om, shard_begin,
                        shard_rows, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Shard rows into out (row - shard_begin), the others into c. Plain stores: complete when the
    notify's barrier ends. One call, so that the produce annotation covers one statement."""
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    local = rows - shard_begin
    in_shard = (local >= 0) & (local < shard_rows)
    in_bounds = (rows[:, None] < M) & (cols[None, :] < N)
    value = acc.to(c_ptr.dtype.element_ty)
    out_rows = tl.where(in_shard, local, 0).to(tl.int64)
    tl.store(out_ptr + out_rows[:, None] * stride_om + cols[None, :], value,
             mask=in_bounds & in_shard[:, None])
    tl.store(c_ptr + rows.to(tl.int64)[:, None] * stride_cm + cols[None, :], value,
             mask=in_bounds & ~in_shard[:, None])


@triton.jit
def gemm_reduce_kernel(a_ptr, b_ptr, c_ptr, p_ptr, out_ptr, M, N, K, stride_am, stride_b, stride_cm,
                       stride_ps, stride_pm, stride_om, shard_begin, shard_rows, skip_slot, num_programs,
                       NUM_SLOTS: tl.constexpr, B_IS_NK: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                       WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr = True):
    """C = A[M,K] @ B with B stored [K,N] or, with B_IS_NK, [N,K]; rows [shard_begin,
    shard_begin + shard_rows) plus the NUM_SLOTS - 1 staged partials of p go to out, the rest to c."""
    a_desc, b_desc = operand_descriptors(a_ptr, b_ptr, M, N, K, stride_am, stride_b, B_IS_NK,
                                         BLOCK_M, BLOCK_N, BLOCK_K)
    num_pid_m, num_pid_n, num_tiles, k_tiles = tile_grid(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)

    for tile_id in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        # @sy.tile(index=tile_id, m=pid_m, n=pid_n)
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        # @sy.end
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tma_k_loop(a_desc, b_desc, off_m, off_n, 0, k_tiles, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K)
        # The wait sits after the K loop: a shard tile computes its own partial while the
        # others' are still on their way.
        # @sy.consume(p_ptr, m=pid_m, n=pid_n, m_dim=1, n_dim=2, m_local_shard=True)
        acc = _add_staged_partials(acc, p_ptr, off_m, off_n, N, stride_ps, stride_pm, shard_begin,
                                   shard_rows, skip_slot, NUM_SLOTS, BLOCK_M, BLOCK_N)
        # @sy.produce(c_ptr, m=pid_m, n=pid_n, m_dim=1, n_dim=2)
        _store_reduced_tile(acc, c_ptr, out_ptr, off_m, off_n, M, N, stride_cm, stride_om,
                            shard_begin, shard_rows, BLOCK_M, BLOCK_N)


def _check_reduce_operands(a: torch.Tensor, c: torch.Tensor, p: torch.Tensor, out: torch.Tensor,
                           n: int, shard_begin: int, skip_slot: int) -> None:
    m = a.shape[0]
    if c.shape != (m, n) or c.dtype != a.dtype or c.stride(1) != 1:
        raise ValueError(f"gemm_reduce: c must be a row-major {m}x{n} {a.dtype} tensor, got "
                         f"{tuple(c.shape)} {c.dtype} with strides {c.stride()}")
    if p.dim() != 3 or p.shape[2] != n or p.dtype != a.dtype or p.stride(2) != 1:
        raise ValueError(f"gemm_reduce: p must be [slots, shard_rows, {n}] {a.dtype} with unit "
                         f"column stride, got {tuple(p.shape)} {p.dtype} strides {p.stride()}")
    slots, shard_rows = p.shape[0], p.shape[1]
    if out.shape != (shard_rows, n) or out.dtype != a.dtype or out.stride(1) != 1:
        raise ValueError(f"gemm_reduce: out must be [{shard_rows}, {n}] {a.dtype} with unit column "
                         f"stride (p's shard rows), got {tuple(out.shape)} {out.dtype}")
    if not 0 <= shard_begin <= m - shard_rows:
        raise ValueError(f"gemm_reduce: the shard rows [{shard_begin}, {shard_begin + shard_rows}) "
                         f"do not lie in the {m} rows of A")
    if not -1 <= skip_slot < slots:
        raise ValueError(f"gemm_reduce: skip_slot {skip_slot} is not -1 (none) or one of the "
                         f"{slots} slots of p")
    if any(t.device != a.device for t in (c, p, out)):
        raise ValueError("gemm_reduce: a, b, c, p and out must be on one device")


def gemm_reduce(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, p: torch.Tensor,
                out: torch.Tensor, *, shard_begin: int, skip_slot: int,
                config: GemmConfig | None = None, num_programs: int | None = None) -> None:
    """Runs the untransformed kernel: out = (A @ B)[shard rows] + sum over s != skip_slot of p[s],
    c = A @ B on every other row (c's shard rows are left as they were).

    A [M, K] and B [K, N] (or W.t() of an [N, K] weight) as for kernels.gemm.gemm; p
    [slots, shard_rows, N]; out [shard_rows, N]; skip_slot -1 adds every slot.
    """
    check_operands(a, b)
    m, k = a.shape
    n = b.shape[1]
    _check_reduce_operands(a, c, p, out, n, shard_begin, skip_slot)
    cfg = config if config is not None else select_config(m, n, k, a.device, a.dtype,
                                                          allow_split_k=False)
    a_view = a if a.stride(1) == 1 else a.contiguous()
    b_is_nk = b.stride(1) != 1 and b.stride(0) == 1
    b_view = b.t() if b_is_nk else (b if b.stride(1) == 1 else b.contiguous())
    if not (tma_compatible(a_view) and tma_compatible(b_view)):
        raise ValueError(f"gemm_reduce: TMA cannot describe A {tuple(a.shape)} or B {tuple(b.shape)} "
                         "(every row pitch must be a multiple of 16 bytes, bases 16-byte aligned)")
    if a.is_cuda:
        ensure_descriptor_allocator()
    elif not interpreter_active():
        raise ValueError("gemm_reduce: the kernel needs a CUDA device or TRITON_INTERPRET=1")
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    if num_programs is None:
        num_programs = device_limits(a.device)[0] if a.is_cuda else 4
    grid_size = max(1, min(num_programs, tiles))
    gemm_reduce_kernel[(grid_size,)](
        a_view, b_view, c, p, out, m, n, k, a_view.stride(0), b_view.stride(0), c.stride(0),
        p.stride(0), p.stride(1), out.stride(0), shard_begin, p.shape[1], skip_slot, grid_size,
        NUM_SLOTS=p.shape[0], B_IS_NK=b_is_nk, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m, WARP_SPECIALIZE=cfg.warp_specialize,
        FLATTEN=cfg.flatten, num_stages=cfg.num_stages, num_warps=cfg.num_warps)

