"""Row-wise RMSNorm consumer: y = x / rms(x) * w, a block of rows per program.

A non-GEMM kernel: the tile grid is BLOCK_M rows by one column tile (sy_tiles_n = 1), so the
tile annotation names only `m`. Transformed, each program waits for the chunk holding its rows
of x (e.g. an all-gather along rows, or an all-to-all of tokens) before reading them.
"""
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, M, N, stride_xm, stride_ym, eps,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    '''One program normalises rows [row_block * BLOCK_M, ...) over the whole width N.

    A docstring may mention "# @sy.tile" without being an annotation: it is a string.
    '''
    # @sy.tile(index=tl.program_id(0), m=row_block)
    row_block = tl.program_id(0)
    # @sy.end
    rows = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    # @sy.consume(x_ptr, m=row_block)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean_sq = tl.sum(x * x, axis=1) / N  # f"{N}" in a comment is just text
    y = x * tl.rsqrt(mean_sq + eps)[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
