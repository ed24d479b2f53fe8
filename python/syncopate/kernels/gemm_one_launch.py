"""One-launch GEMMs for tile counts that do not fill whole waves (small M, decode), bf16 and FP8.

Every tile that more than one program works on is summed in the same launch by the last
program to finish a share of it (so every C tile is stored once, final: the place a producer's
notify would go). TMA descriptors are made on the host (see gemm.py's
gemm_tma_host_kernel: device-made descriptors cost 1-2.4 us per launch on nvidia-h200, which is
what made the earlier one-launch kernels, gemm_split_k_fixup_kernel and gemm_stream_k_kernel,
slower than two launches on decode rows). With HAS_SCALES the epilogue multiplies by FP8 row /
column scales (gemm_fp8.py's _scale_tile) after the sum: (sum of partials) * sa * sb.

- `gemm_tail_fixup_kernel`: the remaining tiles' K split SPLIT_K ways (dp_tiles = 0: plain
  split-K in one launch).
- `gemm_stream_k_flat_kernel` (for tile counts under two waves): every tile's K-steps laid end
  to end and cut into `num_programs` equal ranges (stream-K), walked by ONE pipelined loop of
  K-steps whose body ends a tile's share when the tile's last K-step or the range's end is
  reached: the software pipeline runs across tile boundaries (the earlier gemm_stream_k_kernel
  restarted it for every tile).

A shared tile's contributors write their fp32 partials to a tile-major workspace
[tiles, slots, BLOCK_M, BLOCK_N], then raise the tile's counter (acquire-release, GPU scope) by
what they did; the one that completes the count sums the slots FIXUP_ROWS rows at a time, stores
the tile and resets the counter. No program waits for another. Not annotated for the
transformer (the fused ops run gemm_tma_kernel); both run under TRITON_INTERPRET=1
(tests/python/test_gemm_interpret.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .configs import GemmConfig
from .gemm import grouped_tile, grouped_tma_tile, interpreter_active, tile_grid, tma_k_loop, tma_store_tile
from .gemm_fp8 import _scale_tile


@triton.jit
def _whole_tiles(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, stride_sa, stride_sb, num_programs,
                 dp_tiles, num_pid_m, num_pid_n, k_tiles, HAS_SCALES: tl.constexpr, B_IS_NK: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 EPILOGUE_SPLIT: tl.constexpr):
    """Tiles 0..dp_tiles (grouped order) whole, this program's share, stored through c_desc."""
    for tile_id in tl.range(tl.program_id(0), dp_tiles, num_programs, flatten=True):
        acc, off_m, off_n = grouped_tma_tile(a_desc, b_desc, tile_id, num_pid_m, num_pid_n, k_tiles, B_IS_NK,
                                             BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
        if HAS_SCALES:
            acc = _scale_tile(acc, scale_a_ptr, stride_sa, scale_b_ptr, stride_sb, off_m, off_n, M, N,
                              BLOCK_M, BLOCK_N)
        tma_store_tile(c_desc, acc.to(c_desc.dtype), off_m, off_n, BLOCK_M, BLOCK_N, EPILOGUE_SPLIT)


@triton.jit
def _cta_barrier(ASM_BARRIER: tl.constexpr):
    """Every thread of the program here before any goes on: its stores of a partial are made
    before the one thread's release of the tile's counter. ASM_BARRIER: as a `bar.sync` in
    inline PTX, which Triton's software pipeliner lets stay inside a pipelined loop (a
    tl.debug_barrier there made it give up the loop's pipelining: checked in the TTGIR for
    sm_90); the interpreter, which runs no PTX, takes tl.debug_barrier."""
    if ASM_BARRIER:
        tl.inline_asm_elementwise("bar.sync 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.debug_barrier()


@triton.jit
def _store_rows(c_ptr, acc, off_m, off_n, M, N, stride_cm, scale_a_ptr, scale_b_ptr, stride_sa, stride_sb,
                HAS_SCALES: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    """ROWS x BLOCK_N fp32 values at (off_m, off_n) of C, scaled (HAS_SCALES), masked stores."""
    if HAS_SCALES:
        acc = _scale_tile(acc, scale_a_ptr, stride_sa, scale_b_ptr, stride_sb, off_m, off_n, M, N, ROWS, BLOCK_N)
    rows = off_m + tl.arange(0, ROWS)
    cols = off_n + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def _sum_slots_and_store(tile_base, slots, c_ptr, off_m, off_n, M, N, stride_cm, scale_a_ptr, scale_b_ptr,
                         stride_sa, stride_sb, HAS_SCALES: tl.constexpr, MAX_SLOTS: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, FIXUP_ROWS: tl.constexpr):
    """C tile at (off_m, off_n) = the sum of its first `slots` fp32 partials at tile_base. The
    slots are read unrolled (MAX_SLOTS, masked past `slots`) so their loads are in flight
    together; FIXUP_ROWS rows at a time, so the sum does not spill beside the accumulator."""
    part = tl.arange(0, FIXUP_ROWS)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    for r in tl.static_range(0, BLOCK_M, FIXUP_ROWS):
        total = tl.zeros((FIXUP_ROWS, BLOCK_N), dtype=tl.float32)
        for s in tl.static_range(MAX_SLOTS):
            total += tl.load(tile_base + s * (BLOCK_M * BLOCK_N) + r * BLOCK_N + part,
                             mask=(part >= 0) & (s < slots), other=0.0, cache_modifier=".cg")
        _store_rows(c_ptr, total, off_m + r, off_n, M, N, stride_cm, scale_a_ptr, scale_b_ptr, stride_sa,
                    stride_sb, HAS_SCALES, FIXUP_ROWS, BLOCK_N)


# dp_tiles varies with the shape: not specialised on (no recompile per value).
@triton.jit(do_not_specialize=["dp_tiles"])
def gemm_tail_fixup_kernel(a_desc, b_desc, c_desc, c_ptr, partial_ptr, counter_ptr, scale_a_ptr, scale_b_ptr,
                           M, N, K, stride_cm, stride_sa, stride_sb, num_programs, dp_tiles,
                           SPLIT_K: tl.constexpr, HAS_SCALES: tl.constexpr, B_IS_NK: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr, FIXUP_ROWS: tl.constexpr):
    """Tiles 0..dp_tiles whole; every later tile as SPLIT_K work items over slices of K, each
    tile summed by the last of its slices to finish (workspace [tail tiles, SPLIT_K, BM, BN])."""
    num_pid_m, num_pid_n, num_tiles, k_tiles = tile_grid(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    _whole_tiles(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, stride_sa, stride_sb, num_programs,
                 dp_tiles, num_pid_m, num_pid_n, k_tiles, HAS_SCALES, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                 EPILOGUE_SPLIT)
    k_per_split = tl.cdiv(k_tiles, SPLIT_K)
    in_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    for work in tl.range(tl.program_id(0), (num_tiles - dp_tiles) * SPLIT_K, num_programs):
        local_tile = work // SPLIT_K
        split = work % SPLIT_K
        pid_m, pid_n = grouped_tile(dp_tiles + local_tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        k_begin = split * k_per_split
        acc = tma_k_loop(a_desc, b_desc, off_m, off_n, k_begin, tl.minimum(k_begin + k_per_split, k_tiles),
                         B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K)
        tile_base = partial_ptr + local_tile.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
        tl.store(tile_base + split * (BLOCK_M * BLOCK_N) + in_tile, acc, cache_modifier=".cg")
        # Every thread's partial is written before the counter is raised (release); the last
        # reads the others' only after it saw them all (acquire).
        tl.debug_barrier()
        arrived = tl.atomic_add(counter_ptr + local_tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            _sum_slots_and_store(tile_base, SPLIT_K, c_ptr, off_m, off_n, M, N, stride_cm, scale_a_ptr,
                                 scale_b_ptr, stride_sa, stride_sb, HAS_SCALES, SPLIT_K, BLOCK_M, BLOCK_N,
                                 FIXUP_ROWS)
            tl.atomic_xchg(counter_ptr + local_tile, 0, sem="relaxed", scope="gpu")


@triton.jit
def _store_block(ptr, acc, row_stride, M, N, off_m, off_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    tl.store(ptr + rows[:, None] * row_stride + cols[None, :], acc.to(ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N), cache_modifier=".cg")


@triton.jit
def _store_tile(ptr, acc, row_stride, M, N, off_m, off_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                HALVES: tl.constexpr):
    """acc [BLOCK_M, BLOCK_N] to rows off_m.. and columns off_n.. of a row-major array (masked at
    M, N), in HALVES column halves (2: each half's layout change goes through half the shared
    memory scratch: a 128x256 fp32 tile whole needs 128 KiB of it beside the pipeline's 144 KiB,
    more than the 227 KiB a program may have; checked with the sm_90 compile)."""
    if HALVES == 2:
        left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        _store_block(ptr, left, row_stride, M, N, off_m, off_n, BLOCK_M, BLOCK_N // 2)
        _store_block(ptr, right, row_stride, M, N, off_m, off_n + BLOCK_N // 2, BLOCK_M, BLOCK_N // 2)
    else:
        _store_block(ptr, acc, row_stride, M, N, off_m, off_n, BLOCK_M, BLOCK_N)


@triton.jit
def gemm_stream_k_flat_kernel(a_desc, b_desc, c_ptr, partial_ptr, counter_ptr, scale_a_ptr, scale_b_ptr,
                              M, N, K, stride_cm, stride_sa, stride_sb, num_programs, HAS_SCALES: tl.constexpr,
                              B_IS_NK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, HALVES: tl.constexpr,
                              MAX_SLOTS: tl.constexpr, FIXUP_ROWS: tl.constexpr, ASM_BARRIER: tl.constexpr):
    """Stream-K over every tile: the K-steps of all tiles (units, numbered tile by tile in grouped
    order) cut into num_programs equal ranges, one per program, walked by one loop of K-steps.
    A share that is a whole tile is stored directly; a shared tile's contributors write their
    partial to slot (program - the tile's first contributor) of [tiles, MAX_SLOTS, BM, BN].
    For tile counts under two waves (configs.STREAM_K_MAX_WAVES), where every tile's K-steps are
    worth spreading; no whole-tile phase, so the pipeline's buffers are the kernel's only large
    shared memory."""
    num_pid_m, num_pid_n, num_tiles, k_tiles = tile_grid(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    pid = tl.program_id(0)
    total = num_tiles.to(tl.int64) * k_tiles
    u_begin = (pid.to(tl.int64) * total // num_programs).to(tl.int32)
    u_end = ((pid.to(tl.int64) + 1) * total // num_programs).to(tl.int32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for u in tl.range(u_begin, u_end):
        tile_id = u // k_tiles
        ki = u - tile_id * k_tiles
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        a = a_desc.load([off_m, ki * BLOCK_K])
        if B_IS_NK:
            b = b_desc.load([off_n, ki * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        else:
            b = b_desc.load([ki * BLOCK_K, off_n])
            acc = tl.dot(a, b, acc)
        if (ki == k_tiles - 1) | (u == u_end - 1):
            tile_start = u - ki
            k_begin = tl.maximum(tile_start, u_begin) - tile_start
            if (k_begin == 0) & (ki == k_tiles - 1):
                if HAS_SCALES:
                    acc = _scale_tile(acc, scale_a_ptr, stride_sa, scale_b_ptr, stride_sb, off_m, off_n, M, N,
                                      BLOCK_M, BLOCK_N)
                _store_tile(c_ptr, acc, stride_cm, M, N, off_m, off_n, BLOCK_M, BLOCK_N, HALVES)
            else:
                # The first and last programs whose ranges hold this tile's first and last unit.
                first = (((tile_start.to(tl.int64) + 1) * num_programs - 1) // total).to(tl.int32)
                last = (((tile_start.to(tl.int64) + k_tiles) * num_programs - 1) // total).to(tl.int32)
                tile_base = partial_ptr + tile_id.to(tl.int64) * (MAX_SLOTS * BLOCK_M * BLOCK_N)
                _store_tile(tile_base + (pid - first) * (BLOCK_M * BLOCK_N), acc, BLOCK_N, BLOCK_M, BLOCK_N, 0, 0,
                            BLOCK_M, BLOCK_N, HALVES)
                _cta_barrier(ASM_BARRIER)
                done = ki + 1 - k_begin
                arrived = tl.atomic_add(counter_ptr + tile_id, done, sem="acq_rel", scope="gpu")
                if arrived + done == k_tiles:
                    _sum_slots_and_store(tile_base, last - first + 1, c_ptr, off_m, off_n, M, N, stride_cm,
                                         scale_a_ptr, scale_b_ptr, stride_sa, stride_sb, HAS_SCALES, MAX_SLOTS,
                                         BLOCK_M, BLOCK_N, FIXUP_ROWS)
                    tl.atomic_xchg(counter_ptr + tile_id, 0, sem="relaxed", scope="gpu")
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)


def tail_fixup_split(tiles: int, num_programs: int, split_tail: bool) -> int:
    """dp_tiles of gemm_tail_fixup_kernel: with split_tail, the tiles of the whole waves (all of
    them on a whole number of waves, none under one wave); without, none (plain split-K)."""
    if not split_tail:
        return 0
    return tiles if tiles % num_programs == 0 else (tiles // num_programs) * num_programs


def stream_k_slots(tiles: int, k_tiles: int, num_programs: int) -> int:
    """MAX_SLOTS of gemm_stream_k_flat_kernel: a power of two at least the most programs any one
    tile can be shared by (each program has at least tiles * k_tiles // num_programs K-steps)."""
    per_program = tiles * k_tiles // num_programs
    shared_by = min(num_programs, -(-k_tiles // max(per_program, 1)) + 1)
    return triton.next_power_of_2(shared_by)


def one_launch_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, b_is_nk: bool, cfg: GemmConfig,
                    num_programs: int, counters, scales: tuple | None = None) -> None:
    """C = A @ B (times the FP8 scales: (scale_a, scale_b, stride_sa, stride_sb)) with
    cfg.stream_k (gemm_stream_k_flat_kernel) or cfg.split_fixup (gemm_tail_fixup_kernel; the
    whole waves whole when cfg.split_tail). a: [M, K]; b: [N, K] when b_is_nk, else [K, N];
    counters(tiles): the per-stream zeroed counters (gemm._counters)."""
    m, k = a.shape
    n = out.shape[1]
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    k_tiles = triton.cdiv(k, cfg.block_k)
    a_desc = TensorDescriptor.from_tensor(a, [cfg.block_m, cfg.block_k])
    b_desc = TensorDescriptor.from_tensor(b, [cfg.block_n, cfg.block_k] if b_is_nk else [cfg.block_k, cfg.block_n])
    scale_a, scale_b, stride_sa, stride_sb = scales if scales is not None else (out, out, 0, 0)
    if cfg.stream_k:
        grid = max(1, min(num_programs, tiles * k_tiles))
        slots = stream_k_slots(tiles, k_tiles, grid)
        partial = torch.empty((tiles, slots, cfg.block_m, cfg.block_n), dtype=torch.float32, device=a.device)
        gemm_stream_k_flat_kernel[(grid,)](
            a_desc, b_desc, out, partial, counters(tiles), scale_a, scale_b, m, n, k, out.stride(0), stride_sa,
            stride_sb, grid, HAS_SCALES=scales is not None, B_IS_NK=b_is_nk, BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m, HALVES=2 if cfg.block_n >= 256 else 1,
            MAX_SLOTS=slots, FIXUP_ROWS=min(32, cfg.block_m), ASM_BARRIER=not interpreter_active(),
            num_stages=cfg.num_stages, num_warps=cfg.num_warps)
        return
    c_desc = TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n // cfg.epilogue_split])
    dp_tiles = tail_fixup_split(tiles, num_programs, cfg.split_tail)
    tail = tiles - dp_tiles
    grid = max(1, min(num_programs, max(dp_tiles, tail * cfg.split_k)))
    partial = torch.empty((max(tail, 1), cfg.split_k, cfg.block_m, cfg.block_n), dtype=torch.float32,
                          device=a.device)
    gemm_tail_fixup_kernel[(grid,)](
        a_desc, b_desc, c_desc, out, partial, counters(max(tail, 1)), scale_a, scale_b, m, n, k, out.stride(0),
        stride_sa, stride_sb, grid, dp_tiles, SPLIT_K=cfg.split_k, HAS_SCALES=scales is not None, B_IS_NK=b_is_nk,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        EPILOGUE_SPLIT=cfg.epilogue_split, FIXUP_ROWS=min(32, cfg.block_m), num_stages=cfg.num_stages,
        num_warps=cfg.num_warps)
