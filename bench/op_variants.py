"""The PyTorch ways to run one tensor-parallel op that bench_ops.py times side by side
(Syncopate's own variants: syncopate_variants.py; kernel-level: kernel_level_variants.py).

Every builder returns {variant name: (callable, output getter, poison) or skip reason}. A
callable runs the op once on the current stream; the getter returns the tensor to check;
poison says whether that tensor may be filled with NaN before the checked run (not when it
is also the variant's input, as for an in-place all-reduce). The GEMM-alone and
collective-alone variants start from valid data: the builders fill their inputs.

Conventions (the same for every benchmark in bench/):
- ag_gemm: rank r holds A_r = A[r*M/w:(r+1)*M/w, :]; every rank ends with A @ B, [M, N].
- gemm_rs: rank r holds A[:, K-slice r] and B[K-slice r, :]; rank r ends with rows
  [r*M/w, (r+1)*M/w) of the sum over ranks of the partial products.
- gemm_ar: the same inputs as gemm_rs; every rank ends with the whole sum, [M, N].
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

Variant = tuple[Callable[[], None], Callable[[], torch.Tensor], bool]


def _symm_ops():
    """torch.ops.symm_mem, or the reason it is missing."""
    try:
        import torch.distributed._symmetric_memory  # noqa: F401  (registers the ops)

        return torch.ops.symm_mem, None
    except Exception as error:
        return None, f"torch.ops.symm_mem unavailable: {type(error).__name__}: {error}"


def ag_gemm_variants(a_shard: torch.Tensor, b: torch.Tensor, chunks: int) -> dict[str, Variant | str]:
    world, rank = dist.get_world_size(), dist.get_rank()
    rows = a_shard.shape[0]
    m, n = rows * world, b.shape[1]
    a_full = torch.empty((m, a_shard.shape[1]), dtype=a_shard.dtype, device=a_shard.device)
    out = torch.empty((m, n), dtype=a_shard.dtype, device=a_shard.device)
    variants: dict[str, Variant | str] = {}

    dist.all_gather_into_tensor(a_full, a_shard)  # the GEMM-alone variant's input
    variants["gemm"] = (lambda: torch.mm(a_full, b, out=out), lambda: out, True)
    variants["collective"] = (lambda: dist.all_gather_into_tensor(a_full, a_shard), lambda: a_full, True)

    def sequential():
        dist.all_gather_into_tensor(a_full, a_shard)
        torch.mm(a_full, b, out=out)

    variants["sequential"] = (sequential, lambda: out, True)

    symm, reason = _symm_ops()
    if symm is None:
        variants["async_tp"] = reason
    else:
        group_name = dist.group.WORLD.group_name
        holder = {}

        def async_tp():
            _, outs = symm.fused_all_gather_matmul(a_shard, [b], 0, group_name, return_A=False)
            holder["out"] = outs[0]

        variants["async_tp"] = (async_tp, lambda: holder["out"], False)

    # Kernel-level overlap: each rank's shard, in `chunks` row pieces, is broadcast on NCCL's
    # (high-priority) stream straight into its place in A; the GEMM of a piece's output rows
    # waits only for that piece. The local shard needs no transfer, so its GEMM goes first.
    if rows % chunks:
        variants["two_stream"] = f"M/w={rows} not divisible by --chunks {chunks}"
    else:
        piece = rows // chunks
        order = [(src, c) for src in [rank] + [r for r in range(world) if r != rank] for c in range(chunks)]
        issue_order = [(src, c) for src in range(world) for c in range(chunks)]

        def two_stream():
            a_full[rank * rows : (rank + 1) * rows].copy_(a_shard)
            works = {}
            for src, c in issue_order:  # same collective order on every rank
                lo = src * rows + c * piece
                works[(src, c)] = dist.broadcast(a_full[lo : lo + piece], src=src, async_op=True)
            for src, c in order:
                lo = src * rows + c * piece
                if src != rank:
                    works[(src, c)].wait()  # the compute stream waits for this piece only
                torch.mm(a_full[lo : lo + piece], b, out=out[lo : lo + piece])
            for work in works.values():
                work.wait()

        variants["two_stream"] = (two_stream, lambda: out, True)

    return variants


def gemm_rs_variants(a: torch.Tensor, b_shard: torch.Tensor, chunks: int) -> dict[str, Variant | str]:
    world, rank = dist.get_world_size(), dist.get_rank()
    m, n = a.shape[0], b_shard.shape[1]
    rows = m // world
    partial = torch.empty((m, n), dtype=a.dtype, device=a.device)
    out = torch.empty((rows, n), dtype=a.dtype, device=a.device)
    variants: dict[str, Variant | str] = {}

    torch.mm(a, b_shard, out=partial)  # the collective-alone variant's input
    variants["gemm"] = (lambda: torch.mm(a, b_shard, out=partial), lambda: partial, True)
    variants["collective"] = (lambda: dist.reduce_scatter_tensor(out, partial), lambda: out, True)

    def sequential():
        torch.mm(a, b_shard, out=partial)
        dist.reduce_scatter_tensor(out, partial)

    variants["sequential"] = (sequential, lambda: out, True)

    symm, reason = _symm_ops()
    if symm is None:
        variants["async_tp"] = reason
    else:
        group_name = dist.group.WORLD.group_name
        holder = {}

        def async_tp():
            holder["out"] = symm.fused_matmul_reduce_scatter(a, b_shard, "sum", 0, group_name)

        variants["async_tp"] = (async_tp, lambda: holder["out"], False)

    # Kernel-level overlap: the partial product is computed in pieces, destination by
    # destination; each finished piece is reduced onto its owner (ncclReduce, in place) on
    # NCCL's stream while the next piece's GEMM runs. The owner's rows end where plain
    # reduce-scatter would put them: partial[rank rows] on that rank.
    if rows % chunks:
        variants["two_stream"] = f"M/w={rows} not divisible by --chunks {chunks}"
    else:
        piece = rows // chunks

        def two_stream():
            works = []
            for c in range(chunks):
                for dst in range(world):
                    lo = dst * rows + c * piece
                    torch.mm(a[lo : lo + piece], b_shard, out=partial[lo : lo + piece])
                    works.append(dist.reduce(partial[lo : lo + piece], dst=dst, async_op=True))
            for work in works:
                work.wait()

        variants["two_stream"] = (two_stream, lambda: partial[rank * rows : (rank + 1) * rows], True)

    return variants


def gemm_ar_variants(a: torch.Tensor, b_shard: torch.Tensor, chunks: int) -> dict[str, Variant | str]:
    m, n = a.shape[0], b_shard.shape[1]
    partial = torch.empty((m, n), dtype=a.dtype, device=a.device)
    variants: dict[str, Variant | str] = {}

    torch.mm(a, b_shard, out=partial)  # the collective-alone variant's input
    variants["gemm"] = (lambda: torch.mm(a, b_shard, out=partial), lambda: partial, True)
    # In place: checked once on the GEMM's output; timing repeats it, which scales the
    # values by w per call, harmless for the time and re-made by the variants after it.
    variants["collective"] = (lambda: dist.all_reduce(partial), lambda: partial, False)

    def sequential():
        torch.mm(a, b_shard, out=partial)
        dist.all_reduce(partial)

    variants["sequential"] = (sequential, lambda: partial, True)
    variants["async_tp"] = (
        "torch.ops.symm_mem has no fused matmul + all-reduce op (only all-gather+matmul and matmul+reduce-scatter)"
    )

    if m % chunks:
        variants["two_stream"] = f"M={m} not divisible by --chunks {chunks}"
    else:
        piece = m // chunks

        def two_stream():
            works = []
            for c in range(chunks):
                lo = c * piece
                torch.mm(a[lo : lo + piece], b_shard, out=partial[lo : lo + piece])
                works.append(dist.all_reduce(partial[lo : lo + piece], async_op=True))
            for work in works:
                work.wait()

        variants["two_stream"] = (two_stream, lambda: partial, True)

    return variants


BUILDERS = {"ag_gemm": ag_gemm_variants, "gemm_rs": gemm_rs_variants, "gemm_ar": gemm_ar_variants}
