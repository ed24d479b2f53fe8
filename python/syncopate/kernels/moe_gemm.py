"""The local grouped GEMM over experts that the MoE dispatch and combine run (issue 19),
annotated for the transformer.

The rows a rank received sit in capacity slots: `a` is [S * C, K] where slot q = s * E + e holds
the rows from source rank s for local expert e (C = capacity rows; the first counts[q] are real,
the rest are whatever was there). `w` is [E, K, N] (one matrix per local expert), `c` is
[S * C, N] in the same slots. Tile (pid_m, pid_n) covers rows pid_m * BLOCK_M .. of one slot
(BLOCK_M divides C, so a tile never straddles two slots): it reads the slot's count and skips
(stores nothing) when its rows start past it, else multiplies its rows by w[e] and stores only
the first counts[q] rows of the slot.

Tile order (untransformed): slot by slot, and inside a slot by groups of GROUP_M row blocks,
column block by column block (`slot_grouped_tile`): the GROUP_M row blocks of a group share each
column block of w[e] while it is in L2. Row-major order (every column block of one row block,
then the next row block) reads all of w[e] from memory again for every row block: for a
Mixtral expert (4096 x 14336 bf16, 117 MB, more than L2) that is what made the first version
2x slower than torch._grouped_mm (nvidia-h100-x1, 2026-11-25). The transformed kernel's order
comes from its tile-order table instead; ops/moe_fused.py builds it the same way.

USE_TMA loads A and w through tensor descriptors (w seen as [E * K, N], so K must be a multiple
of BLOCK_K and each expert's matrix contiguous: `grouped_gemm_args` decides). A tile's A block may
hold rows past the slot's count (stale rows of an earlier call): their products land in rows
of the accumulator that are not stored, so they cost nothing but the FLOPs of the tile.

Transformed (`# @sy.` comments), each tile waits for exactly the chunk that lands its slot (the
MoE dispatch plan, plan/expert_parallel.hpp: chunk (s -> r, e) lands slot (s, e) of x_recv, and
its rows' count, delivered before it, in recv_counts) and reads the count after that wait, so the
count is this call's; the tile order puts the local slots first. A tile past the count still
waits for its chunk (it cannot know the count before it lands): it then returns at once.
"""

import triton
import triton.language as tl


@triton.jit
def slot_grouped_tile(tile_id, blocks_per_slot, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of tile `tile_id`: slot by slot; inside a slot, groups of GROUP_M row
    blocks, each group column by column (ops/moe_fused.py `slot_grouped_order` is the same)."""
    tiles_per_slot = blocks_per_slot * num_pid_n
    slot = tile_id // tiles_per_slot
    t = tile_id % tiles_per_slot
    first_block = (t // (GROUP_M * num_pid_n)) * GROUP_M
    group_rows = min(blocks_per_slot - first_block, GROUP_M)
    local = t - first_block * num_pid_n
    pid_m = slot * blocks_per_slot + first_block + local % group_rows
    pid_n = local // group_rows
    return pid_m, pid_n


@triton.jit
def _tma_k_loop(a_desc, w_desc, off_m, w_row, off_n, k_tiles, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr):
    """fp32 product of one tile through the descriptors: A rows at off_m, w rows from w_row."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_tiles):
        a = a_desc.load([off_m, ki * BLOCK_K])
        b = w_desc.load([w_row + ki * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _pointer_k_loop(a_ptr, w_ptr, offs_m, live, offs_n, expert, N, K, stride_am, stride_ak, stride_we,
                    stride_wk, stride_wn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The same product with masked pointer loads (any strides, any K)."""
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(
            a_ptr + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak,
            mask=live[:, None] & ((k0 + offs_k)[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            w_ptr + expert * stride_we + (k0 + offs_k)[:, None] * stride_wk + offs_n[None, :] * stride_wn,
            mask=((k0 + offs_k)[:, None] < K) & (offs_n[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _slot_tile(a_ptr, a_desc, w_ptr, w_desc, c_ptr, pid_m, pid_n, rows, N, K, CAPACITY, NUM_LOCAL_EXPERTS,
               stride_am, stride_ak, stride_we, stride_wk, stride_wn, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr):
    """Tile (pid_m, pid_n): its slot's first `rows` rows times the slot's expert matrix, stored;
    nothing when the tile's rows start past `rows`."""
    blocks_per_slot = CAPACITY // BLOCK_M
    slot = pid_m // blocks_per_slot
    expert = slot % NUM_LOCAL_EXPERTS
    first = (pid_m % blocks_per_slot) * BLOCK_M  # the tile's first row inside its slot
    if first < rows:
        in_slot = first + tl.arange(0, BLOCK_M)
        offs_m = slot * CAPACITY + in_slot
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        live = in_slot < rows
        if USE_TMA:
            acc = _tma_k_loop(a_desc, w_desc, pid_m * BLOCK_M, expert * K, pid_n * BLOCK_N, tl.cdiv(K, BLOCK_K),
                              BLOCK_M, BLOCK_N, BLOCK_K)
        else:
            acc = _pointer_k_loop(a_ptr, w_ptr, offs_m, live, offs_n, expert, N, K, stride_am, stride_ak, stride_we,
                                  stride_wk, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=live[:, None] & (offs_n[None, :] < N))


@triton.jit
def _descriptors(a_ptr, w_ptr, N, K, NUM_LOCAL_EXPERTS, TILES_M, stride_am, stride_wk, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr):
    """A [S * C, K] and w [E * K, N] as tensor descriptors (USE_TMA), else the pointers."""
    if USE_TMA:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[TILES_M * BLOCK_M, K], strides=[stride_am, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[NUM_LOCAL_EXPERTS * K, N], strides=[stride_wk, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    else:
        a_desc = a_ptr
        w_desc = w_ptr
    return a_desc, w_desc


@triton.jit
def moe_grouped_gemm(a_ptr, w_ptr, c_ptr, counts_ptr, N, K, CAPACITY, NUM_LOCAL_EXPERTS, TILES_M,
                     stride_am, stride_ak, stride_we, stride_wk, stride_wn, stride_cm, stride_cn,
                     NUM_PROGS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr = 8, USE_TMA: tl.constexpr = False):
    """The grouped GEMM of both MoE ops, annotated as the consumer of `x_recv` and the producer
    of `y_send` (one kernel, as kernels/gemm.py serves AG+GEMM and GEMM+RS): the op binds the
    tables of its own plan and the other role's lists stay empty.
    - dispatch: a tile waits for its slot's chunk, then reads the slot's count (this call's);
    - combine (its input is local): a tile announces its rows of `c` once stored, so the chunk
      that carries its slot back to the rows' home rank leaves as soon as the slot's last tile
      is done. A tile past the count stores nothing but still announces (the chunk counts every
      tile of its slot)."""
    num_pid_n = tl.cdiv(N, BLOCK_N)
    blocks_per_slot = CAPACITY // BLOCK_M
    a_desc, w_desc = _descriptors(a_ptr, w_ptr, N, K, NUM_LOCAL_EXPERTS, TILES_M, stride_am, stride_wk,
                                  BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA)
    for tile_id in tl.range(tl.program_id(axis=0), TILES_M * num_pid_n, NUM_PROGS):
        # @sy.tile(index=tile_id, m=pid_m, n=pid_n)
        pid_m, pid_n = slot_grouped_tile(tile_id, blocks_per_slot, num_pid_n, GROUP_M)
        # @sy.end
        # @sy.consume(a_ptr, m=pid_m, tensor=x_recv)
        rows = tl.load(counts_ptr + pid_m // blocks_per_slot)
        # @sy.produce(c_ptr, m=pid_m, n=pid_n, tensor=y_send)
        _slot_tile(a_ptr, a_desc, w_ptr, w_desc, c_ptr, pid_m, pid_n, rows, N, K, CAPACITY, NUM_LOCAL_EXPERTS,
                   stride_am, stride_ak, stride_we, stride_wk, stride_wn, stride_cm, stride_cn,
                   BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA)
