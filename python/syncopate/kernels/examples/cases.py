"""Runnable cases for the annotated examples: inputs, launches and signal tables.

Shared by the CPU interpreter tests (tests/python/test_transform_interpret.py) and the GPU test
(tests/gpu/test_transform_gpu.py). Each case runs the untransformed kernel the ordinary way and
the transformed one through `syncopate.launch`, over signal tables made the way lowering makes
them for a row-split collective: the communicated tensor's rows are cut into `world` even shards,
one chunk (and one slot) each; a consumer tile waits on the shards its rows overlap, a producer
tile notifies them, and a slot's writers are the tiles that overlap its shard.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch


def load_module(path: Path, name: str) -> ModuleType:
    """Imports a kernel file under a unique module name (originals and goldens share names)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def even_split(size: int, parts: int, index: int) -> tuple[int, int]:
    base, rem = divmod(size, parts)
    begin = index * base + min(index, rem)
    return begin, base + (1 if index < rem else 0)


@dataclass
class Problem:
    tensors: dict  # name -> torch.Tensor
    args: tuple  # the kernel's positional arguments
    meta: dict  # constexpr keyword arguments
    grid_original: tuple
    grid_transformed: tuple | None  # None: one program per tile
    rows: int  # M of the tile grid
    block_m: int
    tiles_m: int
    tiles_n: int
    output: str  # name of the tensor to compare
    block_n: int | None = None  # columns of a tile (None: every column)


@dataclass
class Case:
    file: str
    kernel: str
    role: str  # "consume" or "produce"
    tensor: str  # the communicated tensor (split into row shards, one chunk each)
    make: Callable[[torch.device, torch.Generator], Problem]


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _gemm_tensors(device, gen, M, N, K):
    a = torch.randn(M, K, generator=gen).to(device)
    b = torch.randn(K, N, generator=gen).to(device)
    c = torch.full((M, N), float("nan"), device=device)  # poisoned: unwritten tiles show
    return a, b, c


def _scale(device) -> int:
    """Sizes grow on a GPU so that many tiles wait at once; the interpreter keeps them small."""
    return 4 if device.type == "cuda" else 1


def _gemm_problem(device, gen, m, n, k, *, strides=True, programs=None, **meta) -> Problem:
    """C = A @ B with 16x16x16 blocks at m, n, k (scaled on a GPU): the kernel's arguments (with
    the six strides unless `strides` is False), one program per tile or `programs` persistent
    programs (then NUM_PROGS=programs), `meta`'s extra constexprs."""
    s = _scale(device)
    M, N, K, BM, BN, BK = m * s, n * s, k * s, 16, 16, 16  # row strides: multiples of 16 bytes
    a, b, c = _gemm_tensors(device, gen, M, N, K)
    args = (a, b, c, M, N, K)
    if strides:
        args += (a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    tiles_m, tiles_n = _cdiv(M, BM), _cdiv(N, BN)
    if programs is None:
        grid_original, grid_transformed = (tiles_m * tiles_n,), None
    else:
        grid_original = grid_transformed = (programs * s,)
        meta = dict(NUM_PROGS=programs * s, **meta)
    meta.update(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
    tensors = {"a": a, "b": b, "c": c}
    return Problem(tensors, args, meta, grid_original, grid_transformed, M, BM, tiles_m, tiles_n, "c", BN)


def _ag_gemm_one_tile(device, gen) -> Problem:
    return _gemm_problem(device, gen, 80, 48, 40, GROUP_M=2)


def _ag_gemm_tma(device, gen) -> Problem:
    return _gemm_problem(device, gen, 80, 48, 40, strides=False)


def _persistent_gemm(device, gen) -> Problem:
    return _gemm_problem(device, gen, 72, 40, 48, programs=3, GROUP_M=2)


def _gemm_rs_producer(device, gen) -> Problem:
    return _gemm_problem(device, gen, 64, 48, 24)


def _rmsnorm_rows(device, gen) -> Problem:
    s = _scale(device)
    M, N, BM, BN = 50 * s, 32 * s, 8, 32 * s
    x = torch.randn(M, N, generator=gen).to(device)
    w = torch.randn(N, generator=gen).to(device)
    y = torch.full((M, N), float("nan"), device=device)
    return Problem(
        {"x": x, "w": w, "y": y},
        (x, w, y, M, N, x.stride(0), y.stride(0), 1e-6),
        dict(BLOCK_M=BM, BLOCK_N=BN),
        (_cdiv(M, BM),),
        None,
        M,
        BM,
        _cdiv(M, BM),
        1,
        "y",
    )


CASES = [
    Case("ag_gemm_one_tile.py", "matmul_kernel", "consume", "a", _ag_gemm_one_tile),
    Case("ag_gemm_tma.py", "matmul_tma_kernel", "consume", "a", _ag_gemm_tma),
    Case("persistent_gemm.py", "matmul_persistent", "consume", "a", _persistent_gemm),
    Case("gemm_rs_producer.py", "matmul_rs_kernel", "produce", "c", _gemm_rs_producer),
    Case("rmsnorm_rows.py", "rmsnorm_kernel", "consume", "x", _rmsnorm_rows),
]


@dataclass
class SlotLists:
    tile_waits: list
    tile_notifies: list
    slot_writers: list
    slot_chunks: list


def row_shard_slots(problem: Problem, role: str, world: int) -> SlotLists:
    """Slots of a row-split collective over the problem's tile grid (see the module doc)."""
    num_tiles = problem.tiles_m * problem.tiles_n
    per_tile: list[list[int]] = []
    for tile in range(num_tiles):
        tm = tile // problem.tiles_n
        r0, r1 = tm * problem.block_m, min((tm + 1) * problem.block_m, problem.rows)
        slots = []
        for s in range(world):
            b, n = even_split(problem.rows, world, s)
            if n > 0 and b < r1 and r0 < b + n:
                slots.append(s)
        per_tile.append(slots)
    empty = [[] for _ in range(num_tiles)]
    if role == "consume":
        return SlotLists(per_tile, empty, [1] * world, list(range(world)))
    writers = [sum(s in row for row in per_tile) for s in range(world)]
    return SlotLists(empty, per_tile, writers, list(range(world)))


def check_problem(case: Case) -> Callable:
    """The case as a problem maker for syncopate.check (CPU tensors, the default row split)."""
    from syncopate.check import CheckProblem

    def make(gen: torch.Generator) -> CheckProblem:
        p = case.make(torch.device("cpu"), gen)
        return CheckProblem(
            p.tensors,
            p.args,
            p.meta,
            p.grid_original,
            p.grid_transformed,
            p.tiles_m,
            p.tiles_n,
            p.block_m,
            p.block_n,
            outputs=(p.output,),
        )

    return make


def shuffled_order(num_tiles: int, seed: int) -> list[int]:
    order = list(range(num_tiles))
    random.Random(seed).shuffle(order)
    return order
