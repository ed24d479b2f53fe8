"""The local grouped GEMM over experts that the MoE dispatch runs (issue 19), annotated for the
transformer.

The rows a rank received sit in capacity slots: `a` is [S * C, K] where slot q = s * E + e holds
the rows from source rank s for local expert e (C = capacity rows; the first counts[q] are real,
the rest are whatever was there). `w` is [E, K, N] (one matrix per local expert), `c` is
[S * C, N] in the same slots. Tile (pid_m, pid_n) covers rows pid_m * BLOCK_M .. of one slot
(BLOCK_M divides C, so a tile never straddles two slots): it reads the slot's count and skips
(stores nothing) when its rows start past it, else multiplies its rows by w[e], loading and
storing only the first counts[q] rows of the slot.

Transformed (`# @sy.` comments), each tile waits for exactly the chunk that lands its slot (the
MoE dispatch plan, plan/expert_parallel.hpp: chunk (s -> r, e) lands slot (s, e) of x_recv, and
its rows' count, delivered before it, in recv_counts) and reads the count after that wait, so the
count is this call's; the tile order puts the local slots first. A tile past the count still
waits for its chunk (it cannot know the count before it lands): it then returns at once.
"""
import triton
import triton.language as tl


@triton.jit
def moe_grouped_gemm(a_ptr, w_ptr, c_ptr, counts_ptr, N, K, CAPACITY, NUM_LOCAL_EXPERTS, TILES_M,
                     stride_am, stride_ak, stride_we, stride_wk, stride_wn, stride_cm, stride_cn,
                     NUM_PROGS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    start_pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = TILES_M * num_pid_n
    blocks_per_slot = CAPACITY // BLOCK_M
    k_tiles = tl.cdiv(K, BLOCK_K)
    offs_k = tl.arange(0, BLOCK_K)

    for tile_id in tl.range(start_pid, num_tiles, NUM_PROGS):
        # @sy.tile(index=tile_id, m=pid_m, n=pid_n)
        pid_m = tile_id // num_pid_n
        pid_n = tile_id % num_pid_n
        # @sy.end
        slot = pid_m // blocks_per_slot
        expert = slot % NUM_LOCAL_EXPERTS
        first = (pid_m % blocks_per_slot) * BLOCK_M  # the tile's first row inside its slot
        # @sy.consume(a_ptr, m=pid_m, tensor=x_recv)
        rows = tl.load(counts_ptr + slot)
        if first < rows:
            in_slot = first + tl.arange(0, BLOCK_M)
            offs_m = slot * CAPACITY + in_slot
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            live = in_slot < rows
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for ki in range(k_tiles):
                k0 = ki * BLOCK_K
                a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak,
                            mask=live[:, None] & ((k0 + offs_k)[None, :] < K), other=0.0)
                b = tl.load(w_ptr + expert * stride_we + (k0 + offs_k)[:, None] * stride_wk
                            + offs_n[None, :] * stride_wn,
                            mask=((k0 + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
                acc = tl.dot(a, b, acc)
            c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=live[:, None] & (offs_n[None, :] < N))
