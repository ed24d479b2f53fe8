"""AG+GEMM consumer reading through TMA tensor descriptors, one tile per program.

The descriptors are made on the device before the tile block (they do not depend on the tile);
the K loop loads A and B tiles with `desc.load`. Transformed, the wait before the K loop also
fences the async proxy (on Hopper and newer), so TMA loads see the chunk that just landed.
"""
import triton
import triton.language as tl
import syncopate.language as syl  # [syncopate]
__syncopate__ = {"version": 2, "kernel": "matmul_tma_kernel", "params": ["sy_signals", "sy_tile_order", "sy_tiles_n", "sy_wait_offsets", "sy_wait_slots", "sy_notify_offsets", "sy_notify_slots", "sy_slot_writers", "sy_epoch", "sy_wait_bound_ns", "sy_rank", "sy_error"], "accesses": [{"tensor": "a", "param": "a_ptr", "role": "consume", "m_dim": 0, "n_dim": -1}]}  # [syncopate]


@triton.jit
def matmul_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      sy_signals, sy_tile_order, sy_tiles_n, sy_wait_offsets, sy_wait_slots, sy_notify_offsets, sy_notify_slots, sy_slot_writers, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error,  # [syncopate]
):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
    # @sy.tile(index=tl.program_id(0), m=pid_m, n=pid_n)
    # [syncopate] was: pid_m = tl.program_id(0) // tl.cdiv(N, BLOCK_N)
    # [syncopate] was: pid_n = tl.program_id(0) % tl.cdiv(N, BLOCK_N)
    sy_tile = syl.tile_at(sy_tile_order, tl.program_id(0))  # [syncopate]
    sy_seen = syl.no_slot_seen()  # [syncopate]
    sy_tile, sy_seen = syl.wait_for_tile(sy_signals, sy_wait_offsets, sy_wait_slots, sy_slot_writers, sy_tile, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)  # [syncopate]
    pid_m, pid_n = syl.tile_coords(sy_tile, sy_tiles_n)  # [syncopate]
    # @sy.end
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # @sy.consume(a_ptr, m=pid_m)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
