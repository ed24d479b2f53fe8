"""Row-wise RMSNorm consumer: y = x / rms(x) * w, a block of rows per program.

A non-GEMM kernel: the tile grid is BLOCK_M rows by one column tile (sy_tiles_n = 1), so the
tile annotation names only `m`. Transformed, each program waits for the chunk holding its rows
of x (e.g. an all-gather along rows, or an all-to-all of tokens) before reading them.
"""
import triton
import triton.language as tl
import syncopate.language as syl  # [syncopate]
__syncopate__ = {"version": 2, "kernel": "rmsnorm_kernel", "params": ["sy_signals", "sy_tile_order", "sy_tiles_n", "sy_wait_offsets", "sy_wait_slots", "sy_notify_offsets", "sy_notify_slots", "sy_slot_writers", "sy_epoch", "sy_wait_bound_ns", "sy_rank", "sy_error"], "accesses": [{"tensor": "x", "param": "x_ptr", "role": "consume", "m_dim": 0, "n_dim": -1}]}  # [syncopate]


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, M, N, stride_xm, stride_ym, eps,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   sy_signals, sy_tile_order, sy_tiles_n, sy_wait_offsets, sy_wait_slots, sy_notify_offsets, sy_notify_slots, sy_slot_writers, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error,  # [syncopate]
):
    '''One program normalises rows [row_block * BLOCK_M, ...) over the whole width N.

    A docstring may mention "# @sy.tile" without being an annotation: it is a string.
    '''
    # @sy.tile(index=tl.program_id(0), m=row_block)
    # [syncopate] was: row_block = tl.program_id(0)
    sy_tile = syl.tile_at(sy_tile_order, tl.program_id(0))  # [syncopate]
    sy_seen = syl.no_slot_seen()  # [syncopate]
    sy_tile, sy_seen = syl.wait_for_tile(sy_signals, sy_wait_offsets, sy_wait_slots, sy_slot_writers, sy_tile, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)  # [syncopate]
    row_block = syl.tile_row(sy_tile, sy_tiles_n)  # [syncopate]
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
