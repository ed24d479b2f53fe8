"""AG+GEMM consumer, persistent: a fixed number of programs loop over the tiles.

Each program takes tiles start, start + NUM_PROGS, ... The tile block inside the loop turns the
loop counter into (pid_m, pid_n); transformed, the counter indexes the tile order instead, so
every program walks the tiles in the order their rows of A arrive. The grouped swizzle is the
library's (`syncopate.kernels.gemm.grouped_tile`): a helper imported from another module, called
inside the tile block, which the rewrite replaces.
"""
import triton
import triton.language as tl

from syncopate.kernels.gemm import grouped_tile
import syncopate.language as syl  # [syncopate]
__syncopate__ = {"version": 2, "kernel": "matmul_persistent", "params": ["sy_signals", "sy_tile_order", "sy_tiles_n", "sy_wait_offsets", "sy_wait_slots", "sy_notify_offsets", "sy_notify_slots", "sy_slot_writers", "sy_epoch", "sy_wait_bound_ns", "sy_rank", "sy_error"], "accesses": [{"tensor": "a", "param": "a_ptr", "role": "consume", "m_dim": 0, "n_dim": -1}]}  # [syncopate]


@triton.jit
def matmul_persistent(a_ptr, b_ptr, c_ptr, M, N, K,
                      stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      NUM_PROGS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                      sy_signals, sy_tile_order, sy_tiles_n, sy_wait_offsets, sy_wait_slots, sy_notify_offsets, sy_notify_slots, sy_slot_writers, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error,  # [syncopate]
):
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    offs_k = tl.arange(0, BLOCK_K)

    sy_tile_next = syl.tile_at_or(sy_tile_order, start_pid, num_tiles, NUM_PROGS)  # [syncopate]
    sy_seen = syl.no_slot_seen()  # [syncopate]
    sy_epoch_now = syl.epoch_of(sy_epoch)  # [syncopate]
    sy_wait_begin_next, sy_wait_end_next = syl.wait_row(sy_wait_offsets, sy_tile_next)  # [syncopate]
    for tile_id in tl.range(start_pid, num_tiles, NUM_PROGS):
        # @sy.tile(index=tile_id, m=pid_m, n=pid_n)
        # [syncopate] was: pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        sy_tile = sy_tile_next  # [syncopate]
        sy_wait_begin, sy_wait_end = sy_wait_begin_next, sy_wait_end_next  # [syncopate]
        sy_tile_next = syl.tile_at_or(sy_tile_order, tile_id + (NUM_PROGS), num_tiles, NUM_PROGS)  # [syncopate]
        sy_tile, sy_seen = syl.wait_for_tile_row(sy_signals, sy_wait_slots, sy_slot_writers, sy_tile, sy_wait_begin, sy_wait_end, sy_epoch_now, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)  # [syncopate]
        sy_wait_begin_next, sy_wait_end_next = syl.wait_row(sy_wait_offsets, sy_tile_next)  # [syncopate]
        pid_m, pid_n = syl.tile_coords(sy_tile, sy_tiles_n)  # [syncopate]
        # @sy.end
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        # @sy.consume(a_ptr, m=pid_m)
        for ki in range(k_tiles):
            k0 = ki * BLOCK_K
            a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak,
                        mask=(offs_m[:, None] < M) & ((k0 + offs_k)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k0 + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                        mask=((k0 + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
