"""AG+GEMM consumer, one tile per program: C = A @ B where the rows of A arrive by all-gather.

Grouped ("swizzled") tile order, a K loop and masked edges, as in Triton's matmul tutorial. The
tile block computes (pid_m, pid_n) from the program id; the transformer replaces it by a lookup
into the arrival-ordered tile list, and waits for the tile's rows of A before the K loop.
"""
import triton
import triton.language as tl
import syncopate.language as syl  # [syncopate]
__syncopate__ = {"version": 2, "kernel": "matmul_kernel", "params": ["sy_signals", "sy_tile_order", "sy_tiles_n", "sy_wait_offsets", "sy_wait_slots", "sy_notify_offsets", "sy_notify_slots", "sy_slot_writers", "sy_epoch", "sy_wait_bound_ns", "sy_rank", "sy_error"], "accesses": [{"tensor": "a", "param": "a_ptr", "role": "consume", "m_dim": 0, "n_dim": -1}]}  # [syncopate]


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr,
                  sy_signals, sy_tile_order, sy_tiles_n, sy_wait_offsets, sy_wait_slots, sy_notify_offsets, sy_notify_slots, sy_slot_writers, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error,  # [syncopate]
):
    # @sy.tile(index=tl.program_id(0), m=pid_m, n=pid_n)
    # [syncopate] was: pid = tl.program_id(axis=0)
    # [syncopate] was: num_pid_m = tl.cdiv(M, BLOCK_M)
    # [syncopate] was: num_pid_n = tl.cdiv(N, BLOCK_N)
    # [syncopate] was: num_pid_in_group = GROUP_M * num_pid_n
    # [syncopate] was: group_id = pid // num_pid_in_group
    # [syncopate] was: first_pid_m = group_id * GROUP_M
    # [syncopate] was: group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    # [syncopate] was: pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    # [syncopate] was: pid_n = (pid % num_pid_in_group) // group_size_m
    sy_tile = syl.tile_at(sy_tile_order, tl.program_id(0))  # [syncopate]
    sy_seen = syl.no_slot_seen()  # [syncopate]
    sy_tile, sy_seen = syl.wait_for_tile(sy_signals, sy_wait_offsets, sy_wait_slots, sy_slot_writers, sy_tile, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)  # [syncopate]
    pid_m, pid_n = syl.tile_coords(sy_tile, sy_tiles_n)  # [syncopate]
    # @sy.end

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # @sy.consume(a_ptr, m=pid_m)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + stride_cm * offs_m[:, None] + stride_cn * offs_n[None, :]
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
