"""GEMM+RS producer: C = A @ B, each finished tile of C announced so its chunk can leave.

Row-major tiles by default; transformed, the tiles run in the order their reduce-scatter chunks
leave, and after each tile's store the ready slots of the chunks it completes are incremented.
"""
import triton
import triton.language as tl
import syncopate.language as syl  # [syncopate]
__syncopate__ = {"version": 2, "kernel": "matmul_rs_kernel", "params": ["sy_signals", "sy_tile_order", "sy_tiles_n", "sy_wait_offsets", "sy_wait_slots", "sy_notify_offsets", "sy_notify_slots", "sy_slot_writers", "sy_epoch", "sy_wait_bound_ns", "sy_rank", "sy_error"], "accesses": [{"tensor": "c", "param": "c_ptr", "role": "produce", "m_dim": 0, "n_dim": 1}]}  # [syncopate]


@triton.jit
def matmul_rs_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                     stride_am, stride_ak,
                     stride_bk, stride_bn,
                     stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     sy_signals, sy_tile_order, sy_tiles_n, sy_wait_offsets, sy_wait_slots, sy_notify_offsets, sy_notify_slots, sy_slot_writers, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error,  # [syncopate]
                     ):
    # @sy.tile(index=tl.program_id(0), m=pid_m, n=pid_n)
    # [syncopate] was: pid_m = tl.program_id(0) // tl.cdiv(N, BLOCK_N)
    # [syncopate] was: pid_n = tl.program_id(0) % tl.cdiv(N, BLOCK_N)
    sy_tile = syl.tile_at(sy_tile_order, tl.program_id(0))  # [syncopate]
    sy_notify_begin, sy_notify_end = syl.notify_row(sy_notify_offsets, sy_tile)  # [syncopate]
    pid_m, pid_n = syl.tile_coords(sy_tile, sy_tiles_n)  # [syncopate]
    # @sy.end
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k0 + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    mask = (rm[:, None] < M) & \
           (rn[None, :] < N)
    # @sy.produce(c_ptr, m=pid_m, n=pid_n)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=mask)
    syl.notify_tile_row(sy_signals, sy_notify_slots, sy_tile, sy_notify_begin, sy_notify_end)  # [syncopate]
