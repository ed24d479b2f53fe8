"""Small problems for checking the shipped kernels with syncopate.check (CPU, Triton's interpreter).

    python -m syncopate.check python/syncopate/kernels/gemm.py --kernel gemm_tma_kernel \\
        --problem syncopate.kernels.check_problems:gemm_tma

Each function takes a torch.Generator and returns a CheckProblem of a few tiles: the persistent
grid is smaller than the tile count (programs loop), shapes are not multiples of the block. The
GEMMs consume A and produce C (their annotations), so one check covers both roles: the default
row split gives A's chunks and C's chunks. gemm_reduce_kernel's staging tensor is not split by
rows, so its problem spells out its slots: the shard's tiles wait on the other ranks' partials,
the other tiles notify the chunk of C that goes to the rank owning their rows.
"""

from __future__ import annotations

import torch

from syncopate.check import CheckProblem, Chunk

# float16: the interpreter's tl.dot is exact for it (bfloat16 needs a workaround there).
_DTYPE = torch.float16
_BM, _BN, _BK = 32, 32, 16
_PROGRAMS = 3


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _operands(gen: torch.Generator, m: int, n: int, k: int):
    a = torch.randn(m, k, generator=gen).to(_DTYPE)
    b = torch.randn(k, n, generator=gen).to(_DTYPE)
    c = torch.empty(m, n, dtype=_DTYPE)
    return a, b, c


def _persistent_problem(tensors: dict, args: tuple, meta: dict, tiles_m: int, tiles_n: int, **rest) -> CheckProblem:
    """A problem of `_PROGRAMS` persistent programs over tiles_m x tiles_n tiles of _BM x _BN;
    `rest`: CheckProblem's keyword fields (outputs, tile regions, tables)."""
    return CheckProblem(tensors, args, meta, (_PROGRAMS,), (_PROGRAMS,), tiles_m, tiles_n, _BM, _BN, **rest)


def _persistent_tma_problem(tensors: dict, args: tuple, m: int, n: int, c_store_pointers: bool) -> CheckProblem:
    """A problem of the persistent TMA GEMMs (gemm_tma_kernel, gemm_fp8_tma_kernel, which share
    their constexprs): `_PROGRAMS` programs looping over the tiles, C stored through TMA or, with
    c_store_pointers, with plain stores."""
    meta = dict(
        B_IS_NK=False,
        BLOCK_M=_BM,
        BLOCK_N=_BN,
        BLOCK_K=_BK,
        GROUP_M=2,
        EPILOGUE_SPLIT=1,
        WARP_SPECIALIZE=False,
        FLATTEN=True,
        C_STORE_POINTERS=c_store_pointers,
    )
    return _persistent_problem(tensors, args, meta, _cdiv(m, _BM), _cdiv(n, _BN), outputs=("c",))


def _tma_problem(gen: torch.Generator, c_store_pointers: bool) -> CheckProblem:
    m, n, k = 96, 56, 48  # rows and columns of 16-byte multiples (TMA), 56 not a block multiple
    a, b, c = _operands(gen, m, n, k)
    args = (a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), _PROGRAMS)
    return _persistent_tma_problem({"a": a, "b": b, "c": c}, args, m, n, c_store_pointers)


def gemm_tma(gen: torch.Generator) -> CheckProblem:
    """gemm_tma_kernel storing C through TMA (the consumer side of a fused op)."""
    return _tma_problem(gen, c_store_pointers=False)


def gemm_tma_pointer_stores(gen: torch.Generator) -> CheckProblem:
    """gemm_tma_kernel storing C with plain stores (the producer side of a fused op)."""
    return _tma_problem(gen, c_store_pointers=True)


def gemm_pointer(gen: torch.Generator) -> CheckProblem:
    """gemm_pointer_kernel (masked pointer loads, any strides)."""
    m, n, k = 80, 40, 40
    a, b, c = _operands(gen, m, n, k)
    meta = dict(BLOCK_M=_BM, BLOCK_N=_BN, BLOCK_K=_BK, GROUP_M=2)
    return CheckProblem(
        {"a": a, "b": b, "c": c},
        (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), _PROGRAMS),
        meta,
        (_PROGRAMS,),
        (_PROGRAMS,),
        _cdiv(m, _BM),
        _cdiv(n, _BN),
        _BM,
        _BN,
        outputs=("c",),
    )


def gemm_reduce(gen: torch.Generator, world: int = 2, rank: int = 1) -> CheckProblem:
    """gemm_reduce_kernel as rank `rank` of `world`: rows [rank*S, (rank+1)*S) of A @ B plus the
    other ranks' staged partials p[s] go to `out`; every other row goes to `c`."""
    shard = 2 * _BM
    m, n, k = shard * world, 48, 32
    a, b, c = _operands(gen, m, n, k)
    p = torch.randn(world, shard, n, generator=gen).to(_DTYPE)
    out = torch.empty(shard, n, dtype=_DTYPE)
    begin = rank * shard
    meta = dict(
        NUM_SLOTS=world,
        B_IS_NK=False,
        BLOCK_M=_BM,
        BLOCK_N=_BN,
        BLOCK_K=_BK,
        GROUP_M=2,
        WARP_SPECIALIZE=False,
        FLATTEN=True,
    )
    args = (
        a,
        b,
        c,
        p,
        out,
        m,
        n,
        k,
        a.stride(0),
        b.stride(0),
        c.stride(0),
        p.stride(0),
        p.stride(1),
        out.stride(0),
        begin,
        shard,
        rank,
        _PROGRAMS,
    )
    tiles_m, tiles_n = _cdiv(m, _BM), _cdiv(n, _BN)

    def rows_of(tile):
        r0 = (tile // tiles_n) * _BM
        return r0, min(r0 + _BM, m)

    def in_shard(tile):
        r0, _ = rows_of(tile)
        return begin <= r0 < begin + shard

    def regions(tile):
        r0, r1 = rows_of(tile)
        c0 = (tile % tiles_n) * _BN
        cols = slice(c0, min(c0 + _BN, n))
        if in_shard(tile):
            return [("out", (slice(r0 - begin, r1 - begin), cols))]
        return [("c", (slice(r0, r1), cols))]

    # Slots 0..world-1: the partial staged by rank s (p[s]); world..2*world-1: the chunk of c
    # that goes to rank q (its shard rows).
    num_tiles = tiles_m * tiles_n
    waits = [[s for s in range(world) if s != rank] if in_shard(t) else [] for t in range(num_tiles)]
    notifies = [[] if in_shard(t) else [world + rows_of(t)[0] // shard] for t in range(num_tiles)]
    writers = [1] * world + [sum(1 for row in notifies if world + q in row) for q in range(world)]
    chunks = [[Chunk("p", (s,))] for s in range(world)] + [
        [Chunk("c", (slice(q * shard, (q + 1) * shard),))] for q in range(world)
    ]
    return _persistent_problem(
        {"a": a, "b": b, "c": c, "p": p, "out": out},
        args,
        meta,
        tiles_m,
        tiles_n,
        outputs=("c", "out"),
        tile_regions=regions,
        tile_waits=waits,
        tile_notifies=notifies,
        slot_writers=writers,
        chunks=chunks,
    )


def _fp8_problem(gen: torch.Generator, c_store_pointers: bool) -> CheckProblem:
    """kernels/gemm_fp8.py: e4m3 A and B, row-wise A scales and column-wise B scales, bf16 C."""
    m, n, k = 96, 48, 64  # 16-byte row pitches for TMA at 1 byte per element; 48 not a block multiple
    a = (torch.randn(m, k, generator=gen) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(k, n, generator=gen) * 2).to(torch.float8_e4m3fn)
    c = torch.empty(m, n, dtype=torch.bfloat16)
    scale_a = torch.rand(m, generator=gen) + 0.5
    scale_b = torch.rand(n, generator=gen) + 0.5
    args = (a, b, c, scale_a, scale_b, m, n, k, a.stride(0), b.stride(0), c.stride(0), 1, 1, _PROGRAMS)
    return _persistent_tma_problem({"a": a, "b": b, "c": c}, args, m, n, c_store_pointers)


def gemm_fp8_tma(gen: torch.Generator) -> CheckProblem:
    """gemm_fp8_tma_kernel storing C through TMA (the consumer side: FP8 AG+GEMM)."""
    return _fp8_problem(gen, c_store_pointers=False)


def gemm_fp8_tma_pointer_stores(gen: torch.Generator) -> CheckProblem:
    """gemm_fp8_tma_kernel storing C with plain stores (the producer side: FP8 GEMM+RS/AR)."""
    return _fp8_problem(gen, c_store_pointers=True)


def moe_grouped_gemm(gen: torch.Generator, world: int = 2, rank: int = 1) -> CheckProblem:
    """moe_gemm.py's grouped GEMM on `rank` of `world`, two local experts: slot q = s * 2 + e of
    `a` (capacity 2 * BLOCK_M rows) is the chunk from rank s for expert e; the counts (one empty
    slot, one full, the rest ragged) say how many rows of each a tile computes and stores."""
    experts, capacity, k, n = 2, 2 * _BM, 32, 48
    slots = world * experts
    counts = torch.tensor([0, capacity, _BM + 5, 7][:slots] + [capacity // 2] * max(0, slots - 4), dtype=torch.int32)
    a = torch.randn(slots * capacity, k, generator=gen).to(_DTYPE)
    w = torch.randn(experts, k, n, generator=gen).to(_DTYPE)
    c = torch.empty(slots * capacity, n, dtype=_DTYPE)
    per_slot, tiles_n = capacity // _BM, _cdiv(n, _BN)
    tiles_m = slots * per_slot
    meta = dict(BLOCK_M=_BM, BLOCK_N=_BN, BLOCK_K=_BK)
    args = (
        a,
        w,
        c,
        counts,
        n,
        k,
        capacity,
        experts,
        tiles_m,
        a.stride(0),
        a.stride(1),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        c.stride(0),
        c.stride(1),
        _PROGRAMS,
    )

    def regions(tile):
        m, col = divmod(tile, tiles_n)
        q, first = m // per_slot, (m % per_slot) * _BM
        rows = min(_BM, max(0, int(counts[q]) - first))
        if rows == 0:
            return []
        r0 = q * capacity + first
        return [("c", (slice(r0, r0 + rows), slice(col * _BN, min((col + 1) * _BN, n))))]

    waits = [[m // per_slot] for m in range(tiles_m) for _ in range(tiles_n)]
    chunks = [[Chunk("a", (slice(q * capacity, (q + 1) * capacity),))] for q in range(slots)]
    return _persistent_problem(
        {"a": a, "w": w, "c": c, "counts": counts},
        args,
        meta,
        tiles_m,
        tiles_n,
        outputs=("c",),
        tile_regions=regions,
        tile_waits=waits,
        tile_notifies=[[] for _ in waits],
        slot_writers=[1] * slots,
        chunks=chunks,
    )
