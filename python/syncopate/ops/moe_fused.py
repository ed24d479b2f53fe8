"""The fused MoE dispatch's grouped GEMM: kernels/moe_gemm.py transformed, its tile tables, and
the slot layout that the MoE dispatch plan (plan/expert_parallel.hpp) lands rows in.

On rank r the received rows sit in capacity slots of x_recv [W * E * C, H]: slot q = s * E + e
holds the rows from rank s for local expert e (E = local experts, C = capacity), the first
recv_counts[q] of them real. Chunk (s -> r, e) of the plan lands slot q, after the chunk that
landed recv_counts[s, :]. The transformed grouped GEMM's tile (pid_m, pid_n) reads rows of one
slot (BLOCK_M divides C), so it waits for exactly that chunk, then reads the count.

`slot_tables` builds those tables in Python (slot q's landing signal is slot q of the table, its
chunk the plan's rows chunk id); `plan_tables` gets them from the plan by lowering (the C++
layers) and is what a runtime workspace would use; the tests check that the two agree.
`local_first_order` puts the tiles of the local slots first, then the peers' in the plan's
rounds (round i brings rank r - i's rows): the order the chunks are issued, local rows needing
no transfer.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import torch

from syncopate.errors import ShapeError, TransformError, Error, InternalError
from syncopate.launch import TileTables

KERNEL_MODULE = "syncopate.kernels.moe_gemm"
KERNEL = "moe_grouped_gemm"


def rows_chunk_id(world: int, experts: int, src: int, dst: int, expert: int) -> int:
    """The rows chunk src -> dst for local expert `expert` (plan/expert_parallel.hpp's order:
    rounds of peer offset, each rank's counts chunk then its rows chunks)."""
    rnd = (dst - src) % world
    return (rnd * world + src) * (1 + experts) + 1 + expert


def check_geometry(who: str, capacity: int, block_m: int) -> None:
    if block_m < 1 or capacity % block_m:
        raise ShapeError(f"{who}: the capacity ({capacity} rows) must be a multiple of BLOCK_M={block_m}, so "
                         f"that a tile reads one (source rank, expert) slot and waits for exactly its chunk")


def slot_tables(world: int, experts: int, capacity: int, block_m: int, tiles_n: int, rank: int,
                order: Optional[Sequence[int]] = None) -> TileTables:
    """Tile tables of the grouped GEMM on `rank`: tile (m, n) waits on landing slot q = m //
    (capacity / block_m), whose chunk is the rows chunk (q // E -> rank, q % E)."""
    check_geometry("slot_tables", capacity, block_m)
    per_slot = capacity // block_m
    slots = world * experts
    tiles_m = slots * per_slot
    waits = [[m // per_slot] for m in range(tiles_m) for _ in range(tiles_n)]
    chunks = [rows_chunk_id(world, experts, q // experts, rank, q % experts) for q in range(slots)]
    if order is None:
        order = local_first_order(world, experts, capacity, block_m, tiles_n, rank)
    return TileTables.from_lists(order, tiles_n, waits, [[] for _ in waits], [1] * slots, chunks, rank=rank)


def local_first_order(world: int, experts: int, capacity: int, block_m: int, tiles_n: int, rank: int) -> list:
    """Tile ids: the slots of rank itself first, then of rank - 1, rank - 2, ... (mod world);
    inside a source, by expert, then row block, then column."""
    check_geometry("local_first_order", capacity, block_m)
    per_slot = capacity // block_m
    order = []
    for i in range(world):
        s = (rank - i) % world  # round i brings the rows of rank - i (the plan's peer offset i)
        for e in range(experts):
            q = s * experts + e
            for b in range(per_slot):
                m = q * per_slot + b
                order.extend(m * tiles_n + n for n in range(tiles_n))
    return order


def plan_tables(plan, world: int, experts: int, capacity: int, hidden_out: int, block_m: int, block_n: int,
                rank: int, order: Optional[Sequence[int]] = None) -> TileTables:
    """The same tables from the plan by lowering (syncopate._core): the kernel's access is a
    consume of x_recv's rows (m_dim 0)."""
    from syncopate import _core

    check_geometry("plan_tables", capacity, block_m)
    grid = _core.TileGrid(world * experts * capacity, hidden_out, block_m, block_n)
    access = _core.TileAccess("x_recv", "consume", 0, -1, False)
    table = _core.lower(plan, grid, [access])[rank]
    tiles_n = -(-hidden_out // block_n)
    if order is None:
        order = local_first_order(world, experts, capacity, block_m, tiles_n, rank)
    return TileTables.from_signal_table(table, order, tiles_n)


@functools.lru_cache(maxsize=None)
def transformed_kernel():
    """kernels/moe_gemm.py's grouped GEMM as the transformer rewrites it (once per process)."""
    from syncopate.ops.fused_gemm import transformed_kernel as transform

    return transform(KERNEL, KERNEL_MODULE)


def grouped_gemm_args(a: torch.Tensor, w: torch.Tensor, c: torch.Tensor, counts: torch.Tensor, capacity: int,
                      block_m: int, block_n: int, block_k: int, num_progs: int):
    """(positional args, meta) of one launch of the grouped GEMM (original or transformed)."""
    who = "moe_grouped_gemm"
    check_geometry(who, capacity, block_m)
    experts, k, n = w.shape
    if a.dim() != 2 or a.shape[1] != k or a.shape[0] % (capacity * experts):
        raise ShapeError(f"{who}: a must be [sources * {experts} * {capacity}, {k}], got {list(a.shape)}")
    if tuple(c.shape) != (a.shape[0], n):
        raise ShapeError(f"{who}: c must be [{a.shape[0]}, {n}], got {list(c.shape)}")
    slots = a.shape[0] // capacity
    if counts.dtype != torch.int32 or counts.numel() != slots:
        raise ShapeError(f"{who}: counts must be int32 with one entry per slot ({slots}), got "
                         f"{counts.dtype} {list(counts.shape)}")
    args = (a, w, c, counts, n, k, capacity, experts, a.shape[0] // block_m,
            a.stride(0), a.stride(1), w.stride(0), w.stride(1), w.stride(2), c.stride(0), c.stride(1))
    meta = dict(NUM_PROGS=num_progs, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return args, meta


def reference(a: torch.Tensor, w: torch.Tensor, counts: Sequence[int], capacity: int) -> list:
    """[(rows, slot's product in fp32)] per slot: a's first counts[q] rows of slot q times w[e]."""
    experts = w.shape[0]
    out = []
    for q, rows in enumerate(int(v) for v in counts):
        at = q * capacity
        out.append(a[at:at + rows].float() @ w[q % experts].float())
    return out
