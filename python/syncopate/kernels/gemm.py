"""The local GEMM: C = A @ B on one GPU, persistent, loading tiles through TMA tensor descriptors.

This is the kernel that Syncopate's transformer turns into overlapped kernels, so it carries
`# @sy.` annotations (docs/ANNOTATIONS.md): the lines that compute a tile's program ids, the
loads of the communicated operand A, and the store of C. Untransformed, the annotations are
plain comments and this is an ordinary single-GPU GEMM meant to run as fast as cuBLAS.

Two kernels:
- `gemm_tma_kernel`: the fast path. Tiles move through tensor descriptors made on the device
  (`tl.make_tensor_descriptor`), which clip at the tensor's edges, so M, N and K need not be
  multiples of the block. TMA needs 16-byte aligned base pointers and leading strides.
- `gemm_pointer_kernel`: the same persistent loop with masked pointer loads, for operands TMA
  cannot describe (a leading stride that is not a multiple of 16 bytes, e.g. bf16 with K=1000
  is fine but K=1001 is not, or a misaligned view).
Both run under TRITON_INTERPRET=1 on the CPU (tests/python/test_gemm_interpret.py).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.runtime import _allocation
from triton.tools.tensor_descriptor import TensorDescriptor

from syncopate.settings import env

from .configs import INTERPRETER_CONFIG, GemmConfig, choose_config

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
_TMA_ALIGN_BYTES = 16


@triton.jit
def grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of tile `tile_id` in grouped order: GROUP_M block-rows share each B column
    block while it is in L2. The transformer replaces this call inside `# @sy.tile` with the
    tile order's lookup."""
    tiles_per_group = GROUP_M * num_pid_n
    group_id = tile_id // tiles_per_group
    first_pid_m = group_id * GROUP_M
    group_rows = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_rows)
    pid_n = (tile_id % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def operand_descriptors(a_ptr, b_ptr, M, N, K, stride_am, stride_b, B_IS_NK: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The operand prologue of the TMA GEMMs: descriptors of A [M, K] and of B, stored [K, N] or,
    with B_IS_NK, [N, K] (a Linear weight)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    if B_IS_NK:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    return a_desc, b_desc


@triton.jit
def tile_grid(M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """(tile rows, tile columns, tiles, K steps) of a GEMM's output grid."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    return num_pid_m, num_pid_n, num_pid_m * num_pid_n, tl.cdiv(K, BLOCK_K)


@triton.jit
def tma_gemm_prologue(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_b, stride_cm, B_IS_NK: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      EPILOGUE_SPLIT: tl.constexpr):
    """What a persistent TMA GEMM sets up before its tile loop: the descriptors of A and B
    (`operand_descriptors`), C's (tiles EPILOGUE_SPLIT pieces wide, see `tma_store_tile`), and the
    tile grid (`tile_grid`): (a_desc, b_desc, c_desc, num_pid_m, num_pid_n, num_tiles, k_tiles)."""
    a_desc, b_desc = operand_descriptors(a_ptr, b_ptr, M, N, K, stride_am, stride_b, B_IS_NK,
                                         BLOCK_M, BLOCK_N, BLOCK_K)
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, BLOCK_N // EPILOGUE_SPLIT])
    num_pid_m, num_pid_n, num_tiles, k_tiles = tile_grid(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    return a_desc, b_desc, c_desc, num_pid_m, num_pid_n, num_tiles, k_tiles


@triton.jit
def tma_k_loop(a_desc, b_desc, off_m, off_n, k_begin, k_end, B_IS_NK: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The fp32 product of one tile over the K steps [k_begin, k_end): A's rows at off_m times
    B's columns at off_n, through the descriptors of `operand_descriptors`. Triton inlines it, so
    the loop pipelines (and flattens into a persistent tile loop) as if written in the kernel.
    The transformer follows the reads of A inside it (docs/ANNOTATIONS.md, "Helpers")."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_begin, k_end):
        off_k = ki * BLOCK_K
        a = a_desc.load([off_m, off_k])
        if B_IS_NK:
            b = b_desc.load([off_n, off_k])
            acc = tl.dot(a, b.T, acc)
        else:
            b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def tma_store_tile(c_desc, c, off_m, off_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   EPILOGUE_SPLIT: tl.constexpr):
    """Stores one C tile through C's descriptor, whose boxes are BLOCK_N // EPILOGUE_SPLIT wide:
    with EPILOGUE_SPLIT == 2, as two halves (a smaller shared-memory staging buffer)."""
    if EPILOGUE_SPLIT == 2:
        halves = tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        c_left, c_right = tl.split(halves)
        c_desc.store([off_m, off_n], c_left)
        c_desc.store([off_m, off_n + BLOCK_N // 2], c_right)
    else:
        c_desc.store([off_m, off_n], c)


@triton.jit
def store_c_tile(c, c_desc, c_ptr, off_m, off_n, M, N, stride_cm, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr, C_STORE_POINTERS: tl.constexpr):
    """Stores one C tile of the annotated TMA GEMMs (gemm_tma_kernel, gemm_fp8.py's kernel). One
    call, so that the produce annotation covers one statement; the transformer follows it (from
    gemm_fp8.py too: an imported helper) to the store."""
    if C_STORE_POINTERS:
        # A TMA store completes asynchronously; a notify after it could announce a tile that
        # has not landed yet. Plain stores are complete once the notify's barrier ends.
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], c,
                 mask=(rows[:, None] < M) & (cols[None, :] < N))
    else:
        tma_store_tile(c_desc, c, off_m, off_n, BLOCK_M, BLOCK_N, EPILOGUE_SPLIT)


@triton.jit
def split_k_work_item(work, num_pid_m, num_pid_n, k_tiles, SPLIT_K: tl.constexpr, GROUP_M: tl.constexpr):
    """The split-K kernels' work item `work`: (tile_id, split, pid_m, pid_n, k_begin, k_end), the
    tile (in grouped order) and its K steps [k_begin, k_end), the split-th of SPLIT_K slices.
    Neighbouring items are the slices of one tile: they share no operand data, but they finish
    together, so a reduction sees complete tiles early."""
    tile_id = work // SPLIT_K
    split = work % SPLIT_K
    pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
    k_tiles_per_split = tl.cdiv(k_tiles, SPLIT_K)
    k_begin = split * k_tiles_per_split
    k_end = min(k_begin + k_tiles_per_split, k_tiles)
    return tile_id, split, pid_m, pid_n, k_begin, k_end


@triton.jit
def gemm_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_b, stride_cm, num_programs,
                    B_IS_NK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr,
                    WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr = True,
                    C_STORE_POINTERS: tl.constexpr = False):
    """C[M,N] = A[M,K] @ B, B stored as [K,N] or, with B_IS_NK, as [N,K] (a Linear weight).

    C_STORE_POINTERS stores C with plain stores instead of TMA: the producer side of a fused
    op (GEMM+RS) needs each tile's store complete before it signals the tile.
    """
    a_desc, b_desc, c_desc, num_pid_m, num_pid_n, num_tiles, k_tiles = tma_gemm_prologue(
        a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_b, stride_cm, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K, EPILOGUE_SPLIT)
    # Flattening the tile and K loops lets the pipeliner prefetch the next tile's first K-steps
    # during this tile's epilogue; warp specialisation gives the loads their own warp.
    for tile_id in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        # @sy.tile(index=tile_id, m=pid_m, n=pid_n)
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        # @sy.end
        # @sy.consume(a_ptr, m=pid_m)
        acc = tma_k_loop(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, 0, k_tiles, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K)
        c = acc.to(c_ptr.dtype.element_ty)
        # @sy.produce(c_ptr, m=pid_m, n=pid_n)
        store_c_tile(c, c_desc, c_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, BLOCK_M, BLOCK_N,
                     EPILOGUE_SPLIT, C_STORE_POINTERS)


@triton.jit
def grouped_tma_tile(a_desc, b_desc, tile_id, num_pid_m, num_pid_n, k_tiles, B_IS_NK: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """One tile of the host-descriptor kernels (not annotated, so the tile's coordinates may come
    from a helper): its fp32 accumulator over the whole K, and its offsets (off_m, off_n)."""
    pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    return tma_k_loop(a_desc, b_desc, off_m, off_n, 0, k_tiles, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K), off_m, off_n


@triton.jit
def gemm_tma_host_kernel(a_desc, b_desc, c_desc, M, N, K, num_programs, B_IS_NK: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr, FLATTEN: tl.constexpr = True):
    """gemm_tma_kernel with the TMA descriptors of A, B and C made on the host (Triton's
    TensorDescriptor, passed by value as kernel parameters): the plain local GEMM's kernel.

    Why a second kernel: `tl.make_tensor_descriptor` has every program write its descriptors to
    global memory and fence them before its first load, which measured 1-2.4 us per launch on
    nvidia-h200 (bench_gemm --wide, 2026-11-25: the same 64x128 block 1.7-2.4 us faster with
    host descriptors on every small-M shape), 10-20% of a decode GEMM. The annotated
    gemm_tma_kernel keeps device descriptors: the fused ops bind pointers (their A may be a
    view into the symmetric heap). Same loop, same helpers; not annotated.
    """
    num_pid_m, num_pid_n, num_tiles, k_tiles = tile_grid(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=FLATTEN):
        acc, off_m, off_n = grouped_tma_tile(a_desc, b_desc, tile_id, num_pid_m, num_pid_n, k_tiles, B_IS_NK,
                                             BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
        tma_store_tile(c_desc, acc.to(c_desc.dtype), off_m, off_n, BLOCK_M, BLOCK_N, EPILOGUE_SPLIT)


@triton.jit
def gemm_pointer_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, num_programs, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C[M,N] = A[M,K] @ B[K,N] for any strides (B_IS_NK is just swapped B strides here)."""
    num_pid_m, num_pid_n, num_tiles, _ = tile_grid(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    for tile_id in range(tl.program_id(0), num_tiles, num_programs):
        # @sy.tile(index=tile_id, m=pid_m, n=pid_n)
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        # @sy.end
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        # @sy.consume(a_ptr, m=pid_m)
        for off_k in range(0, K, BLOCK_K):
            ks = off_k + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                        mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
            b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                        mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        # @sy.produce(c_ptr, m=pid_m, n=pid_n)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def gemm_split_k_kernel(a_ptr, b_ptr, partial_ptr, M, N, K, stride_am, stride_b, num_programs,
                        SPLIT_K: tl.constexpr, B_IS_NK: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                        HOST_DESCRIPTORS: tl.constexpr = False):
    """fp32 partial products: partial[s] = A[:, Ks] @ B[Ks, :] over the s-th slice of K.

    For shapes with too few output tiles to fill the chip (small M, decode): SPLIT_K programs
    share each tile, and `split_k_reduce_kernel` sums the slices. Not annotated for the
    transformer: a tile is final only after the reduction, which is a second launch.
    HOST_DESCRIPTORS: a_ptr and b_ptr are TMA descriptors made on the host (see
    gemm_tma_host_kernel).
    """
    if HOST_DESCRIPTORS:
        a_desc, b_desc = a_ptr, b_ptr
    else:
        a_desc, b_desc = operand_descriptors(a_ptr, b_ptr, M, N, K, stride_am, stride_b, B_IS_NK,
                                             BLOCK_M, BLOCK_N, BLOCK_K)
    num_pid_m, num_pid_n, num_tiles, k_tiles = tile_grid(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    for work in tl.range(tl.program_id(0), num_tiles * SPLIT_K, num_programs, flatten=True):
        _, split, pid_m, pid_n, k_begin, k_end = split_k_work_item(work, num_pid_m, num_pid_n, k_tiles, SPLIT_K,
                                                                   GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tma_k_loop(a_desc, b_desc, off_m, off_n, k_begin, k_end, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K)
        # Plain stores straight from registers: a TMA store would need the fp32 tile staged in
        # shared memory (128 KiB for 128x256), which the pipeline stages already fill.
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        p_ptrs = partial_ptr + split.to(tl.int64) * M * N + rows[:, None] * N + cols[None, :]
        tl.store(p_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def gemm_split_tail_kernel(a_desc, b_desc, c_ptr, partial_ptr, M, N, K, stride_cm, num_programs,
                           dp_tiles, SPLIT_K: tl.constexpr, B_IS_NK: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr):
    """Whole tiles for the whole waves, split-K for the tiles of the last partial wave.

    Work items: the first dp_tiles tiles (in grouped order) whole, each stored to C; then each
    remaining tile as SPLIT_K items over slices of K, their fp32 partials written to
    partial[tail tile, slice] for `split_tail_reduce_kernel`. Both stores are masked plain stores
    (no branch in the flattened loop). TMA descriptors made on the host.
    """
    num_pid_m, num_pid_n, num_tiles, k_tiles = tile_grid(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    num_work = dp_tiles + (num_tiles - dp_tiles) * SPLIT_K
    k_tiles_per_split = tl.cdiv(k_tiles, SPLIT_K)
    for work in tl.range(tl.program_id(0), num_work, num_programs, flatten=True):
        whole = work < dp_tiles
        in_tail = work >= dp_tiles
        tail_work = tl.maximum(work - dp_tiles, 0)
        tile_id = tl.where(whole, work, dp_tiles + tail_work // SPLIT_K)
        split = tail_work % SPLIT_K
        k_begin = tl.where(whole, 0, split * k_tiles_per_split)
        k_end = tl.where(whole, k_tiles, tl.minimum(k_begin + k_tiles_per_split, k_tiles))
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tma_k_loop(a_desc, b_desc, off_m, off_n, k_begin, k_end, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K)
        rows = tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        inside = ((off_m + rows)[:, None] < M) & ((off_n + cols)[None, :] < N)
        tl.store(c_ptr + (off_m + rows)[:, None] * stride_cm + (off_n + cols)[None, :],
                 acc.to(c_ptr.dtype.element_ty), mask=inside & whole)
        slot = (tile_id - dp_tiles).to(tl.int64) * SPLIT_K + split
        tl.store(partial_ptr + slot * (BLOCK_M * BLOCK_N) + rows[:, None] * BLOCK_N + cols[None, :],
                 acc, mask=(rows[:, None] >= 0) & in_tail)


@triton.jit
def split_tail_reduce_kernel(partial_ptr, c_ptr, M, N, stride_cm, dp_tiles, SPLIT_K: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
                             ROWS: tl.constexpr):
    """C tile of tail tile program_id(0) (ROWS rows of it per program_id(1)) = the sum of its
    SPLIT_K partials from gemm_split_tail_kernel."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tail = tl.program_id(0)
    pid_m, pid_n = grouped_tile(dp_tiles + tail, num_pid_m, num_pid_n, GROUP_M)
    r0 = tl.program_id(1) * ROWS
    rows = r0 + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        base = partial_ptr + (tail.to(tl.int64) * SPLIT_K + s) * (BLOCK_M * BLOCK_N)
        acc += tl.load(base + rows[:, None] * BLOCK_N + cols[None, :])
    out_rows = pid_m * BLOCK_M + rows
    out_cols = pid_n * BLOCK_N + cols
    tl.store(c_ptr + out_rows[:, None] * stride_cm + out_cols[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(out_rows[:, None] < M) & (out_cols[None, :] < N))


@triton.jit
def split_k_reduce_kernel(partial_ptr, c_ptr, M, N, stride_cm, SPLIT_K: tl.constexpr,
                          BLOCK: tl.constexpr):
    """C = sum over s of partial[s], cast to C's dtype."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(partial_ptr + s * M * N + offs, mask=mask, other=0.0)
    rows = offs // N
    cols = offs % N
    tl.store(c_ptr + rows * stride_cm + cols, acc.to(c_ptr.dtype.element_ty), mask=mask)


def interpreter_active() -> bool:
    """True when Triton runs kernels with its CPU interpreter (TRITON_INTERPRET=1)."""
    return env.triton_interpret


def ensure_descriptor_allocator() -> None:
    # Descriptors made on the device live in a small global-memory scratch that Triton asks
    # the allocator for at launch. Keep a caller's allocator if one is set; otherwise use
    # PyTorch's caching allocator, which makes the per-launch request nearly free.
    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(
            lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


def tma_compatible(t: torch.Tensor) -> bool:
    """A 2-D tensor TMA can describe: last dim contiguous, 16-byte base and leading stride."""
    return (t.stride(1) == 1 and t.data_ptr() % _TMA_ALIGN_BYTES == 0
            and (t.stride(0) * t.element_size()) % _TMA_ALIGN_BYTES == 0)


def check_operands(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"gemm: A and B must be 2-D, got A{tuple(a.shape)} B{tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm: inner dimensions differ: A is {tuple(a.shape)} (K={a.shape[1]}),"
                         f" B is {tuple(b.shape)} (K={b.shape[0]})")
    if a.dtype not in SUPPORTED_DTYPES or b.dtype != a.dtype:
        raise TypeError(f"gemm: A and B must both be bfloat16 or float16, got {a.dtype} and "
                        f"{b.dtype}")
    if a.device != b.device:
        raise ValueError(f"gemm: A is on {a.device} but B is on {b.device}")
    if not a.is_cuda and not interpreter_active():
        raise ValueError(f"gemm: tensors are on {a.device}; the kernel needs a CUDA device "
                         "(or TRITON_INTERPRET=1 for the CPU interpreter)")


def result_tensor(out: torch.Tensor | None, m: int, n: int, dtype: torch.dtype, device: torch.device,
                  who: str) -> torch.Tensor:
    """A GEMM's [m, n] result: `out` when given (ValueError unless it is [m, n] of `dtype` on
    `device`), else a new tensor."""
    if out is None:
        return torch.empty((m, n), dtype=dtype, device=device)
    if out.shape != (m, n) or out.dtype != dtype or out.device != device:
        raise ValueError(f"{who}: out must be {m}x{n} {dtype} on {device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    return out


def device_limits(device: torch.device) -> tuple[int, int]:
    """(multiprocessor count, shared memory per block) of the device, read, never assumed."""
    props = torch.cuda.get_device_properties(device)
    smem = getattr(props, "shared_memory_per_block_optin", 0) or props.shared_memory_per_block
    return props.multi_processor_count, smem


def select_config(m: int, n: int, k: int, device: torch.device, dtype: torch.dtype,
                  allow_split_k: bool = True, local: bool = False, wide: bool = True) -> GemmConfig:
    """The configuration for this shape on this device. local=True: `gemm`'s own choice, which
    may take a block of configs.LOCAL_CANDIDATES (blocks the fused ops do not compile) and, with
    wide, a wide tile (configs.WIDE_CANDIDATES, gemm_wide)."""
    if device.type != "cuda":
        return INTERPRETER_CONFIG
    num_sms, smem = device_limits(device)
    # Triton itself keeps a little shared memory (barriers); leave it a margin.
    return _memoized_choice(m, n, k, num_sms, torch.tensor([], dtype=dtype).element_size(),
                            smem - 1024, allow_split_k, local, wide)


# choose_config is a pure function of its arguments; remembering its answers keeps the model
# (a dozen candidates) off the per-call host path of small GEMMs.
_memoized_choice = functools.lru_cache(maxsize=4096)(
    lambda m, n, k, sms, elem, smem, split, local, wide: choose_config(m, n, k, sms, elem, smem,
                                                                      allow_split_k=split, local=local,
                                                                      wide=wide))


def gemm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
         config: GemmConfig | None = None, num_programs: int | None = None,
         force_pointer_kernel: bool = False, c_store_pointers: bool = False,
         host_descriptors: bool | None = None) -> torch.Tensor:
    """C = A @ B in the input dtype with fp32 accumulation, like torch.mm.

    A is [M, K]; B is [K, N]. A Linear weight W stored [N, K] is passed as `W.t()`: its
    transposed layout is detected from the strides and read in place, not copied.
    `config` overrides the per-shape choice; `num_programs` the persistent grid size
    (default: one program per multiprocessor, or fewer if there are fewer tiles).
    `host_descriptors`: TMA descriptors made on the host (gemm_tma_host_kernel; the default on
    a GPU) or in the kernel (gemm_tma_kernel; the default under the interpreter).
    """
    check_operands(a, b)
    m, k = a.shape
    n = b.shape[1]
    out = result_tensor(out, m, n, a.dtype, a.device, "gemm")
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    a_view = a if a.stride(1) == 1 else a.contiguous()
    b_is_nk = b.stride(1) != 1 and b.stride(0) == 1
    b_view = b.t() if b_is_nk else (b if b.stride(1) == 1 else b.contiguous())
    use_tma = (not force_pointer_kernel and tma_compatible(a_view) and tma_compatible(b_view)
               and tma_compatible(out))
    # The wide tiles (gemm_wide) need TMA and store C through descriptors: offered only then.
    cfg = config if config is not None else select_config(m, n, k, a.device, a.dtype,
                                                          allow_split_k=not c_store_pointers,
                                                          local=True, wide=use_tma and not c_store_pointers)
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.width)
    if num_programs is None:
        num_programs = device_limits(a.device)[0] if a.is_cuda else 4
        if not cfg.persistent:
            num_programs = tiles * cfg.split_k
    grid_size = max(1, min(num_programs, tiles))

    # Host-made descriptors on a GPU (gemm_tma_host_kernel: no descriptor prologue in the
    # kernel); the interpreter runs the device-descriptor kernel.
    if host_descriptors is None:
        host_descriptors = a.is_cuda and not interpreter_active()
    if use_tma and a.is_cuda:
        ensure_descriptor_allocator()
    if use_tma and cfg.block_n2 and not c_store_pointers:
        from .gemm_wide import wide_gemm  # imports this module's helpers

        wide_gemm(a_view, b_view, out, b_is_nk, cfg, num_programs)
    elif use_tma and (cfg.stream_k or (cfg.split_k > 1 and cfg.split_fixup)) and not c_store_pointers:
        from .gemm_one_launch import one_launch_gemm  # imports this module's helpers

        one_launch_gemm(a_view, b_view, out, b_is_nk, cfg, num_programs, lambda tiles: _counters(a.device, tiles))
    elif use_tma and cfg.split_k > 1 and cfg.split_tail and not c_store_pointers:
        _split_tail_gemm(a_view, b_view, out, b_is_nk, cfg, num_programs)
    elif use_tma and cfg.split_k > 1 and not c_store_pointers:
        _split_k_gemm(a_view, b_view, out, b_is_nk, cfg, num_programs, host_descriptors)
    elif use_tma and host_descriptors and not c_store_pointers:
        a_desc, b_desc = _host_operand_descriptors(a_view, b_view, b_is_nk, cfg)
        c_desc = TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n // cfg.epilogue_split])
        gemm_tma_host_kernel[(grid_size,)](
            a_desc, b_desc, c_desc, m, n, k, grid_size, B_IS_NK=b_is_nk, BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
            EPILOGUE_SPLIT=cfg.epilogue_split, FLATTEN=cfg.flatten, num_stages=cfg.num_stages,
            num_warps=cfg.num_warps)
    elif use_tma:
        gemm_tma_kernel[(grid_size,)](
            a_view, b_view, out, m, n, k, a_view.stride(0), b_view.stride(0), out.stride(0),
            grid_size, B_IS_NK=b_is_nk, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m, EPILOGUE_SPLIT=cfg.epilogue_split,
            WARP_SPECIALIZE=cfg.warp_specialize, FLATTEN=cfg.flatten,
            C_STORE_POINTERS=c_store_pointers,
            num_stages=cfg.num_stages,
            num_warps=cfg.num_warps)
    else:
        gemm_pointer_kernel[(grid_size,)](
            a, b, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            out.stride(0), out.stride(1), grid_size, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m, num_stages=cfg.num_stages,
            num_warps=cfg.num_warps)
    return out


def _host_operand_descriptors(a: torch.Tensor, b: torch.Tensor, b_is_nk: bool, cfg: GemmConfig):
    """operand_descriptors' descriptors, made on the host (b: [N, K] when b_is_nk, else [K, N])."""
    a_desc = TensorDescriptor.from_tensor(a, [cfg.block_m, cfg.block_k])
    b_block = [cfg.block_n, cfg.block_k] if b_is_nk else [cfg.block_k, cfg.block_n]
    return a_desc, TensorDescriptor.from_tensor(b, b_block)


def _split_k_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, b_is_nk: bool,
                  cfg: GemmConfig, num_programs: int, host: bool) -> None:
    m, k = a.shape
    n = out.shape[1]
    partial = torch.empty((cfg.split_k, m, n), dtype=torch.float32, device=a.device)
    work = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n) * cfg.split_k
    a_arg, b_arg = _host_operand_descriptors(a, b, b_is_nk, cfg) if host else (a, b)
    gemm_split_k_kernel[(max(1, min(num_programs, work)),)](
        a_arg, b_arg, partial, m, n, k, a.stride(0), b.stride(0), max(1, min(num_programs, work)),
        SPLIT_K=cfg.split_k, B_IS_NK=b_is_nk, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m, HOST_DESCRIPTORS=host, num_stages=cfg.num_stages,
        num_warps=cfg.num_warps)
    block = 1024
    split_k_reduce_kernel[(triton.cdiv(m * n, block),)](
        partial, out, m, n, out.stride(0), SPLIT_K=cfg.split_k, BLOCK=block, num_warps=4)


def split_tail_work(tiles: int, num_programs: int) -> int:
    """dp_tiles of gemm_split_tail_kernel: the tiles of the whole waves (all of them when the
    count is a whole number of waves, none when it is under one wave)."""
    return tiles if tiles % num_programs == 0 else (tiles // num_programs) * num_programs


def _split_tail_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, b_is_nk: bool,
                     cfg: GemmConfig, num_programs: int) -> None:
    m, k = a.shape
    n = out.shape[1]
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    dp_tiles = split_tail_work(tiles, num_programs)
    tail = tiles - dp_tiles
    work = dp_tiles + tail * cfg.split_k
    grid = max(1, min(num_programs, work))
    partial = torch.empty((max(tail, 1), cfg.split_k, cfg.block_m, cfg.block_n), dtype=torch.float32,
                          device=a.device)
    a_desc, b_desc = _host_operand_descriptors(a, b, b_is_nk, cfg)
    gemm_split_tail_kernel[(grid,)](
        a_desc, b_desc, out, partial, m, n, k, out.stride(0), grid, dp_tiles, SPLIT_K=cfg.split_k,
        B_IS_NK=b_is_nk, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        GROUP_M=cfg.group_m, num_stages=cfg.num_stages, num_warps=cfg.num_warps)
    if tail:
        rows = min(32, cfg.block_m)
        split_tail_reduce_kernel[(tail, cfg.block_m // rows)](
            partial, out, m, n, out.stride(0), dp_tiles, SPLIT_K=cfg.split_k, BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n, GROUP_M=cfg.group_m, ROWS=rows, num_warps=4)


# The fixup kernel's per-tile arrival counters, per (device, stream): zero between launches (the
# last program of each tile resets its counter), so one allocation serves every call that runs
# in order on one stream. Two streams must not share them (two GEMMs in flight would count
# into the same tiles), hence the stream in the key. Under CUDA graph capture the key is the
# capturing stream: its counters are made (and zeroed by a node of the graph) at the first
# call captured; graphs replayed concurrently on different streams must not share a capture
# stream.
_fixup_counters: dict[tuple, torch.Tensor] = {}


def _counters(device: torch.device, tiles: int) -> torch.Tensor:
    if device.type != "cuda":
        return torch.zeros(tiles, dtype=torch.int32, device=device)
    key = (device.index, torch.cuda.current_stream(device).cuda_stream)
    counters = _fixup_counters.get(key)
    if counters is None or counters.numel() < tiles:
        counters = torch.zeros(max(tiles, 1024), dtype=torch.int32, device=device)
        _fixup_counters[key] = counters
    return counters


def linear(x: torch.Tensor, weight: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T for a weight stored [N, K] as nn.Linear keeps it (no bias)."""
    return gemm(x, weight.t(), out=out)
